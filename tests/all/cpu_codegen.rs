//! The Cranelift CPU backend: hand-built kernels compiled and run on host buffers, compared
//! with the reference (the graph interpreter or the reference scalar functions), bitwise
//! where no transcendental or reduction is involved; the max-ULP table of the inline
//! approximations; and compile times (printed, not asserted).

use cranelift_entity::{EntityRef, PrimaryMap};
use ladder::backend::cpu::math::scalar as sm;
use ladder::backend::cpu::{CodegenError, CompiledKernel, CpuCompiler, CpuOptions, KernelError};
use ladder::ir::{DType, Dim, Shape};
use ladder::kernel::{
    Accumulator, Buffer, BufferId, BufferKind, Index, Instr, Kernel, Program, ReduceOp, Reg, Scalar, Stage, Var,
};
use ladder::ops::elementwise::{binary_float, binary_int, unary_float};
use ladder::OpKind;

use crate::common;

// ---------------------------------------------------------------------------------------
// Helpers

fn r(i: usize) -> Reg {
    Reg::new(i)
}

fn b(i: usize) -> BufferId {
    BufferId::new(i)
}

fn d(n: u64) -> Dim {
    Dim::new(n)
}

fn o(k: u32) -> Var {
    Var::Outer(k)
}

fn i(k: u32) -> Var {
    Var::Inner(k)
}

fn ix(offset: Dim, terms: &[(Var, Dim)]) -> Index {
    Index { offset, terms: terms.to_vec() }
}

fn program(bufs: Vec<(DType, Vec<Dim>, BufferKind)>) -> Program {
    let mut buffers = PrimaryMap::new();
    for (dtype, dims, kind) in bufs {
        buffers.push(Buffer { dtype, shape: dims.into_iter().collect::<Shape>(), kind, value: None });
    }
    Program { buffers, steps: vec![], outputs: vec![], symbols: vec![] }
}

fn kernel(outer: Vec<Dim>, stages: Vec<Stage>, n_regs: u32) -> Kernel {
    Kernel { name: "k".into(), outer, stages, n_regs, covers: vec![], activation: None }
}

fn stage(inner: Vec<Dim>, accumulators: Vec<Accumulator>, body: Vec<Instr>) -> Stage {
    Stage { inner, accumulators, body }
}

fn load(dst: usize, buf: usize, index: Index) -> Instr {
    Instr::Load { dst: r(dst), buf: b(buf), index }
}

fn store(buf: usize, index: Index, value: usize) -> Instr {
    Instr::Store { buf: b(buf), index, value: r(value) }
}

fn un(dst: usize, op: OpKind, x: usize, dtype: DType) -> Instr {
    Instr::Unary { dst: r(dst), op, x: r(x), dtype }
}

fn bin(dst: usize, op: OpKind, a: usize, bb: usize, dtype: DType) -> Instr {
    Instr::Binary { dst: r(dst), op, a: r(a), b: r(bb), dtype }
}

fn fconst(dst: usize, v: f64, dtype: DType) -> Instr {
    Instr::Const { dst: r(dst), value: Scalar::Float(v), dtype }
}

/// A host buffer: 8-byte aligned storage of any dtype.
#[derive(Clone, Debug)]
struct Buf {
    words: Vec<u64>,
}

impl Buf {
    fn bytes(n: usize) -> Buf {
        Buf { words: vec![0; n.div_ceil(8).max(1)] }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr() as *mut u8
    }
    fn raw(&self) -> &[u8] {
        // SAFETY: u64 storage viewed as bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.words.len() * 8) }
    }
    fn raw_mut(&mut self) -> &mut [u8] {
        // SAFETY: u64 storage viewed as bytes.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.words.len() * 8) }
    }
    fn f32s(v: &[f32]) -> Buf {
        let mut b = Buf::bytes(v.len() * 4);
        for (k, x) in v.iter().enumerate() {
            b.raw_mut()[4 * k..4 * k + 4].copy_from_slice(&x.to_le_bytes());
        }
        b
    }
    fn f64s(v: &[f64]) -> Buf {
        let mut b = Buf::bytes(v.len() * 8);
        for (k, x) in v.iter().enumerate() {
            b.raw_mut()[8 * k..8 * k + 8].copy_from_slice(&x.to_le_bytes());
        }
        b
    }
    fn i32s(v: &[i32]) -> Buf {
        let mut b = Buf::bytes(v.len() * 4);
        for (k, x) in v.iter().enumerate() {
            b.raw_mut()[4 * k..4 * k + 4].copy_from_slice(&x.to_le_bytes());
        }
        b
    }
    fn i64s(v: &[i64]) -> Buf {
        let mut b = Buf::bytes(v.len() * 8);
        for (k, x) in v.iter().enumerate() {
            b.raw_mut()[8 * k..8 * k + 8].copy_from_slice(&x.to_le_bytes());
        }
        b
    }
    fn bools(v: &[bool]) -> Buf {
        let mut b = Buf::bytes(v.len());
        for (k, x) in v.iter().enumerate() {
            b.raw_mut()[k] = *x as u8;
        }
        b
    }
    fn to_f32(&self, n: usize) -> Vec<f32> {
        (0..n).map(|k| f32::from_le_bytes(self.raw()[4 * k..4 * k + 4].try_into().unwrap())).collect()
    }
    fn to_f64(&self, n: usize) -> Vec<f64> {
        (0..n).map(|k| f64::from_le_bytes(self.raw()[8 * k..8 * k + 8].try_into().unwrap())).collect()
    }
    fn to_i32(&self, n: usize) -> Vec<i32> {
        (0..n).map(|k| i32::from_le_bytes(self.raw()[4 * k..4 * k + 4].try_into().unwrap())).collect()
    }
    fn to_i64(&self, n: usize) -> Vec<i64> {
        (0..n).map(|k| i64::from_le_bytes(self.raw()[8 * k..8 * k + 8].try_into().unwrap())).collect()
    }
    fn to_bool(&self, n: usize) -> Vec<u8> {
        self.raw()[..n].to_vec()
    }
}

/// Runs a compiled kernel over all outer iterations `0..end`.
fn exec(k: &CompiledKernel, bufs: &mut [Buf], dims: &[i64], end: i64) -> Result<(), KernelError> {
    let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.ptr()).collect();
    // SAFETY: every test sizes its buffers for the kernel's shapes and dims.
    unsafe { k.run(&ptrs, dims, 0, end) }
}

/// Every option set the tests compile with: vectorized and scalar, contracting and strict.
fn option_sets() -> Vec<CpuOptions> {
    let mut v = Vec::new();
    for vectorize in [true, false] {
        for strict_fp in [false, true] {
            v.push(CpuOptions { strict_fp, vectorize });
        }
    }
    v
}

fn compile(opts: CpuOptions, k: &Kernel, p: &Program) -> (CpuCompiler, CompiledKernel) {
    let c = CpuCompiler::with_options(opts).unwrap();
    let ck = c.compile(k, p).unwrap_or_else(|e| panic!("compile failed: {e}\n{k}"));
    (c, ck)
}

/// Distance in ULPs between two f32s (NaN equals NaN; ±0 differ by one).
fn ulp(got: f32, want: f32) -> u64 {
    fn ord(x: f32) -> i64 {
        let b = x.to_bits() as i32 as i64;
        if b < 0 {
            i32::MIN as i64 - b
        } else {
            b
        }
    }
    if got.is_nan() || want.is_nan() {
        return if got.is_nan() && want.is_nan() { 0 } else { u64::MAX };
    }
    (ord(got) - ord(want)).unsigned_abs()
}

fn same_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits(), "{what}: element {k}: got {g:e}, want {w:e}");
    }
}

fn special_f32() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        88.7,
        89.0,
        -87.0,
        -104.0,
        -150.0,
        3.0,
        0.1,
        1e-8,
        -1e-8,
        10.0,
        std::f32::consts::PI,
        8192.0,
        8193.5,
        1e10,
    ]
}

// ---------------------------------------------------------------------------------------
// Pointwise chain with broadcast index, symbolic row length, tails 0..17

/// `out[r, j] = max(x[r, j] * s[j] + c[r], 0)` (relu of a scale and a bias broadcast two
/// ways), with `n` symbolic.
fn pointwise_kernel(inner_loop: bool) -> (Kernel, Program) {
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![d(3), n.clone()], BufferKind::Input(0)),
        (DType::F32, vec![n.clone()], BufferKind::Input(1)),
        (DType::F32, vec![d(3)], BufferKind::Input(2)),
        (DType::F32, vec![d(3), n.clone()], BufferKind::Temp),
    ]);
    let (outer, inner, j) =
        if inner_loop { (vec![d(3)], vec![n.clone()], i(0)) } else { (vec![d(3), n.clone()], vec![], o(1)) };
    let row = ix(d(0), &[(o(0), n.clone()), (j, d(1))]);
    let body = vec![
        load(0, 0, row.clone()),
        load(1, 1, ix(d(0), &[(j, d(1))])),
        load(2, 2, ix(d(0), &[(o(0), d(1))])),
        bin(3, OpKind::Mul, 0, 1, DType::F32),
        bin(4, OpKind::Add, 3, 2, DType::F32),
        fconst(5, 0.0, DType::F32),
        bin(6, OpKind::Max, 4, 5, DType::F32),
        store(3, row, 6),
    ];
    (kernel(outer, vec![stage(inner, vec![], body)], 7), p)
}

fn pointwise_inputs(n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let specials = [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-40, -3.5];
    let x: Vec<f32> =
        (0..3 * n).map(|k| if k % 5 == 4 { specials[k % 7] } else { (k as f32 * 0.37).sin() * 3.0 }).collect();
    let s: Vec<f32> = (0..n).map(|k| 1.0 - k as f32 * 0.25).collect();
    let c = vec![0.5, -0.0, -1.25];
    (x, s, c)
}

#[test]
fn pointwise_chain_with_broadcast_matches_interpreter_bitwise() {
    for inner_loop in [true, false] {
        let (k, p) = pointwise_kernel(inner_loop);
        for opts in option_sets() {
            let (_c, ck) = compile(opts, &k, &p);
            assert_eq!(ck.dim_table(), &[Dim::sym("n")]);
            for n in 0..=17usize {
                let (x, s, c) = pointwise_inputs(n);
                let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&s), Buf::f32s(&c), Buf::f32s(&vec![7.0; 3 * n])];
                exec(&ck, &mut bufs, &[n as i64], 3).unwrap();
                let got = bufs[3].to_f32(3 * n);
                // The interpreter on the equivalent graph is the reference.
                let src = "graph g(%x: f32[3, n], %s: f32[n], %c: f32[3, 1]) {\n  %t1 = mul(%x, %s)\n  %t2 = add(%t1, %c)\n  %t3 = relu(%t2)\n  return %t3\n}";
                let want: Vec<f32> = if n == 0 {
                    vec![]
                } else {
                    common::run1(src, &[common::f32t(&[3, n], &x), common::f32t(&[n], &s), common::f32t(&[3, 1], &c)])
                        .into_iter()
                        .map(|v| v as f32)
                        .collect()
                };
                // relu is max(x, 0) with NaN propagating; the interpreter's relu agrees on
                // everything but NaN payloads and the sign of zero, which we check by hand.
                let by_hand: Vec<f32> = (0..3 * n)
                    .map(|q| {
                        let v = x[q] * s[q % n] + c[q / n];
                        binary_float(OpKind::Max, v as f64, 0.0) as f32
                    })
                    .collect();
                same_bits(&got, &by_hand, &format!("pointwise n={n} {opts:?}"));
                for (g, w) in got.iter().zip(&want) {
                    assert!((g.is_nan() && w.is_nan()) || g == w, "interpreter: got {g}, want {w}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Softmax row kernel: three stages

fn softmax_kernel() -> (Kernel, Program) {
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![Dim::sym("rows"), n.clone()], BufferKind::Input(0)),
        (DType::F32, vec![Dim::sym("rows"), n.clone()], BufferKind::Temp),
    ]);
    let row = ix(d(0), &[(o(0), n.clone()), (i(0), d(1))]);
    let s0 = stage(
        vec![n.clone()],
        vec![Accumulator { op: ReduceOp::Max, dtype: DType::F32, result: r(1) }],
        vec![load(0, 0, row.clone()), Instr::Accumulate { acc: 0, x: r(0), index: None }],
    );
    let s1 = stage(
        vec![n.clone()],
        vec![Accumulator { op: ReduceOp::Sum, dtype: DType::F32, result: r(5) }],
        vec![
            load(2, 0, row.clone()),
            bin(3, OpKind::Sub, 2, 1, DType::F32),
            un(4, OpKind::Exp, 3, DType::F32),
            Instr::Accumulate { acc: 0, x: r(4), index: None },
        ],
    );
    let s2 = stage(
        vec![n.clone()],
        vec![],
        vec![
            load(6, 0, row.clone()),
            bin(7, OpKind::Sub, 6, 1, DType::F32),
            un(8, OpKind::Exp, 7, DType::F32),
            bin(9, OpKind::Div, 8, 5, DType::F32),
            store(1, row, 9),
        ],
    );
    (kernel(vec![Dim::sym("rows")], vec![s0, s1, s2], 10), p)
}

#[test]
fn softmax_rows_match_interpreter_within_ulps() {
    let (k, p) = softmax_kernel();
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        assert_eq!(ck.dim_table().len(), 2);
        for n in 0..=17usize {
            let rows = 4;
            let x: Vec<f32> = (0..rows * n)
                .map(|q| match q % 11 {
                    3 => -30.0,
                    7 => 12.5,
                    _ => ((q * 7919) % 97) as f32 / 9.0 - 5.0,
                })
                .collect();
            let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&vec![0.0; rows * n])];
            // dims in dim_table order: n, rows (first use: inner extent, then outer? check).
            let dims: Vec<i64> =
                ck.dim_table().iter().map(|dm| if *dm == Dim::sym("n") { n as i64 } else { rows as i64 }).collect();
            exec(&ck, &mut bufs, &dims, rows as i64).unwrap();
            let got = bufs[1].to_f32(rows * n);
            if n == 0 {
                continue;
            }
            // The same computation op by op in f32 (the interpreter's op-dtype mode): the kernel
            // differs only by exp's approximation and the sum's association.
            let src = "graph g(%x: f32[r, n]) {\n  %m = amax(%x) {axes=[1], keepdim=true}\n  %d = sub(%x, %m)\n  %e = exp(%d)\n  %s = sum(%e) {axes=[1], keepdim=true}\n  %y = div(%e, %s)\n  return %y\n}";
            let want = common::run1(src, &[common::f32t(&[rows, n], &x)]);
            for (q, (g, w)) in got.iter().zip(&want).enumerate() {
                let u = ulp(*g, *w as f32);
                assert!(u <= 4, "softmax n={n} element {q}: got {g:e}, want {w:e} ({u} ulp) {opts:?}");
            }
            // And against the ideal softmax (f64, rounded once) within the error of f32 inputs.
            let ideal = common::run1(
                "graph g(%x: f32[r, n]) {\n  %y = softmax(%x) {axis=1}\n  return %y\n}",
                &[common::f32t(&[rows, n], &x)],
            );
            for (g, w) in got.iter().zip(&ideal) {
                assert!((*g as f64 - w).abs() <= 1e-5 * w.abs() + 1e-30, "ideal softmax: {g} vs {w}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reductions: argmax + max, and a vectorized sum

fn argmax_kernel() -> (Kernel, Program) {
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![d(5), n.clone()], BufferKind::Input(0)),
        (DType::I64, vec![d(5)], BufferKind::Temp),
        (DType::F32, vec![d(5)], BufferKind::Temp),
    ]);
    let row = ix(d(0), &[(o(0), n.clone()), (i(0), d(1))]);
    let s0 = stage(
        vec![n.clone()],
        vec![
            Accumulator { op: ReduceOp::Argmax, dtype: DType::F32, result: r(2) },
            Accumulator { op: ReduceOp::Max, dtype: DType::F32, result: r(3) },
        ],
        vec![
            load(0, 0, row),
            Instr::LoopVar { dst: r(1), var: i(0), dtype: DType::I64 },
            Instr::Accumulate { acc: 0, x: r(0), index: Some(r(1)) },
            Instr::Accumulate { acc: 1, x: r(0), index: None },
        ],
    );
    let s1 =
        stage(vec![], vec![], vec![store(1, ix(d(0), &[(o(0), d(1))]), 2), store(2, ix(d(0), &[(o(0), d(1))]), 3)]);
    (kernel(vec![d(5)], vec![s0, s1], 4), p)
}

#[test]
fn argmax_and_max_reduction_follow_the_reference() {
    let (k, p) = argmax_kernel();
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        for n in 1..=17usize {
            // Row 0: ascending with a tie at the max; row 1: a NaN in the middle; row 2: all
            // -inf; row 3: -0 then +0 (first wins for argmax, +0 is the max); row 4: mixed.
            let mut x = vec![0.0f32; 5 * n];
            for j in 0..n {
                x[j] = (j.min(n / 2)) as f32;
                x[n + j] = if j == n / 2 { f32::NAN } else { j as f32 };
                x[2 * n + j] = f32::NEG_INFINITY;
                x[3 * n + j] = if j == 0 { -0.0 } else { 0.0 };
                x[4 * n + j] = ((j * 37) % 11) as f32 - 5.0;
            }
            let mut bufs = vec![Buf::f32s(&x), Buf::i64s(&[9; 5]), Buf::f32s(&[9.0; 5])];
            exec(&ck, &mut bufs, &[n as i64], 5).unwrap();
            let idx = bufs[1].to_i64(5);
            let mx = bufs[2].to_f32(5);
            for row in 0..5 {
                let g = &x[row * n..(row + 1) * n];
                // Reference: first maximum, NaN wins at once.
                let mut best = 0;
                for (q, &v) in g.iter().enumerate().skip(1) {
                    if g[best].is_nan() {
                        break;
                    }
                    if v.is_nan() || v > g[best] {
                        best = q;
                    }
                }
                let want_max = g.iter().fold(f64::NEG_INFINITY, |a, &v| binary_float(OpKind::Max, a, v as f64)) as f32;
                assert_eq!(idx[row], best as i64, "argmax row {row} n={n} {opts:?}");
                same_bits(&mx[row..row + 1], &[want_max], &format!("max row {row} n={n}"));
            }
        }
    }
}

#[test]
fn vectorized_sum_reassociates_within_tolerance_and_keeps_negative_zero() {
    let n = Dim::sym("n");
    let p = program(vec![(DType::F32, vec![n.clone()], BufferKind::Input(0)), (DType::F32, vec![], BufferKind::Temp)]);
    let s0 = stage(
        vec![n.clone()],
        vec![Accumulator { op: ReduceOp::Sum, dtype: DType::F32, result: r(1) }],
        vec![load(0, 0, ix(d(0), &[(i(0), d(1))])), Instr::Accumulate { acc: 0, x: r(0), index: None }],
    );
    let s1 = stage(vec![], vec![], vec![store(1, ix(d(0), &[]), 1)]);
    let k = kernel(vec![], vec![s0, s1], 2);
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        for len in 0..=40usize {
            let x: Vec<f32> = (0..len).map(|q| 1.0 / (q as f32 + 1.0)).collect();
            let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&[9.0])];
            exec(&ck, &mut bufs, &[len as i64], 1).unwrap();
            let got = bufs[1].to_f32(1)[0] as f64;
            let exact: f64 = x.iter().map(|&v| v as f64).sum();
            assert!(
                (got - exact).abs() <= len as f64 * f32::EPSILON as f64 * exact.abs().max(1e-30),
                "sum len={len}: {got} vs {exact}"
            );
            // All -0: the sum is -0, as the sequential reference gives.
            let z = vec![-0.0f32; len.max(1)];
            let mut bufs = vec![Buf::f32s(&z), Buf::f32s(&[9.0])];
            exec(&ck, &mut bufs, &[z.len() as i64], 1).unwrap();
            assert_eq!(bufs[1].to_f32(1)[0].to_bits(), (-0.0f32).to_bits(), "sum of -0 len={len}");
        }
        // An empty sum is +0, as the reference's.
        let mut bufs = vec![Buf::f32s(&[]), Buf::f32s(&[9.0])];
        exec(&ck, &mut bufs, &[0], 1).unwrap();
        assert_eq!(bufs[1].to_f32(1)[0].to_bits(), 0.0f32.to_bits(), "empty sum");
    }
}

// ---------------------------------------------------------------------------------------
// Permuted load (transpose): strided, not vectorizable, bitwise

#[test]
fn permuted_load_transposes_bitwise() {
    let (a, bb) = (Dim::sym("a"), Dim::sym("b"));
    let p = program(vec![
        (DType::F32, vec![a.clone(), bb.clone()], BufferKind::Input(0)),
        (DType::F32, vec![bb.clone(), a.clone()], BufferKind::Temp),
    ]);
    // out[j, q] = x[q, j]: outer j over b, inner q over a.
    let body = vec![
        load(0, 0, ix(d(0), &[(o(0), d(1)), (i(0), bb.clone())])),
        un(1, OpKind::Neg, 0, DType::F32),
        store(1, ix(d(0), &[(o(0), a.clone()), (i(0), d(1))]), 1),
    ];
    let k = kernel(vec![bb.clone()], vec![stage(vec![a.clone()], vec![], body)], 2);
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        for (na, nb) in [(1usize, 1usize), (3, 5), (17, 2), (0, 4), (6, 0)] {
            let x: Vec<f32> = (0..na * nb).map(|q| q as f32 - 3.0).collect();
            let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&vec![0.0; na * nb])];
            let dims: Vec<i64> = ck.dim_table().iter().map(|dm| if *dm == a { na as i64 } else { nb as i64 }).collect();
            exec(&ck, &mut bufs, &dims, nb as i64).unwrap();
            let got = bufs[1].to_f32(na * nb);
            let want: Vec<f32> = (0..na * nb).map(|q| -x[(q % na) * nb + q / na]).collect();
            same_bits(&got, &want, "transpose");
        }
        // Splitting the outer loop across calls covers the same elements.
        let (na, nb) = (3usize, 5usize);
        let x: Vec<f32> = (0..15).map(|q| q as f32).collect();
        let mut bufs = [Buf::f32s(&x), Buf::f32s(&[0.0; 15])];
        let dims: Vec<i64> = ck.dim_table().iter().map(|dm| if *dm == a { na as i64 } else { nb as i64 }).collect();
        let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.ptr()).collect();
        for (lo, hi) in [(0, 2), (2, 3), (3, 99)] {
            // SAFETY: buffers sized for a=3, b=5; the kernel clamps `end` to its extent.
            unsafe { ck.run(&ptrs, &dims, lo, hi).unwrap() };
        }
        let got = bufs[1].to_f32(15);
        let want: Vec<f32> = (0..15).map(|q| -x[(q % na) * nb + q / na]).collect();
        same_bits(&got, &want, "split transpose");
    }
}

// ---------------------------------------------------------------------------------------
// Integer kernel: wrapping arithmetic, division guards, comparisons, converts

#[test]
fn int_kernel_wraps_and_reports_division_by_zero() {
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::I32, vec![n.clone()], BufferKind::Input(0)),
        (DType::I32, vec![n.clone()], BufferKind::Input(1)),
        (DType::I32, vec![n.clone(), d(7)], BufferKind::Temp),
        (DType::Bool, vec![n.clone()], BufferKind::Temp),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
        (DType::I64, vec![n.clone()], BufferKind::Temp),
    ]);
    let e = ix(d(0), &[(i(0), d(1))]);
    let col = |c: u64| ix(d(c), &[(i(0), d(7))]);
    let body = vec![
        load(0, 0, e.clone()),
        load(1, 1, e.clone()),
        bin(2, OpKind::Add, 0, 1, DType::I32),
        bin(3, OpKind::Mul, 0, 1, DType::I32),
        bin(4, OpKind::Div, 0, 1, DType::I32),
        bin(5, OpKind::Rem, 0, 1, DType::I32),
        bin(6, OpKind::Max, 0, 1, DType::I32),
        un(7, OpKind::Abs, 0, DType::I32),
        un(8, OpKind::Sign, 1, DType::I32),
        store(2, col(0), 2),
        store(2, col(1), 3),
        store(2, col(2), 4),
        store(2, col(3), 5),
        store(2, col(4), 6),
        store(2, col(5), 7),
        store(2, col(6), 8),
        bin(9, OpKind::Lt, 0, 1, DType::Bool),
        store(3, e.clone(), 9),
        Instr::Convert { dst: r(10), x: r(0), dtype: DType::F32 },
        store(4, e.clone(), 10),
        Instr::Convert { dst: r(11), x: r(3), dtype: DType::I64 },
        Instr::LoopVar { dst: r(12), var: i(0), dtype: DType::I64 },
        bin(13, OpKind::Sub, 11, 12, DType::I64),
        store(5, e, 13),
    ];
    let k = kernel(vec![], vec![stage(vec![n.clone()], vec![], body)], 14);
    let a = [7, -7, i32::MIN, i32::MAX, 5, -1, 0, 123456, i32::MIN, 3];
    let bv = [2, 2, -1, 2, -3, 1, 5, 7890, 1, 0];
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        for len in [9usize, 10] {
            let m = len;
            let mut bufs = vec![
                Buf::i32s(&a[..m]),
                Buf::i32s(&bv[..m]),
                Buf::i32s(&vec![0; 7 * m]),
                Buf::bools(&vec![false; m]),
                Buf::f32s(&vec![0.0; m]),
                Buf::i64s(&vec![0; m]),
            ];
            let res = exec(&ck, &mut bufs, &[m as i64], 1);
            if len == 10 {
                // The last divisor is 0: the reference fails, the kernel reports it.
                assert_eq!(res, Err(KernelError::DivisionByZero));
                continue;
            }
            res.unwrap();
            let out = bufs[2].to_i32(7 * m);
            let lt = bufs[3].to_bool(m);
            let f = bufs[4].to_f32(m);
            let w = bufs[5].to_i64(m);
            for q in 0..m {
                let (x, y) = (a[q] as i64, bv[q] as i64);
                let wrap = |v: i64| v as i32;
                let want = [
                    wrap(binary_int(OpKind::Add, DType::I32, x, y).unwrap()),
                    wrap(binary_int(OpKind::Mul, DType::I32, x, y).unwrap()),
                    wrap(binary_int(OpKind::Div, DType::I32, x, y).unwrap()),
                    wrap(binary_int(OpKind::Rem, DType::I32, x, y).unwrap()),
                    wrap(binary_int(OpKind::Max, DType::I32, x, y).unwrap()),
                    (a[q]).wrapping_abs(),
                    bv[q].signum(),
                ];
                assert_eq!(&out[7 * q..7 * q + 7], &want, "row {q} ({x}, {y})");
                assert_eq!(lt[q], (a[q] < bv[q]) as u8);
                assert_eq!(f[q].to_bits(), (a[q] as f64 as f32).to_bits());
                assert_eq!(w[q], a[q].wrapping_mul(bv[q]) as i64 - q as i64);
            }
        }
    }
}

#[test]
fn converts_saturate_and_bools_round_trip() {
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![n.clone()], BufferKind::Input(0)),
        (DType::I32, vec![n.clone()], BufferKind::Temp),
        (DType::I64, vec![n.clone()], BufferKind::Temp),
        (DType::Bool, vec![n.clone()], BufferKind::Temp),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
        (DType::F64, vec![n.clone()], BufferKind::Temp),
    ]);
    let e = ix(d(0), &[(i(0), d(1))]);
    let body = vec![
        load(0, 0, e.clone()),
        Instr::Convert { dst: r(1), x: r(0), dtype: DType::I32 },
        Instr::Convert { dst: r(2), x: r(0), dtype: DType::I64 },
        Instr::Convert { dst: r(3), x: r(0), dtype: DType::Bool },
        un(4, OpKind::IsNan, 0, DType::Bool),
        Instr::Select { dst: r(5), cond: r(4), a: r(0), b: r(0), dtype: DType::F32 },
        Instr::Convert { dst: r(6), x: r(3), dtype: DType::F32 },
        bin(7, OpKind::Add, 5, 6, DType::F32),
        Instr::Convert { dst: r(8), x: r(7), dtype: DType::F64 },
        store(1, e.clone(), 1),
        store(2, e.clone(), 2),
        store(3, e.clone(), 3),
        store(4, e.clone(), 7),
        store(5, e, 8),
    ];
    let k = kernel(vec![], vec![stage(vec![n], vec![], body)], 9);
    let x = special_f32();
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        let m = x.len();
        let mut bufs = vec![
            Buf::f32s(&x),
            Buf::i32s(&vec![0; m]),
            Buf::i64s(&vec![0; m]),
            Buf::bools(&vec![false; m]),
            Buf::f32s(&vec![0.0; m]),
            Buf::f64s(&vec![0.0; m]),
        ];
        exec(&ck, &mut bufs, &[m as i64], 1).unwrap();
        let (a, bb, c, f, g) =
            (bufs[1].to_i32(m), bufs[2].to_i64(m), bufs[3].to_bool(m), bufs[4].to_f32(m), bufs[5].to_f64(m));
        for q in 0..m {
            assert_eq!(a[q], x[q] as i32, "f32→i32 of {}", x[q]);
            assert_eq!(bb[q], x[q] as i64, "f32→i64 of {}", x[q]);
            assert_eq!(c[q], (x[q] != 0.0) as u8, "f32→bool of {}", x[q]);
            let want = x[q] + (x[q] != 0.0) as u8 as f32;
            same_bits(&f[q..q + 1], &[want], "bool→f32 add");
            assert!((g[q].is_nan() && want.is_nan()) || g[q] == want as f64);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Transcendentals: the JIT runs exactly the polynomials of math.rs

fn unary_kernel(op: OpKind, dtype: DType) -> (Kernel, Program) {
    let n = Dim::sym("n");
    let p = program(vec![(dtype, vec![n.clone()], BufferKind::Input(0)), (dtype, vec![n.clone()], BufferKind::Temp)]);
    let e = ix(d(0), &[(i(0), d(1))]);
    let body = vec![load(0, 0, e.clone()), un(1, op, 0, dtype), store(1, e, 1)];
    (kernel(vec![], vec![stage(vec![n], vec![], body)], 2), p)
}

type Approx = fn(f32, bool) -> f32;

fn approximations() -> Vec<(OpKind, Approx)> {
    vec![
        (OpKind::Exp, sm::exp_f32),
        (OpKind::Exp2, sm::exp2_f32),
        (OpKind::Log, sm::log_f32),
        (OpKind::Log1p, sm::log1p_f32),
        (OpKind::Expm1, sm::expm1_f32),
        (OpKind::Tanh, sm::tanh_f32),
        (OpKind::Erf, sm::erf_f32),
        (OpKind::Sin, sm::sin_f32),
        (OpKind::Cos, sm::cos_f32),
        (OpKind::Sqrt, |x, _| sm::sqrt_f32(x)),
        (OpKind::Rsqrt, |x, _| sm::rsqrt_f32(x)),
    ]
}

fn sample_inputs() -> Vec<f32> {
    let mut x = special_f32();
    let mut bits: u32 = 0x1234_5678;
    for _ in 0..3000 {
        // xorshift over all bit patterns, plus a dense band of ordinary magnitudes.
        bits ^= bits << 13;
        bits ^= bits >> 17;
        bits ^= bits << 5;
        x.push(f32::from_bits(bits));
        x.push((bits as f32 / u32::MAX as f32 - 0.5) * 40.0);
    }
    x
}

#[test]
fn jit_transcendentals_equal_the_scalar_reference_bitwise() {
    let x = sample_inputs();
    for (op, f) in approximations() {
        let (k, p) = unary_kernel(op, DType::F32);
        for opts in option_sets() {
            let (c, ck) = compile(opts, &k, &p);
            let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&vec![0.0; x.len()])];
            exec(&ck, &mut bufs, &[x.len() as i64], 1).unwrap();
            let got = bufs[1].to_f32(x.len());
            let want: Vec<f32> = x.iter().map(|&v| f(v, c.uses_fma())).collect();
            same_bits(&got, &want, &format!("{} {opts:?}", op.name()));
        }
    }
}

#[test]
fn f32_pow_and_f64_calls_match_the_reference() {
    let vals = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        3.0,
        -3.0,
        10.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-3,
        7.5,
        -0.25,
        1e20,
        1e-20,
    ];
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for &a in &vals {
        for &y in &vals {
            xs.push(a);
            ys.push(y);
        }
    }
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![n.clone()], BufferKind::Input(0)),
        (DType::F32, vec![n.clone()], BufferKind::Input(1)),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
    ]);
    let e = ix(d(0), &[(i(0), d(1))]);
    let body = vec![
        load(0, 0, e.clone()),
        load(1, 1, e.clone()),
        bin(2, OpKind::Pow, 0, 1, DType::F32),
        bin(3, OpKind::Rem, 0, 1, DType::F32),
        store(2, e.clone(), 2),
        store(3, e, 3),
    ];
    let k = kernel(vec![], vec![stage(vec![n], vec![], body)], 4);
    let (c, ck) = compile(CpuOptions::default(), &k, &p);
    let m = xs.len();
    let mut bufs = vec![Buf::f32s(&xs), Buf::f32s(&ys), Buf::f32s(&vec![0.0; m]), Buf::f32s(&vec![0.0; m])];
    exec(&ck, &mut bufs, &[m as i64], 1).unwrap();
    let (pw, rm) = (bufs[2].to_f32(m), bufs[3].to_f32(m));
    for q in 0..m {
        let want = binary_float(OpKind::Pow, xs[q] as f64, ys[q] as f64) as f32;
        assert!(ulp(pw[q], want) <= 1, "pow({}, {}) = {} want {}", xs[q], ys[q], pw[q], want);
        same_bits(&pw[q..q + 1], &[sm::pow_f32(xs[q], ys[q], c.uses_fma())], "pow vs scalar");
        let want = binary_float(OpKind::Rem, xs[q] as f64, ys[q] as f64) as f32;
        same_bits(&rm[q..q + 1], &[want], "rem");
    }
    // f64 transcendentals call the reference function: bitwise.
    for op in [OpKind::Exp, OpKind::Log, OpKind::Sin, OpKind::Tanh, OpKind::Erf, OpKind::Sqrt, OpKind::Floor] {
        let (k, p) = unary_kernel(op, DType::F64);
        let (_c, ck) = compile(CpuOptions::default(), &k, &p);
        let x: Vec<f64> = sample_inputs().into_iter().map(|v| v as f64 * 1.001).collect();
        let mut bufs = vec![Buf::f64s(&x), Buf::f64s(&vec![0.0; x.len()])];
        exec(&ck, &mut bufs, &[x.len() as i64], 1).unwrap();
        let got = bufs[1].to_f64(x.len());
        for (g, v) in got.iter().zip(&x) {
            let w = unary_float(op, *v);
            assert!((g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits(), "f64 {}({v}) = {g}, want {w}", op.name());
        }
    }
}

/// The stated max-ULP error of each approximation against the f64 function rounded to f32,
/// over every 1024th f32 bit pattern plus special values, with and without contraction.
const ULP_TABLE: &[(&str, u64)] = &[
    ("exp", 1),
    ("exp2", 1),
    ("log", 1),
    ("log1p", 2),
    ("expm1", 1),
    ("tanh", 2),
    ("erf", 2),
    ("sin", 2),
    ("cos", 2),
    ("sqrt", 0),
    ("rsqrt", 1),
];

#[test]
fn approximation_ulp_table_over_the_f32_range() {
    let reference = |op: OpKind, x: f32| unary_float(op, x as f64) as f32;
    let mut lines = Vec::new();
    for (op, f) in approximations() {
        let bound = ULP_TABLE.iter().find(|(n, _)| *n == op.name()).map(|(_, u)| *u).unwrap();
        for fma in [true, false] {
            let mut worst = (0u64, 0.0f32);
            let mut check = |x: f32| {
                let u = ulp(f(x, fma), reference(op, x));
                if u > worst.0 {
                    worst = (u, x);
                }
            };
            let mut bits: u64 = 0;
            while bits < 1 << 32 {
                check(f32::from_bits(bits as u32));
                bits += 1024;
            }
            special_f32().into_iter().for_each(&mut check);
            lines.push(format!("{:>6} fma={fma:<5} max {} ulp (at {:e})", op.name(), worst.0, worst.1));
            assert!(
                worst.0 <= bound,
                "{} fma={fma}: {} ulp at {:e} exceeds the stated {bound}",
                op.name(),
                worst.0,
                worst.1
            );
        }
    }
    // pow over a grid of bases and exponents.
    let mut worst = (0u64, 0.0f32, 0.0f32);
    let mut bits: u64 = 0;
    while bits < 1 << 32 {
        let x = f32::from_bits(bits as u32);
        for y in [0.5f32, -1.5, 2.0, 3.0, -7.0, 0.1, 13.7, -0.333, 100.0] {
            let u = ulp(sm::pow_f32(x, y, true), binary_float(OpKind::Pow, x as f64, y as f64) as f32);
            if u > worst.0 {
                worst = (u, x, y);
            }
        }
        bits += 1 << 16;
    }
    lines.push(format!("   pow          max {} ulp (at {:e}^{:e})", worst.0, worst.1, worst.2));
    assert!(worst.0 <= 1, "pow: {} ulp", worst.0);
    println!("{}", lines.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Support checks, gathers, errors

#[test]
fn supports_reports_why_a_kernel_cannot_compile() {
    let c = CpuCompiler::new().unwrap();
    let (k, p) = unary_kernel(OpKind::Exp, DType::F16);
    let why = c.supports(&k, &p).unwrap_err();
    assert!(why.contains("f16"), "{why}");
    let (mut k, p) = unary_kernel(OpKind::Exp, DType::F32);
    k.stages[0].body.swap(0, 1); // use before definition
    assert!(c.supports(&k, &p).unwrap_err().contains("before it is defined"));
    let (mut k, p) = unary_kernel(OpKind::Exp, DType::F32);
    k.stages[0].body[2] = store(0, ix(d(0), &[(i(0), d(1))]), 1); // into the input
    assert!(c.supports(&k, &p).unwrap_err().contains("read-only"));
    let (mut k, p) = unary_kernel(OpKind::Exp, DType::F32);
    k.stages[0].body[1] = un(1, OpKind::Exp, 0, DType::I32);
    let c2 = CpuCompiler::new().unwrap();
    assert!(matches!(c2.compile(&k, &p), Err(CodegenError::Invalid(_))));
}

#[test]
fn gather_checks_bounds_and_kernels_without_outer_loops_run_once() {
    let p = program(vec![
        (DType::F32, vec![d(4)], BufferKind::Input(0)),
        (DType::I64, vec![d(6)], BufferKind::Input(1)),
        (DType::F32, vec![d(6)], BufferKind::Temp),
    ]);
    let e = ix(d(0), &[(i(0), d(1))]);
    let body = vec![load(0, 1, e.clone()), Instr::LoadAt { dst: r(1), buf: b(0), index: r(0) }, store(2, e, 1)];
    let k = kernel(vec![], vec![stage(vec![d(6)], vec![], body)], 2);
    let (_c, ck) = compile(CpuOptions::default(), &k, &p);
    let table = [10.0f32, 11.0, 12.0, 13.0];
    let mut bufs = vec![Buf::f32s(&table), Buf::i64s(&[3, 0, 2, 1, 1, 3]), Buf::f32s(&[0.0; 6])];
    exec(&ck, &mut bufs, &[], 1).unwrap();
    assert_eq!(bufs[2].to_f32(6), vec![13.0, 10.0, 12.0, 11.0, 11.0, 13.0]);
    let mut bufs = vec![Buf::f32s(&table), Buf::i64s(&[3, 0, 4, 1, -1, 3]), Buf::f32s(&[0.0; 6])];
    assert_eq!(exec(&ck, &mut bufs, &[], 1), Err(KernelError::IndexOutOfBounds));
    // begin >= end runs nothing.
    let mut bufs = vec![Buf::f32s(&table), Buf::i64s(&[3, 0, 2, 1, 1, 3]), Buf::f32s(&[0.0; 6])];
    exec(&ck, &mut bufs, &[], 0).unwrap();
    assert_eq!(bufs[2].to_f32(6), vec![0.0; 6]);
    // Wrong argument counts are refused before the call.
    let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.ptr()).collect();
    // SAFETY: refused before any access.
    let err = unsafe { ck.run(&ptrs, &[5], 0, 1) };
    assert!(matches!(err, Err(KernelError::BadArguments { .. })));
}

#[test]
fn compiled_kernels_are_send_and_sync_and_outlive_the_compiler() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledKernel>();
    fn assert_send<T: Send>() {}
    assert_send::<CpuCompiler>();
    let (k, p) = pointwise_kernel(true);
    let ck = {
        let c = CpuCompiler::new().unwrap();
        c.compile(&k, &p).unwrap()
    };
    let handle = std::thread::spawn(move || {
        let (x, s, c) = pointwise_inputs(5);
        let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&s), Buf::f32s(&c), Buf::f32s(&[0.0; 15])];
        exec(&ck, &mut bufs, &[5], 3).unwrap();
        bufs[3].to_f32(15)
    });
    assert_eq!(handle.join().unwrap().len(), 15);
}

// ---------------------------------------------------------------------------------------
// Compile time (printed, never asserted)

#[test]
fn compile_times_are_printed() {
    let cases: Vec<(&str, (Kernel, Program))> = vec![
        ("pointwise", pointwise_kernel(true)),
        ("softmax", softmax_kernel()),
        ("argmax", argmax_kernel()),
        ("erf", unary_kernel(OpKind::Erf, DType::F32)),
        ("tanh", unary_kernel(OpKind::Tanh, DType::F32)),
    ];
    let c = CpuCompiler::new().unwrap();
    let mut lines = Vec::new();
    for (name, (k, p)) in &cases {
        let mut times: Vec<f64> = (0..9)
            .map(|_| {
                let t = std::time::Instant::now();
                c.compile(k, p).unwrap();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        lines.push(format!("{name:>10}: median {:.3} ms", times[times.len() / 2]));
    }
    println!("compile times (this build's profile):\n{}", lines.join("\n"));
}

#[test]
fn f32_stages_vectorize_and_strided_ones_stay_scalar() {
    // Vectorizing explicitly: the default is scalar under the `portable` ISA cap.
    let opts = CpuOptions { vectorize: true, ..CpuOptions::default() };
    let has_vectors = |k: &Kernel, p: &Program| ladder::backend::cpu::clif_text(k, p, opts).unwrap().contains("f32x4");
    let (k, p) = pointwise_kernel(true);
    assert!(has_vectors(&k, &p));
    let (k, p) = softmax_kernel();
    assert!(has_vectors(&k, &p));
    let (k, p) = argmax_kernel();
    assert!(!has_vectors(&k, &p), "argmax stages stay scalar");
    let (k, p) = unary_kernel(OpKind::Exp, DType::F64);
    assert!(!has_vectors(&k, &p));
    let scalar = CpuOptions { vectorize: false, ..opts };
    let (k, p) = pointwise_kernel(true);
    assert!(!ladder::backend::cpu::clif_text(&k, &p, scalar).unwrap().contains("f32x4"));
}

#[test]
fn throughput_is_printed() {
    let n = 1usize << 18;
    let mut lines = Vec::new();
    for (name, (k, p)) in [("pointwise", pointwise_kernel(true)), ("softmax", softmax_kernel())] {
        for vectorize in [true, false] {
            let (_c, ck) = compile(CpuOptions { vectorize, ..CpuOptions::default() }, &k, &p);
            let (x, s, c) = pointwise_inputs(n);
            let mut bufs = if name == "pointwise" {
                vec![Buf::f32s(&x), Buf::f32s(&s), Buf::f32s(&c), Buf::f32s(&vec![0.0; 3 * n])]
            } else {
                vec![Buf::f32s(&x), Buf::f32s(&vec![0.0; 3 * n])]
            };
            let dims: Vec<i64> =
                ck.dim_table().iter().map(|dm| if *dm == Dim::sym("n") { n as i64 } else { 3 }).collect();
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                exec(&ck, &mut bufs, &dims, 3).unwrap();
                best = best.min(t.elapsed().as_secs_f64());
            }
            lines.push(format!("{name:>10} vectorize={vectorize:<5}: {:.2} ns/element", best * 1e9 / (3 * n) as f64));
        }
    }
    println!("{}", lines.join("\n"));
}

#[test]
fn nested_inner_loops_reduce_with_loop_variables() {
    // out[q] = Σ_{a<3, j<n} x[q, a, j] · a · j, with the row stride 3n symbolic.
    let n = Dim::sym("n");
    let row = Dim::new(3).mul(&n).unwrap();
    let p = program(vec![
        (DType::F32, vec![d(2), d(3), n.clone()], BufferKind::Input(0)),
        (DType::F32, vec![d(2)], BufferKind::Temp),
    ]);
    let s0 = stage(
        vec![d(3), n.clone()],
        vec![Accumulator { op: ReduceOp::Sum, dtype: DType::F32, result: r(5) }],
        vec![
            load(0, 0, ix(d(0), &[(o(0), row.clone()), (i(0), n.clone()), (i(1), d(1))])),
            Instr::LoopVar { dst: r(1), var: i(0), dtype: DType::F32 },
            Instr::LoopVar { dst: r(2), var: i(1), dtype: DType::F32 },
            bin(3, OpKind::Mul, 0, 1, DType::F32),
            bin(4, OpKind::Mul, 3, 2, DType::F32),
            Instr::Accumulate { acc: 0, x: r(4), index: None },
        ],
    );
    let s1 = stage(vec![], vec![], vec![store(1, ix(d(0), &[(o(0), d(1))]), 5)]);
    let k = kernel(vec![d(2)], vec![s0, s1], 6);
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        for len in [0usize, 1, 5, 16, 17, 33] {
            let x: Vec<f32> = (0..6 * len).map(|q| (q % 7) as f32 * 0.5 - 1.0).collect();
            let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&[9.0; 2])];
            let dims: Vec<i64> =
                ck.dim_table().iter().map(|dm| if *dm == n { len as i64 } else { 3 * len as i64 }).collect();
            exec(&ck, &mut bufs, &dims, 2).unwrap();
            let got = bufs[1].to_f32(2);
            for q in 0..2 {
                let mut want = 0.0f64;
                for a in 0..3 {
                    for j in 0..len {
                        want += x[q * 3 * len + a * len + j] as f64 * a as f64 * j as f64;
                    }
                }
                assert!(
                    (got[q] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "len={len} q={q}: {} vs {want} {opts:?}",
                    got[q]
                );
            }
        }
    }
}

#[test]
fn loop_carried_stores_are_not_vectorized() {
    // y[j + 1] = y[j] + x[j]: a running sum through memory, which must run in order.
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![n.clone()], BufferKind::Input(0)),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
    ]);
    let body = vec![
        load(0, 1, ix(d(0), &[(i(0), d(1))])),
        load(1, 0, ix(d(0), &[(i(0), d(1))])),
        bin(2, OpKind::Add, 0, 1, DType::F32),
        store(1, ix(d(1), &[(i(0), d(1))]), 2),
    ];
    let k = kernel(vec![], vec![stage(vec![Dim::sym("m")], vec![], body)], 3);
    let (_c, ck) = compile(CpuOptions::default(), &k, &p);
    let len = 19usize;
    let x: Vec<f32> = (0..len).map(|q| q as f32).collect();
    let mut bufs = vec![Buf::f32s(&x), Buf::f32s(&vec![0.0; len])];
    let dims: Vec<i64> = ck.dim_table().iter().map(|dm| if *dm == n { len as i64 } else { len as i64 - 1 }).collect();
    exec(&ck, &mut bufs, &dims, 1).unwrap();
    let got = bufs[1].to_f32(len);
    let want: Vec<f32> = (0..len).map(|q| (q * q.saturating_sub(1) / 2) as f32).collect();
    same_bits(&got, &want, "running sum");
}

#[test]
fn argmax_of_an_empty_range_is_an_error_not_index_zero() {
    let (k, p) = argmax_kernel();
    let (_c, ck) = compile(CpuOptions::default(), &k, &p);
    let mut bufs = vec![Buf::f32s(&[]), Buf::i64s(&[9; 5]), Buf::f32s(&[9.0; 5])];
    assert!(matches!(exec(&ck, &mut bufs, &[0], 5), Err(KernelError::EmptyArgmax)));
    // Nothing was written.
    assert_eq!(bufs[1].to_i64(5), vec![9; 5]);
}

#[test]
fn gathers_from_symbolically_sized_buffers_are_left_to_the_checked_executor() {
    // Generated code can only bounds-check a gather against a size it knows.
    let p = program(vec![
        (DType::F32, vec![Dim::sym("n")], BufferKind::Input(0)),
        (DType::I64, vec![d(6)], BufferKind::Input(1)),
        (DType::F32, vec![d(6)], BufferKind::Temp),
    ]);
    let e = ix(d(0), &[(i(0), d(1))]);
    let body = vec![load(0, 1, e.clone()), Instr::LoadAt { dst: r(1), buf: b(0), index: r(0) }, store(2, e, 1)];
    let k = kernel(vec![], vec![stage(vec![d(6)], vec![], body)], 2);
    let why = CpuCompiler::new().unwrap().supports(&k, &p).unwrap_err();
    assert!(why.contains("cannot be bounds-checked"), "{why}");
}

/// Pooling windows read every other element; the vectorized loop loads them as two vectors
/// and picks their even lanes. Max-pooling (and the max prim it lowers to) must match the
/// interpreter bit for bit at every width (vector body and scalar tail), with NaN, ±inf and
/// signed zeros in the windows, on a graph compiled natively.
#[test]
fn stride_two_windows_and_branch_free_max_match_interpreter_bitwise() {
    let specials = special_f32();
    for w in [2usize, 3, 8, 9, 16, 17, 30, 64, 67] {
        let src = format!(
            "graph g(%x: f32[2, 3, 4, {w}]) {{\n  %y = max_pool2d(%x) {{kernel=[2, 2], stride=[2, 2], ceil_mode=true}}\n  %z = relu(%y)\n  return %y, %z\n}}"
        );
        let g = common::parse(&src);
        let n = 2 * 3 * 4 * w;
        let x: Vec<f32> =
            (0..n).map(|k| if k % 3 == 0 { specials[k % specials.len()] } else { (k as f32 * 0.37).sin() }).collect();
        let x = common::f32t(&[2, 3, 4, w], &x);
        let want = ladder::interp::run(&g, std::slice::from_ref(&x), &Default::default()).unwrap().outputs;
        let plan = ladder::compile(&g, &ladder::CompileOptions::native_cpu(1).unwrap()).unwrap();
        assert!(plan.native_kernels() > 0);
        let got = plan.run(&[x]).unwrap().outputs;
        for (g_t, w_t) in got.iter().zip(&want) {
            let (g_v, w_v): (Vec<f32>, Vec<f32>) = (g_t.as_f32().unwrap().to_vec(), w_t.as_f32().unwrap().to_vec());
            same_bits(&g_v, &w_v, &format!("width {w}"));
        }
    }
}

#[test]
fn transposed_reads_vectorize_and_match_interpreter_bitwise() {
    // A detection head's layout change: the innermost loop reads with a large constant stride
    // (lanes loaded one at a time), and the arithmetic after runs on vectors. Exact ops only,
    // so the plan must agree with the interpreter bit for bit; odd sizes leave scalar tails.
    let specials = special_f32();
    for (a, b, c) in [(2usize, 5usize, 8usize), (3, 7, 9), (1, 40, 13), (2, 3, 1)] {
        let src = format!(
            "graph g(%x: f32[{a}, {c}, {b}], %s: f32[{c}]) {{
  %p = permute(%x) {{perm=[0, 2, 1]}}
  %sb = broadcast_in_dim(%s) {{shape=[{a}, {b}, {c}], broadcast_dims=[2]}}
  %m = mul(%p, %sb)
  %y = max(%m, %p)
  %z = add(%y, %sb)
  return %z
}}"
        );
        let g = common::parse(&src);
        let n = a * b * c;
        let x: Vec<f32> = (0..n)
            .map(|k| if k % 5 == 0 { specials[k % specials.len()] } else { (k as f32 * 0.61).cos() * 3.0 })
            .collect();
        let sv: Vec<f32> = (0..c).map(|k| k as f32 * 0.25 - 1.0).collect();
        let inputs = [common::f32t(&[a, c, b], &x), common::f32t(&[c], &sv)];
        let want = ladder::interp::run(&g, &inputs, &Default::default()).unwrap().outputs;
        let plan = ladder::compile(&g, &ladder::CompileOptions::native_cpu(1).unwrap()).unwrap();
        let program = plan.program().unwrap();
        // Vectorizing explicitly: the default is scalar under the `portable` ISA cap.
        let vectorized = ladder::backend::cpu::CpuOptions { vectorize: true, ..Default::default() };
        let strided = program
            .kernels()
            .any(|k| ladder::backend::cpu::clif_text(k, program, vectorized).is_ok_and(|t| t.contains("insertlane")));
        assert!(strided || c < 4, "[{a}, {c}, {b}]: no vectorized transposed read:\n{program}");
        let got = plan.run(&inputs).unwrap().outputs;
        let (g_v, w_v): (Vec<f32>, Vec<f32>) = (got[0].as_f32().unwrap().to_vec(), want[0].as_f32().unwrap().to_vec());
        same_bits(&g_v, &w_v, &format!("[{a}, {c}, {b}]"));
    }
}

/// The same layout change with symbolic sizes (a CRNN's `[batch, C, H, W] -> [W, batch,
/// C·H]`, compiled once for every width): the innermost loop's stride is known only at run
/// time, and still vectorizes (lanes loaded and stored one at a time, `stride` apart),
/// matching the interpreter bit for bit at each size, including a stride of 1 and sizes
/// that leave a scalar tail or no vector iteration at all.
#[test]
fn transposed_reads_with_symbolic_strides_vectorize_and_match_interpreter_bitwise() {
    let src = "graph g(%x: f32[n, c, w], %s: f32[c]) {
  %p = permute(%x) {perm=[2, 0, 1]}
  %sb = broadcast_in_dim(%s) {shape=[w, n, c], broadcast_dims=[2]}
  %m = mul(%p, %sb)
  %y = max(%m, %p)
  return %y
}";
    let g = common::parse(src);
    let plan = ladder::compile(&g, &ladder::CompileOptions::native_cpu(1).unwrap()).unwrap();
    let program = plan.program().unwrap();
    let vectorized = ladder::backend::cpu::CpuOptions { vectorize: true, ..Default::default() };
    let strided = program
        .kernels()
        .any(|k| ladder::backend::cpu::clif_text(k, program, vectorized).is_ok_and(|t| t.contains("insertlane")));
    assert!(strided, "no vectorized transposed read:\n{program}");
    let specials = special_f32();
    for (n, c, w) in [(2usize, 96usize, 64usize), (1, 9, 1), (3, 5, 7), (2, 1, 13), (1, 3, 0)] {
        let len = n * c * w;
        let x: Vec<f32> = (0..len)
            .map(|k| if k % 5 == 0 { specials[k % specials.len()] } else { (k as f32 * 0.37).sin() * 5.0 })
            .collect();
        let sv: Vec<f32> = (0..c).map(|k| k as f32 * 0.5 - 2.0).collect();
        let inputs = [common::f32t(&[n, c, w], &x), common::f32t(&[c], &sv)];
        let want = ladder::interp::run(&g, &inputs, &Default::default()).unwrap().outputs;
        let got = plan.run(&inputs).unwrap().outputs;
        let (g_v, w_v): (Vec<f32>, Vec<f32>) = (got[0].as_f32().unwrap().to_vec(), want[0].as_f32().unwrap().to_vec());
        same_bits(&g_v, &w_v, &format!("[{n}, {c}, {w}]"));
    }
}

// ---------------------------------------------------------------------------------------
// max and min on every pair of special values

/// `max(a, b)` and `min(a, b)` over every ordered pair of the special values (so ±0 both
/// ways, NaN in either operand, infinities, subnormals), on vectors and in the scalar tail,
/// bit for bit against the op's meaning: NaN when either is NaN (the canonical NaN), and
/// -0 < +0.
#[test]
fn max_and_min_of_every_special_pair_match_the_op_bitwise() {
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![n.clone()], BufferKind::Input(0)),
        (DType::F32, vec![n.clone()], BufferKind::Input(1)),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
    ]);
    let at = ix(d(0), &[(i(0), d(1))]);
    let body = vec![
        load(0, 0, at.clone()),
        load(1, 1, at.clone()),
        bin(2, OpKind::Max, 0, 1, DType::F32),
        bin(3, OpKind::Min, 0, 1, DType::F32),
        store(2, at.clone(), 2),
        store(3, at, 3),
    ];
    let k = kernel(vec![], vec![stage(vec![n], vec![], body)], 4);
    let specials = special_f32();
    let (a, b): (Vec<f32>, Vec<f32>) = specials.iter().flat_map(|&x| specials.iter().map(move |&y| (x, y))).unzip();
    for opts in option_sets() {
        let (_c, ck) = compile(opts, &k, &p);
        // The whole set (vectors and a tail), and a length below one vector (all tail).
        for len in [a.len(), 3] {
            let mut bufs = vec![Buf::f32s(&a[..len]), Buf::f32s(&b[..len]), Buf::bytes(4 * len), Buf::bytes(4 * len)];
            exec(&ck, &mut bufs, &[len as i64], 1).unwrap();
            for (out, op) in [(2, OpKind::Max), (3, OpKind::Min)] {
                let got = bufs[out].to_f32(len);
                for q in 0..len {
                    let want = binary_float(op, a[q] as f64, b[q] as f64) as f32;
                    assert_eq!(
                        got[q].to_bits(),
                        want.to_bits(),
                        "{op:?}({:e}, {:e}) = {:e}, want {want:e} ({opts:?})",
                        a[q],
                        b[q],
                        got[q]
                    );
                }
            }
        }
    }
}

/// `max(x, c)` and `min(c, x)` with a constant `c` (relu, clamps: a shorter sequence where
/// `c` allows it) for every special `c`, over every special `x`, bit for bit.
#[test]
fn max_and_min_with_a_constant_match_the_op_bitwise() {
    let n = Dim::sym("n");
    let p = program(vec![
        (DType::F32, vec![n.clone()], BufferKind::Input(0)),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
        (DType::F32, vec![n.clone()], BufferKind::Temp),
    ]);
    let at = ix(d(0), &[(i(0), d(1))]);
    let xs = special_f32();
    for &c in &special_f32() {
        let body = vec![
            load(0, 0, at.clone()),
            fconst(1, c as f64, DType::F32),
            bin(2, OpKind::Max, 0, 1, DType::F32),
            bin(3, OpKind::Min, 1, 0, DType::F32),
            store(1, at.clone(), 2),
            store(2, at.clone(), 3),
        ];
        let k = kernel(vec![], vec![stage(vec![n.clone()], vec![], body)], 4);
        for vectorize in [true, false] {
            let (_c, ck) = compile(CpuOptions { vectorize, strict_fp: false }, &k, &p);
            let len = xs.len();
            let mut bufs = vec![Buf::f32s(&xs), Buf::bytes(4 * len), Buf::bytes(4 * len)];
            exec(&ck, &mut bufs, &[len as i64], 1).unwrap();
            for (out, op) in [(1, OpKind::Max), (2, OpKind::Min)] {
                let got = bufs[out].to_f32(len);
                for (q, &x) in xs.iter().enumerate() {
                    let want = binary_float(op, x as f64, c as f64) as f32;
                    assert_eq!(got[q].to_bits(), want.to_bits(), "{op:?}({x:e}, {c:e}) = {:e}, want {want:e}", got[q]);
                }
            }
        }
    }
}

/// Over a static extent only the versions of an innermost loop that run are compiled (the
/// unrolled vector loop, the one-vector loop, the scalar tail): the results are bit for bit
/// those of the same kernel over a symbolic extent, which compiles all three, at every length
/// around the vector widths, and there is less code.
#[test]
fn static_extents_compile_only_the_loops_that_run() {
    // y = exp(x) / sum(exp(x)) + sum(x), per row: stages unrolled ×4 (a sum) and ×2 (exp).
    let rows_kernel = |n: Dim| {
        let p = program(vec![
            (DType::F32, vec![d(3), n.clone()], BufferKind::Input(0)),
            (DType::F32, vec![d(3), n.clone()], BufferKind::Temp),
        ]);
        let row = ix(d(0), &[(o(0), n.clone()), (i(0), d(1))]);
        let sum = |result: usize| vec![Accumulator { op: ReduceOp::Sum, dtype: DType::F32, result: r(result) }];
        let s0 = stage(
            vec![n.clone()],
            sum(1),
            vec![load(0, 0, row.clone()), Instr::Accumulate { acc: 0, x: r(0), index: None }],
        );
        let s1 = stage(
            vec![n.clone()],
            sum(4),
            vec![
                load(2, 0, row.clone()),
                un(3, OpKind::Exp, 2, DType::F32),
                Instr::Accumulate { acc: 0, x: r(3), index: None },
            ],
        );
        let s2 = stage(
            vec![n.clone()],
            vec![],
            vec![
                load(5, 0, row.clone()),
                un(6, OpKind::Exp, 5, DType::F32),
                bin(7, OpKind::Div, 6, 4, DType::F32),
                bin(8, OpKind::Add, 7, 1, DType::F32),
                store(1, row, 8),
            ],
        );
        (kernel(vec![d(3)], vec![s0, s1, s2], 9), p)
    };
    let (k_sym, p_sym) = rows_kernel(Dim::sym("n"));
    for opts in option_sets() {
        let (_c, general) = compile(opts, &k_sym, &p_sym);
        for n in 1..=34usize {
            let (k, p) = rows_kernel(d(n as u64));
            let (_c, fixed) = compile(opts, &k, &p);
            let x: Vec<f32> = (0..3 * n).map(|q| ((q * 37) % 23) as f32 / 7.0 - 1.5).collect();
            let mut a = vec![Buf::f32s(&x), Buf::f32s(&vec![0.0; 3 * n])];
            exec(&general, &mut a, &[n as i64], 3).unwrap();
            let mut b = vec![Buf::f32s(&x), Buf::f32s(&vec![0.0; 3 * n])];
            exec(&fixed, &mut b, &[], 3).unwrap();
            same_bits(&b[1].to_f32(3 * n), &a[1].to_f32(3 * n), &format!("n = {n}, {opts:?}"));
        }
    }
    // 32 elements fill the unrolled loops exactly: no one-vector loop, no scalar tail.
    let opts = CpuOptions { vectorize: true, ..CpuOptions::default() };
    let text = |n: Dim| {
        let (k, p) = rows_kernel(n);
        ladder::backend::cpu::clif_text(&k, &p, opts).unwrap()
    };
    let (fixed, general) = (text(d(32)), text(Dim::sym("n")));
    assert!(fixed.contains("f32x4"), "{fixed}");
    assert!(
        4 * fixed.lines().count() < 3 * general.lines().count(),
        "{} vs {} lines",
        fixed.lines().count(),
        general.lines().count()
    );
}
