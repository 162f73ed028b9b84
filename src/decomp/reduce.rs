//! Decompositions of the reduce family's high-level ops.
//!
//! - `sum`/`prod` convert to the result dtype (ints and bools to i64) and use `reduce_sum` /
//!   `reduce_prod`, which accumulate exactly like the op: the results agree bit for bit.
//! - `amax`/`amin`/`argmax` are their prims (plus a reshape for `keepdim`). The prims are
//!   total, so where the op fails on an axis that is only empty at run time (symbolic),
//!   `amax`/`amin` give the identity (`-inf`/`+inf`, MIN/MAX) instead; `argmax`/`argmin`
//!   fail like the op, in `reduce_argmax`.
//! - `argmin` is `reduce_argmax` of an order-reversing map: `neg(x)` for floats (NaN stays
//!   NaN, so the first NaN still wins; `±0` stay tied, so the first zero wins) and
//!   `-1 - x` (bitwise not, which never overflows; `MAX - x` for unsigned types) for
//!   integers, where `neg` would wrap `MIN` onto itself.
//! - `mean`, `var`, `std` and `logsumexp` compute in the input dtype (f16 and bf16 in f32,
//!   converted back at the end), accumulating sequentially like `reduce_sum`, so their error
//!   grows with the reduced length. The count `N` is a constant when the reduced dims are
//!   static; otherwise each symbolic dim is counted exactly in i64 (`reduce_sum` of an i64
//!   `full(1)` of that one dim), the counts multiplied, and the product converted to the
//!   float dtype once (correctly rounded, so exact below 2^24 in f32).
//! - `var` is two-pass with the correction term, `(Σd² - (Σd)²/N)` with `d = x - mean`
//!   (the second term removes the first-order effect of the rounded mean, which matters for
//!   data far from zero), divided by `max(0, N - correction)` like the op: computed exactly
//!   at compile time when `N` is static, otherwise in i64, saturating like the op.
//! - `logsumexp` subtracts `m = reduce_max(x)`, replaced by 0 where it is ±inf (so no
//!   `inf - inf`): all `-inf` or nothing gives `log(0) + 0 = -inf`, any `+inf` gives `+inf`,
//!   and a NaN makes `m` NaN, which propagates.
//! - `cumsum` along an axis of static length `n` is a log-step scan (Hillis and Steele): in
//!   round `r` the running sums are added to themselves shifted `2^r` places along the axis (a
//!   `pad` of `2^r` zeros in front that crops as many at the end), `ceil(log2 n)` rounds, so
//!   each float result is its prefix summed in a tree of that depth, in the dtype (f16 and bf16
//!   in f32); integers wrap like the op, exactly. Along a symbolic axis it sums `x` masked by
//!   `j <= i` over a new axis `j`: `n` terms per element, meant for the short axes models scan
//!   (positions from an attention mask).

use super::{compute_dtype, DecompError, DecompFn, Emitter};
use crate::ir::{AttrValue, DType, Node, Shape, Value};
use crate::ops::reduce::reduced_shape;
use crate::ops::util::{normalize_axes, normalize_axis};
use crate::ops::OpKind;

/// The decomposition of `op`, if this family has one.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    use OpKind::*;
    Some(match op {
        Sum => sum,
        Prod => prod,
        Mean => mean,
        Var => var,
        Std => std,
        Amax => amax,
        Amin => amin,
        Argmax => argmax,
        Argmin => argmin,
        Logsumexp => logsumexp,
        Cumsum => cumsum,
        _ => return None,
    })
}

fn bad(node: &Node, reason: impl ToString) -> DecompError {
    DecompError::Unsupported { op: node.op.name(), reason: reason.to_string() }
}

/// The normalised axes (`[]` = all) and `keepdim` of a high-level reduction node.
fn axes_keepdim(e: &Emitter, node: &Node, x: Value) -> Result<(Vec<usize>, bool), DecompError> {
    let axes = normalize_axes(node.attrs.ints("axes"), e.rank(x), true).map_err(|err| bad(node, err))?;
    Ok((axes, node.attrs.bool("keepdim")))
}

/// The reduced value `r` of a reduction of `x_shape` over `axes`, broadcast back to `x_shape`
/// (the reduced axes stretched). No node when nothing was reduced.
pub(super) fn expand(e: &mut Emitter, r: Value, axes: &[usize], x_shape: &Shape) -> Result<Value, DecompError> {
    if axes.is_empty() {
        return Ok(r);
    }
    let kept: Vec<i64> = (0..x_shape.rank()).filter(|i| !axes.contains(i)).map(|i| i as i64).collect();
    let shape = AttrValue::Dims(x_shape.dims().iter().cloned().map(Some).collect());
    e.prim(OpKind::BroadcastInDim, &[r], &[("shape", shape), ("broadcast_dims", AttrValue::Ints(kept))])
}

/// A reduction prim over `axes` (no node when there are none), kept as size 1 if `keepdim`.
fn reduce(e: &mut Emitter, op: OpKind, x: Value, axes: &[usize], keepdim: bool) -> Result<Value, DecompError> {
    if axes.is_empty() {
        return Ok(x);
    }
    e.reduce(op, x, axes, keepdim)
}

/// `r` (a reduction of `x_shape` over `axes`, axes removed) reshaped with the axes kept as 1s
/// when `keepdim`.
fn keep(e: &mut Emitter, r: Value, x_shape: &Shape, axes: &[usize], keepdim: bool) -> Result<Value, DecompError> {
    if !keepdim {
        return Ok(r);
    }
    e.reshape(r, &reduced_shape(x_shape, axes, true))
}

/// The number of elements a reduction folds.
#[derive(Clone, Copy)]
enum Count {
    Static(u64),
    /// An i64 scalar computed at run time (some reduced dim is symbolic).
    Dynamic(Value),
}

/// The number of elements a reduction of `shape` over `axes` folds: each symbolic dim counted
/// exactly in i64 (`reduce_sum` of an i64 `full(1)` of just that dim), times the static ones.
fn count_i64(e: &mut Emitter, shape: &Shape, axes: &[usize]) -> Result<Count, DecompError> {
    let mut known: u64 = 1;
    let mut counted: Option<Value> = None;
    for &a in axes {
        let d = &shape.dims()[a];
        match d.as_const() {
            Some(n) => known = known.saturating_mul(n),
            None => {
                let ones = e.full(1.0, DType::I64, &std::iter::once(d.clone()).collect())?;
                let n = e.prim(OpKind::ReduceSum, &[ones], &[("axes", AttrValue::Ints(vec![0]))])?;
                counted = Some(match counted {
                    Some(c) => e.mul(c, n)?,
                    None => n,
                });
            }
        }
    }
    let Some(c) = counted else { return Ok(Count::Static(known)) };
    if known == 1 {
        return Ok(Count::Dynamic(c));
    }
    let k = e.full(known as f64, DType::I64, &Shape::scalar())?;
    Ok(Count::Dynamic(e.mul(c, k)?))
}

/// The count of a reduction of `shape` over `axes` in float `dtype`, as a tensor of shape
/// `out` (the reduction's result).
pub(super) fn count(
    e: &mut Emitter,
    shape: &Shape,
    axes: &[usize],
    dtype: DType,
    out: &Shape,
) -> Result<Value, DecompError> {
    match count_i64(e, shape, axes)? {
        Count::Static(n) => e.full(n as f64, dtype, out),
        Count::Dynamic(c) => {
            let c = e.convert(c, dtype)?;
            e.broadcast_to(c, out)
        }
    }
}

/// The mean of float `x` (already in its compute dtype) over `axes`, axes removed.
pub(super) fn mean_of(e: &mut Emitter, x: Value, axes: &[usize]) -> Result<Value, DecompError> {
    let shape = e.shape(x);
    let s = reduce(e, OpKind::ReduceSum, x, axes, false)?;
    let out = e.shape(s);
    let n = count(e, &shape, axes, e.dtype(x), &out)?;
    e.div(s, n)
}

/// The variance of float `x` (in its compute dtype) over `axes` with `correction`, axes
/// removed: two-pass with the correction term (Björck; Higham, *Accuracy and Stability*,
/// §1.9): `(Σd² - (Σd)² / N) / max(0, N - correction)` with `d = x - mean`. The second term
/// cancels, to first order, the error of the rounded mean, which the plain two-pass formula
/// leaves in as `N δ²` (large for data far from zero).
pub(super) fn var_of(e: &mut Emitter, x: Value, axes: &[usize], correction: i64) -> Result<Value, DecompError> {
    let shape = e.shape(x);
    let dtype = e.dtype(x);
    let s = reduce(e, OpKind::ReduceSum, x, axes, false)?;
    let out = e.shape(s);
    let counted = count_i64(e, &shape, axes)?;
    let n = match counted {
        Count::Static(n) => e.full(n as f64, dtype, &out)?,
        Count::Dynamic(c) => {
            let c = e.convert(c, dtype)?;
            e.broadcast_to(c, &out)?
        }
    };
    let m = e.div(s, n)?;
    let m = expand(e, m, axes, &shape)?;
    let d = e.sub(x, m)?;
    let d2 = e.mul(d, d)?;
    let ss = reduce(e, OpKind::ReduceSum, d2, axes, false)?;
    let sd = reduce(e, OpKind::ReduceSum, d, axes, false)?;
    let sd2 = e.mul(sd, sd)?;
    // Over an empty axis Σd is 0 and N is 0: divide by max(N, 1) so the compensation is 0,
    // not 0/0 (the op's variance of nothing is 0 / max(0, N - correction)).
    let n_or_one = e.binary_scalar(OpKind::Max, n, 1.0)?;
    let fix = e.div(sd2, n_or_one)?;
    let corrected = e.sub(ss, fix)?;
    // Mathematically Σd² >= (Σd)²/N; rounding must not make the variance negative.
    let corrected = e.binary_scalar(OpKind::Max, corrected, 0.0)?;
    // Where Σd² overflowed (or is NaN) keep it: inf - inf would turn an infinite variance
    // into NaN.
    let inf = e.full_like(f64::INFINITY, ss)?;
    let finite = e.prim(OpKind::Lt, &[ss, inf], &[])?;
    let ss = e.select(finite, corrected, ss)?;
    let denom = match counted {
        Count::Static(n) => {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            e.full(n.saturating_sub(correction).max(0) as f64, dtype, &out)?
        }
        Count::Dynamic(n) => {
            // max(0, N - correction) with the op's saturation: N >= 0, so only a negative
            // correction can overflow, and then the wrapped difference is below N.
            let c = e.full_like(correction as f64, n)?;
            let diff = e.prim(OpKind::Sub, &[n, c], &[])?;
            let diff = if correction < 0 {
                let wrapped = e.prim(OpKind::Lt, &[diff, n], &[])?;
                let max = e.full_like(i64::MAX as f64, n)?;
                e.select(wrapped, max, diff)?
            } else {
                e.binary_scalar(OpKind::Max, diff, 0.0)?
            };
            let diff = e.convert(diff, dtype)?;
            e.broadcast_to(diff, &out)?
        }
    };
    let var = e.div(ss, denom)?;
    // With a zero divisor (N <= correction) the op's answer is inf when Σd² > 0 and NaN when
    // it is 0. Σd² can underflow to 0 in f32 (d ~ 1e-29) where it is positive in f64, so
    // decide "> 0" as "some d != 0", which does not underflow.
    let abs_d = e.unary(OpKind::Abs, d)?;
    let max_d = reduce(e, OpKind::ReduceMax, abs_d, axes, false)?;
    let zero = e.full_like(0.0, max_d)?;
    let spread = e.prim(OpKind::Gt, &[max_d, zero], &[])?;
    let inf = e.full_like(f64::INFINITY, var)?;
    let nan = e.full_like(f64::NAN, var)?;
    let at_zero = e.select(spread, inf, nan)?;
    // NaN in the data stays NaN: max|d| is then NaN and `spread` false.
    let denom_zero = e.binary_scalar(OpKind::Eq, denom, 0.0)?;
    e.select(denom_zero, at_zero, var)
}

/// `log(sum(exp(x)))` of float `x` (in its compute dtype) over `axes`, axes removed,
/// max-subtracted.
pub(super) fn logsumexp_of(e: &mut Emitter, x: Value, axes: &[usize]) -> Result<Value, DecompError> {
    let shape = e.shape(x);
    let m = reduce(e, OpKind::ReduceMax, x, axes, false)?;
    let am = e.unary(OpKind::Abs, m)?;
    let inf = e.full_like(f64::INFINITY, am)?;
    let is_inf = e.prim(OpKind::Eq, &[am, inf], &[])?;
    let zero = e.full_like(0.0, m)?;
    let ms = e.select(is_inf, zero, m)?;
    let mb = expand(e, ms, axes, &shape)?;
    let d = e.sub(x, mb)?;
    let ex = e.unary(OpKind::Exp, d)?;
    let s = reduce(e, OpKind::ReduceSum, ex, axes, false)?;
    let ls = e.unary(OpKind::Log, s)?;
    e.add(ls, ms)
}

/// `sum`/`prod`: convert to the result dtype, then the prim.
fn sum_like(e: &mut Emitter, node: &Node, x: Value, op: OpKind) -> Result<Value, DecompError> {
    let (axes, keepdim) = axes_keepdim(e, node, x)?;
    let x = e.convert(x, node.ty.dtype)?;
    reduce(e, op, x, &axes, keepdim)
}

fn sum(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    sum_like(e, node, args[0], OpKind::ReduceSum)
}

fn prod(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    sum_like(e, node, args[0], OpKind::ReduceProd)
}

fn amax(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let (axes, keepdim) = axes_keepdim(e, node, args[0])?;
    reduce(e, OpKind::ReduceMax, args[0], &axes, keepdim)
}

fn amin(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let (axes, keepdim) = axes_keepdim(e, node, args[0])?;
    reduce(e, OpKind::ReduceMin, args[0], &axes, keepdim)
}

/// `reduce_argmax` of `x` along `node`'s axis, kept as size 1 if `keepdim`.
fn argmax_of(e: &mut Emitter, node: &Node, x: Value, shape: &Shape) -> Result<Value, DecompError> {
    let axis = normalize_axis(node.attrs.int("axis"), shape.rank()).map_err(|err| bad(node, err))?;
    let r = e.prim(OpKind::ReduceArgmax, &[x], &[("axis", AttrValue::Int(axis as i64))])?;
    keep(e, r, shape, &[axis], node.attrs.bool("keepdim"))
}

fn argmax(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let shape = e.shape(args[0]);
    argmax_of(e, node, args[0], &shape)
}

fn argmin(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = args[0];
    let shape = e.shape(x);
    let flipped = if e.dtype(x).is_float() {
        e.unary(OpKind::Neg, x)?
    } else {
        // -1 - x is !x: order-reversing on every integer, with no overflow. An unsigned type
        // has no -1: its all-ones is MAX (for u64, 2^64 as an f64, which `full` saturates to
        // u64::MAX).
        let ones = match e.dtype(x).int_range() {
            Some((0, hi)) => hi as f64,
            _ => -1.0,
        };
        let m1 = e.full_like(ones, x)?;
        e.prim(OpKind::Sub, &[m1, x], &[])?
    };
    argmax_of(e, node, flipped, &shape)
}

/// A float composite computed in the compute dtype and converted back at the end.
fn float_composite(
    e: &mut Emitter,
    node: &Node,
    x: Value,
    f: impl FnOnce(&mut Emitter, Value, &[usize]) -> Result<Value, DecompError>,
) -> Result<Value, DecompError> {
    let (axes, keepdim) = axes_keepdim(e, node, x)?;
    let shape = e.shape(x);
    let xc = e.convert(x, compute_dtype(node.ty.dtype))?;
    let r = f(e, xc, &axes)?;
    let r = e.convert(r, node.ty.dtype)?;
    keep(e, r, &shape, &axes, keepdim)
}

fn mean(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    float_composite(e, node, args[0], mean_of)
}

fn var(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let c = node.attrs.int("correction");
    float_composite(e, node, args[0], |e, x, axes| var_of(e, x, axes, c))
}

fn std(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let c = node.attrs.int("correction");
    float_composite(e, node, args[0], |e, x, axes| {
        let v = var_of(e, x, axes, c)?;
        e.unary(OpKind::Sqrt, v)
    })
}

fn logsumexp(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    float_composite(e, node, args[0], logsumexp_of)
}

fn cumsum(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = args[0];
    let shape = e.shape(x);
    let rank = shape.rank();
    let axis = normalize_axis(node.attrs.int("axis"), rank).map_err(|err| bad(node, err))?;
    let dtype = e.dtype(x);
    let y = e.convert(x, compute_dtype(dtype))?;
    let y = match shape.dims()[axis].as_const() {
        Some(n) => {
            let mut y = y;
            let mut shift = 1u64;
            while shift < n {
                let (mut low, mut high) = (vec![0i64; rank], vec![0i64; rank]);
                (low[axis], high[axis]) = (shift as i64, -(shift as i64));
                let shifted = e.prim(
                    OpKind::Pad,
                    &[y],
                    &[("low", AttrValue::Ints(low)), ("high", AttrValue::Ints(high)), ("value", AttrValue::Float(0.0))],
                )?;
                y = e.add(y, shifted)?;
                shift *= 2;
            }
            y
        }
        None => {
            // y[..., i, ...] = sum over j of where(j <= i, x[..., j, ...], 0), with j a new axis
            // after the scanned one.
            let n = shape.dims()[axis].clone();
            let mut wide: Vec<_> = shape.dims().to_vec();
            wide.insert(axis + 1, n);
            let wide = Shape(wide.into_iter().collect());
            // x indexed by j: the scanned axis moves to position axis + 1.
            let bdims: Vec<i64> = (0..rank).map(|d| if d < axis { d } else { d + 1 } as i64).collect();
            let xj = e.prim(
                OpKind::BroadcastInDim,
                &[y],
                &[
                    ("shape", AttrValue::Dims(wide.dims().iter().cloned().map(Some).collect())),
                    ("broadcast_dims", AttrValue::Ints(bdims)),
                ],
            )?;
            let i = e.iota(&wide, axis, DType::I64)?;
            let j = e.iota(&wide, axis + 1, DType::I64)?;
            let keep = e.binary(OpKind::Le, j, i)?;
            let zero = e.full_like(0.0, xj)?;
            let masked = e.select(keep, xj, zero)?;
            e.reduce(OpKind::ReduceSum, masked, &[axis + 1], false)?
        }
    };
    e.convert(y, dtype)
}
