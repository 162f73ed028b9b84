//! Decompositions of the shape family's high-level ops, and of `slice_scatter` (the
//! functional twin of slice assignment that `functionalize` produces).
//!
//! All of them move data and compute nothing, so each gives exactly the interpreter's result
//! (NaN payloads, -0 and infinities pass through untouched):
//! - `view`, `flatten`, `squeeze`, `unsqueeze` → `reshape` to the node's type (no node when
//!   the shape does not change). `view` fails at run time when strides forbid it; `reshape`
//!   never does, so such a run succeeds after lowering.
//! - `transpose` → `permute`; `expand` → `broadcast_in_dim` (trailing-aligned);
//!   `contiguous` → its argument (values have no strides at the prims rung).
//! - `select` → `slice` of one element and a `reshape` dropping the axis. On a symbolic dim
//!   a non-negative index cannot be a `slice` (its size would not be a polynomial of the
//!   dim), so there it is a `gather` of a constant index, which fails at run time exactly
//!   when `select` does (index out of range); a negative index stays a `slice`, which fails
//!   with a typed error when the dim is too small, as `select` does.
//! - `stack` → a `reshape` of each argument adding the new axis, then `cat` (promoting).
//! - `split`/`chunk` → `slice` of the piece `crate::ops::shape::piece` names.
//! - `slice_scatter(x, src)` → `where(mask, placed, x)`: `src` is converted to `x`'s dtype as
//!   the write does (float → i32 goes through i64, since the write truncates to i64 and then
//!   wraps), broadcast to the slice's shape and placed into `x`'s shape with `pad` (low = the
//!   first index, interior = step - 1, high = the rest); the bool mask is a 1-D `full(true)`
//!   placed the same way and broadcast along the axis. A slice covering the whole axis is
//!   just the converted, broadcast `src`; an empty one is `x` itself.
//!   On a symbolic dim (where `pad`'s static low/high cannot reach it) the symbolic part of
//!   the margin is a `cat` with a `full` of the symbolic size. Supported there: step 1 with
//!   bounds whose slice length is a polynomial of the dim (start of either sign with end
//!   negative or omitted, or both start and end non-negative); like the `slice` prim, the
//!   lowering assumes the dim is large enough for the bounds, and a run where it is not fails
//!   with a typed shape error instead of clamping. Otherwise (`step > 1`, or a negative start
//!   with a non-negative end, or a `src` whose size on the axis cannot be shown to be the
//!   slice length or 1) it is `DecompError::Unsupported`.

use super::{dims, ints, DecompError, DecompFn, Emitter};
use crate::ir::{AttrValue, DType, Dim, Node, Shape, Value};
use crate::ops::util::{normalize_axis, normalize_insert_axis};
use crate::ops::{OpError, OpKind};

/// The decomposition of `op`, if this family has one.
pub fn rule(op: OpKind) -> Option<DecompFn> {
    Some(match op {
        OpKind::View => view,
        OpKind::Flatten => flatten,
        OpKind::Transpose => transpose,
        OpKind::Expand => expand,
        OpKind::Squeeze => squeeze,
        OpKind::Unsqueeze => unsqueeze,
        OpKind::Select => select,
        OpKind::Contiguous => contiguous,
        OpKind::Stack => stack,
        OpKind::Split | OpKind::Chunk => split_or_chunk,
        OpKind::SliceScatter => slice_scatter,
        _ => return None,
    })
}

/// An error from an op helper (already checked by infer, so not expected) as a DecompError.
fn op_err(node: &Node) -> impl Fn(OpError) -> DecompError + '_ {
    move |e| DecompError::Unsupported { op: node.op.name(), reason: e.to_string() }
}

fn unsupported(node: &Node, reason: String) -> DecompError {
    DecompError::Unsupported { op: node.op.name(), reason }
}

fn view(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    e.reshape(args[0], &node.ty.shape)
}

fn flatten(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    e.reshape(args[0], &node.ty.shape)
}

fn squeeze(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    e.reshape(args[0], &node.ty.shape)
}

fn unsqueeze(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    e.reshape(args[0], &node.ty.shape)
}

fn transpose(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let rank = e.rank(args[0]);
    let a = normalize_axis(node.attrs.int("axis0"), rank).map_err(op_err(node))?;
    let b = normalize_axis(node.attrs.int("axis1"), rank).map_err(op_err(node))?;
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(a, b);
    e.permute(args[0], &perm)
}

fn expand(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    e.broadcast_to(args[0], &node.ty.shape)
}

fn contiguous(_: &mut Emitter, _: &Node, args: &[Value]) -> Result<Value, DecompError> {
    Ok(args[0])
}

fn select(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = args[0];
    let shape = e.shape(x);
    let axis = normalize_axis(node.attrs.int("axis"), shape.rank()).map_err(op_err(node))?;
    let index = node.attrs.int("index");
    let one = match shape.dims()[axis].as_const() {
        Some(n) => {
            let i = if index < 0 { i128::from(index) + i128::from(n) } else { i128::from(index) };
            if !(0..i128::from(n)).contains(&i) {
                return Err(unsupported(node, format!("index {index} is out of range for a dim of size {n}")));
            }
            let i = i as i64;
            e.slice(x, axis, i, i + 1, 1)?
        }
        None if index < 0 => {
            let end = if index == -1 { i64::MAX } else { index + 1 };
            e.slice(x, axis, index, end, 1)?
        }
        None => {
            let mut at = shape.clone();
            at.0[axis] = Dim::new(1);
            let idx = e.full(index as f64, DType::I64, &at)?;
            e.prim(OpKind::Gather, &[x, idx], &[("axis", AttrValue::Int(axis as i64))])?
        }
    };
    e.reshape(one, &node.ty.shape)
}

fn stack(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let rank = e.rank(args[0]);
    let axis = normalize_insert_axis(node.attrs.int("axis"), rank).map_err(op_err(node))?;
    let mut parts = Vec::with_capacity(args.len());
    for &a in args {
        let mut s = e.shape(a);
        s.0.insert(axis, Dim::new(1));
        parts.push(e.reshape(a, &s)?);
    }
    e.cat(&parts, axis)
}

fn split_or_chunk(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let x = args[0];
    let shape = e.shape(x);
    let axis = normalize_axis(node.attrs.int("axis"), shape.rank()).map_err(op_err(node))?;
    let dim = &shape.dims()[axis];
    let (start, size) = crate::ops::shape::piece(node.op, &node.attrs, dim, axis).map_err(op_err(node))?;
    if start == 0 && dim.as_const() == Some(size) {
        return Ok(x);
    }
    let (start, end) = (i64::try_from(start), i64::try_from(start + size));
    let (Ok(start), Ok(end)) = (start, end) else {
        return Err(unsupported(node, "piece bounds overflow i64".into()));
    };
    e.slice(x, axis, start, end, 1)
}

/// Where a slice sits along its axis: `first` elements before it, its `len` elements (every
/// `step`-th position), and `rest` elements after its last one. `first + (len - 1) * step + 1
/// + rest` is the dim.
struct Placement {
    first: Dim,
    len: Dim,
    rest: Dim,
}

/// The placement of `start:end:step` on a dim `n` (`crate::ops::shape::slice_range`), or
/// `None` when the slice is statically empty.
fn placement(
    node: &Node,
    n: &Dim,
    start: &crate::ir::SizeExpr,
    end: &crate::ir::SizeExpr,
    step: i64,
) -> Result<Option<Placement>, DecompError> {
    let r = crate::ops::shape::slice_range(n, start, end, step).map_err(op_err(node))?;
    if r.len.as_const() == Some(0) {
        return Ok(None);
    }
    // rest = n - (first + (len - 1) * step) - 1
    let dim_err = |e: crate::ir::DimError| unsupported(node, format!("slice {start}:{end}:{step} of {n}: {e}"));
    let last = r.len.sub(&Dim::new(1)).and_then(|l| l.mul(&Dim::new(step as u64))).and_then(|l| l.add(&r.first));
    let rest = last.and_then(|l| n.sub(&l)).and_then(|d| d.sub(&Dim::new(1))).map_err(dim_err)?;
    Ok(Some(Placement { first: r.first, len: r.len, rest }))
}

/// `block` (of length `len` along `axis`) with `interior` fill elements between neighbours,
/// `first` fill elements before it and `rest` after: static margins by `pad`, symbolic ones
/// by a `cat` with a `full` of that size. The fill is zero (false for bool).
fn place(
    e: &mut Emitter,
    node: &Node,
    block: Value,
    axis: usize,
    p: &Placement,
    interior: i64,
) -> Result<Value, DecompError> {
    let rank = e.rank(block);
    let margin = |d: &Dim| match d.as_const() {
        None => Ok(0),
        Some(v) => i64::try_from(v).map_err(|_| unsupported(node, format!("padding of {v} overflows i64"))),
    };
    let (lo, hi) = (margin(&p.first)?, margin(&p.rest)?);
    let mut v = block;
    if lo != 0 || hi != 0 || interior != 0 {
        let mut low = vec![0i64; rank];
        let mut high = vec![0i64; rank];
        let mut inner = vec![0i64; rank];
        low[axis] = lo;
        high[axis] = hi;
        inner[axis] = interior;
        v = e.prim(
            OpKind::Pad,
            &[v],
            &[("low", AttrValue::Ints(low)), ("high", AttrValue::Ints(high)), ("interior", AttrValue::Ints(inner))],
        )?;
    }
    for (margin, before) in [(&p.first, true), (&p.rest, false)] {
        if margin.is_static() {
            continue;
        }
        let mut s = e.shape(v);
        s.0[axis] = margin.clone();
        let dtype = e.dtype(v);
        let fill = e.full(0.0, dtype, &s)?;
        v = if before { e.cat(&[fill, v], axis)? } else { e.cat(&[v, fill], axis)? };
    }
    Ok(v)
}

/// `src` converted to `dtype` the way an in-place write converts it: exactly
/// `convert_element_type` (floats saturate at the destination's range).
fn convert_as_written(e: &mut Emitter, src: Value, dtype: DType) -> Result<Value, DecompError> {
    e.convert(src, dtype)
}

fn slice_scatter(e: &mut Emitter, node: &Node, args: &[Value]) -> Result<Value, DecompError> {
    let (x, src) = (args[0], args[1]);
    let shape = e.shape(x);
    let rank = shape.rank();
    let axis = normalize_axis(node.attrs.int("axis"), rank).map_err(op_err(node))?;
    let (start, end, step) = (node.attrs.size("start"), node.attrs.size("end"), node.attrs.int("step"));
    if step < 1 {
        return Err(unsupported(node, format!("step must be at least 1, got {step}")));
    }
    let n = shape.dims()[axis].clone();
    let Some(p) = placement(node, &n, &start, &end, step)? else {
        return Ok(x);
    };

    // `src` as the values written: x's dtype, the slice's shape.
    let mut slice_shape = shape.clone();
    slice_shape.0[axis] = p.len.clone();
    let src_shape = e.shape(src);
    let lead = rank.checked_sub(src_shape.rank()).ok_or_else(|| {
        unsupported(node, format!("src of shape {src_shape} has a higher rank than the slice {slice_shape}"))
    })?;
    for (i, d) in src_shape.dims().iter().enumerate() {
        let t = &slice_shape.dims()[lead + i];
        if d != t && d.as_const() != Some(1) {
            return Err(unsupported(
                node,
                format!("src of shape {src_shape} cannot be shown to fit the slice of shape {slice_shape}"),
            ));
        }
    }
    let dtype = e.dtype(x);
    let values = convert_as_written(e, src, dtype)?;
    let values = e.broadcast_to(values, &slice_shape)?;
    if p.len == n {
        // The slice is the whole axis.
        return Ok(values);
    }

    let interior = step - 1;
    let placed = place(e, node, values, axis, &p, interior)?;
    let ones = e.full(1.0, DType::Bool, &Shape::from_iter([p.len.clone()]))?;
    let line = place(e, node, ones, 0, &p, interior)?;
    let mask = if rank == 1 {
        line
    } else {
        e.prim(OpKind::BroadcastInDim, &[line], &[("shape", dims(&shape)), ("broadcast_dims", ints(&[axis]))])?
    };
    e.select(mask, placed, x)
}
