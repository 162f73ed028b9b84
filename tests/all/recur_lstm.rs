//! The `lstm` op: its meaning by hand, its shape rule's errors, its decomposition and the CPU
//! library kernel, each checked against the interpreter on random and adversarial inputs.

use ladder::interp::{self, Options};
use ladder::kernel::Step;
use ladder::{compile, CompileOptions, Tensor};

use crate::common::*;

fn graph(steps: &str, batch: &str, hidden: usize, reverse: bool) -> String {
    let g = 4 * hidden;
    format!(
        "graph g(%xw: f32[{steps}, {batch}, {g}], %r: f32[{g}, {hidden}], %h0: f32[{batch}, {hidden}], %c0: f32[{batch}, {hidden}]) {{\n  %y = lstm(%xw, %r, %h0, %c0) {{reverse={reverse}}}\n  return %y\n}}"
    )
}

/// A deterministic generator of f32 values in [-scale, scale].
struct Gen(u64);

impl Gen {
    fn next(&mut self, scale: f32) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        f32t(shape, &(0..n).map(|_| self.next(scale)).collect::<Vec<_>>())
    }
}

fn inputs(gen: &mut Gen, s: usize, b: usize, h: usize) -> Vec<Tensor> {
    vec![
        gen.tensor(&[s, b, 4 * h], 2.0),
        gen.tensor(&[4 * h, h], 0.7),
        gen.tensor(&[b, h], 1.0),
        gen.tensor(&[b, h], 1.0),
    ]
}

/// Adversarial inputs: NaN, ±inf, huge and tiny magnitudes scattered through xw and the
/// initial state (each poisons only its own batch row from there on), and huge, tiny and
/// zero recurrent weights.
fn adversarial(gen: &mut Gen, s: usize, b: usize, h: usize) -> Vec<Tensor> {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 1e-40, -1e-40, 0.0, -0.0, 88.0, -104.0];
    let finite = [1e30, -1e30, 1e-40, -1e-40, 0.0, -0.0, 1e4];
    let mut ts = inputs(gen, s, b, h);
    for (k, t) in ts.iter_mut().enumerate() {
        let mut v: Vec<f32> = t.to_f64_vec().into_iter().map(|x| x as f32).collect();
        let n = v.len();
        let (every, pool): (usize, &[f32]) = match k {
            0 => (11, &specials),
            1 => (13, &finite),
            _ => (n.max(1), &specials),
        };
        for i in 0..n.div_ceil(every) {
            let at = (i * every + k * 3) % n;
            v[at] = pool[(i + k) % pool.len()];
        }
        *t = f32t(t.shape(), &v);
    }
    ts
}

/// Elementwise: NaN with NaN, infinities exactly, finite values within `tol` relative to
/// max(1, |want|).
fn assert_rel(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (g.is_finite() && w.is_finite() && (g - w).abs() <= tol * w.abs().max(1.0));
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn one_step_by_hand_and_reverse_order() {
    // Zero projections and weights, c0 = 1: every gate is σ(0) = 1/2 and c̃ = tanh(0) = 0, so
    // c = 1/2 and h = tanh(1/2) / 2.
    let src = graph("1", "1", 1, false);
    let ins = [f32t(&[1, 1, 4], &[0.0; 4]), f32t(&[4, 1], &[0.0; 4]), f32t(&[1, 1], &[0.0]), f32t(&[1, 1], &[1.0])];
    let y = run1(&src, &ins);
    assert_close(&y, &[(0.5f64.tanh() / 2.0) as f32 as f64, 0.5], 0.0);

    // Two steps, reverse: step 1 runs first from the initial state, and each result is stored
    // at its own position in the sequence.
    let (i1, o1, f1, c1) = (0.3f32, -0.2f32, 1.1f32, 0.7f32);
    let xw = [0.0, 0.0, 0.0, 0.0, i1, o1, f1, c1];
    let r = [0.5f32, -1.0, 0.25, 2.0];
    let ins = [f32t(&[2, 1, 4], &xw), f32t(&[4, 1], &r), f32t(&[1, 1], &[0.0]), f32t(&[1, 1], &[0.0])];
    let y = run1(&graph("2", "1", 1, true), &ins);
    let c_1 = sig(f64::from(i1)) * f64::from(c1).tanh();
    let h_1 = sig(f64::from(o1)) * c_1.tanh();
    // Step 0 then sees h = h_1, c = c_1.
    let g: Vec<f64> = r.iter().map(|&w| f64::from(w) * h_1).collect();
    let c_0 = sig(g[2]) * c_1 + sig(g[0]) * g[3].tanh();
    let h_0 = sig(g[1]) * c_0.tanh();
    let want: Vec<f64> = [h_0, c_0, h_1, c_1].iter().map(|&x| x as f32 as f64).collect();
    assert_close(&y, &want, 0.0);
}

#[test]
fn shape_rule_errors_name_the_operand() {
    let bad = [
        ("f32[3, 2, 8]", "f32[8, 2]", "f32[2, 2]", "f32[2, 2]", ""),
        ("f32[3, 2, 7]", "f32[8, 2]", "f32[2, 2]", "f32[2, 2]", "xw"),
        ("f32[3, 2, 8]", "f32[8, 3]", "f32[2, 2]", "f32[2, 2]", "r"),
        ("f32[3, 2, 8]", "f32[8, h]", "f32[2, h]", "f32[2, h]", "static hidden size"),
        ("f32[3, 2, 8]", "f32[8, 2]", "f32[1, 2]", "f32[2, 2]", "h0"),
        ("f32[3, 2, 8]", "f32[8, 2]", "f32[2, 2]", "f32[2, 3]", "c0"),
        ("f32[3, 2, 8]", "f64[8, 2]", "f32[2, 2]", "f32[2, 2]", "dtype"),
        ("i32[3, 2, 8]", "i32[8, 2]", "i32[2, 2]", "i32[2, 2]", "dtype"),
        ("f32[3, 8]", "f32[8, 2]", "f32[2, 2]", "f32[2, 2]", "rank"),
    ];
    for (xw, r, h0, c0, want) in bad {
        let src = format!(
            "graph g(%xw: {xw}, %r: {r}, %h0: {h0}, %c0: {c0}) {{\n  %y = lstm(%xw, %r, %h0, %c0)\n  return %y\n}}"
        );
        match ladder::text::parse(&src) {
            Ok(_) => assert!(want.is_empty(), "{src} parsed, expected an error about {want}"),
            Err(e) => {
                assert!(!want.is_empty(), "{src}: {e}");
                assert!(e.to_string().contains(want), "{src}: `{e}` does not mention {want}");
            }
        }
    }
}

#[test]
fn decomposition_matches_the_op() {
    let mut gen = Gen(7);
    for (s, b, h, reverse) in [(1, 1, 1, false), (5, 3, 4, false), (5, 3, 4, true), (9, 2, 8, true), (3, 0, 2, false)] {
        let src = graph(&s.to_string(), &b.to_string(), h, reverse);
        check_decomposition(&src, &inputs(&mut gen, s, b, h), 2e-6, 2e-6);
        check_decomposition(&src, &adversarial(&mut gen, s, b, h), 2e-6, 2e-6);
    }
    // f64 decomposes in f64.
    let src = graph("4", "2", 3, false).replace("f32", "f64");
    let ins: Vec<Tensor> = inputs(&mut gen, 4, 2, 3)
        .iter()
        .map(|t| Tensor::from_f64_as(ladder::DType::F64, t.shape(), &t.to_f64_vec()).unwrap())
        .collect();
    check_decomposition(&src, &ins, 1e-14, 1e-14);
}

#[test]
fn a_symbolic_sequence_length_does_not_unroll() {
    let g = parse(&graph("s", "b", 2, false));
    let e = ladder::passes::lower(&g).unwrap_err().to_string();
    assert!(e.contains("sequence length") && e.contains("not static"), "{e}");
    // Native mode keeps the op whole, so the same graph compiles there.
    assert!(ladder::pipeline::lower(&g, ladder::pipeline::Mode::Native, ladder::pipeline::Rung::Simplified).is_ok());
    // A static length past the unrolling bound: a typed error in reference mode; native mode
    // runs it.
    let g = parse(&graph("5000", "1", 1, false));
    let e = ladder::passes::lower(&g).unwrap_err().to_string();
    assert!(e.contains("5000 steps"), "{e}");
    let plan = compile(&g, &native()).unwrap();
    let ins =
        [f32t(&[5000, 1, 4], &[0.1; 20000]), f32t(&[4, 1], &[0.5; 4]), f32t(&[1, 1], &[0.0]), f32t(&[1, 1], &[0.0])];
    let want = interp::run(&g, &ins, &Options::default()).unwrap().outputs.remove(0);
    let got = plan.run(&ins).unwrap().outputs.remove(0);
    assert_rel(&got.to_f64_vec(), &want.to_f64_vec(), 1e-5);
}

fn native() -> CompileOptions {
    CompileOptions::native_cpu(1).unwrap()
}

fn lstm_steps(p: &ladder::Plan) -> usize {
    let program = p.program().unwrap();
    program.steps.iter().filter(|s| matches!(s, Step::Library(l) if l.op == ladder::ops::OpKind::Lstm)).count()
}

#[test]
fn native_kernel_matches_the_interpreter() {
    let mut gen = Gen(11);
    // Hidden sizes around the kernel's 64-column chunks, batch and sequence sizes of 1.
    let cases = [(1, 1, 1), (4, 1, 16), (6, 3, 5), (3, 2, 24), (2, 2, 32), (5, 1, 17), (1, 4, 40), (3, 0, 3)];
    for (s, b, h) in cases {
        for reverse in [false, true] {
            // Symbolic sequence length and batch: one plan serves every size.
            let g = parse(&graph("s", "b", h, reverse));
            let plan = compile(&g, &native()).unwrap();
            assert_eq!(lstm_steps(&plan), 1, "one lstm library step");
            assert!(plan.fallbacks().is_empty(), "{:?}", plan.fallbacks());
            for ins in [inputs(&mut gen, s, b, h), adversarial(&mut gen, s, b, h)] {
                let want = interp::run(&g, &ins, &Options::default()).unwrap().outputs.remove(0);
                let got = plan.run(&ins).unwrap().outputs.remove(0);
                assert_eq!(got.shape(), want.shape());
                // Both run in f32 against the op's f64 meaning; a few ULPs per step apart.
                assert_rel(&got.to_f64_vec(), &want.to_f64_vec(), 2e-6);
            }
        }
    }
}

#[test]
fn other_dtypes_run_the_op_through_the_interpreter_meaning() {
    let mut gen = Gen(5);
    let g = parse(&graph("3", "2", 4, false).replace("f32", "f64"));
    let plan = compile(&g, &native()).unwrap();
    let ins: Vec<Tensor> = inputs(&mut gen, 3, 2, 4)
        .iter()
        .map(|t| Tensor::from_f64_as(ladder::DType::F64, t.shape(), &t.to_f64_vec()).unwrap())
        .collect();
    let want = interp::run(&g, &ins, &Options::default()).unwrap().outputs.remove(0);
    let got = plan.run(&ins).unwrap().outputs.remove(0);
    assert_close(&got.to_f64_vec(), &want.to_f64_vec(), 0.0);
}

#[test]
fn reference_mode_runs_the_decomposition() {
    let mut gen = Gen(3);
    let g = parse(&graph("4", "2", 3, true));
    let plan = compile(&g, &CompileOptions::reference()).unwrap();
    assert_eq!(lstm_steps(&plan), 0, "reference mode unrolls");
    let ins = inputs(&mut gen, 4, 2, 3);
    let want = interp::run(&g, &ins, &Options::default()).unwrap().outputs.remove(0);
    let got = plan.run(&ins).unwrap().outputs.remove(0);
    assert_close(&got.to_f64_vec(), &want.to_f64_vec(), 2e-6);
}

/// The library kernel held to the decomposition's tolerance (`numerics::tolerance`, the bound
/// carried through the recurrence), on the numerics harness's generated cases: random
/// dtypes, symbolic batches, NaN, infinities and huge values in every operand.
#[test]
fn native_kernel_meets_the_tolerance_table() {
    use ladder::numerics::{compare, generate_case, CompareCtx};
    let op = ladder::ops::OpKind::Lstm;
    let precise = Options { precise: true, ..Options::default() };
    let (mut checked, mut f32_cases) = (0, 0);
    for k in 0..400u64 {
        let Some(case) = generate_case(op, &ladder::gen::seeded_bytes(0x157 << 40 | k, 16)) else { continue };
        let Ok(reference) = interp::run(&case.graph, &case.inputs, &precise) else { continue };
        let plan = compile(&case.graph, &native()).unwrap_or_else(|e| panic!("case {k}: {e}"));
        let got = plan.run(&case.inputs).unwrap_or_else(|e| panic!("case {k}: {e}")).outputs.remove(0);
        let ctx = CompareCtx { graph: &case.graph, node: case.node, inputs: &case.inputs, output: "out" };
        if let Err(m) = compare(op, &reference.outputs[0], &got, &ctx) {
            panic!("case {k}: {m}\n{}", ladder::text::print(&case.graph));
        }
        checked += 1;
        f32_cases += usize::from(got.dtype() == ladder::DType::F32 && got.numel() > 0);
    }
    assert!(checked >= 200 && f32_cases >= 50, "{checked} cases, {f32_cases} f32 ones");
}

/// Threads split the batch rows, each running the whole sequence: the same bits as one
/// thread, whatever the split (3 rows over 2 threads: 2 and 1).
#[test]
fn threads_split_batch_rows_without_changing_a_bit() {
    let mut gen = Gen(19);
    let g = parse(&graph("s", "b", 24, true));
    let one = compile(&g, &native()).unwrap();
    let two = compile(&g, &CompileOptions::native_cpu(2).unwrap()).unwrap();
    for (s, b) in [(64, 3), (64, 2), (200, 5), (3, 7)] {
        let ins = adversarial(&mut gen, s, b, 24);
        let a = one.run(&ins).unwrap().outputs.remove(0);
        let z = two.run(&ins).unwrap().outputs.remove(0);
        assert!(a.bit_eq(&z), "{s} steps, {b} rows");
        let want = interp::run(&g, &ins, &Options::default()).unwrap().outputs.remove(0);
        assert_rel(&z.to_f64_vec(), &want.to_f64_vec(), 2e-6);
    }
}
