//! Small graph-building helpers the op converters share: result slots, typed errors, attribute
//! values, and the common emits (reshape, convert, permute, binary ops) that skip themselves
//! when they would change nothing.

use super::import::{Importer, NResult, Slot};
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, DimError, Value};
use crate::ops::OpKind;

/// A converter's results, one slot per ONNX output.
pub(super) type Outs = Vec<Option<Slot>>;

/// One result.
pub(super) fn one(v: Value) -> NResult<Outs> {
    Ok(vec![Some(Slot::Val(v))])
}

pub(super) fn invalid<T>(msg: impl Into<String>) -> NResult<T> {
    Err(NodeError::Invalid(msg.into()))
}

pub(super) fn unsupported<T>(msg: impl Into<String>) -> NResult<T> {
    Err(NodeError::Unsupported(msg.into()))
}

pub(super) fn int(v: i64) -> AttrValue {
    AttrValue::Int(v)
}

pub(super) fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

pub(super) fn dims_attr(d: &[Dim]) -> AttrValue {
    AttrValue::Dims(d.iter().cloned().map(Some).collect())
}

/// `v`'s dims.
pub(super) fn shape(imp: &Importer, v: Value) -> Vec<Dim> {
    imp.ty(v).shape.dims().to_vec()
}

pub(super) fn dtype(imp: &Importer, v: Value) -> DType {
    imp.ty(v).dtype
}

/// `axis` (negative from the end) as an index below `rank`, or a typed error.
pub(super) fn norm_axis(axis: i64, rank: usize) -> NResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return invalid(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

/// `v` reshaped to `dims` (`v` itself when it has them).
pub(super) fn reshape(imp: &mut Importer, v: Value, dims: &[Dim]) -> NResult<Value> {
    if shape(imp, v) == dims {
        return Ok(v);
    }
    imp.emit(OpKind::Reshape, &[v], &[("shape", dims_attr(dims))])
}

/// `v` converted to `to` (`v` itself when it is already).
pub(super) fn convert(imp: &mut Importer, v: Value, to: DType) -> NResult<Value> {
    if dtype(imp, v) == to {
        return Ok(v);
    }
    imp.emit(OpKind::ConvertElementType, &[v], &[("dtype", AttrValue::DType(to))])
}

pub(super) fn permute(imp: &mut Importer, v: Value, perm: &[i64]) -> NResult<Value> {
    imp.emit(OpKind::Permute, &[v], &[("perm", ints(perm))])
}

pub(super) fn bin(imp: &mut Importer, op: OpKind, a: Value, b: Value) -> NResult<Value> {
    imp.emit(op, &[a, b], &[])
}

/// `v op c` with `c` a scalar of `v`'s dtype.
pub(super) fn bin_scalar(imp: &mut Importer, op: OpKind, v: Value, c: f64) -> NResult<Value> {
    let s = imp.scalar(dtype(imp, v), c)?;
    bin(imp, op, v, s)
}

/// A size computation that overflowed or cannot be expressed, as an unsupported node.
pub(super) fn dim_err(e: DimError) -> NodeError {
    NodeError::Unsupported(format!("size arithmetic: {e}"))
}

/// The same emits as methods, for the converters that read better that way.
impl Importer<'_> {
    pub(super) fn shape_of(&self, v: Value) -> Vec<Dim> {
        self.ty(v).shape.dims().to_vec()
    }

    pub(super) fn rank_of(&self, v: Value) -> usize {
        self.ty(v).rank()
    }

    pub(super) fn dtype_of_v(&self, v: Value) -> DType {
        self.ty(v).dtype
    }

    pub(super) fn reshape(&mut self, v: Value, dims: &[Dim]) -> NResult<Value> {
        if self.shape_of(v) == dims {
            return Ok(v);
        }
        self.emit(OpKind::Reshape, &[v], &[("shape", dims_attr(dims))])
    }

    pub(super) fn convert_to(&mut self, v: Value, dtype: DType) -> NResult<Value> {
        if self.dtype_of_v(v) == dtype {
            return Ok(v);
        }
        self.emit(OpKind::ConvertElementType, &[v], &[("dtype", AttrValue::DType(dtype))])
    }

    pub(super) fn un(&mut self, op: OpKind, v: Value) -> NResult<Value> {
        self.emit(op, &[v], &[])
    }

    pub(super) fn bin(&mut self, op: OpKind, a: Value, b: Value) -> NResult<Value> {
        self.emit(op, &[a, b], &[])
    }

    /// `v op c` with `c` a scalar of `v`'s dtype.
    pub(super) fn bin_scalar(&mut self, op: OpKind, v: Value, c: f64) -> NResult<Value> {
        let s = self.scalar(self.dtype_of_v(v), c)?;
        self.bin(op, v, s)
    }

    /// Inserts size-1 axes at `axes` (positions in the result).
    pub(super) fn unsqueeze(&mut self, v: Value, axes: &[i64]) -> NResult<Value> {
        let out_rank = self.rank_of(v) + axes.len();
        let mut norm: Vec<usize> = axes.iter().map(|&a| norm_axis(a, out_rank)).collect::<NResult<_>>()?;
        norm.sort_unstable();
        if norm.windows(2).any(|w| w[0] == w[1]) {
            return invalid(format!("repeated axis in {axes:?}"));
        }
        let mut dims = self.shape_of(v);
        for &a in &norm {
            dims.insert(a, Dim::new(1));
        }
        self.reshape(v, &dims)
    }

    pub(super) fn squeeze(&mut self, v: Value, axes: &[i64]) -> NResult<Value> {
        self.emit(OpKind::Squeeze, &[v], &[("axes", ints(axes))])
    }

    pub(super) fn numel_of(&self, dims: &[Dim]) -> NResult<Dim> {
        dims.iter().try_fold(Dim::new(1), |a, d| a.mul(d)).map_err(dim_err)
    }
}
