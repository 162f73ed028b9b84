//! The online `Σ exp(x - max)` (the kernel IR's `sumexp` accumulators): softmax, log_softmax
//! and logsumexp scheduled into two passes over each row, run by the reference executor (bit
//! for bit against the interpreter on the prims) and compiled natively (under the tolerance
//! table against the op, and with the prims' special values) on adversarial rows; the read
//! counts of the explanation; a hand-built `sumexp` kernel without a `max` to share; and the
//! online arithmetic itself on plain f32 against f64.

use cranelift_entity::{EntityRef, PrimaryMap};
use ladder::backend::cpu::math::{self, Soft32};
use ladder::backend::cpu::{CpuCompiler, CpuOptions};
use ladder::interp::{run, Options};
use ladder::kernel::eval::run_program;
use ladder::kernel::{
    Accumulator, Buffer, BufferId, BufferKind, Index, Instr, Kernel, Program, ReduceOp, Reg, Stage, Step, Var,
};
use ladder::numerics::{compare, CompareCtx};
use ladder::sched::{schedule, schedule_explained};
use ladder::{compile, CompileOptions, DType, Dim, Graph, OpKind, Shape, Tensor, TensorData};

fn parse(text: &str) -> Graph {
    ladder::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The three ops that sum `exp(x - max)`, as (name, attributes, kind).
const OPS: [(&str, &str, OpKind); 3] = [
    ("softmax", "axis=-1", OpKind::Softmax),
    ("log_softmax", "axis=-1", OpKind::LogSoftmax),
    ("logsumexp", "axes=[-1]", OpKind::Logsumexp),
];

fn one_op(op: &str, attrs: &str, dtype: DType, rows: usize, n: usize) -> Graph {
    parse(&format!("graph g(%x: {dtype}[{rows}, {n}]) {{\n  %y = {op}(%x) {{{attrs}}}\n  return %y\n}}"))
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Row `kind` of length `n`: random rows, and every special case of the max-then-sum-of-exp
/// structure (`big` is the dtype's largest finite value).
fn adversarial_row(kind: usize, n: usize, big: f64, rng: &mut Rng) -> Vec<f64> {
    let inf = f64::INFINITY;
    let mut row: Vec<f64> = (0..n).map(|_| rng.uniform(-3.0, 3.0)).collect();
    let at = |rng: &mut Rng| (rng.next() % n.max(1) as u64) as usize;
    if n == 0 {
        return row;
    }
    match kind {
        0 => {}
        1 => row.iter_mut().for_each(|x| *x = -inf),
        2 => row[at(rng)] = inf,
        3 => {
            row[0] = inf;
            row[n - 1] = inf;
        }
        4 => row[at(rng)] = f64::NAN,
        5 => row[n - 1] = f64::NAN,
        6 => row.iter_mut().step_by(2).for_each(|x| *x = -inf),
        // Increasing: the maximum grows at every value, the worst case for rescaling.
        7 => row.iter_mut().enumerate().for_each(|(i, x)| *x = i as f64 * 0.01),
        8 => row.iter_mut().enumerate().for_each(|(i, x)| *x = i as f64 * 7.0),
        9 => row.iter_mut().enumerate().for_each(|(i, x)| *x = -(i as f64) * 0.01),
        // Huge values: differences overflow, terms underflow.
        10 => row.iter_mut().for_each(|x| *x = if rng.next() & 1 == 0 { big } else { -big }),
        11 => row.iter_mut().for_each(|x| *x = rng.uniform(-1.0, 1.0) * big),
        12 => row.iter_mut().for_each(|x| *x = big),
        // Tiny values, signed zeros.
        13 => row.iter_mut().enumerate().for_each(|(i, x)| *x = [0.0, -0.0, 1e-45, -1e-40, 1e-38][i % 5]),
        14 => row.iter_mut().for_each(|x| *x = 5.0),
        15 => {
            row.iter_mut().for_each(|x| *x = -inf);
            row[n - 1] = 2.0;
        }
        16 => {
            row[0] = inf;
            row[n - 1] = -inf;
        }
        17 => {
            row[0] = inf;
            row[n - 1] = f64::NAN;
        }
        18 => {
            row.iter_mut().for_each(|x| *x = -inf);
            row[0] = f64::NAN;
        }
        19 => row.iter_mut().for_each(|x| *x = rng.uniform(-1e4, 1e4)),
        _ => row.iter_mut().for_each(|x| *x = -big),
    }
    row
}

const KINDS: usize = 21;

fn tensor(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
    let data = match dtype {
        DType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
        _ => TensorData::F64(v.to_vec()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

fn big(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        f32::MAX as f64
    } else {
        f64::MAX
    }
}

/// Bitwise equality (any NaN equals any NaN).
fn same(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape()
        && a.dtype() == b.dtype()
        && a.to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

/// The kernels of `p` with a `sumexp` accumulator.
fn fused(p: &Program) -> usize {
    p.kernels().filter(|k| k.stages.iter().any(|s| s.accumulators.iter().any(|a| a.op.is_sum_exp()))).count()
}

#[test]
fn adversarial_rows_agree_with_the_interpreter_natively_and_in_the_reference_executor() {
    let native = CompileOptions { recover: false, ..CompileOptions::native_cpu(2).unwrap() };
    let lengths = [0usize, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 33, 64, 257, 1024, 1027];
    let mut compared = 0usize;
    for (op, attrs, kind) in OPS {
        for dtype in [DType::F32, DType::F64] {
            for &n in &lengths {
                let rows = KINDS;
                let g = one_op(op, attrs, dtype, rows, n);
                let lowered = ladder::passes::lower(&g).unwrap().simplified;
                let program = schedule(&lowered).unwrap();
                if n > 1 {
                    assert_eq!(fused(&program), 1, "{op} {dtype}[{rows}, {n}] is not fused:\n{program}");
                }
                let plan = compile(&g, &native).unwrap();
                assert!(
                    n == 0 || plan.native_kernels() >= 1,
                    "{op} {dtype}[{rows}, {n}] did not compile:\n{}",
                    plan.explanation()
                );
                for seed in 0..3u64 {
                    let mut rng = Rng(seed * 7919 + n as u64);
                    let data: Vec<f64> = (0..rows).flat_map(|k| adversarial_row(k, n, big(dtype), &mut rng)).collect();
                    let inputs = [tensor(dtype, &[rows, n], &data)];
                    let what = format!("{op} {dtype}[{rows}, {n}] seed {seed}");
                    // The reference executor: the prims, bit for bit.
                    let prims = run(&lowered, &inputs, &Options::default()).unwrap().outputs;
                    let reference = run_program(&program, &lowered, &inputs).unwrap();
                    assert!(
                        same(&prims[0], &reference[0]),
                        "{what}: reference executor\n want {}\n  got {}",
                        prims[0],
                        reference[0]
                    );
                    // Native: the op within the tolerance table, and the prims' special values.
                    let got = plan.run(&inputs).unwrap().outputs;
                    let precise = Options { precise: true, ..Default::default() };
                    let want = run(&g, &inputs, &precise).unwrap().outputs;
                    let node = g.outputs()[0].value;
                    let ctx = CompareCtx { graph: &g, node, inputs: &inputs, output: "y" };
                    if let Err(m) = compare(kind, &want[0], &got[0], &ctx) {
                        panic!("{what}: {m}\nrow data: {data:?}");
                    }
                    for (k, (p, q)) in prims[0].to_f64_vec().iter().zip(got[0].to_f64_vec()).enumerate() {
                        let special = |x: f64| {
                            if x.is_nan() {
                                0
                            } else if x == f64::INFINITY {
                                1
                            } else if x == f64::NEG_INFINITY {
                                2
                            } else {
                                3
                            }
                        };
                        assert_eq!(special(*p), special(q), "{what}: element {k}: prims give {p}, native {q}");
                    }
                    compared += 1;
                }
            }
        }
    }
    eprintln!("{compared} cases compared");
}

#[test]
fn the_explanation_counts_two_reads_of_each_row() {
    // Softmax and log_softmax read a row twice (the fused reduction, the output); logsumexp,
    // whose result is per row, once.
    for ((op, attrs, _), reads) in OPS.into_iter().zip(["reads %x 2 times", "reads %x 2 times", "reads %x once"]) {
        for n in [8usize, 1000] {
            let g = one_op(op, attrs, DType::F32, 4096, n);
            let lowered = ladder::passes::lower(&g).unwrap().simplified;
            let s = schedule_explained(&lowered).unwrap();
            assert!(s.explanation.contains(reads), "{op} [4096, {n}]:\n{}\n{}", s.program, s.explanation);
            assert!(s.program.to_string().contains("acc1=sumexp"), "{}", s.program);
        }
    }
    // Softmax and log_softmax of one row share the maximum and fuse both sums into its stage
    // (logsumexp's shift, zero for an infinite maximum, is the `_finite` form).
    let g = parse(
        "graph g(%x: f32[n, 8]) {\n  %y = softmax(%x) {axis=-1}\n  %z = log_softmax(%x) {axis=-1}\n  %w = logsumexp(%x) {axes=[-1]}\n  return %y, %z, %w\n}",
    );
    let lowered = ladder::passes::lower(&g).unwrap().simplified;
    let s = schedule_explained(&lowered).unwrap();
    let text = s.program.to_string();
    assert!(text.contains("acc0=max:f32->r3 acc1=sumexp:f32->r4 acc2=sumexp_finite:f32->r5"), "{text}");
    assert!(s.explanation.contains("(1 reduction)"), "{}", s.explanation);
}

#[test]
fn a_sum_of_exp_of_something_else_is_not_fused() {
    // exp(x - max) summed over a different value than the maximum was taken of, or with a
    // shift that is not the maximum: three stages, as written.
    for body in [
        "%m = reduce_max(%x) {axes=[1]}\n  %b = broadcast_in_dim(%m) {shape=[n, 8], broadcast_dims=[0]}\n  %d = sub(%z, %b)\n  %e = exp(%d)\n  %s = reduce_sum(%e) {axes=[1]}",
        "%m = reduce_max(%x) {axes=[1]}\n  %h = mul(%m, %m)\n  %b = broadcast_in_dim(%h) {shape=[n, 8], broadcast_dims=[0]}\n  %d = sub(%x, %b)\n  %e = exp(%d)\n  %s = reduce_sum(%e) {axes=[1]}",
        "%m = reduce_min(%x) {axes=[1]}\n  %b = broadcast_in_dim(%m) {shape=[n, 8], broadcast_dims=[0]}\n  %d = sub(%x, %b)\n  %e = exp(%d)\n  %s = reduce_sum(%e) {axes=[1]}",
    ] {
        let g = parse(&format!("graph g(%x: f32[n, 8], %z: f32[n, 8]) {{\n  {body}\n  return %s\n}}"));
        let p = schedule(&g).unwrap();
        assert_eq!(fused(&p), 0, "{p}");
    }
}

// ---------------------------------------------------------------------------------------------
// A hand-built `sumexp` kernel: no `max` accumulator to share, both shifts, f32 and f64,
// vectorized and scalar, against the reference executor.

fn sum_exp_program(op: ReduceOp, dtype: DType, with_max: bool) -> Program {
    let (r, n) = (Dim::sym("r"), Dim::sym("n"));
    let mut buffers = PrimaryMap::new();
    let shape = |dims: Vec<Dim>| dims.into_iter().collect::<Shape>();
    buffers.push(Buffer { dtype, shape: shape(vec![r.clone(), n.clone()]), kind: BufferKind::Input(0), value: None });
    buffers.push(Buffer { dtype, shape: shape(vec![r.clone()]), kind: BufferKind::Temp, value: None });
    let row = Index { offset: Dim::new(0), terms: vec![(Var::Outer(0), n.clone()), (Var::Inner(0), Dim::new(1))] };
    let at = Index { offset: Dim::new(0), terms: vec![(Var::Outer(0), Dim::new(1))] };
    let feed = |acc: u32| Instr::Accumulate { acc, x: Reg::new(0), index: None };
    let mut accumulators = vec![Accumulator { op, dtype, result: Reg::new(1) }];
    let mut body = vec![Instr::Load { dst: Reg::new(0), buf: BufferId::new(0), index: row }, feed(0)];
    if with_max {
        // The max fed after the sumexp: not shared (the step needs the maximum before).
        accumulators.push(Accumulator { op: ReduceOp::Max, dtype, result: Reg::new(2) });
        body.push(feed(1));
    }
    let stages = vec![
        Stage { inner: vec![n], accumulators, body },
        Stage {
            inner: vec![],
            accumulators: vec![],
            body: vec![Instr::Store { buf: BufferId::new(1), index: at, value: Reg::new(1) }],
        },
    ];
    let k = Kernel { name: "k".into(), outer: vec![r], stages, n_regs: 3, covers: vec![], activation: None };
    Program {
        buffers,
        steps: vec![Step::Kernel(k)],
        outputs: vec![("s".into(), BufferId::new(1))],
        symbols: vec!["r".into(), "n".into()],
    }
}

/// Runs the program's one kernel natively on `x` (`rows × n`), returning the row results.
fn run_native(p: &Program, opts: CpuOptions, dtype: DType, x: &[f64], rows: usize, n: usize) -> Vec<f64> {
    let Step::Kernel(k) = &p.steps[0] else { unreachable!() };
    let c = CpuCompiler::with_options(opts).unwrap();
    let ck = c.compile(k, p).unwrap_or_else(|e| panic!("compile failed: {e}\n{k}"));
    let dims: Vec<i64> = ck
        .dim_table()
        .iter()
        .map(|d| d.eval(&|s: &str| Some(if s == "r" { rows as u64 } else { n as u64 })).unwrap() as i64)
        .collect();
    if dtype == DType::F32 {
        let mut xs: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let mut out = vec![0f32; rows.max(1)];
        let ptrs = [xs.as_mut_ptr() as *mut u8, out.as_mut_ptr() as *mut u8];
        // SAFETY: the buffers have the kernel's shapes for these dims.
        unsafe { ck.run(&ptrs, &dims, 0, rows as i64) }.unwrap();
        out[..rows].iter().map(|&v| v as f64).collect()
    } else {
        let mut xs = x.to_vec();
        let mut out = vec![0f64; rows.max(1)];
        let ptrs = [xs.as_mut_ptr() as *mut u8, out.as_mut_ptr() as *mut u8];
        // SAFETY: as above.
        unsafe { ck.run(&ptrs, &dims, 0, rows as i64) }.unwrap();
        out[..rows].to_vec()
    }
}

#[test]
fn a_sumexp_without_a_shared_maximum_compiles_to_the_same_meaning() {
    let graph = parse("graph g(%x: f32[r, n]) {\n  return %x\n}");
    for op in [ReduceOp::SumExp, ReduceOp::SumExpFinite] {
        for dtype in [DType::F32, DType::F64] {
            for with_max in [false, true] {
                let p = sum_exp_program(op, dtype, with_max);
                for n in [0usize, 1, 3, 4, 8, 11, 100] {
                    let rows = KINDS;
                    let mut rng = Rng(n as u64);
                    let x: Vec<f64> = (0..rows).flat_map(|k| adversarial_row(k, n, big(dtype), &mut rng)).collect();
                    let want = run_program(&p, &graph, &[tensor(dtype, &[rows, n], &x)]).unwrap()[0].to_f64_vec();
                    for vectorize in [true, false] {
                        let opts = CpuOptions { strict_fp: false, vectorize };
                        let got = run_native(&p, opts, dtype, &x, rows, n);
                        for k in 0..rows {
                            let (g, w) = (got[k], want[k]);
                            let e = if dtype == DType::F32 { f32::EPSILON as f64 } else { f64::EPSILON };
                            let ok = (g.is_nan() && w.is_nan())
                                || g == w
                                || (w.is_finite() && (g - w).abs() <= 4.0 * e * (n as f64 + 2.0) * w.abs());
                            assert!(ok, "{op:?} {dtype} n={n} with_max={with_max} vectorize={vectorize} row {k}: got {g:e}, want {w:e}; row {:?}", &x[k * n..(k + 1) * n]);
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The online arithmetic on plain f32, against f64.

/// `Σ exp(x - c)` in f64 with the shift of the two-stage form (`finite`: 0 for an infinite
/// maximum).
fn exact(row: &[f32], finite: bool) -> f64 {
    let m =
        row.iter().fold(
            f64::NEG_INFINITY,
            |m, &x| if m.is_nan() || (x as f64).is_nan() { f64::NAN } else { m.max(x as f64) },
        );
    let c = if finite && m.is_infinite() { 0.0 } else { m };
    row.iter().map(|&x| (x as f64 - c).exp()).sum()
}

/// The online sum over `lanes` interleaved lanes, as compiled code keeps it.
fn online(row: &[f32], lanes: usize, finite: bool) -> f32 {
    let a = &mut Soft32 { fma: true };
    let mut exp0 = |a: &mut Soft32, x: f32| math::exp_or_zero(a, x);
    let mut state = vec![(f32::NEG_INFINITY, 0f32); lanes];
    for (k, &x) in row.iter().enumerate() {
        let (m, s) = state[k % lanes];
        let s = math::sum_exp_step(a, m, s, x, &mut exp0);
        state[k % lanes] = (math::max_min(a, m, x, true), s);
    }
    let m = state.iter().fold(f32::NEG_INFINITY, |m, &(mi, _)| math::max_min(a, m, mi, true));
    let s: f32 = state.iter().map(|&(mi, si)| math::sum_exp_rescale(a, mi, si, m, &mut exp0)).sum();
    let empty = row.is_empty();
    math::sum_exp_finish(a, m, s, empty, finite)
}

#[test]
fn the_online_sum_is_the_sum_of_exponentials_within_its_rounding() {
    let mut rng = Rng(1);
    for n in [0usize, 1, 2, 5, 16, 100, 1000, 4099] {
        for kind in 0..KINDS {
            let row: Vec<f32> = adversarial_row(kind, n, f32::MAX as f64, &mut rng).iter().map(|&x| x as f32).collect();
            for finite in [false, true] {
                let want = exact(&row, finite);
                for lanes in [1usize, 4, 8] {
                    let got = online(&row, lanes, finite) as f64;
                    let allowed = 2.0 * f32::EPSILON as f64 * (n as f64 + 2.0) * want.abs();
                    let ok = (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= allowed;
                    assert!(ok, "n={n} kind {kind} finite={finite} lanes={lanes}: got {got:e}, want {want:e}");
                }
            }
        }
    }
    // Every term stays at most 1: a row of the largest values sums to its length.
    let row = vec![f32::MAX; 1000];
    assert_eq!(online(&row, 4, false), 1000.0);
    // An exponential of a NaN difference is 0, of anything below -104 too.
    let a = &mut Soft32 { fma: false };
    assert_eq!(math::exp_or_zero(a, f32::NAN), 0.0);
    assert_eq!(math::exp_or_zero(a, f32::NEG_INFINITY), 0.0);
    assert_eq!(math::exp_or_zero(a, -0.0), 1.0);
}
