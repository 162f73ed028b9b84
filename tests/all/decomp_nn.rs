//! Decompositions of the activations: every op lowered to prims and compared with the op.
//!
//! - Selection ops (`relu`, `clamp`, `leaky_relu` with a slope exact in f32, `dropout`) must
//!   agree bit for bit with the op run in f32 mode (signed zeros included; any NaN matches
//!   any NaN), and with the f64 reference.
//! - Transcendental chains are measured in f32 against the op in precise (f64) mode, in ULPs
//!   of the f32 result (`|got - ref| / ulp_f32(ref)`, subnormal ULP = 2^-149), over special
//!   values (±0, subnormals, ±1e-30, the branch points, ±87..±104 where exp over/underflows,
//!   ±1e4, ±1e30, ±f32::MAX, ±inf, NaN), a dense sweep of [-110, 110] and random f32 bit
//!   patterns. Non-finite results must match exactly and zeros must have the reference's
//!   sign. Each test asserts a bound just above what it measured (printed with
//!   `--nocapture`).

use ladder::interp::{self, Options};
use ladder::{Graph, Tensor, TensorData};

use crate::common::*;

fn graph(ty: &str, op: &str, attrs: &str) -> String {
    let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
    format!("graph g(%x: {ty}) {{\n  %1 = {op}(%x){attrs}\n  return %1\n}}")
}

fn lower(src: &str) -> Graph {
    ladder::passes::lower(&parse(src)).unwrap_or_else(|e| panic!("lower: {e}\n{src}")).prims
}

fn precise() -> Options {
    Options { precise: true, ..Default::default() }
}

fn out(g: &Graph, x: &Tensor, o: &Options) -> Tensor {
    interp::run(g, std::slice::from_ref(x), o).unwrap_or_else(|e| panic!("run: {e}")).outputs.remove(0)
}

fn f32s(t: &Tensor) -> Vec<f32> {
    match t.data() {
        TensorData::F32(v) => v.clone(),
        other => panic!("not f32: {other:?}"),
    }
}

/// Special values: zeros, subnormals, tiny, branch points and their neighbours, the exp
/// overflow/underflow region, huge values, infinities and NaN, with both signs.
fn specials() -> Vec<f32> {
    let mut v = vec![f32::NAN];
    let mags = [
        0.0,
        1e-45,
        3e-45,
        1e-40,
        1.1754942e-38,
        1e-30,
        1e-8,
        1e-4,
        0.1,
        0.5,
        0.99999994,
        1.0,
        1.0000001,
        1.5,
        2.0,
        2.9999998,
        3.0,
        3.0000002,
        5.0,
        6.0,
        9.0,
        10.0,
        13.0,
        14.0,
        19.999998,
        20.0,
        20.000002,
        38.0,
        40.0,
        50.0,
        80.0,
        87.0,
        87.33655,
        88.0,
        88.72284,
        89.0,
        90.0,
        100.0,
        103.0,
        104.0,
        110.0,
        1e4,
        1e19,
        1e30,
        f32::MAX,
        f32::INFINITY,
    ];
    for m in mags {
        v.push(m);
        v.push(-m);
    }
    v
}

/// Specials, a dense sweep of [-110, 110], and random bit patterns (finite or not).
fn inputs() -> Vec<f32> {
    let mut v = specials();
    let n = 44_000;
    for i in 0..=n {
        v.push(-110.0 + 220.0 * i as f32 / n as f32);
    }
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..20_000 {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.push(f32::from_bits((s >> 32) as u32));
    }
    // Random values in [-16, 16], where most activations bend.
    for _ in 0..20_000 {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.push(((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 32.0);
    }
    v
}

/// The spacing of f32 values at `r` (the subnormal spacing below the normal range).
fn ulp32(r: f64) -> f64 {
    let a = r.abs();
    if a < f32::MIN_POSITIVE as f64 {
        return 2f64.powi(-149);
    }
    let exp = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    2f64.powi(exp.min(127) - 23)
}

/// The largest error of the decomposition of `op {attrs}` in f32 against the op in f64, in
/// f32 ULPs, and the input where it occurs. Panics on a non-finite or zero-sign mismatch.
fn measure(op: &str, attrs: &str, xs: &[f32]) -> (f64, f32) {
    let src = graph("f32[n]", op, attrs);
    let prims = lower(&src);
    let x = f32t(&[xs.len()], xs);
    let want = out(&parse(&src), &x, &precise()).to_f64_vec();
    let got = f32s(&out(&prims, &x, &Options::default()));
    let (mut worst, mut at) = (0.0f64, 0.0f32);
    for ((&xi, &w), &g) in xs.iter().zip(&want).zip(&got) {
        let g = g as f64;
        if !w.is_finite() || !g.is_finite() {
            let ok = (w.is_nan() && g.is_nan()) || w == g;
            // A finite reference beyond f32's range legitimately rounds to ±inf.
            let overflow = w.is_finite() && (w as f32) == g as f32;
            assert!(ok || overflow, "{op} {attrs} at x = {xi:e}: reference {w:e}, decomposed {g:e}");
            continue;
        }
        if g == 0.0 || w == 0.0 {
            assert_eq!(
                g.is_sign_negative(),
                w.is_sign_negative(),
                "{op} {attrs} at x = {xi:e}: zero sign: reference {w:e}, decomposed {g:e}"
            );
        }
        let err = (g - w).abs() / ulp32(w);
        if err > worst {
            (worst, at) = (err, xi);
        }
    }
    eprintln!("{op} {attrs}: max error {worst:.3} ulp at x = {at:e} ({} inputs)", xs.len());
    (worst, at)
}

/// Asserts the decomposition's max error over `inputs()` is at most `bound` ULPs.
fn within(op: &str, attrs: &str, bound: f64) {
    let (err, at) = measure(op, attrs, &inputs());
    assert!(err <= bound, "{op} {attrs}: {err} ulp at x = {at:e}, bound {bound}");
}

/// Bitwise agreement (any NaN matches any NaN) of the decomposition with the op in f32 mode.
fn assert_bit_exact(ty: &str, op: &str, attrs: &str, x: &Tensor) {
    let src = graph(ty, op, attrs);
    let prims = lower(&src);
    let want = out(&parse(&src), x, &Options::default());
    let got = out(&prims, x, &Options::default());
    assert_eq!(want.shape(), got.shape());
    assert_eq!(want.dtype(), got.dtype());
    let same = match (want.data(), got.data()) {
        (TensorData::F32(a), TensorData::F32(b)) => {
            a.iter().zip(b).all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
        }
        _ => want.bit_eq(&got),
    };
    assert!(same, "{op} {attrs}: op {want:?}\ndecomposed {got:?}\n{}", ladder::text::print(&prims));
}

fn bit_exact_f32(op: &str, attrs: &str) {
    let xs = inputs();
    assert_bit_exact("f32[n]", op, attrs, &f32t(&[xs.len()], &xs));
    // Against the f64 reference: correctly rounded.
    let (err, at) = measure(op, attrs, &xs);
    assert!(err <= 0.5, "{op} {attrs}: {err} ulp at x = {at:e}");
}

// ---------------------------------------------------------------------------------------
// Selection ops: exact.
// ---------------------------------------------------------------------------------------

#[test]
fn relu_is_exact() {
    bit_exact_f32("relu", "");
    // relu(-0) is +0, NaN stays NaN.
    let got = run1(&ladder::text::print(&lower(&graph("f32[3]", "relu", ""))), &[f32t(&[3], &[-0.0, f32::NAN, -1.0])]);
    assert!(got[0] == 0.0 && got[0].is_sign_positive() && got[1].is_nan() && got[2] == 0.0);
    assert_bit_exact("i64[n]", "relu", "", &i64t(&[5], &[i64::MIN, -1, 0, 1, i64::MAX]));
    let i32x = Tensor::new(vec![3], TensorData::I32(vec![i32::MIN, 0, 7])).unwrap();
    assert_bit_exact("i32[n]", "relu", "", &i32x);
}

#[test]
fn clamp_is_exact() {
    for attrs in [
        "min=-1.0, max=2.0",
        "min=0.0",
        "max=0.0",
        "min=-0.0, max=0.0",
        "min=0.0, max=-0.0",
        "min=0.1, max=0.30000001",
        "min=3.0, max=1.0",
        "min=-1e300, max=1e300",
        "min=nan",
        "max=nan",
        "min=inf",
        "max=-inf",
        "",
    ] {
        bit_exact_f32("clamp", attrs);
    }
    let x = i64t(&[6], &[i64::MIN, -5, 0, 3, 9, i64::MAX]);
    for attrs in ["min=-2.0, max=4.0", "min=5.0, max=1.0", "min=-inf, max=1e30", "min=-1e30", ""] {
        assert_bit_exact("i64[n]", "clamp", attrs, &x);
    }
    let x = Tensor::new(vec![4], TensorData::I32(vec![i32::MIN, -3, 4, i32::MAX])).unwrap();
    for attrs in ["min=-2.0, max=3.0", "min=-1e12, max=1e12", "min=3e9"] {
        assert_bit_exact("i32[n]", "clamp", attrs, &x);
    }
}

/// A zero bound keeps a zero input's sign (a tie keeps `x`), like torch. The op's own result
/// here comes from Rust's `f64::max`/`min`, whose choice between ±0 is unspecified; this
/// pins the decomposition's choice.
#[test]
fn clamp_zero_ties_keep_the_input() {
    let prims = ladder::text::print(&lower(&graph("f32[2]", "clamp", "min=0.0, max=-0.0")));
    let got = run1(&prims, &[f32t(&[2], &[-0.0, 0.0])]);
    // min > max: every element is max = -0 except ties, which keep x.
    assert_eq!(got[0].to_bits(), (-0.0f64).to_bits());
    assert_eq!(got[1].to_bits(), 0.0f64.to_bits());
    let prims = ladder::text::print(&lower(&graph("f32[2]", "clamp", "min=0.0")));
    let got = run1(&prims, &[f32t(&[2], &[-0.0, 0.0])]);
    assert_eq!(got[0].to_bits(), (-0.0f64).to_bits());
}

#[test]
fn leaky_relu_is_exact_for_representable_slopes() {
    for attrs in ["negative_slope=0.25", "negative_slope=0.0", "negative_slope=-2.0", "negative_slope=1.5"] {
        bit_exact_f32("leaky_relu", attrs);
    }
}

#[test]
fn leaky_relu_inexact_slope_within_one_ulp() {
    // 0.01 is not an f32: the slope rounds once and the product once.
    within("leaky_relu", "", 1.0);
    within("leaky_relu", "negative_slope=0.2", 1.0);
}

#[test]
fn dropout_is_the_identity() {
    let xs = inputs();
    for attrs in ["", "p=0.0", "p=1.0", "p=0.3, train=false"] {
        assert_bit_exact("f32[n]", "dropout", attrs, &f32t(&[xs.len()], &xs));
    }
    let text = ladder::text::print(&lower(&graph("f32[n, 2]", "dropout", "")));
    assert!(!text.contains("dropout") && text.contains("return %x"), "{text}");
}

// ---------------------------------------------------------------------------------------
// Transcendental chains: measured in ULPs.
// ---------------------------------------------------------------------------------------

#[test]
fn sigmoid_error() {
    within("sigmoid", "", 3.0);
}

#[test]
fn silu_error() {
    within("silu", "", 4.0);
    within("silu", "nan_at_neg_inf=true", 4.0);
}

#[test]
fn gelu_erf_error() {
    within("gelu", "", 4.5);
    within("gelu", "approximate=\"none\"", 4.5);
    within("gelu", "nan_at_neg_inf=true", 4.5);
}

/// At -inf gelu and silu take their limit -0, or NaN with `nan_at_neg_inf` (what the unfused
/// product exporters write computes); elsewhere the attribute changes nothing.
#[test]
fn nan_at_neg_inf_changes_only_minus_infinity() {
    let x = f32t(&[5], &[f32::NEG_INFINITY, -200.0, -1.5, 0.0, f32::INFINITY]);
    for (op, attrs) in [("silu", ""), ("gelu", ""), ("gelu", "approximate=\"tanh\"")] {
        let sep = if attrs.is_empty() { "" } else { ", " };
        let with = format!("{attrs}{sep}nan_at_neg_inf=true");
        for (a, first_is_nan) in [(attrs.to_string(), false), (with, true)] {
            let src = graph("f32[n]", op, &a);
            for g in [parse(&src), lower(&src)] {
                let y = f32s(&out(&g, &x, &Options::default()));
                assert_eq!(y[0].is_nan(), first_is_nan, "{op} {{{a}}} at -inf: {}", y[0]);
                if !first_is_nan {
                    assert_eq!(y[0].to_bits(), (-0.0f32).to_bits(), "{op} {{{a}}} at -inf");
                }
                assert!(y[1..].iter().all(|v| !v.is_nan()), "{op} {{{a}}}: {y:?}");
            }
        }
    }
}

/// The tanh form is ill-conditioned in f32 for x << 0: sigmoid(y) ≈ e^y with y ≈ 0.07 x³
/// rounded in f32, so its relative error grows like |y| * 2^-24 (the op evaluates y in f64).
#[test]
fn gelu_tanh_error() {
    let xs = inputs();
    let (moderate, far): (Vec<f32>, Vec<f32>) = xs.iter().partition(|&&x| x.is_nan() || x >= -3.0);
    let (err, at) = measure("gelu", "approximate=\"tanh\"", &moderate);
    assert!(err <= 16.0, "gelu tanh for x >= -3: {err} ulp at {at:e}");
    let (err, at) = measure("gelu", "approximate=\"tanh\"", &far);
    assert!(err <= 300.0, "gelu tanh for x < -3: {err} ulp at {at:e}");
}

#[test]
fn softplus_error() {
    within("softplus", "", 2.0);
    within("softplus", "beta=2.0", 2.0);
    within("softplus", "beta=0.5, threshold=5.0", 2.0);
}

/// With a beta that is not a power of two, `beta * x` rounds in f32 and log1p(exp(bx)) ≈
/// exp(bx) amplifies that by |bx|: the relative error grows like |bx| * 2^-24.
#[test]
fn softplus_inexact_beta_error() {
    within("softplus", "beta=3.0, threshold=10.0", 200.0);
    within("softplus", "beta=-1.5, threshold=4.0", 200.0);
}

/// Where `beta * x > threshold` flips, the decomposition picks the same branch as the op,
/// even where `beta * x` rounded to f32 would not.
#[test]
fn softplus_branch_matches_the_op() {
    let beta = 3.0f64;
    // The f32 values around x = 1/3, where 3x crosses 1.
    let mut xs = vec![];
    let mut x = (1.0f32 / 3.0).next_down_f32(8);
    for _ in 0..16 {
        xs.push(x);
        x = x.next_down_f32(-1);
    }
    let src = graph("f32[n]", "softplus", &format!("beta={beta}, threshold=1.0"));
    let prims = lower(&src);
    let t = f32t(&[xs.len()], &xs);
    let want = f32s(&out(&parse(&src), &t, &Options::default()));
    let got = f32s(&out(&prims, &t, &Options::default()));
    for ((x, w), g) in xs.iter().zip(&want).zip(&got) {
        let linear = beta * *x as f64 > 1.0;
        assert_eq!(linear, w == x, "op branch at {x:e}");
        assert_eq!(linear, g == x, "decomposed branch at {x:e}: got {g:e}, op {w:e}");
    }
}

trait NextDown {
    /// Steps `n` f32 values down (negative `n`: up).
    fn next_down_f32(self, n: i32) -> f32;
}

impl NextDown for f32 {
    fn next_down_f32(self, n: i32) -> f32 {
        f32::from_bits((self.to_bits() as i64 - n as i64) as u32)
    }
}

#[test]
fn elu_error() {
    within("elu", "", 1.0);
    within("elu", "alpha=0.5", 1.0);
    within("elu", "alpha=1.7", 2.0);
}

#[test]
fn hardsigmoid_error() {
    within("hardsigmoid", "", 1.5);
}

#[test]
fn hardswish_error() {
    within("hardswish", "", 2.0);
}

// ---------------------------------------------------------------------------------------
// Shapes, other dtypes, limits.
// ---------------------------------------------------------------------------------------

/// Symbolic and empty shapes keep their type through the decomposition.
#[test]
fn symbolic_and_empty_shapes() {
    let x = f32t(&[2, 3], &[-2.0, -0.5, 0.0, 0.5, 2.0, f32::NAN]);
    let empty = Tensor::from_f32(&[0, 3], vec![]).unwrap();
    for (op, attrs) in [
        ("relu", ""),
        ("gelu", ""),
        ("gelu", "approximate=\"tanh\""),
        ("gelu", "approximate=\"tanh\", nan_at_neg_inf=true"),
        ("silu", ""),
        ("silu", "nan_at_neg_inf=true"),
        ("sigmoid", ""),
        ("softplus", "beta=2.0, threshold=3.0"),
        ("leaky_relu", ""),
        ("hardsigmoid", ""),
        ("hardswish", ""),
        ("elu", "alpha=0.3"),
        ("clamp", "min=-1.0, max=1.0"),
        ("dropout", ""),
    ] {
        let src = graph("f32[b, 3]", op, attrs);
        check_decomposition(&src, std::slice::from_ref(&x), 0.0, 2e-7);
        check_decomposition(&src, std::slice::from_ref(&empty), 0.0, 0.0);
        check_decomposition(&graph("f32[]", op, attrs), &[Tensor::scalar_f32(-1.25)], 0.0, 2e-7);
        let p = lower(&src);
        assert_eq!(p.ty(p.outputs()[0].value).to_string(), "f32[b, 3]", "{op}");
    }
}

/// f64 keeps its dtype and is accurate to f64 precision except in the gelu tail.
#[test]
fn f64_inputs() {
    let vals: Vec<f64> =
        [-1e30, -50.0, -30.0, -10.0, -6.0, -4.0, -1.0, -1e-300, 0.0, 0.3, 2.0, 25.0, 1e300, f64::INFINITY, f64::NAN]
            .to_vec();
    let x = Tensor::new(vec![vals.len()], TensorData::F64(vals)).unwrap();
    for (op, attrs, rtol) in [
        ("sigmoid", "", 1e-15),
        ("silu", "", 1e-15),
        ("gelu", "approximate=\"tanh\"", 1e-13),
        ("softplus", "beta=3.0, threshold=10.0", 1e-14),
        ("elu", "", 1e-15),
        ("hardswish", "", 1e-15),
        ("leaky_relu", "", 1e-16),
        ("clamp", "min=-3.0, max=3.0", 0.0),
        // x >= -5 in erf form (cancellation up to 1e-16 / Φ(-5) = 4e-10), the tail fit below.
        ("gelu", "", 1e-9),
    ] {
        check_decomposition(&graph("f64[n]", op, attrs), std::slice::from_ref(&x), 0.0, rtol);
    }
}

/// The spacing of values of a float format with `mant` explicit mantissa bits and smallest
/// normal exponent `emin` at `r`.
fn ulp_of(r: f64, mant: i32, emin: i32) -> f64 {
    let a = r.abs();
    let exp = if a == 0.0 { emin } else { (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin) };
    2f64.powi(exp - mant)
}

/// f16 and bf16 compute in f32 and round once at the end: within one unit of the op (which
/// rounds its f64 value once), and never a different non-finite value.
#[test]
fn half_inputs() {
    let vals: Vec<f32> = specials().into_iter().filter(|v| v.is_nan() || v.abs() < 7e4).collect();
    let h = Tensor::new(vec![vals.len()], TensorData::F16(vals.iter().map(|&v| half::f16::from_f32(v)).collect()));
    let b = Tensor::new(vec![vals.len()], TensorData::BF16(vals.iter().map(|&v| half::bf16::from_f32(v)).collect()));
    let (h, b) = (h.unwrap(), b.unwrap());
    for (op, attrs) in [
        ("sigmoid", ""),
        ("silu", ""),
        ("gelu", ""),
        ("gelu", "approximate=\"tanh\""),
        ("softplus", ""),
        ("softplus", "beta=3.0, threshold=2.0"),
        ("elu", ""),
        ("hardsigmoid", ""),
        ("hardswish", ""),
        ("leaky_relu", ""),
        ("clamp", "min=-2.0, max=2.0"),
        ("relu", ""),
    ] {
        for (ty, x, mant, emin) in [("f16[n]", &h, 10, -14), ("bf16[n]", &b, 7, -126)] {
            let src = graph(ty, op, attrs);
            let prims = lower(&src);
            let want = out(&parse(&src), x, &Options::default());
            let got = out(&prims, x, &Options::default());
            assert_eq!(want.dtype(), got.dtype(), "{op} {ty}");
            for (i, (w, g)) in want.to_f64_vec().into_iter().zip(got.to_f64_vec()).enumerate() {
                let ok = if w.is_finite() && g.is_finite() {
                    (w - g).abs() <= ulp_of(w, mant, emin)
                } else {
                    (w.is_nan() && g.is_nan()) || w == g
                };
                assert!(ok, "{op} {attrs} {ty} at x = {}: op {w:e}, decomposed {g:e}", vals[i]);
            }
        }
    }
}

/// The decompositions never produce a high-level op and the gelu tail is really used.
#[test]
fn prims_only() {
    let text = ladder::text::print(&lower(&graph("f32[n]", "gelu", "")));
    assert!(text.contains("erf(") && text.contains("floor(") && !text.contains("gelu"), "{text}");
    let text = ladder::text::print(&lower(&graph("f32[n]", "softplus", "beta=3.0, threshold=1.0")));
    assert!(text.contains("ge(") && text.contains("log1p(") && !text.contains("softplus"), "{text}");
}

/// With a threshold beyond exp's range the decomposition stays finite (log1p(exp(-|bx|)) +
/// max(bx, 0)). The op itself evaluates log1p(exp(bx)) and overflows to inf there (reported;
/// not compared here).
#[test]
fn softplus_without_a_linear_branch_stays_finite() {
    let prims = ladder::text::print(&lower(&graph("f32[n]", "softplus", "threshold=inf")));
    let got = run1(&prims, &[f32t(&[4], &[800.0, -800.0, 3e38, f32::INFINITY])]);
    assert_eq!(got, vec![800.0, 0.0, 3e38f32 as f64, f64::INFINITY]);
    let prims = ladder::text::print(&lower(&graph("f32[n]", "softplus", "beta=-1.0, threshold=inf")));
    let got = run1(&prims, &[f32t(&[2], &[-800.0, 800.0])]);
    assert_eq!(got, vec![-800.0, -0.0]);
}
