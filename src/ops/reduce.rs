//! Reductions: the reduction prims (`reduce_sum`, `reduce_prod`, `reduce_max`, `reduce_min`,
//! `reduce_argmax`) and the high-level reductions frontends emit (`sum`, `mean`, `var`, `std`,
//! `prod`, `amax`, `amin`, `argmax`, `argmin`, `logsumexp`).
//!
//! Semantic choices:
//! - **Prims** take `axes` (required, distinct, negative allowed) and remove the reduced axes
//!   (no `keepdim` at the prims rung); `axes=[]` reduces nothing and is the identity. They keep
//!   the input's dtype and accumulate sequentially, in row-major order of the reduced elements,
//!   in that dtype: `acc = round(dtype, acc + x)` (precise mode skips the rounding); integers
//!   wrap. The accumulator starts at the first element, so a sum of `[-0.0]` is `-0.0`.
//! - **Identities** over an empty axis: sum 0, prod 1, max `-inf` / min `+inf` for floats and
//!   the dtype's MIN / MAX for integers (i32 uses i32's range); for bool, max is `any` (false)
//!   and min is `all` (true). `reduce_sum`/`reduce_prod` reject bool.
//! - **max/min** propagate NaN and order `-0 < +0`, like the elementwise `max`/`min`.
//! - **argmax/argmin** return i64 indices of the first extreme element; NaN counts as the
//!   maximum for argmax and the minimum for argmin (the first NaN wins), like torch. They reject
//!   bool inputs (as torch does) and an empty reduced axis (an infer error when the dim is
//!   statically 0, `EvalError::Invalid` at run time otherwise).
//! - **High-level** reductions take `axes` (`[]` means every axis) and `keepdim` (reduced axes
//!   kept as size 1); `argmax`/`argmin` take one required `axis`.
//! - `sum` and `prod` of int or bool inputs give i64 (like torch); floats keep their dtype.
//!   They accumulate **sequentially in the result dtype**, exactly like `reduce_sum` /
//!   `reduce_prod`, so the high-level op and its decomposition agree bit for bit in both modes.
//! - `mean`, `var`, `std` and `logsumexp` are float-only composites: they compute in f64 and
//!   round once (they define the ideal answer). `mean` over nothing is NaN. `var`/`std` are
//!   two-pass (mean, then squared deviations) and divide by `max(0, N - correction)`, so
//!   `N <= correction` gives NaN (all deviations 0) or inf, as torch does. `logsumexp`
//!   subtracts the maximum; all `-inf` (or no elements) gives `-inf`, any `+inf` gives `+inf`,
//!   NaN propagates.
//! - `amax`/`amin` propagate NaN and keep the dtype (bool: any/all). Like torch they have no
//!   identity: reducing a size-0 axis is an error (infer error when static, EvalError otherwise).
//! - `cumsum` (torch.cumsum, ONNX `CumSum`) is a scan, not a reduction: the same shape and
//!   dtype, element `i` along the required `axis` the sum of elements `0..=i`. Floats sum in
//!   f64 and round each result once (the ideal answer; NaN and infinities propagate as in a
//!   sum); integers wrap in their dtype (torch widens them to i64 instead: a frontend that
//!   wants that converts first); bool and rank 0 are rejected.

use super::elementwise::binary_float;
use super::util::{bool_attr, int_attr, normalize_axes, normalize_axis};
use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{int_cmp, int_limits, EvalCtx, EvalError, View};
use crate::ir::{AttrDefault, AttrKind, AttrSpec, Attrs, DType, Dim, Shape, TensorType};

/// The shape of a reduction's result: `axes` (normalised, in `0..rank`) removed, or kept as
/// size 1 when `keepdim` is set.
pub fn reduced_shape(shape: &Shape, axes: &[usize], keepdim: bool) -> Shape {
    let mut out = Shape::scalar();
    for (i, d) in shape.dims().iter().enumerate() {
        if !axes.contains(&i) {
            out.0.push(d.clone());
        } else if keepdim {
            out.0.push(Dim::new(1));
        }
    }
    out
}

/// `reduced_shape` for concrete runtime dims.
pub fn reduced_dims(shape: &[usize], axes: &[usize], keepdim: bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if !axes.contains(&i) {
            out.push(d);
        } else if keepdim {
            out.push(1);
        }
    }
    out
}

const AXES_REQUIRED: &[AttrSpec] = &[AttrSpec::required("axes", AttrKind::Ints)];
const AXIS_REQUIRED: &[AttrSpec] = &[AttrSpec::required("axis", AttrKind::Int)];
const AXES_KEEPDIM: &[AttrSpec] =
    &[AttrSpec::optional("axes", AttrKind::Ints, AttrDefault::Empty), bool_attr("keepdim", false)];
const AXES_KEEPDIM_CORRECTION: &[AttrSpec] = &[
    AttrSpec::optional("axes", AttrKind::Ints, AttrDefault::Empty),
    bool_attr("keepdim", false),
    int_attr("correction", 1),
];
const AXIS_KEEPDIM: &[AttrSpec] = &[AttrSpec::required("axis", AttrKind::Int), bool_attr("keepdim", false)];

const fn spec(kind: OpKind, name: &'static str, rung: Rung, attrs: &'static [AttrSpec], doc: &'static str) -> OpSpec {
    OpSpec {
        kind,
        name,
        rung,
        arity: Arity::Exactly(1),
        attrs,
        infer: infer_reduce,
        eval: eval_reduce,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc,
    }
}

pub static SPECS: &[OpSpec] = &[
    spec(
        OpKind::ReduceSum,
        "reduce_sum",
        Rung::Prim,
        AXES_REQUIRED,
        "sum over axes (removed), accumulated in the dtype",
    ),
    spec(
        OpKind::ReduceProd,
        "reduce_prod",
        Rung::Prim,
        AXES_REQUIRED,
        "product over axes (removed), accumulated in the dtype",
    ),
    spec(OpKind::ReduceMax, "reduce_max", Rung::Prim, AXES_REQUIRED, "maximum over axes (removed), NaN-propagating"),
    spec(OpKind::ReduceMin, "reduce_min", Rung::Prim, AXES_REQUIRED, "minimum over axes (removed), NaN-propagating"),
    spec(
        OpKind::ReduceArgmax,
        "reduce_argmax",
        Rung::Prim,
        AXIS_REQUIRED,
        "i64 index of the first maximum along axis (removed); NaN is the maximum",
    ),
    spec(OpKind::Sum, "sum", Rung::High, AXES_KEEPDIM, "sum over axes ([] = all); ints and bools sum to i64"),
    spec(OpKind::Mean, "mean", Rung::High, AXES_KEEPDIM, "mean over axes ([] = all), float only; empty gives NaN"),
    spec(
        OpKind::Var,
        "var",
        Rung::High,
        AXES_KEEPDIM_CORRECTION,
        "variance over axes ([] = all), divided by max(0, N - correction)",
    ),
    spec(
        OpKind::Std,
        "std",
        Rung::High,
        AXES_KEEPDIM_CORRECTION,
        "standard deviation over axes ([] = all), divided by max(0, N - correction)",
    ),
    spec(OpKind::Prod, "prod", Rung::High, AXES_KEEPDIM, "product over axes ([] = all); ints and bools give i64"),
    spec(
        OpKind::Amax,
        "amax",
        Rung::High,
        AXES_KEEPDIM,
        "maximum over axes ([] = all), NaN-propagating; not over empty",
    ),
    spec(
        OpKind::Amin,
        "amin",
        Rung::High,
        AXES_KEEPDIM,
        "minimum over axes ([] = all), NaN-propagating; not over empty",
    ),
    spec(
        OpKind::Argmax,
        "argmax",
        Rung::High,
        AXIS_KEEPDIM,
        "i64 index of the first maximum along axis; NaN is the maximum",
    ),
    spec(
        OpKind::Argmin,
        "argmin",
        Rung::High,
        AXIS_KEEPDIM,
        "i64 index of the first minimum along axis; NaN is the minimum",
    ),
    spec(
        OpKind::Logsumexp,
        "logsumexp",
        Rung::High,
        AXES_KEEPDIM,
        "log(sum(exp(x))) over axes ([] = all), max-subtracted, float only",
    ),
    OpSpec {
        kind: OpKind::Cumsum,
        name: "cumsum",
        rung: Rung::High,
        arity: Arity::Exactly(1),
        attrs: &[AttrSpec::required("axis", AttrKind::Int)],
        infer: infer_cumsum,
        eval: eval_cumsum,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc: "prefix sums along axis, same shape and dtype (floats summed in f64 and rounded once, ints wrap)",
    },
];

fn infer_cumsum(_: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    let x = args[0];
    normalize_axis(attrs.int("axis"), x.rank())?;
    if x.dtype.is_bool() {
        return Err(OpError::DType { arg: 0, got: x.dtype, expected: "a numeric (int or float) type".into() });
    }
    Ok(x.clone())
}

fn eval_cumsum(
    _: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    let x = &args[0];
    let axis = normalize_axis(attrs.int("axis"), x.rank()).map_err(|e| EvalError::Invalid(e.to_string()))?;
    let dims = x.shape().to_vec();
    let (len, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    if out.dtype.is_float() {
        let mut v = x.floats();
        scan(&mut v, len, inner, |acc, x| acc + x);
        Ok(View::from_floats(ctx, out.dtype, dims, v))
    } else {
        let mut v = x.ints();
        scan(&mut v, len, inner, i64::wrapping_add);
        Ok(View::from_ints(out.dtype, dims, v))
    }
}

/// Prefix sums, in place, along the middle axis of a row-major `[outer, len, inner]` buffer.
fn scan<T: Copy>(v: &mut [T], len: usize, inner: usize, add: impl Fn(T, T) -> T) {
    let block = len * inner;
    if block == 0 {
        return;
    }
    for base in (0..v.len()).step_by(block) {
        for k in base + inner..base + block {
            v[k] = add(v[k - inner], v[k]);
        }
    }
}

/// The reduced axes (normalised, sorted) and `keepdim` of a reduction node.
fn axes_of(kind: OpKind, attrs: &Attrs, rank: usize) -> Result<(Vec<usize>, bool), OpError> {
    use OpKind::*;
    Ok(match kind {
        ReduceSum | ReduceProd | ReduceMax | ReduceMin => (normalize_axes(attrs.ints("axes"), rank, false)?, false),
        ReduceArgmax => (vec![normalize_axis(attrs.int("axis"), rank)?], false),
        Argmax | Argmin => (vec![normalize_axis(attrs.int("axis"), rank)?], attrs.bool("keepdim")),
        _ => (normalize_axes(attrs.ints("axes"), rank, true)?, attrs.bool("keepdim")),
    })
}

/// True for reductions without an identity, which fail over a size-0 axis.
fn needs_nonempty(kind: OpKind) -> bool {
    use OpKind::*;
    matches!(kind, ReduceArgmax | Argmax | Argmin | Amax | Amin)
}

fn infer_reduce(kind: OpKind, attrs: &Attrs, args: &[&TensorType]) -> Result<TensorType, OpError> {
    use OpKind::*;
    let x = args[0];
    let (axes, keepdim) = axes_of(kind, attrs, x.rank())?;
    let dtype_err = |expected: &str| Err(OpError::DType { arg: 0, got: x.dtype, expected: expected.to_string() });
    let dtype = match kind {
        ReduceSum | ReduceProd if x.dtype.is_bool() => return dtype_err("a numeric (int or float) type"),
        ReduceArgmax | Argmax | Argmin if x.dtype.is_bool() => return dtype_err("a numeric (int or float) type"),
        ReduceArgmax | Argmax | Argmin => DType::I64,
        Mean | Var | Std | Logsumexp if !x.dtype.is_float() => return dtype_err("a float type"),
        Sum | Prod if !x.dtype.is_float() => DType::I64,
        _ => x.dtype,
    };
    if needs_nonempty(kind) {
        for &a in &axes {
            if x.shape.dims()[a].as_const() == Some(0) {
                return Err(OpError::Shape(format!(
                    "{} reduces axis {a}, which has size 0, and has no identity for an empty reduction",
                    kind.name()
                )));
            }
        }
    }
    Ok(TensorType::new(dtype, reduced_shape(&x.shape, &axes, keepdim)))
}

/// Slices `data` (row-major over kept axes, then reduced axes) into `n` groups of `k`.
fn groups<T>(data: &[T], n: usize, k: usize) -> impl Iterator<Item = &[T]> {
    (0..n).map(move |i| &data[i * k..(i + 1) * k])
}

/// A view of `x` with the kept axes first and the reduced axes last (sharing storage), the
/// number of output elements, and the number of elements each one reduces.
fn regroup(x: &View, axes: &[usize]) -> (View, usize, usize) {
    let rank = x.rank();
    let perm: Vec<usize> = (0..rank).filter(|i| !axes.contains(i)).chain(axes.iter().copied()).collect();
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let strides: Vec<isize> = perm.iter().map(|&p| x.strides()[p]).collect();
    let n = (0..rank).filter(|i| !axes.contains(i)).map(|i| x.shape()[i]).product();
    let k = axes.iter().map(|&a| x.shape()[a]).product();
    (x.restride(shape, strides, x.offset()), n, k)
}

/// Sequential float reduction in `dtype` (sum, prod, max, min).
fn fold_float(ctx: &EvalCtx, kind: OpKind, dtype: DType, g: &[f64]) -> f64 {
    use OpKind::*;
    let Some((&first, rest)) = g.split_first() else {
        return match kind {
            ReduceSum | Sum => 0.0,
            ReduceProd | Prod => 1.0,
            ReduceMax | Amax => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        };
    };
    let mut acc = ctx.round(dtype, first);
    for &x in rest {
        acc = match kind {
            ReduceSum | Sum => ctx.round(dtype, acc + x),
            ReduceProd | Prod => ctx.round(dtype, acc * x),
            ReduceMax | Amax => binary_float(OpKind::Max, acc, x),
            _ => binary_float(OpKind::Min, acc, x),
        };
    }
    acc
}

/// Sequential integer reduction, wrapping (the result is wrapped to `dtype` on write).
fn fold_int(kind: OpKind, dtype: DType, g: &[i64]) -> i64 {
    use OpKind::*;
    let (lo, hi) = int_limits(dtype);
    let pick = |a: i64, x: i64, want: std::cmp::Ordering| if int_cmp(dtype, x, a) == want { x } else { a };
    match kind {
        ReduceSum | Sum => g.iter().fold(0i64, |a, &x| a.wrapping_add(x)),
        ReduceProd | Prod => g.iter().fold(1i64, |a, &x| a.wrapping_mul(x)),
        ReduceMax | Amax => g.iter().fold(lo, |a, &x| pick(a, x, std::cmp::Ordering::Greater)),
        _ => g.iter().fold(hi, |a, &x| pick(a, x, std::cmp::Ordering::Less)),
    }
}

/// Index of the first maximum (or minimum) of a non-empty group; NaN wins at once.
fn arg_float(g: &[f64], want_max: bool) -> usize {
    let mut best = 0;
    for (i, &x) in g.iter().enumerate().skip(1) {
        if g[best].is_nan() {
            break;
        }
        if x.is_nan() || (want_max && x > g[best]) || (!want_max && x < g[best]) {
            best = i;
        }
    }
    best
}

fn arg_int(dtype: DType, g: &[i64], want_max: bool) -> usize {
    let mut best = 0;
    for (i, &x) in g.iter().enumerate().skip(1) {
        let ord = int_cmp(dtype, x, g[best]);
        if (want_max && ord.is_gt()) || (!want_max && ord.is_lt()) {
            best = i;
        }
    }
    best
}

/// `log(sum(exp(g)))` in f64, max-subtracted.
fn logsumexp(g: &[f64]) -> f64 {
    let m = g.iter().fold(f64::NEG_INFINITY, |a, &x| binary_float(OpKind::Max, a, x));
    if m.is_nan() {
        return f64::NAN;
    }
    if m.is_infinite() {
        // All -inf (or nothing): log(0) = -inf. Any +inf: +inf.
        return m;
    }
    let s: f64 = super::util::sum_f64(g.iter().map(|&x| (x - m).exp()));
    m + s.ln()
}

/// Two-pass variance in f64 with the given correction.
fn variance(g: &[f64], correction: i64) -> f64 {
    let n = g.len() as f64;
    let mean = super::util::sum_f64(g.iter().copied()) / n;
    let ss: f64 = super::util::sum_f64(g.iter().map(|&x| (x - mean) * (x - mean)));
    let denom = (g.len() as i64).saturating_sub(correction).max(0) as f64;
    ss / denom
}

fn eval_reduce(
    kind: OpKind,
    ctx: &mut EvalCtx,
    attrs: &Attrs,
    args: &[View],
    out: &TensorType,
) -> Result<View, EvalError> {
    use OpKind::{Amax, Argmax, Argmin, Logsumexp, Mean, ReduceArgmax, ReduceMax, Std, Var};
    let x = &args[0];
    let (axes, keepdim) = axes_of(kind, attrs, x.rank()).map_err(|e| EvalError::Invalid(e.to_string()))?;
    let shape = reduced_dims(x.shape(), &axes, keepdim);
    if needs_nonempty(kind) {
        if let Some(&a) = axes.iter().find(|&&a| x.shape()[a] == 0) {
            return Err(EvalError::Invalid(format!(
                "{} over axis {a}, which has size 0: an empty reduction has no identity here",
                kind.name()
            )));
        }
    }
    let (xv, n, k) = regroup(x, &axes);
    let dtype = out.dtype;
    match kind {
        ReduceArgmax | Argmax | Argmin => {
            let want_max = kind != Argmin;
            let vals: Vec<i64> = if x.dtype().is_float() {
                groups(&xv.floats(), n, k).map(|g| arg_float(g, want_max) as i64).collect()
            } else {
                groups(&xv.ints(), n, k).map(|g| arg_int(x.dtype(), g, want_max) as i64).collect()
            };
            Ok(View::from_ints(DType::I64, shape, vals))
        }
        Mean | Var | Std | Logsumexp => {
            let correction = if matches!(kind, Var | Std) { attrs.int("correction") } else { 0 };
            let vals = groups(&xv.floats(), n, k)
                .map(|g| match kind {
                    Mean => super::util::sum_f64(g.iter().copied()) / g.len() as f64,
                    Var => variance(g, correction),
                    Std => variance(g, correction).sqrt(),
                    _ => logsumexp(g),
                })
                .collect();
            Ok(View::from_floats(ctx, dtype, shape, vals))
        }
        _ if x.dtype().is_bool() && dtype.is_bool() => {
            // reduce_max/min and amax/amin on bool: any / all.
            let want_any = matches!(kind, ReduceMax | Amax);
            let vals = groups(&xv.bools(), n, k)
                .map(|g| if want_any { g.iter().any(|&b| b) } else { g.iter().all(|&b| b) })
                .collect();
            Ok(View::from_bools(shape, vals))
        }
        _ if dtype.is_float() => {
            let vals = groups(&xv.floats(), n, k).map(|g| fold_float(ctx, kind, dtype, g)).collect();
            Ok(View::from_floats(ctx, dtype, shape, vals))
        }
        _ => {
            let vals = groups(&xv.ints(), n, k).map(|g| fold_int(kind, dtype, g)).collect();
            Ok(View::from_ints(dtype, shape, vals))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::AttrValue;

    /// Reductions read strided (here: transposed) views in logical row-major order.
    #[test]
    fn reductions_read_strided_views() {
        let mut ctx = EvalCtx::new(false, u64::MAX);
        let base = View::from_floats(&ctx, DType::F32, vec![2, 3], vec![1., 2., 3., 4., 5., 6.]);
        // [[1, 4], [2, 5], [3, 6]]
        let t = base.restride(vec![3, 2], vec![1, 3], 0);
        let out = TensorType::new(DType::F32, Shape::from_static(&[3]));
        let attrs = Attrs::resolve(AXES_REQUIRED, vec![("axes".into(), AttrValue::Ints(vec![1]))]).unwrap();
        let r = eval_reduce(OpKind::ReduceSum, &mut ctx, &attrs, std::slice::from_ref(&t), &out).unwrap();
        assert_eq!(r.floats(), vec![5., 7., 9.]);
        let attrs = Attrs::resolve(AXES_REQUIRED, vec![("axes".into(), AttrValue::Ints(vec![0]))]).unwrap();
        let r = eval_reduce(OpKind::ReduceMax, &mut ctx, &attrs, std::slice::from_ref(&t), &out).unwrap();
        assert_eq!(r.floats(), vec![3., 6.]);
        let attrs = Attrs::resolve(AXIS_REQUIRED, vec![("axis".into(), AttrValue::Int(0))]).unwrap();
        let out = TensorType::new(DType::I64, Shape::from_static(&[2]));
        let r = eval_reduce(OpKind::ReduceArgmax, &mut ctx, &attrs, &[t], &out).unwrap();
        assert_eq!(r.ints(), vec![2, 2]);
    }

    #[test]
    fn reduced_shape_keeps_symbols() {
        let s = Shape(vec![Dim::sym("batch"), Dim::new(4), Dim::sym("seq")].into());
        assert_eq!(reduced_shape(&s, &[1], false).to_string(), "[batch, seq]");
        assert_eq!(reduced_shape(&s, &[0, 2], true).to_string(), "[1, 4, 1]");
        assert_eq!(reduced_shape(&s, &[], false), s);
        assert_eq!(reduced_dims(&[2, 3, 4], &[0, 2], true), vec![1, 3, 1]);
    }
}
