//! Helpers shared by the op families: axis normalisation, broadcasting, dtype checks, and
//! the source ops (`input`, `const`), whose values the interpreter takes from outside.

use smallvec::SmallVec;

use super::{Arity, OpError, OpKind, OpSpec, Rung};
use crate::interp::{EvalCtx, EvalError, View};
use crate::ir::{AttrDefault, AttrKind, AttrSpec, Attrs, DType, Dim, Shape, TensorType};

pub static SOURCES: &[OpSpec] = &[
    OpSpec {
        kind: OpKind::Input,
        name: "input",
        rung: Rung::Source,
        arity: Arity::Exactly(0),
        attrs: &[AttrSpec::required("index", AttrKind::Int)],
        infer: infer_source,
        eval: eval_source,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc: "a graph input (its type is declared in the graph signature)",
    },
    OpSpec {
        kind: OpKind::Const,
        name: "const",
        rung: Rung::Source,
        arity: Arity::Exactly(0),
        attrs: &[AttrSpec::required("blob", AttrKind::Str)],
        infer: infer_source,
        eval: eval_source,
        explicit: None,
        mutates: false,
        aliases: false,
        native: super::Native::Prims,
        doc: "a constant read from the graph's blob store",
    },
];

fn infer_source(_: OpKind, _: &Attrs, _: &[&TensorType]) -> Result<TensorType, OpError> {
    Err(OpError::Shape("input and const nodes take their type from the graph, not from arguments".into()))
}

fn eval_source(_: OpKind, _: &mut EvalCtx, _: &Attrs, _: &[View], _: &TensorType) -> Result<View, EvalError> {
    Err(EvalError::Invalid("input and const nodes are evaluated by the interpreter loop".into()))
}

/// An axis attribute in `-rank..rank` as an index in `0..rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(OpError::Axis { axis, rank });
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Like `normalize_axis` but for a position to insert at (`-(rank+1)..=rank`).
pub fn normalize_insert_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    normalize_axis(axis, rank + 1)
}

/// A list of distinct axes, normalised and sorted. An empty list means every axis when
/// `empty_means_all` is set.
pub fn normalize_axes(axes: &[i64], rank: usize, empty_means_all: bool) -> Result<Vec<usize>, OpError> {
    if axes.is_empty() && empty_means_all {
        return Ok((0..rank).collect());
    }
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(OpError::AttrValue { name: "axes", problem: format!("axis {a} is listed twice") });
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// NumPy broadcasting of two shapes: align on the right; a dim of 1 stretches. Two symbolic
/// dims broadcast only when equal (a symbol is never assumed to be 1).
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Result<Shape, OpError> {
    let rank = a.rank().max(b.rank());
    let one = Dim::new(1);
    let mut out: SmallVec<[Dim; 4]> = SmallVec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.rank() >= rank { &a.0[i + a.rank() - rank] } else { &one };
        let db = if i + b.rank() >= rank { &b.0[i + b.rank() - rank] } else { &one };
        let d = if da == db || *db == one {
            da.clone()
        } else if *da == one {
            db.clone()
        } else {
            return Err(OpError::Broadcast { a: Box::new(a.clone()), b: Box::new(b.clone()) });
        };
        out.push(d);
    }
    Ok(Shape(out))
}

/// Broadcasts all argument shapes together.
pub fn broadcast_all(args: &[&TensorType]) -> Result<Shape, OpError> {
    let mut shape = Shape::scalar();
    for a in args {
        shape = broadcast_shapes(&shape, &a.shape)?;
    }
    Ok(shape)
}

/// Concrete broadcasting of runtime shapes (the interpreter's version of `broadcast_shapes`).
pub fn broadcast_concrete(a: &[usize], b: &[usize]) -> Result<Vec<usize>, EvalError> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out.push(match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(EvalError::Invalid(format!("shapes {a:?} and {b:?} do not broadcast"))),
        });
    }
    Ok(out)
}

/// The element strides of a dense row-major tensor of `shape` broadcast to `target` (NumPy
/// rules: `shape` aligned to the right, each of its dims the target's or 1), 0 along the dims
/// it broadcasts and the leading ones it lacks; `None` where it does not broadcast or its
/// element count overflows. What the attention kernels read a mask through.
pub fn broadcast_strides(shape: &[usize], target: &[usize]) -> Option<SmallVec<[usize; 6]>> {
    let off = target.len().checked_sub(shape.len())?;
    let mut strides = SmallVec::from_elem(0, target.len());
    let mut numel = 1usize;
    for (i, &n) in shape.iter().enumerate().rev() {
        if n != target[off + i] && n != 1 {
            return None;
        }
        strides[off + i] = if n == 1 { 0 } else { numel };
        numel = numel.checked_mul(n)?;
    }
    Some(strides)
}

/// A stride-0 view of `v` broadcast to `shape` (NumPy rules; `v`'s rank must not exceed it).
pub fn broadcast_view(v: &View, shape: &[usize]) -> Result<View, EvalError> {
    let rank = shape.len();
    if v.rank() > rank {
        return Err(EvalError::Invalid(format!("cannot broadcast {:?} to {shape:?}", v.shape())));
    }
    let lead = rank - v.rank();
    let mut strides = vec![0isize; rank];
    for i in 0..v.rank() {
        let (d, t) = (v.shape()[i], shape[lead + i]);
        if d == t {
            strides[lead + i] = v.strides()[i];
        } else if d == 1 {
            strides[lead + i] = 0;
        } else {
            return Err(EvalError::Invalid(format!("cannot broadcast {:?} to {shape:?}", v.shape())));
        }
    }
    Ok(v.restride(shape.to_vec(), strides, v.offset()))
}

/// Fails unless argument `arg` has a float dtype.
pub fn expect_float(arg: usize, ty: &TensorType) -> Result<(), OpError> {
    if ty.dtype.is_float() {
        Ok(())
    } else {
        Err(OpError::DType { arg, got: ty.dtype, expected: "a float type".into() })
    }
}

/// Fails unless argument `arg` is bool.
pub fn expect_bool(arg: usize, ty: &TensorType) -> Result<(), OpError> {
    if ty.dtype.is_bool() {
        Ok(())
    } else {
        Err(OpError::DType { arg, got: ty.dtype, expected: "bool".into() })
    }
}

/// Fails unless argument `arg` is an integer type.
pub fn expect_int(arg: usize, ty: &TensorType) -> Result<(), OpError> {
    if ty.dtype.is_int() {
        Ok(())
    } else {
        Err(OpError::DType { arg, got: ty.dtype, expected: "an integer type".into() })
    }
}

/// Fails unless argument `arg` is an index type: i32 or i64 (the narrow and unsigned
/// integers are data, not indices).
pub fn expect_index(arg: usize, ty: &TensorType) -> Result<(), OpError> {
    if matches!(ty.dtype, DType::I32 | DType::I64) {
        Ok(())
    } else {
        Err(OpError::DType { arg, got: ty.dtype, expected: "i32 or i64 indices".into() })
    }
}

/// Fails unless argument `arg` has exactly rank `rank`.
pub fn expect_rank(arg: usize, ty: &TensorType, rank: usize) -> Result<(), OpError> {
    if ty.rank() == rank {
        Ok(())
    } else {
        Err(OpError::Rank { arg, expected: rank.to_string(), got: ty.rank() })
    }
}

/// Fails unless argument `arg` has rank at least `rank`.
pub fn expect_min_rank(arg: usize, ty: &TensorType, rank: usize) -> Result<(), OpError> {
    if ty.rank() >= rank {
        Ok(())
    } else {
        Err(OpError::Rank { arg, expected: format!("at least {rank}"), got: ty.rank() })
    }
}

/// The promoted dtype of all arguments (NumPy/PyTorch rules, see `DType::promote`).
pub fn promote_all(args: &[&TensorType]) -> DType {
    args.iter().map(|a| a.dtype).reduce(DType::promote).unwrap_or(DType::F32)
}

/// The prims-rung check shared by elementwise prims: every argument has the result's shape,
/// and every argument has the same dtype.
pub fn explicit_same_shape_and_dtype(_: &Attrs, args: &[&TensorType]) -> Result<(), OpError> {
    if let Some(first) = args.first() {
        for (i, a) in args.iter().enumerate().skip(1) {
            if a.shape != first.shape {
                return Err(OpError::NotExplicit(format!(
                    "argument {i} has shape {}, argument 0 has {}",
                    a.shape, first.shape
                )));
            }
            if a.dtype != first.dtype {
                return Err(OpError::NotExplicit(format!(
                    "argument {i} is {}, argument 0 is {}",
                    a.dtype, first.dtype
                )));
            }
        }
    }
    Ok(())
}

/// Converts a static-or-symbolic dim list attribute into a shape, rejecting `-1`.
pub fn dims_attr_to_shape(name: &'static str, dims: &[Option<Dim>]) -> Result<Shape, OpError> {
    dims.iter()
        .map(|d| d.clone().ok_or_else(|| OpError::AttrValue { name, problem: "-1 is not allowed here".into() }))
        .collect()
}

/// A spec for an optional attribute with an int default.
pub const fn int_attr(name: &'static str, default: i64) -> AttrSpec {
    AttrSpec::optional(name, AttrKind::Int, AttrDefault::Int(default))
}

/// A spec for an optional size attribute (a slice bound: an int or a size expression).
pub const fn size_attr(name: &'static str, default: i64) -> AttrSpec {
    AttrSpec::optional(name, AttrKind::Size, AttrDefault::Int(default))
}

/// A spec for an optional bool attribute.
pub const fn bool_attr(name: &'static str, default: bool) -> AttrSpec {
    AttrSpec::optional(name, AttrKind::Bool, AttrDefault::Bool(default))
}

/// A spec for an optional float attribute.
pub const fn float_attr(name: &'static str, default: f64) -> AttrSpec {
    AttrSpec::optional(name, AttrKind::Float, AttrDefault::Float(default))
}

/// Row-major multi-index of flat position `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> SmallVec<[usize; 6]> {
    let mut idx: SmallVec<[usize; 6]> = SmallVec::from_elem(0, shape.len());
    for i in (0..shape.len()).rev() {
        if shape[i] > 0 {
            idx[i] = flat % shape[i];
            flat /= shape[i];
        }
    }
    idx
}

/// Flat row-major position of `idx` in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// The f64 sum of `values`, starting from +0 like `matmul`'s and the reduction prims'
/// accumulators (`Iterator::sum` starts from -0, which would make an empty sum -0).
pub fn sum_f64(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(0.0, |acc, x| acc + x)
}

#[cfg(test)]
mod tests {
    use super::broadcast_strides;

    #[test]
    fn broadcast_strides_follow_numpy_rules() {
        let s = |shape: &[usize], target: &[usize]| broadcast_strides(shape, target).map(|v| v.to_vec());
        assert_eq!(s(&[2, 1, 4], &[3, 2, 5, 4]), Some(vec![0, 4, 0, 1]));
        assert_eq!(s(&[], &[3, 2]), Some(vec![0, 0]));
        assert_eq!(s(&[1, 1], &[1, 1]), Some(vec![0, 0]));
        assert_eq!(s(&[0, 3], &[0, 3]), Some(vec![3, 1]));
        // Not broadcastable: a dim that is neither the target's nor 1, more dims than the
        // target, an element count past usize.
        assert_eq!(s(&[2, 3], &[2, 4]), None);
        assert_eq!(s(&[1, 2, 3], &[2, 3]), None);
        assert_eq!(s(&[usize::MAX, 2], &[usize::MAX, 2]), None);
    }
}
