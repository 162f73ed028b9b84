//! Decompositions of the reductions: every op lowered to prims and compared with the op.
//!
//! - `sum`, `prod`, `amax`, `amin`, `argmax`, `argmin` must agree bit for bit with the op, in
//!   f32 mode and in precise mode (they accumulate, select or index exactly like it).
//! - `mean`, `var`, `std`, `logsumexp` accumulate in f32 where the op computes in f64: their
//!   error is measured against the f64 op and held to a bound that grows with the reduced
//!   length N: `|got - ref| <= N * 2^-24 * scale`, where `scale` is `mean |x|` for `mean`,
//!   the variance (std: the std) for `var`/`std` and `1` for `logsumexp` (an absolute bound,
//!   since `log` turns the relative error of the sum into an absolute one). Special values
//!   (NaN, ±inf, empty axes, N <= correction) must match exactly.

use ladder::interp::{self, Options};
use ladder::{Graph, Tensor, TensorData};

use crate::common;
use crate::common::*;

fn graph(ty: &str, op: &str, attrs: &str) -> String {
    let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
    format!("graph g(%x: {ty}) {{\n  %1 = {op}(%x){attrs}\n  return %1\n}}")
}

fn lower(src: &str) -> Graph {
    ladder::passes::lower(&parse(src)).unwrap_or_else(|e| panic!("lower: {e}\n{src}")).prims
}

fn opts(precise: bool) -> Options {
    Options { precise, ..Default::default() }
}

fn out(g: &Graph, x: &Tensor, o: &Options) -> Tensor {
    interp::run(g, std::slice::from_ref(x), o).unwrap_or_else(|e| panic!("run: {e}")).outputs.remove(0)
}

/// Bitwise equality (any NaN matches any NaN) of two tensors.
fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return false;
    }
    match (a.data(), b.data()) {
        (TensorData::F32(x), TensorData::F32(y)) => {
            x.iter().zip(y).all(|(p, q)| (p.is_nan() && q.is_nan()) || p.to_bits() == q.to_bits())
        }
        (TensorData::F64(x), TensorData::F64(y)) => {
            x.iter().zip(y).all(|(p, q)| (p.is_nan() && q.is_nan()) || p.to_bits() == q.to_bits())
        }
        _ => a.bit_eq(b),
    }
}

/// The decomposition agrees bit for bit with the op in f32 mode and in precise mode.
fn exact(ty: &str, op: &str, attrs: &str, x: &Tensor) {
    let src = graph(ty, op, attrs);
    let prims = lower(&src);
    for precise in [false, true] {
        let want = out(&parse(&src), x, &opts(precise));
        let got = out(&prims, x, &opts(precise));
        assert!(
            same_bits(&want, &got),
            "{op} {{{attrs}}} on {ty} (precise: {precise}):\n op {want:?}\n decomposed {got:?}\n{}",
            ladder::text::print(&prims)
        );
    }
}

/// A deterministic pseudo-random f32 in [lo, hi).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, lo: f32, hi: f32) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((self.0 >> 40) as f32 / (1u64 << 24) as f32)
    }

    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.next(lo, hi)).collect()
    }
}

const U: f64 = 1.0 / (1u64 << 24) as f64;

// ---------------------------------------------------------------------------------------
// sum, prod: bit for bit.
// ---------------------------------------------------------------------------------------

#[test]
fn sum_and_prod_are_exact() {
    let mut r = Lcg(1);
    let x = f32t(&[3, 4, 5], &r.vec(60, -2.0, 2.0));
    for op in ["sum", "prod"] {
        for attrs in ["", "axes=[0]", "axes=[-1]", "axes=[0, 2]", "axes=[1], keepdim=true", "axes=[], keepdim=true"] {
            exact("f32[3, 4, 5]", op, attrs, &x);
            exact("f32[a, 4, c]", op, attrs, &x);
        }
    }
    // Specials: -0 sums to -0 (the accumulator starts at the first element), NaN, ±inf.
    let x = f32t(&[2, 3], &[-0.0, -0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 1.0]);
    for attrs in ["axes=[1]", "axes=[0]", ""] {
        exact("f32[2, 3]", "sum", attrs, &x);
        exact("f32[2, 3]", "prod", attrs, &x);
    }
    let x = f32t(&[3], &[f32::NAN, 1.0, 2.0]);
    exact("f32[n]", "sum", "", &x);
    exact("f32[n]", "prod", "", &x);
    // Accumulation order matters in f32: 1 + 1e8 - 1e8 + ... is order-dependent.
    let x = f32t(&[4], &[1.0, 1e8, -1e8, 1.0]);
    exact("f32[4]", "sum", "", &x);
}

#[test]
fn sum_and_prod_of_ints_and_bools_give_i64() {
    let x = Tensor::new(vec![2, 3], TensorData::I32(vec![i32::MAX, i32::MAX, 1, -5, 7, i32::MIN])).unwrap();
    for op in ["sum", "prod"] {
        for attrs in ["", "axes=[1]", "axes=[-2], keepdim=true"] {
            exact("i32[2, 3]", op, attrs, &x);
            exact("i32[n, 3]", op, attrs, &x);
        }
    }
    // i64 wraps like the op.
    let x = i64t(&[3], &[i64::MAX, i64::MAX, 3]);
    exact("i64[3]", "sum", "", &x);
    exact("i64[3]", "prod", "", &x);
    let x = boolt(&[2, 3], &[true, true, false, true, true, true]);
    for attrs in ["", "axes=[1]", "axes=[0], keepdim=true"] {
        exact("bool[2, 3]", "sum", attrs, &x);
        exact("bool[2, 3]", "prod", attrs, &x);
    }
    let p = lower(&graph("bool[n]", "sum", ""));
    assert_eq!(p.ty(p.outputs()[0].value).to_string(), "i64[]");
}

#[test]
fn sum_and_prod_over_empty_axes_give_the_identity() {
    let x = Tensor::from_f32(&[2, 0], vec![]).unwrap();
    for op in ["sum", "prod"] {
        exact("f32[2, n]", op, "axes=[1]", &x);
        exact("f32[2, n]", op, "axes=[1], keepdim=true", &x);
        exact("f32[2, n]", op, "axes=[0]", &x);
        exact("f32[2, 0]", op, "", &x);
    }
    // A scalar reduced over "all" (no axes) is itself.
    exact("f32[]", "sum", "", &Tensor::scalar_f32(-0.0));
    let text = ladder::text::print(&lower(&graph("f32[]", "sum", "keepdim=true")));
    assert!(!text.contains("reduce_sum"), "{text}");
}

/// Half types accumulate in their own dtype, like the op.
#[test]
fn sum_of_halves_accumulates_in_the_dtype() {
    let vals: Vec<half::f16> = (0..300).map(|i| half::f16::from_f32(1.0 + i as f32 * 0.37)).collect();
    let x = Tensor::new(vec![300], TensorData::F16(vals)).unwrap();
    exact("f16[n]", "sum", "", &x);
    exact("f16[n]", "prod", "", &x);
}

// ---------------------------------------------------------------------------------------
// amax, amin, argmax, argmin: bit for bit.
// ---------------------------------------------------------------------------------------

#[test]
fn amax_amin_are_exact() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    let x = f32t(&[4, 3], &[-0.0, 0.0, -0.0, nan, 1.0, -inf, -inf, -inf, -inf, 2.0, 3.0, nan]);
    for op in ["amax", "amin"] {
        for attrs in ["", "axes=[0]", "axes=[-1]", "axes=[1], keepdim=true", "axes=[0, 1], keepdim=true"] {
            exact("f32[4, 3]", op, attrs, &x);
            exact("f32[n, 3]", op, attrs, &x);
        }
    }
    let x = i64t(&[2, 3], &[i64::MIN, 0, i64::MAX, -1, -1, -1]);
    let b = boolt(&[2, 3], &[false, true, false, true, true, true]);
    for op in ["amax", "amin"] {
        exact("i64[2, 3]", op, "axes=[1]", &x);
        exact("bool[2, n]", op, "axes=[1]", &b);
        exact("bool[2, 3]", op, "", &b);
    }
}

/// The op fails on an axis that is empty only at run time; the prims have an identity, so
/// the decomposition gives it (-inf for amax, +inf for amin) instead of failing.
#[test]
fn amax_over_a_runtime_empty_axis_gives_the_identity() {
    let x = Tensor::from_f32(&[2, 0], vec![]).unwrap();
    let src = graph("f32[2, n]", "amax", "axes=[1]");
    assert!(interp::run(&parse(&src), std::slice::from_ref(&x), &opts(false)).is_err());
    assert_eq!(out(&lower(&src), &x, &opts(false)).to_f64_vec(), vec![f64::NEG_INFINITY; 2]);
    let src = graph("f32[2, n]", "amin", "axes=[1]");
    assert_eq!(out(&lower(&src), &x, &opts(false)).to_f64_vec(), vec![f64::INFINITY; 2]);
}

#[test]
fn argmax_argmin_are_exact() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    // Rows: ties (first wins), ±0 ties, NaN first and later, ±inf, a single NaN among -inf.
    #[rustfmt::skip]
    let x = f32t(&[6, 4], &[
        1.0, 3.0, 3.0, 1.0,
        0.0, -0.0, 0.0, -0.0,
        -0.0, 0.0, -0.0, 0.0,
        2.0, nan, 5.0, nan,
        -inf, inf, -inf, inf,
        -inf, -inf, nan, -inf,
    ]);
    for op in ["argmax", "argmin"] {
        for attrs in ["axis=1", "axis=-1", "axis=0", "axis=1, keepdim=true", "axis=-2, keepdim=true"] {
            exact("f32[6, 4]", op, attrs, &x);
            exact("f32[r, c]", op, attrs, &x);
        }
    }
    // Integers, including MIN (where argmin via neg would wrap) and MAX.
    let x = i64t(&[3, 3], &[0, i64::MIN, i64::MIN, i64::MAX, -1, i64::MAX, 5, 5, i64::MIN]);
    let y =
        Tensor::new(vec![3, 3], TensorData::I32(vec![0, i32::MIN, i32::MAX, i32::MAX, -1, i32::MIN, 5, 5, 5])).unwrap();
    for op in ["argmax", "argmin"] {
        for attrs in ["axis=1", "axis=0, keepdim=true"] {
            exact("i64[3, 3]", op, attrs, &x);
            exact("i32[n, 3]", op, attrs, &y);
        }
    }
    // Rank 1, a size-1 axis, and a scalar.
    exact("f32[n]", "argmin", "axis=0", &f32t(&[1], &[nan]));
    exact("f32[n]", "argmin", "axis=0, keepdim=true", &f32t(&[5], &[3.0, -1.0, nan, -1.0, nan]));
}

/// Both the op and the decomposition fail on an axis that is empty at run time.
#[test]
fn argmax_over_a_runtime_empty_axis_fails() {
    let x = Tensor::from_f32(&[2, 0], vec![]).unwrap();
    for op in ["argmax", "argmin"] {
        let src = graph("f32[2, n]", op, "axis=1");
        assert!(interp::run(&parse(&src), std::slice::from_ref(&x), &opts(false)).is_err());
        assert!(interp::run(&lower(&src), std::slice::from_ref(&x), &opts(false)).is_err());
        // Over the other (non-empty) axis it is an empty result.
        exact("f32[2, n]", op, "axis=0", &x);
    }
}

// ---------------------------------------------------------------------------------------
// mean, var, std, logsumexp: bounded by the length.
// ---------------------------------------------------------------------------------------

/// Runs `op {attrs}` on `x` (type `ty`) as the op in precise mode and as the decomposition in
/// f32 mode; returns (reference, decomposed) values. Non-finite values must match exactly.
fn both(ty: &str, op: &str, attrs: &str, x: &Tensor) -> (Vec<f64>, Vec<f64>) {
    let src = graph(ty, op, attrs);
    let want = out(&parse(&src), x, &opts(true));
    let got = out(&lower(&src), x, &opts(false));
    assert_eq!(want.shape(), got.shape(), "{op} {attrs}");
    let (w, g) = (want.to_f64_vec(), got.to_f64_vec());
    for (a, b) in w.iter().zip(&g) {
        let ok = (a.is_finite() && b.is_finite()) || (a.is_nan() && b.is_nan()) || a == b;
        assert!(ok, "{op} {{{attrs}}}: reference {a:e}, decomposed {b:e}\nreference {w:?}\ndecomposed {g:?}");
    }
    (w, g)
}

/// Asserts every finite result is within `n * U * scale[i]` of the reference and returns the
/// largest error in units of `U * scale[i]` (to be compared with `n`).
fn within_length(label: &str, want: &[f64], got: &[f64], scale: &[f64], n: usize) -> f64 {
    let mut worst = 0.0f64;
    for ((w, g), s) in want.iter().zip(got).zip(scale) {
        if !w.is_finite() {
            continue;
        }
        let units = (w - g).abs() / (U * s.max(f64::MIN_POSITIVE));
        worst = worst.max(units);
        assert!(units <= n as f64, "{label}: error {units} units of 2^-24 * scale, bound {n} (N): {w:e} vs {g:e}");
    }
    worst
}

/// Rows of `x` (row-major `[rows, n]`).
fn rows(x: &[f32], n: usize) -> Vec<&[f32]> {
    x.chunks(n).collect()
}

fn mean_abs(r: &[f32]) -> f64 {
    r.iter().map(|&v| (v as f64).abs()).sum::<f64>() / r.len() as f64
}

fn exact_var(r: &[f32], correction: i64) -> f64 {
    let n = r.len() as f64;
    let m = r.iter().map(|&v| v as f64).sum::<f64>() / n;
    r.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / (n - correction as f64)
}

#[test]
fn mean_error_grows_with_length() {
    let mut rng = Lcg(7);
    for (n, lo, hi) in [(1, -1.0, 1.0), (7, -1.0, 1.0), (100, 0.0, 1.0), (1000, -1.0, 1.0), (4096, 1e3, 1e3 + 1.0)] {
        let x = rng.vec(3 * n, lo, hi);
        let scale: Vec<f64> = rows(&x, n).into_iter().map(mean_abs).collect();
        let t = f32t(&[3, n], &x);
        for ty in [format!("f32[3, {n}]"), "f32[b, n]".to_string()] {
            let (w, g) = both(&ty, "mean", "axes=[1]", &t);
            let worst = within_length("mean", &w, &g, &scale, n);
            eprintln!("mean over {n} ({ty}): max error {worst:.2} units (bound {n})");
            let (w, g) = both(&ty, "mean", "axes=[-1], keepdim=true", &t);
            within_length("mean keepdim", &w, &g, &scale, n);
        }
    }
}

#[test]
fn mean_specials_and_shapes() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    let x = f32t(&[4, 2], &[inf, 1.0, inf, -inf, nan, 0.0, -0.0, -0.0]);
    let (w, g) = both("f32[4, 2]", "mean", "axes=[1]", &x);
    assert_eq!(&w[..1], &g[..1]);
    assert!(g[1].is_nan() && g[2].is_nan() && g[3] == 0.0);
    // Over nothing: NaN (0 / 0), static and symbolic.
    let e = Tensor::from_f32(&[2, 0], vec![]).unwrap();
    for ty in ["f32[2, 0]", "f32[2, n]", "f32[m, n]"] {
        let (_, g) = both(ty, "mean", "axes=[1]", &e);
        assert!(g.iter().all(|v| v.is_nan()));
        both(ty, "mean", "axes=[0], keepdim=true", &e);
    }
    // All axes, several axes, a scalar.
    let x = f32t(&[2, 3, 2], &(0..12).map(|i| i as f32).collect::<Vec<_>>());
    for attrs in ["", "axes=[0, 2]", "axes=[-1, 0], keepdim=true"] {
        check_decomposition(&graph("f32[a, 3, c]", "mean", attrs), std::slice::from_ref(&x), 0.0, 1e-6);
    }
    check_decomposition(&graph("f32[]", "mean", ""), &[Tensor::scalar_f32(2.5)], 0.0, 0.0);
    // The symbolic count is exact: a count of 3 * a * c.
    let text = check_decomposition(&graph("f32[a, 3, c]", "mean", ""), &[x], 0.0, 1e-6);
    assert!(text.contains("full() {shape=[a], value=1.0, dtype=i64}"), "{text}");
}

#[test]
fn var_and_std_error_grows_with_length() {
    let mut rng = Lcg(11);
    // Offset data: E[x²] - E[x]² would lose every digit here; two-pass does not.
    for (n, lo, hi) in [(2, -1.0, 1.0), (10, -1.0, 1.0), (500, 0.0, 1.0), (2000, 1e4, 1e4 + 1.0)] {
        let x = rng.vec(2 * n, lo, hi);
        for correction in [0i64, 1] {
            let vars: Vec<f64> = rows(&x, n).into_iter().map(|r| exact_var(r, correction)).collect();
            let stds: Vec<f64> = vars.iter().map(|v| v.sqrt()).collect();
            let t = f32t(&[2, n], &x);
            let attrs = format!("axes=[1], correction={correction}");
            for ty in [format!("f32[2, {n}]"), "f32[2, n]".to_string()] {
                let (w, g) = both(&ty, "var", &attrs, &t);
                let worst = within_length("var", &w, &g, &vars, 2 * n);
                eprintln!(
                    "var over {n} in [{lo}, {hi}) c={correction} ({ty}): max error {worst:.2} units (bound {})",
                    2 * n
                );
                let (w, g) = both(&ty, "std", &attrs, &t);
                within_length("std", &w, &g, &stds, 2 * n);
            }
        }
    }
}

/// `N <= correction` divides by max(0, N - correction) = 0 (NaN for equal values, inf
/// otherwise); a negative correction enlarges the divisor; empty is NaN.
#[test]
fn var_corrections_and_specials() {
    let x = f32t(&[3, 2], &[1.0, 3.0, 2.0, 2.0, f32::INFINITY, 1.0]);
    for correction in [-3i64, -1, 0, 1, 2, 3, 1 << 40, -(1 << 40), i64::MAX, i64::MIN] {
        for ty in ["f32[3, 2]", "f32[3, n]", "f32[m, n]"] {
            for op in ["var", "std"] {
                let attrs = format!("axes=[1], correction={correction}");
                let (w, g) = both(ty, op, &attrs, &x);
                for (a, b) in w.iter().zip(&g) {
                    assert!((a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 4.0 * U * a.abs(), "{op} {attrs}");
                }
            }
        }
    }
    let e = Tensor::from_f32(&[2, 0], vec![]).unwrap();
    for ty in ["f32[2, 0]", "f32[2, n]"] {
        let (_, g) = both(ty, "var", "axes=[1], correction=0", &e);
        assert!(g.iter().all(|v| v.is_nan()));
        let (_, g) = both(ty, "std", "axes=[1], keepdim=true", &e);
        assert!(g.iter().all(|v| v.is_nan()));
    }
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0]);
    for attrs in ["", "axes=[0]", "axes=[-1], keepdim=true", "axes=[0, 1], correction=0"] {
        check_decomposition(&graph("f32[a, b]", "var", attrs), std::slice::from_ref(&x), 0.0, 1e-6);
        check_decomposition(&graph("f32[a, b]", "std", attrs), std::slice::from_ref(&x), 0.0, 1e-6);
    }
}

#[test]
fn logsumexp_error_grows_with_length() {
    let mut rng = Lcg(3);
    for (n, lo, hi) in [(1, -5.0, 5.0), (16, -5.0, 5.0), (1000, -20.0, 20.0), (3000, 1e4, 1e4 + 10.0)] {
        let x = rng.vec(2 * n, lo, hi);
        let t = f32t(&[2, n], &x);
        // Absolute: the sum's relative error becomes log's absolute error, plus m's rounding.
        let scale: Vec<f64> = rows(&x, n).into_iter().map(|r| 1.0 + mean_abs(r)).collect();
        for ty in [format!("f32[2, {n}]"), "f32[b, n]".to_string()] {
            let (w, g) = both(&ty, "logsumexp", "axes=[1]", &t);
            let worst = within_length("logsumexp", &w, &g, &scale, n + 2);
            eprintln!("logsumexp over {n} in [{lo}, {hi}) ({ty}): max error {worst:.2} units (bound {})", n + 2);
        }
    }
}

#[test]
fn logsumexp_specials() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    #[rustfmt::skip]
    let x = f32t(&[8, 3], &[
        -inf, -inf, -inf, // all -inf: -inf
        -inf, inf, 1.0,   // any +inf: +inf
        inf, nan, 1.0,    // NaN wins
        -inf, 2.0, -inf,  // one finite: itself
        1e30, 1e30, -1e30,
        1e4, 1e4, 1e4,    // large logits: 1e4 + log 3
        -1e4, -1e4, -1e4,
        1e-40, -1e-40, 0.0,
    ]);
    for ty in ["f32[8, 3]", "f32[r, n]"] {
        let (w, g) = both(ty, "logsumexp", "axes=[1]", &x);
        assert!(g[0] == f64::NEG_INFINITY && g[1] == f64::INFINITY && g[2].is_nan() && g[3] == 2.0);
        for (a, b) in w.iter().zip(&g).skip(4) {
            assert!((a - b).abs() <= 4.0 * U * a.abs().max(1.0), "{a} vs {b}");
        }
        both(ty, "logsumexp", "axes=[0], keepdim=true", &x);
        both(ty, "logsumexp", "", &x);
    }
    // Over nothing: -inf.
    let e = Tensor::from_f32(&[2, 0], vec![]).unwrap();
    for ty in ["f32[2, 0]", "f32[2, n]"] {
        let (_, g) = both(ty, "logsumexp", "axes=[1]", &e);
        assert_eq!(g, vec![f64::NEG_INFINITY; 2]);
        let (_, g) = both(ty, "logsumexp", "axes=[0], keepdim=true", &e);
        assert!(g.is_empty());
    }
    check_decomposition(&graph("f32[]", "logsumexp", ""), &[Tensor::scalar_f32(-3.5)], 0.0, 0.0);
    check_decomposition(&graph("f32[]", "logsumexp", ""), &[Tensor::scalar_f32(f32::NEG_INFINITY)], 0.0, 0.0);
}

/// f16/bf16 composites compute in f32 and round once at the end; f64 stays f64.
#[test]
fn composites_in_other_dtypes() {
    let mut rng = Lcg(5);
    let vals = rng.vec(2 * 300, -3.0, 3.0);
    let h = Tensor::new(vec![2, 300], TensorData::F16(vals.iter().map(|&v| half::f16::from_f32(v)).collect())).unwrap();
    let b =
        Tensor::new(vec![2, 300], TensorData::BF16(vals.iter().map(|&v| half::bf16::from_f32(v)).collect())).unwrap();
    let d = Tensor::new(vec![2, 300], TensorData::F64(vals.iter().map(|&v| v as f64 * 1.1).collect())).unwrap();
    for op in ["mean", "var", "std", "logsumexp"] {
        for (ty, x, rtol) in [("f16[2, n]", &h, 2f64.powi(-10)), ("bf16[2, n]", &b, 2f64.powi(-7))] {
            let src = graph(ty, op, "axes=[1]");
            let want = out(&parse(&src), x, &opts(false)).to_f64_vec();
            let got = out(&lower(&src), x, &opts(false)).to_f64_vec();
            for (w, g) in want.iter().zip(&got) {
                assert!((w - g).abs() <= rtol * w.abs().max(1e-3), "{op} {ty}: op {w}, decomposed {g}");
            }
            let text = ladder::text::print(&lower(&src));
            assert!(text.contains("dtype=f32"), "{op} {ty} computes in f32:\n{text}");
        }
        check_decomposition(&graph("f64[2, n]", op, "axes=[1]"), std::slice::from_ref(&d), 1e-13, 1e-13);
    }
}

#[test]
fn var_of_an_empty_axis_with_negative_correction_is_zero_not_nan() {
    // Found by tests/all/decompose_random.rs: the compensation term divided 0 by a count of 0.
    let src = "graph g(%x: f32[0, 3]) {\n  %1 = var(%x) {correction=-1}\n  %2 = var(%x) {axes=[0], correction=-1}\n  return %1, %2\n}";
    common::check_decomposition(src, &[common::f32t(&[0, 3], &[])], 0.0, 0.0);
}
