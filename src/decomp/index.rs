//! Decompositions of the index family's high-level ops.
//!
//! All of them select or move elements and compute nothing on them, so each gives exactly the
//! interpreter's result (NaN payloads, -0 and infinities pass through untouched):
//! - `embedding(indices, weight)` → `gather` on the weight: the indices (as i64) reshaped to
//!   `[n]`, broadcast to `[n, D]`, gathered along axis 0, reshaped to `indices.shape + [D]`.
//!   `embedding` rejects negative indices while `gather` counts them from the end, so a
//!   negative index is first replaced (`where(index < 0, i64::MIN, index)`) by one that no
//!   tensor can hold: the gather then fails with `IndexOutOfRange` whenever `embedding`
//!   would (its message names i64::MIN rather than the original index). One difference is
//!   left: with `D = 0` the gather reads nothing, so an out-of-range index that `embedding`
//!   rejects goes unnoticed and the run succeeds (with an empty result).
//! - `masked_fill(x, mask) {value}` → `where(mask, full(value), x)`. The fill converts as the
//!   interpreter does: floats round to `x`'s dtype, bool is `value != 0`, and integers
//!   truncate toward zero and saturate at `x`'s dtype's range (NaN → 0): exactly `full`'s
//!   conversion, so the `full` is made directly in `x`'s dtype.
//! - `tril`/`triu {diagonal}` → `where(cmp(col - row, diagonal), x, 0)` with `row` and `col`
//!   `iota`s over the last two dims (i64), broadcast over the leading ones.

use super::{dims, ints, DecompError, DecompFn, Emitter};
use crate::ir::{AttrValue, DType, Node, Shape, Value};
use crate::ops::OpKind;

/// The decomposition of `op`, if this family has one.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    Some(match op {
        OpKind::Embedding => embedding,
        OpKind::MaskedFill => masked_fill,
        OpKind::Tril | OpKind::Triu => tri,
        _ => return None,
    })
}

fn embedding(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let (indices, weight) = (args[0], args[1]);
    let ishape = e.shape(indices);
    let wshape = e.shape(weight);
    let d = wshape.dims()[1].clone();
    let n = ishape
        .numel()
        .map_err(|err| DecompError::Unsupported { op: node.op.name(), reason: format!("indices {ishape}: {err}") })?;
    let idx = e.convert(indices, DType::I64)?;
    let flat = e.reshape(idx, &Shape::from_iter([n.clone()]))?;
    // Negative indices are out of range for embedding: make them out of range for gather too.
    let negative = e.binary_scalar(OpKind::Lt, flat, 0.0)?;
    let invalid = e.full_like(i64::MIN as f64, flat)?;
    let checked = e.select(negative, invalid, flat)?;
    let wide = e.prim(
        OpKind::BroadcastInDim,
        &[checked],
        &[("shape", dims(&Shape::from_iter([n, d.clone()]))), ("broadcast_dims", ints(&[0]))],
    )?;
    let rows = e.prim(OpKind::Gather, &[weight, wide], &[("axis", AttrValue::Int(0))])?;
    let mut out = ishape;
    out.0.push(d);
    e.reshape(rows, &out)
}

fn masked_fill(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let (x, mask) = (args[0], args[1]);
    let dtype = e.dtype(x);
    let value = node.attrs.float("value");
    let fill = e.full(value, dtype, &Shape::scalar())?;
    e.select(mask, fill, x)
}

fn tri(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = args[0];
    let shape = e.shape(x);
    let rank = shape.rank();
    if rank < 2 {
        return Err(DecompError::Unsupported { op: node.op.name(), reason: format!("needs rank >= 2, got {shape}") });
    }
    let matrix = Shape::from_iter(shape.dims()[rank - 2..].iter().cloned());
    let row = e.iota(&matrix, 0, DType::I64)?;
    let col = e.iota(&matrix, 1, DType::I64)?;
    let offset = e.sub(col, row)?;
    let cmp = if node.op == OpKind::Tril { OpKind::Le } else { OpKind::Ge };
    let keep = e.binary_scalar(cmp, offset, node.attrs.int("diagonal") as f64)?;
    let zero = e.full(0.0, e.dtype(x), &Shape::scalar())?;
    e.select(keep, x, zero)
}
