//! Derivatives of the shape prims: each moves the cotangent back the way the op moved the
//! data. `broadcast_in_dim` sums it over the axes the broadcast added or stretched; `slice`
//! and `pad` are each other's adjoints (a slice's cotangent is padded back with zeros,
//! `interior` filling its stride; a pad's is sliced out, after undoing any cropping by
//! padding); `cat` slices its cotangent into pieces; `reshape`, `permute` and `rev` invert
//! themselves. [`sum_to`] is the NumPy-style reverse of broadcasting that other rules share.
//!
//! Symbolic dims: a `slice` on a symbolic axis is undone with a `cat` of zero blocks of
//! symbolic sizes (a strided one spreads its cotangent over blocks of `step` first, by a
//! reshape and a pad of a size-1 axis, and is cut back to length at the end); `pad` with interior padding, like the op itself,
//! needs a static axis.

use smallvec::smallvec;

use super::{Grads, Vjp};
use crate::decomp::{DecompError, Emitter};
use crate::ir::{AttrValue, Dim, Shape, SizeExpr, Value};
use crate::ops::util::normalize_axis;
use crate::ops::OpKind;

pub(super) fn ints(v: impl IntoIterator<Item = i64>) -> AttrValue {
    AttrValue::Ints(v.into_iter().collect())
}

pub(super) fn dims(shape: &Shape) -> AttrValue {
    AttrValue::Dims(shape.dims().iter().cloned().map(Some).collect())
}

fn attr_error(op: OpKind, error: impl std::fmt::Display) -> DecompError {
    DecompError::Unsupported { op: op.name(), reason: error.to_string() }
}

/// `ct` summed NumPy-style to `target` (the reverse of broadcasting `target` to `ct`'s shape):
/// over the leading axes `target` lacks and the axes where `target` has a 1 that `ct` does
/// not, then reshaped to `target`.
pub(super) fn sum_to(e: &mut Emitter, ct: Value, target: &Shape) -> Result<Value, DecompError> {
    let shape = e.shape(ct);
    let lead = shape.rank().checked_sub(target.rank()).ok_or_else(|| DecompError::Unsupported {
        op: "sum_to",
        reason: format!("cannot sum {shape} to the larger rank of {target}"),
    })?;
    let axes: Vec<usize> = (0..shape.rank())
        .filter(|&i| {
            i < lead || (target.dims()[i - lead].as_const() == Some(1) && shape.dims()[i].as_const() != Some(1))
        })
        .collect();
    let summed = if axes.is_empty() { ct } else { e.reduce(OpKind::ReduceSum, ct, &axes, false)? };
    e.reshape(summed, target)
}

pub(super) fn broadcast_in_dim(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let x = v.arg(0);
    let (xs, ys) = (e.shape(x), e.shape(v.out));
    let map: Vec<usize> = v
        .node
        .attrs
        .ints("broadcast_dims")
        .iter()
        .map(|&b| normalize_axis(b, ys.rank()))
        .collect::<Result<_, _>>()
        .map_err(|err| attr_error(OpKind::BroadcastInDim, err))?;
    // Summed: the axes the operand does not map to, and those it stretches from 1.
    let axes: Vec<usize> = (0..ys.rank())
        .filter(|o| match map.iter().position(|m| m == o) {
            None => true,
            Some(i) => xs.dims()[i].as_const() == Some(1) && ys.dims()[*o].as_const() != Some(1),
        })
        .collect();
    let summed = if axes.is_empty() { v.ct } else { e.reduce(OpKind::ReduceSum, v.ct, &axes, false)? };
    Ok(smallvec![Some(e.reshape(summed, &xs)?)])
}

pub(super) fn reshape(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let xs = e.shape(v.arg(0));
    Ok(smallvec![Some(e.reshape(v.ct, &xs)?)])
}

pub(super) fn permute(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let rank = e.rank(v.out);
    let perm: Vec<usize> = v
        .node
        .attrs
        .ints("perm")
        .iter()
        .map(|&p| normalize_axis(p, rank))
        .collect::<Result<_, _>>()
        .map_err(|err| attr_error(OpKind::Permute, err))?;
    let mut inverse = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    Ok(smallvec![Some(e.permute(v.ct, &inverse)?)])
}

pub(super) fn rev(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let axes = v.node.attrs.ints("axes").to_vec();
    Ok(smallvec![Some(e.prim(OpKind::Rev, &[v.ct], &[("axes", ints(axes))])?)])
}

/// `x[start:end:step]` along one axis: the cotangent padded back into place with zeros.
pub(super) fn slice(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (x, a) = (v.arg(0), &v.node.attrs);
    let xs = e.shape(x);
    let axis = normalize_axis(a.int("axis"), xs.rank()).map_err(|err| attr_error(OpKind::Slice, err))?;
    let step = a.int("step");
    let range = crate::ops::shape::slice_range(&xs.dims()[axis], &a.size("start"), &a.size("end"), step)
        .map_err(|err| attr_error(OpKind::Slice, err))?;
    if range.len.as_const() == Some(0) {
        return Ok(smallvec![None]);
    }
    if let (Some(n), Some(first), Some(len)) =
        (xs.dims()[axis].as_const(), range.first.as_const(), range.len.as_const())
    {
        let (n, first, len) = (n as i64, first as i64, len as i64);
        let mut low = vec![0; xs.rank()];
        let mut high = vec![0; xs.rank()];
        let mut interior = vec![0; xs.rank()];
        low[axis] = first;
        high[axis] = n - (first + (len - 1) * step + 1);
        interior[axis] = step - 1;
        let padded = e.prim(
            OpKind::Pad,
            &[v.ct],
            &[("low", ints(low)), ("high", ints(high)), ("interior", ints(interior)), ("value", AttrValue::Float(0.0))],
        )?;
        return Ok(smallvec![Some(padded)]);
    }
    // Symbolic: zeros before and after, joined by `cat`. A strided cotangent is first spread
    // over blocks of `step` (each element then `step - 1` zeros); the blocks may overhang the
    // operand's end by up to `step - 1`, so the zeros after are `step` longer than the rest
    // of the axis (never negative) and the join is cut back by `step`.
    let (mut spread, mut extra) = (v.ct, 0);
    if step > 1 {
        let split: Shape = split_axis(&e.shape(v.ct), axis, [range.len.clone(), Dim::new(1)]);
        let t = e.reshape(v.ct, &split)?;
        let mut high = vec![0; split.rank()];
        high[axis + 1] = step - 1;
        let t = e.prim(
            OpKind::Pad,
            &[t],
            &[("low", ints(vec![0; split.rank()])), ("high", ints(high)), ("value", AttrValue::Float(0.0))],
        )?;
        let blocks = range.len.mul(&Dim::new(step as u64)).map_err(|err| attr_error(OpKind::Slice, err))?;
        spread = e.reshape(t, &split_axis(&e.shape(v.ct), axis, [blocks]))?;
        extra = step;
    }
    let spread_len = e.shape(spread).dims()[axis].clone();
    let after = xs.dims()[axis]
        .add(&Dim::new(extra as u64))
        .and_then(|d| d.sub(&range.first))
        .and_then(|d| d.sub(&spread_len))
        .map_err(|err| attr_error(OpKind::Slice, err))?;
    let mut pieces = Vec::with_capacity(3);
    for (size, is_ct) in [(range.first.clone(), false), (spread_len, true), (after, false)] {
        if is_ct {
            pieces.push(spread);
        } else if size.as_const() != Some(0) {
            let mut shape = xs.clone();
            shape.0[axis] = size;
            pieces.push(e.full(0.0, e.dtype(x), &shape)?);
        }
    }
    let mut joined = if pieces.len() == 1 { pieces[0] } else { e.cat(&pieces, axis)? };
    if extra > 0 {
        joined = e.slice(joined, axis, 0, -extra, 1)?;
    }
    Ok(smallvec![Some(joined)])
}

/// `shape` with dim `axis` replaced by `dims`.
fn split_axis<const N: usize>(shape: &Shape, axis: usize, dims: [Dim; N]) -> Shape {
    let d = shape.dims();
    d[..axis].iter().cloned().chain(dims).chain(d[axis + 1..].iter().cloned()).collect()
}

/// `pad`: undo any cropping (negative low/high) by padding the cotangent with zeros, then
/// slice the operand's elements out from between the edge and interior padding.
pub(super) fn pad(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let (x, a) = (v.arg(0), &v.node.attrs);
    let xs = e.shape(x);
    let rank = xs.rank();
    if xs.dims().iter().any(|d| d.as_const() == Some(0)) {
        return Ok(smallvec![None]);
    }
    let (low, high) = (a.ints("low"), a.ints("high"));
    let interior: Vec<i64> = (0..rank).map(|i| a.ints("interior").get(i).copied().unwrap_or(0)).collect();
    let mut ct = v.ct;
    if low.iter().chain(high).any(|&p| p < 0) {
        let uncrop = |p: &[i64]| ints(p.iter().map(|&p| (-p).max(0)));
        ct = e.prim(
            OpKind::Pad,
            &[ct],
            &[
                ("low", uncrop(low)),
                ("high", uncrop(high)),
                ("interior", ints(vec![0; rank])),
                ("value", AttrValue::Float(0.0)),
            ],
        )?;
    }
    for axis in 0..rank {
        let (lo, hi, step) = (low[axis].max(0), high[axis].max(0), interior[axis] + 1);
        if lo == 0 && hi == 0 && step == 1 {
            continue;
        }
        let end = if hi > 0 { -hi } else { i64::MAX };
        ct = e.slice(ct, axis, lo, end, step)?;
    }
    Ok(smallvec![Some(ct)])
}

/// `cat`: each operand's piece of the cotangent, sliced out at its offset.
pub(super) fn cat(e: &mut Emitter, v: &Vjp) -> Result<Grads, DecompError> {
    let rank = e.rank(v.out);
    let axis = normalize_axis(v.node.attrs.int("axis"), rank).map_err(|err| attr_error(OpKind::Cat, err))?;
    let mut offset = SizeExpr::constant(0);
    let mut grads = Grads::new();
    for &x in &v.node.args {
        let len = e.shape(x).dims()[axis].clone();
        let end = SizeExpr::from_dim(&len).and_then(|l| offset.add(&l)).map_err(|err| attr_error(OpKind::Cat, err))?;
        grads.push(if len.as_const() == Some(0) {
            None
        } else {
            Some(e.slice_sym(v.ct, axis, offset.clone(), end.clone(), 1)?)
        });
        offset = end;
    }
    Ok(grads)
}
