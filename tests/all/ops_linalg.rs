//! matmul, conv and the high-level linear-algebra and pooling ops on the interpreter:
//! hand-computed expectations, transposes, batch broadcasting, integer and empty cases,
//! symbolic shapes, accumulation order, fuel, and typed errors at the node's line.

use ladder::interp::{EvalError, InterpError, Options};

use crate::common::*;

fn precise() -> Options {
    Options { precise: true, ..Default::default() }
}

/// The printed type of the graph's first output.
fn out_type(src: &str) -> String {
    let g = parse(src);
    g.ty(g.outputs()[0].value).to_string()
}

/// Asserts that `src` fails to parse at line 2 with a message containing `needle`.
fn assert_bad(src: &str, needle: &str) {
    let err = match ladder::text::parse(src) {
        Ok(_) => panic!("expected an error containing {needle:?}\n{src}"),
        Err(e) => e,
    };
    assert!(err.to_string().contains(needle), "{err}\nwanted {needle:?}\n{src}");
    assert_eq!(err.line, 2, "{err}");
}

fn iota(n: usize) -> Vec<f32> {
    (1..=n).map(|v| v as f32).collect()
}

// ----------------------------------------------------------------------------------- matmul

const A23: [f32; 6] = [1., 2., 3., 4., 5., 6.];
const B32: [f32; 6] = [7., 8., 9., 10., 11., 12.];

#[test]
fn matmul_2x3_by_3x2() {
    let src = "graph g(%a: f32[2, 3], %b: f32[3, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[2, 2]");
    let got = run1(src, &[f32t(&[2, 3], &A23), f32t(&[3, 2], &B32)]);
    assert_eq!(got, vec![58., 64., 139., 154.]);
}

#[test]
fn matmul_transposes() {
    // a^T and b^T given, with the transpose flags: the same product as above.
    let at = [1., 4., 2., 5., 3., 6.];
    let bt = [7., 9., 11., 8., 10., 12.];
    let src = "graph g(%a: f32[3, 2], %b: f32[2, 3]) {\n  %y = matmul(%a, %b) {transpose_a=true, transpose_b=true}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[3, 2], &at), f32t(&[2, 3], &bt)]), vec![58., 64., 139., 154.]);
    let src = "graph g(%a: f32[3, 2], %b: f32[3, 2]) {\n  %y = matmul(%a, %b) {transpose_a=true}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[3, 2], &at), f32t(&[3, 2], &B32)]), vec![58., 64., 139., 154.]);
    // a [2, 3] @ (a [2, 3])^T = [[14, 32], [32, 77]].
    let src = "graph g(%a: f32[2, 3]) {\n  %y = matmul(%a, %a) {transpose_b=true}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[2, 3], &A23)]), vec![14., 32., 32., 77.]);
}

#[test]
fn matmul_broadcasts_batch_dims() {
    // a[i, 0] = (i + 1) * [[1, 0, 0], [0, 1, 0]] picks rows 0 and 1 of each b[j], scaled.
    let mut a = Vec::new();
    for i in 0..2 {
        let s = (i + 1) as f32;
        a.extend([s, 0., 0., 0., s, 0.]);
    }
    // b[j, r, c] = 100 j + 10 r + c.
    let b: Vec<f32> =
        (0..3).flat_map(|j| (0..3).flat_map(move |r| (0..4).map(move |c| (100 * j + 10 * r + c) as f32))).collect();
    let src = "graph g(%a: f32[2, 1, 2, 3], %b: f32[3, 3, 4]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[2, 3, 2, 4]");
    let got = run1(src, &[f32t(&[2, 1, 2, 3], &a), f32t(&[3, 3, 4], &b)]);
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            for r in 0..2 {
                for c in 0..4 {
                    want.push(((i + 1) * (100 * j + 10 * r + c)) as f64);
                }
            }
        }
    }
    assert_eq!(got, want);
    // First few written out: i = 0, j = 0 is rows 0 and 1 of b[0].
    assert_eq!(&got[..8], &[0., 1., 2., 3., 10., 11., 12., 13.]);
    // The last: i = 1, j = 2, r = 1: 2 * [210, 211, 212, 213].
    assert_eq!(&got[44..], &[420., 422., 424., 426.]);
}

#[test]
fn matmul_integers_and_promotion() {
    let src = "graph g(%a: i64[2, 2], %b: i64[2, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "i64[2, 2]");
    let out = run(src, &[i64t(&[2, 2], &[1, 2, 3, 4]), i64t(&[2, 2], &[5, 6, 7, 8])]).unwrap();
    assert_eq!(out.outputs[0].dtype(), ladder::DType::I64);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![19., 22., 43., 50.]);
    let src = "graph g(%a: i64[1, 2], %b: f32[2, 1]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1]");
    assert_eq!(run1(src, &[i64t(&[1, 2], &[3, 4]), f32t(&[2, 1], &[0.5, 0.25])]), vec![2.5]);
}

#[test]
fn matmul_empty_dims() {
    // k = 0: every element is the empty sum, 0.
    let src = "graph g(%a: f32[2, 0], %b: f32[0, 3]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    let out = run(src, &[f32t(&[2, 0], &[]), f32t(&[0, 3], &[])]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[2, 3]);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![0.; 6]);
    // m = 0: an empty result.
    let src = "graph g(%a: f32[0, 3], %b: f32[3, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    let out = run(src, &[f32t(&[0, 3], &[]), f32t(&[3, 2], &B32)]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[0, 2]);
    // An empty batch dim.
    let src = "graph g(%a: f32[0, 2, 3], %b: f32[3, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    let out = run(src, &[f32t(&[0, 2, 3], &[]), f32t(&[3, 2], &B32)]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[0, 2, 2]);
}

#[test]
fn matmul_symbolic_shapes() {
    let src = "graph g(%x: f32[batch, 4], %w: f32[4, 8]) {\n  %y = matmul(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, 8]");
    let src = "graph g(%x: f32[b, seq, d], %w: f32[d, 8]) {\n  %y = matmul(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[b, seq, 8]");
    let src = "graph g(%x: f32[b, 1, s, d], %w: f32[h, d, s]) {\n  %y = matmul(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[b, h, s, s]");
    // Running binds the symbols: x [2, 4] of ones @ w [4, 8] of ones is all 4s.
    let src = "graph g(%x: f32[batch, 4], %w: f32[4, 8]) {\n  %y = matmul(%x, %w)\n  return %y\n}";
    let out = run(src, &[f32t(&[2, 4], &[1.; 8]), f32t(&[4, 8], &[1.; 32])]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[2, 8]);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![4.; 16]);
}

#[test]
fn matmul_accumulates_in_f32_sequentially_but_precise_is_f64() {
    // 1e8 + 1 rounds back to 1e8 in f32, so the f32 sum is 0; the exact sum is 1.
    let src = "graph g(%a: f32[1, 3], %b: f32[3, 1]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    let inputs = [f32t(&[1, 3], &[1e8, 1., -1e8]), f32t(&[3, 1], &[1., 1., 1.])];
    assert_eq!(run1(src, &inputs), vec![0.]);
    let out = ladder::interp::run(&parse(src), &inputs, &precise()).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1.]);
}

#[test]
fn matmul_charges_fuel_for_its_multiply_adds() {
    let src = "graph g(%a: f32[64, 64], %b: f32[64, 64]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    let inputs = [f32t(&[64, 64], &[1.; 4096]), f32t(&[64, 64], &[1.; 4096])];
    // The run loop alone would charge 3 * 4096 elements; the product is 64^3 = 262144.
    let opts = Options { fuel: 100_000, ..Default::default() };
    let err = ladder::interp::run(&parse(src), &inputs, &opts).unwrap_err();
    assert!(matches!(err, InterpError::Eval { error: EvalError::OutOfFuel, .. }), "{err}");
    let opts = Options { fuel: 300_000, ..Default::default() };
    let out = ladder::interp::run(&parse(src), &inputs, &opts).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec()[0], 64.);
}

#[test]
fn matmul_nan_and_inf_propagate() {
    let src = "graph g(%a: f32[2, 2], %b: f32[2, 1]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    let got = run1(src, &[f32t(&[2, 2], &[f32::NAN, 1., f32::INFINITY, 1.]), f32t(&[2, 1], &[1., 2.])]);
    assert!(got[0].is_nan());
    assert_eq!(got[1], f64::INFINITY);
}

#[test]
fn matmul_explicit_form_needs_equal_dtypes() {
    use ladder::ir::verify::{verify, Stage};
    let src = "graph g(%a: f32[2, 2], %b: f32[2, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    assert!(verify(&parse(src), Stage::Prims).is_ok());
    let src = "graph g(%a: f32[2, 2], %b: f64[2, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}";
    let g = parse(src);
    assert_eq!(out_type(src), "f64[2, 2]");
    let err = verify(&g, Stage::Prims).unwrap_err();
    assert!(err.to_string().contains("explicit"), "{err}");
    let src = "graph g(%a: f32[2, 2]) {\n  %y = linear(%a, %a)\n  return %y\n}";
    assert!(verify(&parse(src), Stage::Prims).is_err());
}

#[test]
fn matmul_bad_inputs() {
    assert_bad("graph g(%a: f32[2, 3], %b: f32[2, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}", "inner dims differ");
    assert_bad("graph g(%a: f32[batch, 3], %b: f32[n, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}", "inner dims");
    assert_bad("graph g(%a: f32[3], %b: f32[3, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}", "rank at least 2");
    assert_bad(
        "graph g(%a: f32[2, 3], %b: f32[3]) {\n  %y = matmul(%a, %b)\n  return %y\n}",
        "argument 1 must have rank",
    );
    assert_bad(
        "graph g(%a: f32[2, 2, 3], %b: f32[3, 3, 2]) {\n  %y = matmul(%a, %b)\n  return %y\n}",
        "do not broadcast",
    );
    assert_bad("graph g(%a: bool[2, 2]) {\n  %y = matmul(%a, %a)\n  return %y\n}", "numeric");
    assert_bad("graph g(%a: f32[2, 2]) {\n  %y = matmul(%a)\n  return %y\n}", "takes 2 arguments");
    assert_bad("graph g(%a: f32[2, 2]) {\n  %y = matmul(%a, %a) {transpose=true}\n  return %y\n}", "unknown attribute");
}

// --------------------------------------------------------------------- bmm, linear, addmm

#[test]
fn bmm_hand_computed() {
    let src = "graph g(%a: f32[2, 1, 2], %b: f32[2, 2, 1]) {\n  %y = bmm(%a, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[2, 1, 1]");
    assert_eq!(run1(src, &[f32t(&[2, 1, 2], &[1., 2., 3., 4.]), f32t(&[2, 2, 1], &[5., 6., 7., 8.])]), vec![17., 53.]);
    let src = "graph g(%a: f32[b, n, k], %c: f32[b, k, m]) {\n  %y = bmm(%a, %c)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[b, n, m]");
    assert_bad(
        "graph g(%a: f32[2, 1, 2], %b: f32[1, 2, 1]) {\n  %y = bmm(%a, %b)\n  return %y\n}",
        "batch dims differ",
    );
    assert_bad("graph g(%a: f32[1, 2], %b: f32[2, 1]) {\n  %y = bmm(%a, %b)\n  return %y\n}", "rank 3");
    assert_bad("graph g(%a: f32[2, 1, 2], %b: f32[2, 3, 1]) {\n  %y = bmm(%a, %b)\n  return %y\n}", "inner dims");
}

#[test]
fn linear_with_and_without_bias() {
    let x = [1., 2., 3., 4., 5., 6.];
    let w = [1., 0., -1., 0.5, 0.5, 0.5];
    let src = "graph g(%x: f32[2, 3], %w: f32[2, 3], %b: f32[2]) {\n  %y = linear(%x, %w, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[2, 2]");
    let got = run1(src, &[f32t(&[2, 3], &x), f32t(&[2, 3], &w), f32t(&[2], &[10., 20.])]);
    assert_eq!(got, vec![8., 23., 8., 27.5]);
    let src = "graph g(%x: f32[2, 3], %w: f32[2, 3]) {\n  %y = linear(%x, %w)\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[2, 3], &x), f32t(&[2, 3], &w)]), vec![-2., 3., -2., 7.5]);
    // A 1-D input gives a 1-D output.
    let src = "graph g(%x: f32[3], %w: f32[2, 3], %b: f32[2]) {\n  %y = linear(%x, %w, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[2]");
    assert_eq!(run1(src, &[f32t(&[3], &[1., 2., 3.]), f32t(&[2, 3], &w), f32t(&[2], &[1., 1.])]), vec![-1., 4.]);
    // Precise mode.
    let src = "graph g(%x: f32[2, 3], %w: f32[2, 3], %b: f32[2]) {\n  %y = linear(%x, %w, %b)\n  return %y\n}";
    let out =
        ladder::interp::run(&parse(src), &[f32t(&[2, 3], &x), f32t(&[2, 3], &w), f32t(&[2], &[10., 20.])], &precise())
            .unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![8., 23., 8., 27.5]);
}

#[test]
fn linear_symbolic_and_bad_inputs() {
    let src = "graph g(%x: f32[batch, seq, 3], %w: f32[2, 3]) {\n  %y = linear(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, seq, 2]");
    let src = "graph g(%x: f32[batch, d], %w: f32[h, d], %b: f32[h]) {\n  %y = linear(%x, %w, %b)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, h]");
    assert_bad("graph g(%x: f32[2, 3], %w: f32[2, 4]) {\n  %y = linear(%x, %w)\n  return %y\n}", "input features");
    assert_bad(
        "graph g(%x: f32[2, 3], %w: f32[2, 3], %b: f32[3]) {\n  %y = linear(%x, %w, %b)\n  return %y\n}",
        "bias has 3 entries",
    );
    assert_bad("graph g(%x: f32[2, 3], %w: f32[3]) {\n  %y = linear(%x, %w)\n  return %y\n}", "rank 2");
    assert_bad("graph g(%x: f32[2, 3]) {\n  %y = linear(%x)\n  return %y\n}", "takes 2 to 3 arguments");
}

#[test]
fn addmm_scales_and_broadcasts_bias() {
    let src = "graph g(%c: f32[2], %a: f32[2, 2], %b: f32[2, 2]) {\n  %y = addmm(%c, %a, %b) {beta=2.0, alpha=3}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[2, 2]");
    let inputs = [f32t(&[2], &[10., 20.]), f32t(&[2, 2], &[1., 2., 3., 4.]), f32t(&[2, 2], &[1., 0., 0., 1.])];
    assert_eq!(run1(src, &inputs), vec![23., 46., 29., 52.]);
    // A [2, 1] bias broadcasts along columns; defaults beta = alpha = 1.
    let src = "graph g(%c: f32[2, 1], %a: f32[2, 2], %b: f32[2, 2]) {\n  %y = addmm(%c, %a, %b)\n  return %y\n}";
    let inputs = [f32t(&[2, 1], &[10., 20.]), f32t(&[2, 2], &[1., 2., 3., 4.]), f32t(&[2, 2], &[1., 0., 0., 1.])];
    assert_eq!(run1(src, &inputs), vec![11., 12., 23., 24.]);
}

#[test]
fn addmm_beta_zero_ignores_the_bias_even_nan() {
    let src =
        "graph g(%c: f32[2, 2], %a: f32[2, 2], %b: f32[2, 2]) {\n  %y = addmm(%c, %a, %b) {beta=0.0}\n  return %y\n}";
    let inputs = [
        f32t(&[2, 2], &[f32::NAN, f32::INFINITY, 1., 1.]),
        f32t(&[2, 2], &[1., 2., 3., 4.]),
        f32t(&[2, 2], &[1., 0., 0., 1.]),
    ];
    assert_eq!(run1(src, &inputs), vec![1., 2., 3., 4.]);
    // With beta = 1 the NaN comes through.
    let src = "graph g(%c: f32[2, 2], %a: f32[2, 2], %b: f32[2, 2]) {\n  %y = addmm(%c, %a, %b)\n  return %y\n}";
    let got = run1(src, &inputs);
    assert!(got[0].is_nan());
    assert_eq!(&got[1..], &[f64::INFINITY, 4., 5.]);
}

#[test]
fn addmm_integers_and_bad_inputs() {
    let src = "graph g(%c: i64[2], %a: i64[2, 2], %b: i64[2, 2]) {\n  %y = addmm(%c, %a, %b) {alpha=2}\n  return %y\n}";
    assert_eq!(out_type(src), "i64[2, 2]");
    let inputs = [i64t(&[2], &[1, -1]), i64t(&[2, 2], &[1, 2, 3, 4]), i64t(&[2, 2], &[5, 6, 7, 8])];
    assert_eq!(run1(src, &inputs), vec![39., 43., 87., 99.]);
    assert_bad(
        "graph g(%c: i64[2], %a: i64[2, 2], %b: i64[2, 2]) {\n  %y = addmm(%c, %a, %b) {beta=0.5}\n  return %y\n}",
        "beta",
    );
    assert_bad(
        "graph g(%c: f32[3], %a: f32[2, 2], %b: f32[2, 2]) {\n  %y = addmm(%c, %a, %b)\n  return %y\n}",
        "do not broadcast",
    );
    assert_bad(
        "graph g(%c: f32[2, 2, 2], %a: f32[2, 2], %b: f32[2, 2]) {\n  %y = addmm(%c, %a, %b)\n  return %y\n}",
        "does not broadcast",
    );
    assert_bad(
        "graph g(%c: f32[2], %a: f32[2, 3], %b: f32[2, 2]) {\n  %y = addmm(%c, %a, %b)\n  return %y\n}",
        "inner dims",
    );
}

// ------------------------------------------------------------------------------------- conv

const X33: [f32; 9] = [1., 2., 3., 4., 5., 6., 7., 8., 9.];
const W22: [f32; 4] = [1., 2., 3., 4.];

#[test]
fn conv2d_plain() {
    let src = "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 2]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33), f32t(&[1, 1, 2, 2], &W22)]), vec![37., 47., 67., 77.]);
    // The opaque conv, with default attributes, means the same.
    let src = "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv(%x, %w)\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33), f32t(&[1, 1, 2, 2], &W22)]), vec![37., 47., 67., 77.]);
    // Bias per output channel.
    let src =
        "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2], %b: f32[1]) {\n  %y = conv2d(%x, %w, %b)\n  return %y\n}";
    let got = run1(src, &[f32t(&[1, 1, 3, 3], &X33), f32t(&[1, 1, 2, 2], &W22), f32t(&[1], &[0.5])]);
    assert_eq!(got, vec![37.5, 47.5, 67.5, 77.5]);
}

#[test]
fn conv2d_stride_padding_dilation() {
    let src = "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {stride=[2, 2], padding=[1, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 2]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33), f32t(&[1, 1, 2, 2], &W22)]), vec![4., 18., 36., 77.]);
    // Dilation 2: the kernel taps the corners of the 3x3 input.
    let src =
        "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {dilation=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 1, 1]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33), f32t(&[1, 1, 2, 2], &W22)]), vec![64.]);
    // Stride 2 along the width only: one window column.
    let src =
        "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {stride=[1, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 1]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33), f32t(&[1, 1, 2, 2], &W22)]), vec![37., 67.]);
}

#[test]
fn conv2d_groups_and_channels() {
    let x = [1., 2., 3., 4., 5., 6., 7., 8.];
    // groups = 2: each output channel sees its own input channel.
    let src = "graph g(%x: f32[1, 2, 2, 2], %w: f32[2, 1, 1, 1]) {\n  %y = conv2d(%x, %w) {groups=2}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 2, 2, 2]");
    let got = run1(src, &[f32t(&[1, 2, 2, 2], &x), f32t(&[2, 1, 1, 1], &[10., 100.])]);
    assert_eq!(got, vec![10., 20., 30., 40., 500., 600., 700., 800.]);
    // groups = 1: the output channel sums both input channels.
    let src = "graph g(%x: f32[1, 2, 2, 2], %w: f32[1, 2, 1, 1]) {\n  %y = conv2d(%x, %w)\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 2, 2, 2], &x), f32t(&[1, 2, 1, 1], &[1., 1.])]), vec![6., 8., 10., 12.]);
    // Two batches and two output channels from one input channel.
    let src = "graph g(%x: f32[2, 1, 1, 2], %w: f32[2, 1, 1, 1]) {\n  %y = conv2d(%x, %w)\n  return %y\n}";
    let got = run1(src, &[f32t(&[2, 1, 1, 2], &[1., 2., 3., 4.]), f32t(&[2, 1, 1, 1], &[1., -1.])]);
    assert_eq!(got, vec![1., 2., -1., -2., 3., 4., -3., -4.]);
}

#[test]
fn conv_1d_asymmetric_pads_and_3d() {
    let x = [1., 2., 3., 4.];
    let src = "graph g(%x: f32[1, 1, 4], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w) {padding=[1, 0]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 4]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 4], &x), f32t(&[1, 1, 2], &[1., 1.])]), vec![1., 3., 5., 7.]);
    let src = "graph g(%x: f32[1, 1, 4], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w) {padding=[0, 2]}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 4], &x), f32t(&[1, 1, 2], &[1., 1.])]), vec![3., 5., 7., 4., 0.]);
    let src = "graph g(%x: f32[1, 1, 4], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w) {stride=[3]}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 4], &x), f32t(&[1, 1, 2], &[1., -1.])]), vec![-1.]);
    let src = "graph g(%x: f32[1, 1, 2, 2, 2], %w: f32[1, 1, 2, 2, 2]) {\n  %y = conv(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 1, 1, 1]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 2, 2, 2], &iota(8)), f32t(&[1, 1, 2, 2, 2], &[1.; 8])]), vec![36.]);
    // Precise mode.
    let out = ladder::interp::run(
        &parse(src),
        &[f32t(&[1, 1, 2, 2, 2], &iota(8)), f32t(&[1, 1, 2, 2, 2], &[0.5; 8])],
        &precise(),
    )
    .unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![18.]);
}

#[test]
fn conv_padding_is_literal_zeros_and_empty_outputs() {
    // The padded zero meets the infinite weight: 0 * inf is NaN.
    let src = "graph g(%x: f32[1, 1, 1], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w) {padding=[1, 0]}\n  return %y\n}";
    let got = run1(src, &[f32t(&[1, 1, 1], &[1.]), f32t(&[1, 1, 2], &[f32::INFINITY, 1.])]);
    assert!(got[0].is_nan());
    // A kernel one longer than the input gives an empty output; two longer is an error.
    let src = "graph g(%x: f32[1, 1, 1], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 0]");
    let out = run(src, &[f32t(&[1, 1, 1], &[1.]), f32t(&[1, 1, 2], &[1., 1.])]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[1, 1, 0]);
    assert_bad("graph g(%x: f32[1, 1, 1], %w: f32[1, 1, 3]) {\n  %y = conv(%x, %w)\n  return %y\n}", "does not fit");
    // Empty batch, and zero input channels (every output is the empty sum).
    let src = "graph g(%x: f32[0, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w)\n  return %y\n}";
    let out = run(src, &[f32t(&[0, 1, 3, 3], &[]), f32t(&[1, 1, 2, 2], &W22)]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[0, 1, 2, 2]);
    let src = "graph g(%x: f32[1, 0, 2], %w: f32[2, 0, 1]) {\n  %y = conv(%x, %w)\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 0, 2], &[]), f32t(&[2, 0, 1], &[])]), vec![0.; 4]);
}

#[test]
fn conv_symbolic_shapes() {
    let src = "graph g(%x: f32[batch, 1, 3, 3], %w: f32[2, 1, 2, 2]) {\n  %y = conv2d(%x, %w)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, 2, 2, 2]");
    // Stride 1: the output length is a polynomial in the symbol.
    let src = "graph g(%x: f32[1, 1, h, w], %k: f32[1, 1, 2, 3]) {\n  %y = conv2d(%x, %k)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, h - 1, w - 2]");
    let src =
        "graph g(%x: f32[1, 1, h, w], %k: f32[1, 1, 3, 3]) {\n  %y = conv2d(%x, %k) {padding=[2, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, h + 2, w]");
    let src = "graph g(%x: f32[n, c, h], %k: f32[o, c, 2]) {\n  %y = conv(%x, %k)\n  return %y\n}";
    assert_eq!(out_type(src), "f32[n, o, h - 1]");
    // Running: h = 3, w = 4.
    let src = "graph g(%x: f32[1, 1, h, w], %k: f32[1, 1, 2, 3]) {\n  %y = conv2d(%x, %k)\n  return %y\n}";
    let out = run(src, &[f32t(&[1, 1, 3, 4], &iota(12)), f32t(&[1, 1, 2, 3], &[1.; 6])]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[1, 1, 2, 2]);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![24., 30., 48., 54.]);
    // Other strides: a floor quotient, evaluated at run time (h = 5: 2 rows).
    let src =
        "graph g(%x: f32[1, 1, h, 4], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {stride=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, h / 2, 2]");
    let out = run(src, &[f32t(&[1, 1, 5, 4], &iota(20)), f32t(&[1, 1, 2, 2], &[1.; 4])]).unwrap();
    assert_eq!(out.outputs[0].shape(), &[1, 1, 2, 2]);
    assert_eq!(out.outputs[0].to_f64_vec(), vec![14., 22., 46., 54.]);
    assert_bad("graph g(%x: f32[1, 1, 4, 4], %w: f32[1, 1, k, 2]) {\n  %y = conv2d(%x, %w)\n  return %y\n}", "static");
}

#[test]
fn conv_bad_inputs() {
    assert_bad(
        "graph g(%x: f32[1, 4, 3, 3], %w: f32[3, 2, 1, 1]) {\n  %y = conv2d(%x, %w) {groups=2}\n  return %y\n}",
        "not divisible by 2 groups",
    );
    assert_bad(
        "graph g(%x: f32[1, 3, 3, 3], %w: f32[2, 2, 1, 1]) {\n  %y = conv2d(%x, %w)\n  return %y\n}",
        "channels",
    );
    assert_bad(
        "graph g(%x: f32[1, 3, 3, 3], %w: f32[3, 1, 1, 1]) {\n  %y = conv2d(%x, %w) {groups=0}\n  return %y\n}",
        "groups",
    );
    assert_bad("graph g(%x: i64[1, 1, 3, 3], %w: i64[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w)\n  return %y\n}", "float");
    assert_bad("graph g(%x: f32[1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w)\n  return %y\n}", "rank 4");
    assert_bad("graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2]) {\n  %y = conv2d(%x, %w)\n  return %y\n}", "rank 4");
    assert_bad("graph g(%x: f32[1, 3], %w: f32[1, 3]) {\n  %y = conv(%x, %w)\n  return %y\n}", "rank 3, 4 or 5");
    assert_bad(
        "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {stride=[0, 1]}\n  return %y\n}",
        "stride",
    );
    assert_bad(
        "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {padding=[1]}\n  return %y\n}",
        "padding",
    );
    assert_bad(
        "graph g(%x: f32[1, 1, 3], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w) {padding=[1]}\n  return %y\n}",
        "needs 2 entries",
    );
    assert_bad(
        "graph g(%x: f32[1, 1, 3], %w: f32[1, 1, 2]) {\n  %y = conv(%x, %w) {dilation=[-1]}\n  return %y\n}",
        "dilation",
    );
    assert_bad(
        "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2], %b: f32[2]) {\n  %y = conv2d(%x, %w, %b)\n  return %y\n}",
        "bias",
    );
}

// ------------------------------------------------------------------------------------ pools

#[test]
fn max_pool2d_basic_padding_and_dilation() {
    let src = "graph g(%x: f32[1, 1, 4, 4]) {\n  %y = max_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 2]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 4, 4], &iota(16))]), vec![6., 8., 14., 16.]);
    // -inf padding: negative inputs never lose to the padding.
    let src =
        "graph g(%x: f32[1, 1, 2, 2]) {\n  %y = max_pool2d(%x) {kernel=[2, 2], stride=[1, 1], padding=[1, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 3, 3]");
    assert_eq!(
        run1(src, &[f32t(&[1, 1, 2, 2], &[-1., -2., -3., -4.])]),
        vec![-1., -1., -2., -1., -1., -2., -3., -3., -4.]
    );
    // Dilation 2 taps the corners, skipping the large centre.
    let src = "graph g(%x: f32[1, 1, 3, 3]) {\n  %y = max_pool2d(%x) {kernel=[2, 2], stride=[1, 1], dilation=[2, 2]}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &[1., 2., 3., 4., 100., 6., 7., 8., 9.])]), vec![9.]);
}

#[test]
fn max_pool2d_ceil_mode() {
    let src = "graph g(%x: f32[1, 1, 3, 3]) {\n  %y = max_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 1, 1]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33)]), vec![5.]);
    let src = "graph g(%x: f32[1, 1, 3, 3]) {\n  %y = max_pool2d(%x) {kernel=[2, 2], ceil_mode=true}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 2]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33)]), vec![5., 6., 8., 9.]);
    // H = 5, kernel 2, stride 2, padding 1: rounding up would give 4 windows, but the 4th
    // would start at 5 >= H + padding, so torch drops it: 3 windows starting at -1, 1, 3.
    let src = "graph g(%x: f32[1, 1, 5, 1]) {\n  %y = max_pool2d(%x) {kernel=[2, 1], stride=[2, 1], padding=[1, 0], ceil_mode=true}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 3, 1]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 5, 1], &[1., 2., 3., 4., 5.])]), vec![1., 3., 5.]);
    // H = 4, kernel 3, stride 2, padding 1: floor mode has 2 windows (starting at -1, 1), ceil
    // mode adds a third starting at 3 < H + padding, holding only x[3].
    let attrs = "kernel=[3, 1], stride=[2, 1], padding=[1, 0]";
    let src = format!("graph g(%x: f32[1, 1, 4, 1]) {{\n  %y = max_pool2d(%x) {{{attrs}}}\n  return %y\n}}");
    assert_eq!(out_type(&src), "f32[1, 1, 2, 1]");
    assert_eq!(run1(&src, &[f32t(&[1, 1, 4, 1], &[1., 2., 3., 4.])]), vec![2., 4.]);
    let src =
        format!("graph g(%x: f32[1, 1, 4, 1]) {{\n  %y = max_pool2d(%x) {{{attrs}, ceil_mode=true}}\n  return %y\n}}");
    assert_eq!(out_type(&src), "f32[1, 1, 3, 1]");
    assert_eq!(run1(&src, &[f32t(&[1, 1, 4, 1], &[1., 2., 3., 4.])]), vec![2., 4., 4.]);
}

#[test]
fn max_pool2d_nan_inf_unbatched_and_precise() {
    let src = "graph g(%x: f32[2, 2, 2]) {\n  %y = max_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[2, 1, 1]");
    let got = run1(src, &[f32t(&[2, 2, 2], &[1., f32::NAN, 3., 4., f32::NEG_INFINITY, f32::NEG_INFINITY, -5., -6.])]);
    assert!(got[0].is_nan());
    assert_eq!(got[1], -5.);
    let out =
        ladder::interp::run(&parse(src), &[f32t(&[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.])], &precise()).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![4., 8.]);
    let src = "graph g(%x: f32[1, 1, 2, 2]) {\n  %y = max_pool2d(%x) {kernel=[1, 1]}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 2, 2], &[f32::INFINITY, 0., -0., 1.])]), vec![f64::INFINITY, 0., 0., 1.]);
}

#[test]
fn avg_pool2d_basic_and_count_include_pad() {
    let src = "graph g(%x: f32[1, 1, 4, 4]) {\n  %y = avg_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 4, 4], &iota(16))]), vec![3.5, 5.5, 11.5, 13.5]);
    // Each window holds one input element and three padded positions.
    let src = "graph g(%x: f32[1, 1, 2, 2]) {\n  %y = avg_pool2d(%x) {kernel=[2, 2], padding=[1, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 2]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 2, 2], &[1., 2., 3., 4.])]), vec![0.25, 0.5, 0.75, 1.]);
    let src = "graph g(%x: f32[1, 1, 2, 2]) {\n  %y = avg_pool2d(%x) {kernel=[2, 2], padding=[1, 1], count_include_pad=false}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 2, 2], &[1., 2., 3., 4.])]), vec![1., 2., 3., 4.]);
    // Kernel 3, stride 1, padding 1 on 2x2: every window holds the whole input, divisor 9.
    let src = "graph g(%x: f32[1, 1, 2, 2]) {\n  %y = avg_pool2d(%x) {kernel=[3, 3], stride=[1, 1], padding=[1, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 2]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 2, 2], &[9., 9., 9., 9.])]), vec![4., 4., 4., 4.]);
}

#[test]
fn avg_pool2d_ceil_mode_divisor_is_clipped() {
    // Windows past the input (not padding) do not count towards the divisor, whatever
    // count_include_pad says.
    for cip in ["true", "false"] {
        let src = format!(
            "graph g(%x: f32[1, 1, 3, 3]) {{\n  %y = avg_pool2d(%x) {{kernel=[2, 2], ceil_mode=true, count_include_pad={cip}}}\n  return %y\n}}"
        );
        assert_eq!(out_type(&src), "f32[1, 1, 2, 2]");
        assert_eq!(run1(&src, &[f32t(&[1, 1, 3, 3], &X33)]), vec![3., 4.5, 7.5, 9.]);
    }
    // H = 2, kernel 3, stride 2, padding 1, ceil mode: windows start at -1 and 1. The first
    // spans [-1, 2) (pool size 3, one padded row); the second [1, 4) is clipped to the padded
    // end 3 (pool size 2, one padded row) and holds x[1] only.
    let attrs = "kernel=[3, 1], stride=[2, 1], padding=[1, 0], ceil_mode=true";
    let src = format!("graph g(%x: f32[1, 1, 2, 1]) {{\n  %y = avg_pool2d(%x) {{{attrs}}}\n  return %y\n}}");
    assert_eq!(out_type(&src), "f32[1, 1, 2, 1]");
    assert_eq!(run1(&src, &[f32t(&[1, 1, 2, 1], &[6., 12.])]), vec![6., 6.]);
    let src = format!(
        "graph g(%x: f32[1, 1, 2, 1]) {{\n  %y = avg_pool2d(%x) {{{attrs}, count_include_pad=false}}\n  return %y\n}}"
    );
    assert_eq!(run1(&src, &[f32t(&[1, 1, 2, 1], &[6., 12.])]), vec![9., 12.]);
}

#[test]
fn avg_pool2d_nan_inf_and_precise() {
    let src = "graph g(%x: f32[1, 1, 2, 4]) {\n  %y = avg_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    let got = run1(src, &[f32t(&[1, 1, 2, 4], &[f32::INFINITY, 1., f32::INFINITY, 1., 1., 1., f32::NEG_INFINITY, 1.])]);
    assert_eq!(got[0], f64::INFINITY);
    assert!(got[1].is_nan());
    // 1/3 in precise mode is the f64 value.
    let src = "graph g(%x: f32[1, 1, 1, 3]) {\n  %y = avg_pool2d(%x) {kernel=[1, 3]}\n  return %y\n}";
    let out = ladder::interp::run(&parse(src), &[f32t(&[1, 1, 1, 3], &[1., 0., 0.])], &precise()).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1.0 / 3.0]);
    assert_eq!(run1(src, &[f32t(&[1, 1, 1, 3], &[1., 0., 0.])]), vec![(1.0f32 / 3.0) as f64]);
}

#[test]
fn adaptive_avg_pool2d_windows() {
    let src = "graph g(%x: f32[1, 1, 3, 3]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, 2, 2]");
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33)]), vec![3., 4., 6., 7.]);
    let src = "graph g(%x: f32[1, 1, 3, 3]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[1, 1]}\n  return %y\n}";
    assert_eq!(run1(src, &[f32t(&[1, 1, 3, 3], &X33)]), vec![5.]);
    // Upsampling 3 -> 5 rows: windows [0], [0, 1], [1], [1, 2], [2].
    let src = "graph g(%x: f32[3, 1]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[5, 1]}\n  return %y\n}";
    assert_bad(src, "rank 3 or 4");
    let src = "graph g(%x: f32[1, 3, 1]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[5, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 5, 1]");
    assert_eq!(run1(src, &[f32t(&[1, 3, 1], &[1., 2., 3.])]), vec![1., 1.5, 2., 2.5, 3.]);
    // The mean over an empty input is NaN.
    let src = "graph g(%x: f32[1, 0, 2]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[1, 1]}\n  return %y\n}";
    assert!(run1(src, &[f32t(&[1, 0, 2], &[])])[0].is_nan());
    // Precise mode.
    let src = "graph g(%x: f32[1, 1, 3]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[1, 1]}\n  return %y\n}";
    let out = ladder::interp::run(&parse(src), &[f32t(&[1, 1, 3], &[1., 0., 0.])], &precise()).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![1.0 / 3.0]);
}

#[test]
fn pools_symbolic_shapes() {
    // Adaptive pooling's cells are fractions of the input size: one cell works on a symbolic
    // size, more need a static one.
    let src = "graph g(%x: f32[batch, 3, h, w]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[1, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, 3, 1, 1]");
    let src = "graph g(%x: f32[batch, 3, 5, 6]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, 3, 2, 2]");
    assert_bad(
        "graph g(%x: f32[batch, 3, h, w]) {\n  %y = adaptive_avg_pool2d(%x) {output_size=[2, 2]}\n  return %y\n}",
        "needs a static input size",
    );
    let src = "graph g(%x: f32[batch, c, 4, 4]) {\n  %y = max_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, c, 2, 2]");
    let src = "graph g(%x: f32[batch, 3, 4, 4]) {\n  %y = avg_pool2d(%x) {kernel=[3, 3], stride=[1, 1], padding=[1, 1]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[batch, 3, 4, 4]");
    // Stride 1 on a symbolic dim is a polynomial; other strides a floor quotient, and ceil
    // mode keeps only windows that start inside the input.
    let src = "graph g(%x: f32[1, 1, h, 4]) {\n  %y = max_pool2d(%x) {kernel=[3, 2], stride=[1, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, h - 2, 2]");
    let src = "graph g(%x: f32[1, 1, h, 4]) {\n  %y = max_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, h / 2, 2]");
    let src = "graph g(%x: f32[1, 1, h, 4]) {\n  %y = max_pool2d(%x) {kernel=[2, 2], ceil_mode=true}\n  return %y\n}";
    assert_eq!(out_type(src), "f32[1, 1, (h + 1) / 2, 2]");
    let out = run(src, &[f32t(&[1, 1, 3, 4], &iota(12))]).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![6., 8., 10., 12.]);
    // A batch of 2 bound at run time.
    let src = "graph g(%x: f32[batch, 1, 2, 2]) {\n  %y = avg_pool2d(%x) {kernel=[2, 2]}\n  return %y\n}";
    let out = run(src, &[f32t(&[2, 1, 2, 2], &iota(8))]).unwrap();
    assert_eq!(out.outputs[0].to_f64_vec(), vec![2.5, 6.5]);
}

#[test]
fn pools_bad_inputs() {
    let one =
        |op: &str, attrs: &str, ty: &str| format!("graph g(%x: {ty}) {{\n  %y = {op}(%x) {{{attrs}}}\n  return %y\n}}");
    assert_bad(&one("max_pool2d", "kernel=[2, 2], padding=[2, 0]", "f32[1, 1, 4, 4]"), "more than half");
    assert_bad(&one("avg_pool2d", "kernel=[2, 2], padding=[0, 2]", "f32[1, 1, 4, 4]"), "more than half");
    assert_bad(&one("max_pool2d", "kernel=[2]", "f32[1, 1, 4, 4]"), "needs 2 entries");
    assert_bad(&one("max_pool2d", "kernel=[0, 2]", "f32[1, 1, 4, 4]"), "kernel");
    assert_bad(&one("max_pool2d", "kernel=[2, 2], stride=[0, 1]", "f32[1, 1, 4, 4]"), "stride");
    assert_bad(&one("max_pool2d", "kernel=[2, 2], dilation=[0, 1]", "f32[1, 1, 4, 4]"), "dilation");
    assert_bad(&one("max_pool2d", "kernel=[2, 2]", "i64[1, 1, 4, 4]"), "float");
    assert_bad(&one("avg_pool2d", "kernel=[2, 2]", "f32[4, 4]"), "rank 3 or 4");
    // floor((3 - 5) / 1) + 1 = -1 windows is an error; floor((3 - 5) / 5) + 1 = 0 is an empty result.
    assert_bad(&one("max_pool2d", "kernel=[5, 5], stride=[1, 1]", "f32[1, 1, 3, 3]"), "does not fit");
    assert_eq!(out_type(&one("max_pool2d", "kernel=[5, 5]", "f32[1, 1, 3, 3]")), "f32[1, 1, 0, 0]");
    assert_bad(&one("adaptive_avg_pool2d", "output_size=[2]", "f32[1, 1, 4, 4]"), "output_size");
    assert_bad(&one("adaptive_avg_pool2d", "output_size=[-1, 2]", "f32[1, 1, 4, 4]"), "output_size");
    assert_bad(&one("max_pool2d", "stride=[1, 1]", "f32[1, 1, 4, 4]"), "kernel");
    assert_bad(&one("avg_pool2d", "kernel=[2, 2], dilation=[1, 1]", "f32[1, 1, 4, 4]"), "unknown attribute");
}

#[test]
fn list_defaults_are_not_printed_and_round_trip() {
    // conv2d's stride/padding/dilation default to [1, 1], [0, 0], [1, 1]: spelling them out
    // gives the same node, printed without them.
    let src = "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {stride=[1, 1], padding=[0, 0], dilation=[1, 1]}\n  %z = max_pool2d(%y) {kernel=[2, 2], padding=[0, 0]}\n  return %z\n}";
    let g = parse(src);
    let plain = parse("graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w)\n  %z = max_pool2d(%y) {kernel=[2, 2]}\n  return %z\n}");
    let text = ladder::text::print(&g);
    assert_eq!(text, ladder::text::print(&plain));
    assert!(!text.contains("stride") && !text.contains("padding") && !text.contains("dilation"), "{text}");
    let back = parse(&text);
    assert_eq!(ladder::text::print(&back), text);
    let strided = parse(
        "graph g(%x: f32[1, 1, 3, 3], %w: f32[1, 1, 2, 2]) {\n  %y = conv2d(%x, %w) {stride=[2, 1]}\n  return %y\n}",
    );
    assert!(ladder::text::print(&strided).contains("stride=[2, 1]"));
}
