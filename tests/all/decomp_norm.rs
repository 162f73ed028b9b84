//! Decompositions of the norm family (softmax, log_softmax, layer_norm, rms_norm, batch_norm,
//! group_norm, scaled_dot_product_attention, cross_entropy, mse_loss) against the ops
//! themselves: each case lowers a one-node graph to prims, runs it in f32, and compares it
//! with the op's f64 answer rounded to the output dtype (and, through `check_decomposition`,
//! with the unrounded one), on hand-picked and adversarial inputs: logits of magnitude 1e4,
//! ±inf, NaN, ±1e30, denormals, empty and size-1 axes, negative axes, symbolic dims.
//!
//! Tolerances (u = 2^-24, n = the reduced length), `|err| <= atol + rtol * |ref|`:
//! - softmax: rtol = (n + 110) u, atol = 1e-44: the sum costs n u, the division and
//!   exponential a few u, and rounding `x - max` to f32 costs up to |x - max| u <= 104 u
//!   relative in `exp` (beyond 104 the result is below f32's denormals); atol covers results
//!   that are themselves f32 denormals.
//! - log_softmax: atol = (n + 4) u, rtol = 4 u (the log of the sum is off by about n u
//!   absolute; the shifted logit by at most u relative).
//! - layer_norm / rms_norm / group_norm (outputs O(1), rows roughly centred):
//!   atol = 2 (n + 8) sqrt(n) u, rtol = (n + 8) u.
//! - batch_norm: atol = 16 u, rtol = 8 u (a handful of roundings, no reduction).
//! - attention, cross_entropy, mse_loss: stated at each test.
//!
//! Run with `--nocapture` to see each case's measured error.

use ladder::Tensor;

use crate::decomp_util::*;

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

fn tol_softmax(n: usize) -> Tol {
    Tol { atol: 1e-44, rtol: (n as f64 + 110.0) * U }
}

fn tol_log_softmax(n: usize) -> Tol {
    Tol { atol: (n as f64 + 4.0) * U, rtol: 4.0 * U }
}

fn tol_norm(n: usize) -> Tol {
    let n = n as f64;
    Tol { atol: 2.0 * (n + 8.0) * n.sqrt() * U, rtol: (n + 8.0) * U }
}

/// Rows of 6 logits, each an adversarial pattern.
fn adversarial_rows() -> Vec<f32> {
    let rows: [[f32; 6]; 14] = [
        [1e4, -1e4, 0.0, 9999.0, 1e4, -3.5],
        [-1e4, -1e4 + 1.0, -1e4 + 2.0, -1e4 + 3.0, -1e4 + 4.0, -1e4 + 5.0],
        [INF, 1.0, 2.0, 3.0, 4.0, 5.0],
        [-INF, -INF, -INF, -INF, -INF, -INF],
        [NAN, 1.0, 2.0, 3.0, 4.0, 5.0],
        [-INF, 0.0, 1.0, -INF, 2.0, -INF],
        [1e30, -1e30, 0.0, 1.0, 5e29, -5e29],
        [1e-40, -1e-40, 0.0, 1e-45, -1e-38, 1e-38],
        [0.5, -0.25, 3.0, 2.0, -1.5, 0.0],
        [87.0, -87.0, 88.0, -100.0, 0.0, 50.0],
        [3e38, -3e38, 3e38, 0.0, 1.0, -1.0],
        [-INF, -INF, -INF, -INF, -INF, 7.0],
        [INF, INF, 0.0, 0.0, 0.0, 0.0],
        [-0.0, 0.0, -0.0, 0.0, -0.0, 0.0],
    ];
    rows.iter().flatten().copied().collect()
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax

#[test]
fn softmax_adversarial_rows() {
    let x = f32t(&[14, 6], &adversarial_rows());
    let sig = "%x: f32[14, 6]";
    case("softmax rows", &graph(sig, "softmax(%x)"), std::slice::from_ref(&x), tol_softmax(6));
    case("log_softmax rows", &graph(sig, "log_softmax(%x) {axis=-1}"), &[x], tol_log_softmax(6));
}

#[test]
fn softmax_hand_values_and_nan_rules() {
    // The op's documented rules, written out: +inf in a row or all -inf gives NaN; -inf
    // among finite entries gives exactly 0 (log: -inf); 1e4 logits are exact.
    let src = graph("%x: f32[4, 2]", "softmax(%x)");
    let x = f32t(&[4, 2], &[INF, 1.0, -INF, -INF, -INF, 0.0, 1e4, 1e4]);
    let (_, p, _) = lower(&src);
    let out = ladder::interp::run(&p, &[x], &Default::default()).unwrap().outputs[0].to_f64_vec();
    assert!(out[..4].iter().all(|v| v.is_nan()), "{out:?}");
    assert_eq!(&out[4..], &[0.0, 1.0, 0.5, 0.5]);
}

#[test]
fn softmax_long_rows() {
    let mut rng = Rng::new(1);
    for (n, scale, offset) in [(1000usize, 10.0f32, 0.0f32), (1000, 30.0, 1e4), (4096, 5.0, -2e3)] {
        let v: Vec<f32> = rng.vec(3 * n, scale).into_iter().map(|x| x + offset).collect();
        let x = f32t(&[3, n], &v);
        let sig = format!("%x: f32[3, {n}]");
        case(
            &format!("softmax n={n} offset={offset}"),
            &graph(&sig, "softmax(%x)"),
            std::slice::from_ref(&x),
            tol_softmax(n),
        );
        case(&format!("log_softmax n={n} offset={offset}"), &graph(&sig, "log_softmax(%x)"), &[x], tol_log_softmax(n));
    }
}

#[test]
fn softmax_every_axis_of_rank_three() {
    let mut rng = Rng::new(2);
    let mut v = rng.vec(2 * 3 * 4, 20.0);
    v[5] = INF;
    v[7] = -INF;
    v[11] = NAN;
    v[13] = 1e4;
    let x = f32t(&[2, 3, 4], &v);
    for (axis, n) in [(0i64, 2usize), (1, 3), (2, 4), (-1, 4), (-2, 3), (-3, 2)] {
        let node = format!("softmax(%x) {{axis={axis}}}");
        case(
            &format!("softmax axis {axis}"),
            &graph("%x: f32[2, 3, 4]", &node),
            std::slice::from_ref(&x),
            tol_softmax(n),
        );
        let node = format!("log_softmax(%x) {{axis={axis}}}");
        case(
            &format!("log_softmax axis {axis}"),
            &graph("%x: f32[2, 3, 4]", &node),
            std::slice::from_ref(&x),
            tol_log_softmax(n),
        );
    }
}

#[test]
fn softmax_empty_and_size_one_axes() {
    for op in ["softmax", "log_softmax"] {
        let t = |n| if op == "softmax" { tol_softmax(n) } else { tol_log_softmax(n) };
        case(&format!("{op} [2, 0]"), &graph("%x: f32[2, 0]", &format!("{op}(%x)")), &[f32t(&[2, 0], &[])], t(0));
        case(&format!("{op} [0, 3]"), &graph("%x: f32[0, 3]", &format!("{op}(%x)")), &[f32t(&[0, 3], &[])], t(3));
        let x = f32t(&[5, 1], &[3.0, INF, -INF, NAN, -1e30]);
        case(&format!("{op} size-1 axis"), &graph("%x: f32[5, 1]", &format!("{op}(%x)")), &[x], t(1));
        let x = f32t(&[4], &[1e4, 0.0, -1e4, 2.0]);
        case(&format!("{op} rank 1"), &graph("%x: f32[4]", &format!("{op}(%x) {{axis=0}}")), &[x], t(4));
    }
}

#[test]
fn softmax_symbolic_dims() {
    let mut rng = Rng::new(3);
    for (n, len) in [(3usize, 5usize), (1, 7), (0, 2)] {
        let x = f32t(&[n, len], &rng.vec(n * len, 50.0));
        let sig = "%x: f32[n, len]";
        case(
            &format!("softmax symbolic [{n}, {len}]"),
            &graph(sig, "softmax(%x)"),
            std::slice::from_ref(&x),
            tol_softmax(len),
        );
        case(
            &format!("log_softmax symbolic [{n}, {len}]"),
            &graph(sig, "log_softmax(%x) {axis=0}"),
            &[x],
            tol_log_softmax(n),
        );
    }
    let (_, p, text) = lower(&graph("%x: f32[n, len]", "softmax(%x)"));
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[n, len]", "{text}");
}

#[test]
fn softmax_half_and_double() {
    let mut rng = Rng::new(4);
    let v = rng.vec(24, 8.0);
    // f16: the decomposition widens to f32 and narrows once; the op rounds once from f64.
    // Allow one f16 unit (at most 2^-10 relative) for the double rounding.
    let x = f16t(&[4, 6], &v);
    let tol = Tol { atol: 1e-7, rtol: 1.0 / 1024.0 };
    measure("softmax f16", &graph("%x: f16[4, 6]", "softmax(%x)"), std::slice::from_ref(&x), tol);
    measure("log_softmax f16", &graph("%x: f16[4, 6]", "log_softmax(%x)"), &[x], tol);
    let x = f64t(&[4, 6], &v.iter().map(|&a| a as f64 * 1e3).collect::<Vec<_>>());
    let tol = Tol { atol: 1e-300, rtol: 1e-12 };
    let st = measure("softmax f64", &graph("%x: f64[4, 6]", "softmax(%x)"), std::slice::from_ref(&x), tol);
    println!("softmax f64: max rel err {:.3e}", st.max_rel_u * U);
    measure("log_softmax f64", &graph("%x: f64[4, 6]", "log_softmax(%x)"), &[x], Tol { atol: 1e-12, rtol: 1e-14 });
}

/// Negative control: softmax without max subtraction overflows on 1e4 logits (exp(1e4) is inf
/// in f32, inf/inf is NaN) and fails the same tolerance the decomposition meets.
#[test]
fn naive_softmax_fails_on_large_logits() {
    let naive = "graph g(%x: f32[2, 3]) {
  %e = exp(%x)
  %s = reduce_sum(%e) {axes=[1]}
  %b = broadcast_in_dim(%s) {shape=[2, 3], broadcast_dims=[0]}
  %r = div(%e, %b)
  return %r
}";
    let reference = |x: &Tensor| {
        let opts = ladder::interp::Options { precise: true, ..Default::default() };
        let g = parse(&graph("%x: f32[2, 3]", "softmax(%x)"));
        ladder::interp::run(&g, std::slice::from_ref(x), &opts).unwrap().outputs[0].to_f64_vec()
    };
    let run_naive = |x: &Tensor| {
        ladder::interp::run(&parse(naive), std::slice::from_ref(x), &Default::default()).unwrap().outputs[0]
            .to_f64_vec()
    };
    // On small logits the naive graph is a correct softmax...
    let small = f32t(&[2, 3], &[0.5, -1.0, 2.0, 1.0, 2.0, 3.0]);
    assert!(within(&run_naive(&small), &reference(&small), tol_softmax(3)));
    // ...but not on 1e4 logits.
    let x = f32t(&[2, 3], &[1e4, 1e4 - 1.0, 0.0, 1.0, 2.0, 3.0]);
    let (naive_out, reference) = (run_naive(&x), reference(&x));
    assert!(
        !within(&naive_out, &reference, tol_softmax(3)),
        "the naive softmax should fail: {naive_out:?} vs {reference:?}"
    );
    assert!(naive_out[..2].iter().all(|v| v.is_nan()), "{naive_out:?}");
    // The decomposition passes on the same input.
    case("softmax 1e4 logits", &graph("%x: f32[2, 3]", "softmax(%x)"), &[x], tol_softmax(3));
}

// ---------------------------------------------------------------------------------------------
// layer_norm, rms_norm

fn norm_rows() -> Vec<f32> {
    let rows: [[f32; 8]; 10] = [
        [1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0],
        [1e30, -1e30, 5e29, -5e29, 2e30, -2e30, 0.0, 1e29],
        [3e38, -3e38, 1e38, -1e38, 2e38, -2e38, 0.0, 3e38],
        [1e-40, -1e-40, 2e-40, -3e-40, 1e-45, 0.0, 5e-41, -5e-41],
        [2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5],
        [1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30],
        [INF, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        [NAN, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        [-INF, INF, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [0.1, -0.7, 0.3, 0.9, -0.2, 0.05, -0.6, 0.15],
    ];
    rows.iter().flatten().copied().collect()
}

#[test]
fn layer_norm_adversarial_rows() {
    let x = f32t(&[10, 8], &norm_rows());
    let w = f32t(&[8], &[1.0, 0.5, -1.5, 2.0, 1.0, -0.25, 0.75, 1.25]);
    let b = f32t(&[8], &[0.0, 0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7]);
    let t = tol_norm(8);
    case("layer_norm rows", &graph("%x: f32[10, 8]", "layer_norm(%x)"), std::slice::from_ref(&x), t);
    let sig = "%x: f32[10, 8], %w: f32[8], %b: f32[8]";
    case("layer_norm rows w b", &graph(sig, "layer_norm(%x, %w, %b)"), &[x.clone(), w.clone(), b], t);
    case("layer_norm rows w", &graph("%x: f32[10, 8], %w: f32[8]", "layer_norm(%x, %w)"), &[x.clone(), w.clone()], t);
    case("rms_norm rows", &graph("%x: f32[10, 8]", "rms_norm(%x)"), std::slice::from_ref(&x), t);
    case("rms_norm rows w", &graph("%x: f32[10, 8], %w: f32[8]", "rms_norm(%x, %w) {eps=1e-5}"), &[x, w], t);
}

#[test]
fn layer_norm_random_long_rows_and_axes() {
    let mut rng = Rng::new(5);
    let v = rng.vec(4 * 512, 3.0);
    let x = f32t(&[4, 512], &v);
    case("layer_norm n=512", &graph("%x: f32[4, 512]", "layer_norm(%x)"), std::slice::from_ref(&x), tol_norm(512));
    case("rms_norm n=512", &graph("%x: f32[4, 512]", "rms_norm(%x)"), &[x], tol_norm(512));
    // Over the last two dims (axis -2 and its positive spelling), with [3, 4] weight and bias.
    let x = f32t(&[2, 3, 4], &rng.vec(24, 100.0));
    let w = f32t(&[3, 4], &rng.vec(12, 2.0));
    let b = f32t(&[3, 4], &rng.vec(12, 1.0));
    let sig = "%x: f32[2, 3, 4], %w: f32[3, 4], %b: f32[3, 4]";
    for axis in [-2, 1] {
        let node = format!("layer_norm(%x, %w, %b) {{axis={axis}}}");
        case(&format!("layer_norm axis {axis}"), &graph(sig, &node), &[x.clone(), w.clone(), b.clone()], tol_norm(12));
        let node = format!("rms_norm(%x, %w) {{axis={axis}}}");
        let sig2 = "%x: f32[2, 3, 4], %w: f32[3, 4]";
        case(&format!("rms_norm axis {axis}"), &graph(sig2, &node), &[x.clone(), w.clone()], tol_norm(12));
    }
    // Every dim (axis 0).
    case("layer_norm axis 0", &graph("%x: f32[2, 3, 4]", "layer_norm(%x) {axis=0}"), &[x], tol_norm(24));
}

#[test]
fn layer_norm_size_one_empty_eps_zero() {
    // A size-1 span: the result is the bias (0 without one); NaN/inf inputs still give NaN.
    let x = f32t(&[4, 1], &[3.0, -1e30, INF, NAN]);
    let b = f32t(&[1], &[0.5]);
    case(
        "layer_norm size 1",
        &graph("%x: f32[4, 1], %b: f32[1], %w: f32[1]", "layer_norm(%x, %w, %b)"),
        &[x.clone(), b.clone(), b],
        tol_norm(1),
    );
    case("rms_norm size 1", &graph("%x: f32[4, 1]", "rms_norm(%x)"), &[x], tol_norm(1));
    for op in ["layer_norm", "rms_norm"] {
        case(
            &format!("{op} [3, 0]"),
            &graph("%x: f32[3, 0]", &format!("{op}(%x)")),
            &[f32t(&[3, 0], &[])],
            tol_norm(0),
        );
        case(
            &format!("{op} [0, 5]"),
            &graph("%x: f32[0, 5]", &format!("{op}(%x)")),
            &[f32t(&[0, 5], &[])],
            tol_norm(5),
        );
    }
    // eps = 0: a constant row is 0/0 = NaN in the op, and in the decomposition.
    let x = f32t(&[2, 3], &[2.0, 2.0, 2.0, 1.0, 2.0, 4.0]);
    case(
        "layer_norm eps 0",
        &graph("%x: f32[2, 3]", "layer_norm(%x) {eps=0.0}"),
        std::slice::from_ref(&x),
        tol_norm(3),
    );
    let x = f32t(&[2, 3], &[0.0, 0.0, 0.0, 1e30, -1e30, 3.0]);
    case("rms_norm eps 0", &graph("%x: f32[2, 3]", "rms_norm(%x) {eps=0.0}"), &[x], tol_norm(3));
}

#[test]
fn layer_norm_symbolic_and_half() {
    let mut rng = Rng::new(6);
    let x = f32t(&[3, 6], &rng.vec(18, 4.0));
    let w = f32t(&[6], &rng.vec(6, 2.0));
    let sig = "%x: f32[n, d], %w: f32[d], %b: f32[d]";
    let (_, p, _) = lower(&graph(sig, "layer_norm(%x, %w, %b)"));
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[n, d]");
    case("layer_norm symbolic", &graph(sig, "layer_norm(%x, %w, %b)"), &[x.clone(), w.clone(), w.clone()], tol_norm(6));
    case("rms_norm symbolic", &graph("%x: f32[n, d], %w: f32[d]", "rms_norm(%x, %w)"), &[x, w], tol_norm(6));
    let x = f16t(&[2, 8], &rng.vec(16, 30.0));
    let tol = Tol { atol: 1e-5, rtol: 1.0 / 1024.0 };
    measure("layer_norm f16", &graph("%x: f16[2, 8]", "layer_norm(%x)"), std::slice::from_ref(&x), tol);
    measure("rms_norm f16", &graph("%x: f16[2, 8]", "rms_norm(%x)"), &[x], tol);
}

/// The two-pass variance on an offset row: the error grows with |mean| / std (here 1e4), as
/// for any f32 algorithm; stated with that factor.
#[test]
fn layer_norm_offset_rows() {
    let v: Vec<f32> = (0..16).map(|i| 1e4 + (i % 4) as f32 - 1.5).collect();
    let x = f32t(&[2, 8], &v);
    let kappa = 1e4;
    let tol = Tol { atol: 16.0 * U * kappa, rtol: 16.0 * U };
    case("layer_norm offset 1e4", &graph("%x: f32[2, 8]", "layer_norm(%x)"), &[x], tol);
}

// ---------------------------------------------------------------------------------------------
// batch_norm, group_norm

#[test]
fn batch_norm_cases() {
    let mut rng = Rng::new(7);
    let tol = Tol { atol: 16.0 * U, rtol: 8.0 * U };
    let mut v = rng.vec(2 * 3 * 2 * 2, 5.0);
    v[0] = INF;
    v[5] = NAN;
    v[9] = 1e30;
    v[10] = -1e-40;
    let x = f32t(&[2, 3, 2, 2], &v);
    let m = f32t(&[3], &[0.5, -1.0, 1e30]);
    let var = f32t(&[3], &[2.0, 0.25, 1e30]);
    let w = f32t(&[3], &[1.5, -0.5, 2.0]);
    let b = f32t(&[3], &[0.1, 0.2, -0.3]);
    let sig = "%x: f32[2, 3, 2, 2], %m: f32[3], %v: f32[3], %w: f32[3], %b: f32[3]";
    case(
        "batch_norm w b",
        &graph(sig, "batch_norm(%x, %m, %v, %w, %b)"),
        &[x.clone(), m.clone(), var.clone(), w.clone(), b],
        tol,
    );
    let sig = "%x: f32[2, 3, 2, 2], %m: f32[3], %v: f32[3], %w: f32[3]";
    case(
        "batch_norm w",
        &graph(sig, "batch_norm(%x, %m, %v, %w) {eps=0.001}"),
        &[x.clone(), m.clone(), var.clone(), w],
        tol,
    );
    let sig = "%x: f32[2, 3, 2, 2], %m: f32[3], %v: f32[3]";
    case("batch_norm", &graph(sig, "batch_norm(%x, %m, %v)"), &[x, m.clone(), var.clone()], tol);
    // Rank 2, eps 0 with a zero variance (0/0 and x/0), empty, symbolic.
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 0.5, -1.0, 1e30]);
    let zv = f32t(&[3], &[0.0, 1.0, 4.0]);
    let m = f32t(&[3], &[1.0, 0.0, 0.0]);
    case(
        "batch_norm rank 2 eps 0",
        &graph("%x: f32[2, 3], %m: f32[3], %v: f32[3]", "batch_norm(%x, %m, %v) {eps=0.0}"),
        &[x, m.clone(), zv.clone()],
        tol,
    );
    case(
        "batch_norm empty",
        &graph("%x: f32[0, 3, 2], %m: f32[3], %v: f32[3]", "batch_norm(%x, %m, %v)"),
        &[f32t(&[0, 3, 2], &[]), m.clone(), zv.clone()],
        tol,
    );
    let x = f32t(&[2, 3, 5], &rng.vec(30, 3.0));
    let src =
        graph("%x: f32[n, c, l], %m: f32[c], %v: f32[c], %w: f32[c], %b: f32[c]", "batch_norm(%x, %m, %v, %w, %b)");
    case("batch_norm symbolic", &src, &[x, m.clone(), zv.clone(), m, zv], tol);
}

#[test]
fn group_norm_cases() {
    let mut rng = Rng::new(8);
    let mut v = rng.vec(2 * 6 * 4, 3.0);
    v[3] = 1e30;
    v[4] = -1e30;
    v[30] = NAN;
    let x = f32t(&[2, 6, 4], &v);
    let w = f32t(&[6], &rng.vec(6, 2.0));
    let b = f32t(&[6], &rng.vec(6, 1.0));
    let sig = "%x: f32[2, 6, 4], %w: f32[6], %b: f32[6]";
    for g in [1, 2, 3, 6] {
        let n = 24 / g;
        let node = format!("group_norm(%x, %w, %b) {{groups={g}}}");
        case(&format!("group_norm groups={g}"), &graph(sig, &node), &[x.clone(), w.clone(), b.clone()], tol_norm(n));
    }
    case(
        "group_norm no affine",
        &graph("%x: f32[2, 6, 4]", "group_norm(%x) {groups=3, eps=0.0}"),
        std::slice::from_ref(&x),
        tol_norm(8),
    );
    case(
        "group_norm w only",
        &graph("%x: f32[2, 6, 4], %w: f32[6]", "group_norm(%x, %w) {groups=2}"),
        &[x, w.clone()],
        tol_norm(12),
    );
    // Rank 2 (no spatial dims), rank 4, empty spatial, symbolic batch and spatial dims.
    let x = f32t(&[3, 6], &rng.vec(18, 1.0));
    case("group_norm rank 2", &graph("%x: f32[3, 6]", "group_norm(%x) {groups=3}"), &[x], tol_norm(2));
    let x = f32t(&[1, 4, 2, 3], &rng.vec(24, 1.0));
    case("group_norm rank 4", &graph("%x: f32[1, 4, 2, 3]", "group_norm(%x) {groups=2}"), &[x], tol_norm(12));
    case(
        "group_norm empty",
        &graph("%x: f32[2, 4, 0]", "group_norm(%x) {groups=4}"),
        &[f32t(&[2, 4, 0], &[])],
        tol_norm(0),
    );
    let x = f32t(&[2, 6, 5], &rng.vec(60, 2.0));
    let src = graph("%x: f32[n, 6, h], %w: f32[6], %b: f32[6]", "group_norm(%x, %w, %b) {groups=3}");
    case("group_norm symbolic", &src, &[x, w.clone(), b], tol_norm(10));
}

// ---------------------------------------------------------------------------------------------
// scaled_dot_product_attention

/// Attention tolerance for head dim `d` and key length `s`, values of magnitude <= `vmax`,
/// scores of magnitude <= `smax`: the scores carry about d u * smax absolute error, which
/// softmax turns into that much relative error of the weights; the weighted sum adds s u.
fn tol_attention(d: usize, s: usize, smax: f64, vmax: f64) -> Tol {
    let rel = (d as f64 + 2.0) * smax.max(1.0) + s as f64 + 110.0;
    Tol { atol: 2.0 * rel * U * vmax, rtol: rel * U }
}

fn attn_inputs(rng: &mut Rng, q: &[usize], k: &[usize], v: &[usize], scale: f32) -> Vec<Tensor> {
    let n = |s: &[usize]| s.iter().product::<usize>();
    vec![f32t(q, &rng.vec(n(q), scale)), f32t(k, &rng.vec(n(k), scale)), f32t(v, &rng.vec(n(v), 4.0))]
}

#[test]
fn attention_plain_scaled_and_broadcast() {
    let mut rng = Rng::new(9);
    let ins = attn_inputs(&mut rng, &[2, 3, 4], &[2, 5, 4], &[2, 5, 3], 1.5);
    let sig = "%q: f32[2, 3, 4], %k: f32[2, 5, 4], %v: f32[2, 5, 3]";
    let tol = tol_attention(4, 5, 5.0, 4.0);
    case("attention", &graph(sig, "scaled_dot_product_attention(%q, %k, %v)"), &ins, tol);
    case("attention scale 0.3", &graph(sig, "scaled_dot_product_attention(%q, %k, %v) {scale=0.3}"), &ins, tol);
    // Large scores (|q k| * scale up to ~1e3): softmax is nearly one-hot but still right.
    let big = attn_inputs(&mut rng, &[2, 3, 4], &[2, 5, 4], &[2, 5, 3], 30.0);
    case(
        "attention large scores",
        &graph(sig, "scaled_dot_product_attention(%q, %k, %v)"),
        &big,
        tol_attention(4, 5, 1e3, 4.0),
    );
    // Batch dims broadcast: q [2, 1, 3, 4], k [1, 2, 5, 4], v [5, 3].
    let ins = attn_inputs(&mut rng, &[2, 1, 3, 4], &[1, 2, 5, 4], &[5, 3], 1.0);
    let sig = "%q: f32[2, 1, 3, 4], %k: f32[1, 2, 5, 4], %v: f32[5, 3]";
    case("attention broadcast", &graph(sig, "scaled_dot_product_attention(%q, %k, %v)"), &ins, tol);
}

#[test]
fn attention_masks_and_causal() {
    let mut rng = Rng::new(10);
    let ins = attn_inputs(&mut rng, &[2, 3, 4], &[2, 5, 4], &[2, 5, 3], 1.0);
    let tol = tol_attention(4, 5, 4.0, 4.0);
    // Row 1 of the bool mask keeps nothing: that output row is 0 (the op's _safe_softmax).
    let keep = [true, false, true, true, false, false, false, false, false, false, true, true, true, true, true];
    let bm = boolt(&[3, 5], &keep);
    let sig = "%q: f32[2, 3, 4], %k: f32[2, 5, 4], %v: f32[2, 5, 3], %m: bool[3, 5]";
    let with = |m: Tensor| ins.iter().cloned().chain([m]).collect::<Vec<_>>();
    let st = case(
        "attention bool mask",
        &graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m)"),
        &with(bm.clone()),
        tol,
    );
    assert!(st.finite > 0);
    let (_, p, _) = lower(&graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m)"));
    let out = ladder::interp::run(&p, &with(bm.clone()), &Default::default()).unwrap().outputs[0].to_f64_vec();
    assert_eq!(&out[3..6], &[0.0, 0.0, 0.0], "{out:?}");
    case(
        "attention bool mask causal",
        &graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m) {causal=true}"),
        &with(bm),
        tol,
    );
    // Float mask, including -inf, a finite bias, and +inf (a NaN row in the op).
    let fm: Vec<f32> = vec![0.0, -INF, 0.5, -1.0, 0.0, -INF, -INF, -INF, -INF, -INF, 0.0, INF, 0.0, 0.0, 0.0];
    let fm = f32t(&[3, 5], &fm);
    let sig = "%q: f32[2, 3, 4], %k: f32[2, 5, 4], %v: f32[2, 5, 3], %m: f32[3, 5]";
    case("attention float mask", &graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m)"), &with(fm), tol);
    // Causal with L < S and L > S (top-left aligned).
    let sig = "%q: f32[2, 3, 4], %k: f32[2, 5, 4], %v: f32[2, 5, 3]";
    case("attention causal L<S", &graph(sig, "scaled_dot_product_attention(%q, %k, %v) {causal=true}"), &ins, tol);
    let ins2 = attn_inputs(&mut rng, &[2, 5, 4], &[2, 3, 4], &[2, 3, 3], 1.0);
    let sig = "%q: f32[2, 5, 4], %k: f32[2, 3, 4], %v: f32[2, 3, 3]";
    case("attention causal L>S", &graph(sig, "scaled_dot_product_attention(%q, %k, %v) {causal=true}"), &ins2, tol);
}

#[test]
fn attention_special_values_and_edge_shapes() {
    let mut rng = Rng::new(11);
    let tol = tol_attention(4, 5, 4.0, 4.0);
    let mut ins = attn_inputs(&mut rng, &[3, 4], &[5, 4], &[5, 3], 1.0);
    // A NaN in query row 0 and +inf in query row 1 (scores of ±inf/NaN): NaN rows.
    let mut q = ins[0].to_f64_vec().into_iter().map(|x| x as f32).collect::<Vec<_>>();
    q[1] = NAN;
    q[4] = INF;
    ins[0] = f32t(&[3, 4], &q);
    let sig = "%q: f32[3, 4], %k: f32[5, 4], %v: f32[5, 3]";
    case("attention nan/inf query", &graph(sig, "scaled_dot_product_attention(%q, %k, %v)"), &ins, tol);
    // S = 0: nothing to attend, every row is 0.
    let sig = "%q: f32[3, 4], %k: f32[0, 4], %v: f32[0, 2]";
    let ins0 = vec![f32t(&[3, 4], &rng.vec(12, 1.0)), f32t(&[0, 4], &[]), f32t(&[0, 2], &[])];
    case("attention S=0", &graph(sig, "scaled_dot_product_attention(%q, %k, %v)"), &ins0, Tol::EXACT);
    // D = 0: every score is 0, a plain average of v (also with an infinite given scale).
    let sig = "%q: f32[2, 0], %k: f32[3, 0], %v: f32[3, 2]";
    let insd = vec![f32t(&[2, 0], &[]), f32t(&[3, 0], &[]), f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 9.0])];
    case("attention D=0", &graph(sig, "scaled_dot_product_attention(%q, %k, %v)"), &insd, tol);
    case("attention D=0 scale inf", &graph(sig, "scaled_dot_product_attention(%q, %k, %v) {scale=inf}"), &insd, tol);
    // L = 0 and size-1 dims.
    let sig = "%q: f32[0, 4], %k: f32[5, 4], %v: f32[5, 3]";
    case(
        "attention L=0",
        &graph(sig, "scaled_dot_product_attention(%q, %k, %v)"),
        &[f32t(&[0, 4], &[]), ins[1].clone(), ins[2].clone()],
        tol,
    );
    let ins1 = attn_inputs(&mut rng, &[1, 1], &[1, 1], &[1, 1], 1.0);
    case(
        "attention 1x1",
        &graph("%q: f32[1, 1], %k: f32[1, 1], %v: f32[1, 1]", "scaled_dot_product_attention(%q, %k, %v) {causal=true}"),
        &ins1,
        tol,
    );
}

#[test]
fn attention_half_precision() {
    // f16 operands (and an f16 float mask) are widened to f32 and the result narrowed once:
    // within one f16 unit of the op's answer.
    let mut rng = Rng::new(16);
    let q = f16t(&[2, 3, 4], &rng.vec(24, 2.0));
    let k = f16t(&[2, 5, 4], &rng.vec(40, 2.0));
    let v = f16t(&[2, 5, 3], &rng.vec(30, 4.0));
    let m = f16t(&[3, 5], &[0.0, -INF, 0.5, -1.0, 0.0, -INF, -INF, -INF, -INF, -INF, 0.0, 2.0, 0.0, 0.0, 0.0]);
    let sig = "%q: f16[2, 3, 4], %k: f16[2, 5, 4], %v: f16[2, 5, 3], %m: f16[3, 5]";
    let tol = Tol { atol: 4.0 / 2048.0, rtol: 1.0 / 1024.0 };
    measure(
        "attention f16",
        &graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m) {causal=true}"),
        &[q, k, v, m],
        tol,
    );
}

#[test]
fn attention_symbolic_dims() {
    let mut rng = Rng::new(12);
    let sig = "%q: f32[b, l, d], %k: f32[b, s, d], %v: f32[b, s, e], %m: bool[l, s]";
    let node = "scaled_dot_product_attention(%q, %k, %v, %m) {causal=true}";
    let (_, p, _) = lower(&graph(sig, node));
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[b, l, e]");
    for (b, l, s, d) in [(2usize, 3usize, 4usize, 5usize), (1, 2, 2, 0), (1, 0, 3, 2), (2, 2, 0, 3)] {
        let mut ins = attn_inputs(&mut rng, &[b, l, d], &[b, s, d], &[b, s, 2], 1.0);
        let keep: Vec<bool> = (0..l * s).map(|i| i % 3 != 1).collect();
        ins.push(boolt(&[l, s], &keep));
        case(
            &format!("attention symbolic b={b} l={l} s={s} d={d}"),
            &graph(sig, node),
            &ins,
            tol_attention(d, s, 4.0, 4.0),
        );
        case(
            &format!("attention symbolic scale=inf d={d}"),
            &graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m) {scale=inf}"),
            &ins,
            tol_attention(d, s, 4.0, 4.0),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// cross_entropy

/// Per element the loss is a log_softmax entry (tolerance as log_softmax); a reduction over
/// m elements adds m u relative of the sum of |losses|.
fn tol_ce(c: usize, m: usize, loss_scale: f64) -> Tol {
    Tol { atol: (c as f64 + 4.0 + m as f64) * U * loss_scale, rtol: (m as f64 + 8.0) * U }
}

fn ce(sig: &str, attrs: &str) -> String {
    graph(sig, &format!("cross_entropy(%x, %t){attrs}"))
}

#[test]
fn cross_entropy_reductions_and_ignore() {
    let mut rng = Rng::new(13);
    let mut v = rng.vec(5 * 4, 3.0);
    v[4..8].copy_from_slice(&[1e4, -1e4, 0.0, 9999.0]);
    v[8..12].copy_from_slice(&[-INF, 0.0, 1.0, 2.0]);
    let x = f32t(&[5, 4], &v);
    let t = i64t(&[5], &[0, 3, 1, -100, 2]);
    let sig = "%x: f32[5, 4], %t: i64[5]";
    let tol = tol_ce(4, 5, 10.0);
    for red in ["mean", "sum", "none"] {
        for smooth in [0.0, 0.1, 1.0] {
            let attrs = format!(" {{reduction=\"{red}\", label_smoothing={smooth}}}");
            case(&format!("cross_entropy {red} eps={smooth}"), &ce(sig, &attrs), &[x.clone(), t.clone()], tol);
        }
    }
    // The -inf logit is the target: the loss is +inf (and stays inf with smoothing).
    let t2 = i64t(&[5], &[0, 0, 0, 1, 2]);
    case("cross_entropy -inf target", &ce(sig, " {reduction=\"none\"}"), &[x.clone(), t2.clone()], tol);
    case("cross_entropy -inf target smooth", &ce(sig, " {label_smoothing=0.2}"), &[x.clone(), t2], tol);
    // A custom ignore_index, all ignored (mean NaN, sum 0), NaN logits in an ignored row.
    let t3 = i64t(&[5], &[0, 3, 1, 2, 3]);
    case("cross_entropy ignore 3", &ce(sig, " {ignore_index=3}"), &[x.clone(), t3], tol);
    let all = i64t(&[5], &[-100; 5]);
    case("cross_entropy all ignored mean", &ce(sig, ""), &[x.clone(), all.clone()], tol);
    case("cross_entropy all ignored sum", &ce(sig, " {reduction=\"sum\"}"), &[x.clone(), all], tol);
    let mut vn = v.clone();
    vn[12] = NAN;
    case("cross_entropy nan ignored", &ce(sig, ""), &[f32t(&[5, 4], &vn), t.clone()], tol);
    case("cross_entropy nan counted", &ce(sig, ""), &[f32t(&[5, 4], &vn), i64t(&[5], &[0, 1, 2, 3, 0])], tol);
    // ignore_index beyond 2^53 and beyond i32 (never equal to an i32 target).
    let big = (1i64 << 60) + 3;
    let tb = i64t(&[5], &[0, big, 1, 2, 3]);
    case("cross_entropy huge ignore_index", &ce(sig, &format!(" {{ignore_index={big}}}")), &[x.clone(), tb], tol);
    let t32 = i32t(&[5], &[0, 3, 1, 2, 2]);
    let sig32 = "%x: f32[5, 4], %t: i32[5]";
    case(
        "cross_entropy i32 ignore 2^40",
        &ce(sig32, &format!(" {{ignore_index={}}}", 1i64 << 40)),
        &[x.clone(), t32.clone()],
        tol,
    );
    case("cross_entropy i32", &ce(sig32, " {ignore_index=1, label_smoothing=0.3}"), &[x, t32], tol);
}

#[test]
fn cross_entropy_shapes() {
    let mut rng = Rng::new(14);
    // [N, C, d1, d2] logits with [N, d1, d2] targets.
    let x = f32t(&[2, 3, 2, 2], &rng.vec(24, 5.0));
    let t = i64t(&[2, 2, 2], &[0, 1, 2, -100, 2, 2, 1, 0]);
    let sig = "%x: f32[2, 3, 2, 2], %t: i64[2, 2, 2]";
    for red in ["mean", "sum", "none"] {
        case(
            &format!("cross_entropy spatial {red}"),
            &ce(sig, &format!(" {{reduction=\"{red}\", label_smoothing=0.05}}")),
            &[x.clone(), t.clone()],
            tol_ce(3, 8, 10.0),
        );
    }
    // Unbatched [C] logits with a scalar target.
    let x = f32t(&[4], &[1.0, 2.0, 3.0, 1e4]);
    for red in ["mean", "none"] {
        case(
            &format!("cross_entropy rank 1 {red}"),
            &ce("%x: f32[4], %t: i64[]", &format!(" {{reduction=\"{red}\"}}")),
            &[x.clone(), i64t(&[], &[2])],
            tol_ce(4, 1, 1e4),
        );
    }
    case("cross_entropy rank 1 ignored", &ce("%x: f32[4], %t: i64[]", ""), &[x, i64t(&[], &[-100])], tol_ce(4, 1, 1.0));
    // Empty batch: mean NaN, sum 0. Size-1 class dim: loss 0.
    case(
        "cross_entropy empty mean",
        &ce("%x: f32[0, 3], %t: i64[0]", ""),
        &[f32t(&[0, 3], &[]), i64t(&[0], &[])],
        Tol::EXACT,
    );
    case(
        "cross_entropy empty sum",
        &ce("%x: f32[0, 3], %t: i64[0]", " {reduction=\"sum\"}"),
        &[f32t(&[0, 3], &[]), i64t(&[0], &[])],
        Tol::EXACT,
    );
    case(
        "cross_entropy C=1",
        &ce("%x: f32[3, 1], %t: i64[3]", " {label_smoothing=0.5}"),
        &[f32t(&[3, 1], &[1e30, -2.0, 0.0]), i64t(&[3], &[0, 0, 0])],
        Tol::EXACT,
    );
    // Symbolic batch and class dims (the padded path), including C = 0 with all ignored.
    let sig = "%x: f32[n, c], %t: i64[n]";
    let x = f32t(&[3, 4], &rng.vec(12, 2.0));
    case(
        "cross_entropy symbolic",
        &ce(sig, " {label_smoothing=0.1}"),
        &[x.clone(), i64t(&[3], &[3, -100, 0])],
        tol_ce(4, 3, 5.0),
    );
    case(
        "cross_entropy symbolic none",
        &ce(sig, " {reduction=\"none\"}"),
        &[x, i64t(&[3], &[1, 2, -100])],
        tol_ce(4, 3, 5.0),
    );
    let sig2 = "%x: f32[n, 3], %t: i64[n]";
    let x = f32t(&[4, 3], &rng.vec(12, 2.0));
    case(
        "cross_entropy symbolic batch",
        &ce(sig2, " {label_smoothing=0.2}"),
        &[x, i64t(&[4], &[2, 0, -100, 1])],
        tol_ce(3, 4, 5.0),
    );
    case(
        "cross_entropy C=0 all ignored",
        &ce(sig, " {reduction=\"sum\"}"),
        &[f32t(&[2, 0], &[]), i64t(&[2], &[-100, -100])],
        Tol::EXACT,
    );
    case(
        "cross_entropy C=0 static all ignored",
        &ce("%x: f32[2, 0], %t: i64[2]", ""),
        &[f32t(&[2, 0], &[]), i64t(&[2], &[-100, -100])],
        Tol::EXACT,
    );
}

#[test]
fn cross_entropy_out_of_range_targets_fail_in_both() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]);
    for (sig, tname) in [("%x: f32[2, 3], %t: i64[2]", "static"), ("%x: f32[n, c], %t: i64[n]", "symbolic")] {
        for bad in [3i64, 7, -1, -3, -4, i64::MIN, i64::MAX] {
            let (op_err, prims_err) = both_fail(&ce(sig, ""), &[x.clone(), i64t(&[2], &[0, bad])]);
            assert!(op_err.contains("out of range"), "{op_err}");
            assert!(prims_err.contains("out of range"), "{tname} target {bad}: {prims_err}");
        }
    }
    let (_, prims_err) = both_fail(&ce("%x: f32[2, 3], %t: i32[2]", ""), &[x, i32t(&[2], &[-1, 0])]);
    assert!(prims_err.contains("out of range"), "{prims_err}");
}

// ---------------------------------------------------------------------------------------------
// mse_loss

#[test]
fn mse_loss_cases() {
    let mut rng = Rng::new(15);
    let a = f32t(&[3, 4], &rng.vec(12, 10.0));
    let b = f32t(&[4], &rng.vec(4, 10.0));
    let sig = "%a: f32[3, 4], %b: f32[4]";
    let tol = |m: usize| Tol { atol: 0.0, rtol: (m as f64 + 4.0) * U };
    for red in ["mean", "sum", "none"] {
        case(
            &format!("mse_loss broadcast {red}"),
            &graph(sig, &format!("mse_loss(%a, %b) {{reduction=\"{red}\"}}")),
            &[a.clone(), b.clone()],
            tol(12),
        );
    }
    // Special values; empty (mean NaN, sum 0); symbolic; mixed dtypes promote.
    let s = f32t(&[5], &[INF, NAN, 1e-40, 1e19, -0.0]);
    let z = f32t(&[5], &[INF, 0.0, 0.0, 0.0, 0.0]);
    case(
        "mse_loss special none",
        &graph("%a: f32[5], %b: f32[5]", "mse_loss(%a, %b) {reduction=\"none\"}"),
        &[s, z],
        Tol { atol: 1e-45, rtol: 2.0 * U },
    );
    case(
        "mse_loss empty mean",
        &graph("%a: f32[0], %b: f32[0]", "mse_loss(%a, %b)"),
        &[f32t(&[0], &[]), f32t(&[0], &[])],
        Tol::EXACT,
    );
    case(
        "mse_loss empty sum",
        &graph("%a: f32[0], %b: f32[0]", "mse_loss(%a, %b) {reduction=\"sum\"}"),
        &[f32t(&[0], &[]), f32t(&[0], &[])],
        Tol::EXACT,
    );
    let a = f32t(&[2, 3], &rng.vec(6, 1.0));
    case(
        "mse_loss symbolic",
        &graph("%a: f32[n, m], %b: f32[n, m]", "mse_loss(%a, %b)"),
        &[a.clone(), a.clone()],
        Tol::EXACT,
    );
    let d = f64t(&[3], &[0.5, 1.5, -2.0]);
    case(
        "mse_loss f32 f64",
        &graph("%a: f32[2, 3], %b: f64[3]", "mse_loss(%a, %b)"),
        &[a, d],
        Tol { atol: 0.0, rtol: 1e-15 },
    );
    // (1e30)^2 overflows f32: the op's f32 answer is inf too (measured against the rounded
    // reference only: the unrounded one is finite).
    let a = f32t(&[2], &[1e30, 1.0]);
    measure(
        "mse_loss overflow",
        &graph("%a: f32[2], %b: f32[2]", "mse_loss(%a, %b) {reduction=\"none\"}"),
        &[a, f32t(&[2], &[0.0, 0.0])],
        Tol::EXACT,
    );
}

// ---------------------------------------------------------------------------------------------
// Error measurement summary over random and adversarial inputs (printed with --nocapture).

#[test]
fn measured_errors_summary() {
    let mut rng = Rng::new(99);
    let mut sm = Stats::default();
    let mut lsm = Stats::default();
    let mut ln = Stats::default();
    for trial in 0..20 {
        let n = [1usize, 2, 7, 64, 300][trial % 5];
        let scale = [1.0f32, 30.0, 1e4, 1e30][trial % 4];
        let mut v = rng.vec(4 * n, scale);
        if trial % 3 == 0 {
            v[rng.below(4 * n as u64) as usize] = [INF, -INF, NAN, 1e-40][trial % 4];
        }
        let x = f32t(&[4, n], &v);
        let sig = format!("%x: f32[4, {n}]");
        sm = sm.merge(measure("softmax", &graph(&sig, "softmax(%x)"), std::slice::from_ref(&x), tol_softmax(n)));
        lsm = lsm.merge(measure(
            "log_softmax",
            &graph(&sig, "log_softmax(%x)"),
            std::slice::from_ref(&x),
            tol_log_softmax(n),
        ));
        ln = ln.merge(measure("layer_norm", &graph(&sig, "layer_norm(%x)"), &[x], tol_norm(n)));
    }
    for (name, st) in [("softmax", sm), ("log_softmax", lsm), ("layer_norm", ln)] {
        println!(
            "summary {name}: max abs {:.3e}, max rel {:.2} u, worst {:.3} of tolerance over {} elements",
            st.max_abs, st.max_rel_u, st.worst, st.finite
        );
    }
}
