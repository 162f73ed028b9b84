//! Derivatives of the reductions and of `gather`/`scatter_add`.
//!
//! A reduction's cotangent is broadcast back over the reduced axes (`expand_back`).
//! `reduce_prod`'s derivative is the product of the other elements: `y / x` where `x` is not
//! 0; where exactly one element of a group is 0, that element gets the product of the others
//! and the rest get 0; where two or more are 0, everything gets 0. `reduce_max`/`reduce_min`
//! share the cotangent equally among the elements equal to the extreme. `gather` and
//! `scatter_add` are each other's adjoints; their index operands get no gradient.
//!
//! `softmax` and `log_softmax` have hand rules (`super::HAND_RULES`), from their results:
//! `dx = y (g - Σ g y)` and `dx = g - exp(y) Σ g` over the axis. The rules derived from
//! their decompositions run back through the row's maximum (whose contribution is 0 in exact
//! arithmetic: the result does not depend on the shift), the exponentials and the sum, and
//! need those saved or recomputed; these need the result alone, and leave the forward to the
//! library kernel.

use smallvec::smallvec;

use super::shape::{dims, ints};
use super::{Grads, Vjp};
use crate::decomp::{compute_dtype, DecompError, Emitter};
use crate::ir::{AttrValue, DType, Shape, Value};
use crate::ops::util::{normalize_axes, normalize_axis};
use crate::ops::OpKind;

/// The reduced axes of a reduction node, normalised.
fn axes(e: &Emitter, v: &Vjp) -> Result<Vec<usize>, DecompError> {
    normalize_axes(v.node.attrs.ints("axes"), e.rank(v.arg(0)), false)
        .map_err(|error| DecompError::Unsupported { op: v.node.op.name(), reason: error.to_string() })
}

/// `r` (a reduction's result over `axes` of a tensor of shape `full`) broadcast back to `full`.
fn expand_back(e: &mut Emitter, r: Value, full: &Shape, axes: &[usize]) -> Result<Value, DecompError> {
    if axes.is_empty() {
        return Ok(r);
    }
    let kept = (0..full.rank()).filter(|i| !axes.contains(i)).map(|i| i as i64);
    e.prim(OpKind::BroadcastInDim, &[r], &[("shape", dims(full)), ("broadcast_dims", ints(kept))])
}

pub(super) fn sum(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (axes, xs) = (axes(e, v)?, e.shape(v.arg(0)));
    Ok(smallvec![Some(expand_back(e, v.ct, &xs, &axes)?)])
}

pub(super) fn prod(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (x, y) = (v.arg(0), v.out);
    let (axes, xs, dtype) = (axes(e, v)?, e.shape(x), e.dtype(x));
    let zero = e.full_like(0.0, x)?;
    let is_zero = e.binary(OpKind::Eq, x, zero)?;
    // The product of the non-zero elements, used where exactly one element is 0.
    let one = e.full_like(1.0, x)?;
    let non_zero = e.select(is_zero, one, x)?;
    let others = e.reduce(OpKind::ReduceProd, non_zero, &axes, false)?;
    let zeros = e.convert(is_zero, dtype)?;
    let n_zeros = e.reduce(OpKind::ReduceSum, zeros, &axes, false)?;
    let one_r = e.full_like(1.0, n_zeros)?;
    let zero_r = e.full_like(0.0, n_zeros)?;
    let single = e.binary(OpKind::Eq, n_zeros, one_r)?;
    let others = e.select(single, others, zero_r)?;
    let others = expand_back(e, others, &xs, &axes)?;
    let yb = expand_back(e, y, &xs, &axes)?;
    let quotient = e.div(yb, x)?;
    let d = e.select(is_zero, others, quotient)?;
    let ctb = expand_back(e, v.ct, &xs, &axes)?;
    Ok(smallvec![Some(e.mul(ctb, d)?)])
}

/// `reduce_max` and `reduce_min`.
pub(super) fn extreme(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (x, y) = (v.arg(0), v.out);
    let (axes, xs, dtype) = (axes(e, v)?, e.shape(x), e.dtype(x));
    let yb = expand_back(e, y, &xs, &axes)?;
    let hit = e.binary(OpKind::Eq, x, yb)?;
    let hit = e.convert(hit, dtype)?;
    let count = e.reduce(OpKind::ReduceSum, hit, &axes, false)?;
    let share = e.div(v.ct, count)?;
    let share = expand_back(e, share, &xs, &axes)?;
    Ok(smallvec![Some(e.mul(hit, share)?)])
}

fn axis_attr(v: &Vjp) -> [(&'static str, AttrValue); 1] {
    [("axis", AttrValue::Int(v.node.attrs.int("axis")))]
}

/// `gather(x, index)`: the cotangent scattered back into zeros of `x`'s shape.
pub(super) fn gather(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let zeros = e.full_like(0.0, v.arg(0))?;
    let d = e.prim(OpKind::ScatterAdd, &[zeros, v.arg(1), v.ct], &axis_attr(v))?;
    Ok(smallvec![Some(d), None])
}

/// `scatter_add(x, index, src)`: `x` gets the cotangent, `src` its gathered elements.
pub(super) fn scatter_add(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let d_src = e.prim(OpKind::Gather, &[v.ct, v.arg(1)], &axis_attr(v))?;
    Ok(smallvec![Some(v.ct), None, Some(d_src)])
}

/// `softmax`'s hand rule: `dx = y (g - Σ_axis g y)`, in the dtype the decomposition computes
/// in (f32 for f16 and bf16).
pub(super) fn softmax(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (axis, dtype, wide) = softmax_axis(e, v)?;
    let y = e.convert(v.out, wide)?;
    let g = e.convert(v.ct, wide)?;
    let gy = e.mul(g, y)?;
    let s = e.reduce(OpKind::ReduceSum, gy, &[axis], true)?;
    let d = e.sub(g, s)?;
    let dx = e.mul(y, d)?;
    Ok(smallvec![Some(e.convert(dx, dtype)?)])
}

/// `log_softmax`'s hand rule: `dx = g - exp(y) Σ_axis g`, in the dtype the decomposition
/// computes in.
pub(super) fn log_softmax(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (axis, dtype, wide) = softmax_axis(e, v)?;
    let y = e.convert(v.out, wide)?;
    let g = e.convert(v.ct, wide)?;
    let s = e.reduce(OpKind::ReduceSum, g, &[axis], true)?;
    let p = e.unary(OpKind::Exp, y)?;
    let ps = e.mul(p, s)?;
    let dx = e.sub(g, ps)?;
    Ok(smallvec![Some(e.convert(dx, dtype)?)])
}

/// A softmax node's normalised axis, its dtype, and the dtype its rule computes in.
fn softmax_axis(e: &Emitter, v: &Vjp) -> Result<(usize, DType, DType), DecompError> {
    let axis = normalize_axis(v.node.attrs.int("axis"), e.rank(v.arg(0)))
        .map_err(|error| DecompError::Unsupported { op: v.node.op.name(), reason: error.to_string() })?;
    let dtype = e.dtype(v.arg(0));
    Ok((axis, dtype, compute_dtype(dtype)))
}
