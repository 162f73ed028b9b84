//! Reductions: `ReduceSum`, `ReduceMean`, `ReduceMax`, `ReduceMin`, `ReduceProd`, `ReduceL1`,
//! `ReduceL2`, `ReduceSumSquare`, `ReduceLogSum`, `ReduceLogSumExp`, `ArgMax` and `ArgMin`.
//!
//! Mapping choices:
//! - `Reduce*` of integers sum in i64 (ladder's `sum`/`prod`) and convert back.
//! - `ReduceMax`/`ReduceMin` are the prims, whose identities (-inf / +inf) are what ONNX gives
//!   for an empty reduction.
//! - `ArgMax`/`ArgMin` with `select_last_index` take the first index of the reversed axis
//!   (the axis must be static).

use super::build::{int, ints, norm_axis, one, Outs};
use super::import::{a_int, a_ints, Importer, NResult};
use super::ops::Row;
use super::proto::NodeProto;
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim};
use crate::ops::OpKind as K;

/// The reductions, by ONNX name.
pub(super) const REDUCE: &[Row] = &[
    ("ArgMax", |imp, node, _| arg_max_min(imp, node, K::Argmax)),
    ("ArgMin", |imp, node, _| arg_max_min(imp, node, K::Argmin)),
    ("ReduceL1", |imp, node, _| reduce(imp, node)),
    ("ReduceL2", |imp, node, _| reduce(imp, node)),
    ("ReduceLogSum", |imp, node, _| reduce(imp, node)),
    ("ReduceLogSumExp", |imp, node, _| reduce(imp, node)),
    ("ReduceMax", |imp, node, _| reduce(imp, node)),
    ("ReduceMean", |imp, node, _| reduce(imp, node)),
    ("ReduceMin", |imp, node, _| reduce(imp, node)),
    ("ReduceProd", |imp, node, _| reduce(imp, node)),
    ("ReduceSum", |imp, node, _| reduce(imp, node)),
    ("ReduceSumSquare", |imp, node, _| reduce(imp, node)),
];

fn reduce(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let op = node.op_type.as_str();
    let x = imp.input(node, 0)?;
    let dt = imp.dtype_of_v(x);
    let keep = a_int(node, "keepdims", 1) != 0;
    let axes = match a_ints(node, "axes") {
        Some(a) => a,
        None => imp.ints_input(node, 1, "axes")?.unwrap_or_default(),
    };
    if axes.is_empty() && a_int(node, "noop_with_empty_axes", 0) != 0 {
        return one(x);
    }
    let attrs = [("axes", ints(&axes)), ("keepdim", AttrValue::Bool(keep))];
    let y = match op {
        "ReduceSum" => imp.emit(K::Sum, &[x], &attrs)?,
        "ReduceMean" => imp.emit(K::Mean, &[x], &attrs)?,
        "ReduceMax" | "ReduceMin" => {
            // The prims have identities (-inf / +inf), as ONNX gives for an empty reduction.
            let r = imp.rank_of(x);
            let mut norm: Vec<usize> = if axes.is_empty() {
                (0..r).collect()
            } else {
                axes.iter().map(|&a| norm_axis(a, r)).collect::<NResult<_>>()?
            };
            norm.sort_unstable();
            norm.dedup();
            let kind = if op == "ReduceMax" { K::ReduceMax } else { K::ReduceMin };
            let axes_i: Vec<i64> = norm.iter().map(|&a| a as i64).collect();
            let y = imp.emit(kind, &[x], &[("axes", ints(&axes_i))])?;
            if keep {
                let mut dims = imp.shape_of(x);
                for &a in &norm {
                    dims[a] = Dim::new(1);
                }
                imp.reshape(y, &dims)?
            } else {
                y
            }
        }
        "ReduceProd" => imp.emit(K::Prod, &[x], &attrs)?,
        "ReduceL1" => {
            let a = imp.un(K::Abs, x)?;
            imp.emit(K::Sum, &[a], &attrs)?
        }
        "ReduceL2" => {
            let sq = imp.bin(K::Mul, x, x)?;
            let s = imp.emit(K::Sum, &[sq], &attrs)?;
            let s = imp.convert_to(s, dt)?;
            if dt.is_float() {
                imp.un(K::Sqrt, s)?
            } else {
                let f = imp.convert_to(s, DType::F64)?;
                let r = imp.un(K::Sqrt, f)?;
                imp.convert_to(r, dt)?
            }
        }
        "ReduceSumSquare" => {
            let sq = imp.bin(K::Mul, x, x)?;
            imp.emit(K::Sum, &[sq], &attrs)?
        }
        "ReduceLogSum" => {
            let s = imp.emit(K::Sum, &[x], &attrs)?;
            imp.un(K::Log, s)?
        }
        _ => imp.emit(K::Logsumexp, &[x], &attrs)?,
    };
    one(imp.convert_to(y, dt)?)
}

/// `ArgMax` (`kind` is `argmax`) or `ArgMin` (`argmin`).
fn arg_max_min(imp: &mut Importer, node: &NodeProto, kind: K) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let r = imp.rank_of(x);
    let axis = norm_axis(a_int(node, "axis", 0), r)?;
    let keep = a_int(node, "keepdims", 1) != 0;
    let attrs = [("axis", int(axis as i64)), ("keepdim", AttrValue::Bool(keep))];
    if a_int(node, "select_last_index", 0) == 0 {
        return one(imp.emit(kind, &[x], &attrs)?);
    }
    let n = imp.shape_of(x)[axis]
        .as_const()
        .ok_or_else(|| NodeError::Unsupported("select_last_index on a symbolic axis".into()))?;
    let rev = imp.emit(K::Rev, &[x], &[("axes", ints(&[axis as i64]))])?;
    let i = imp.emit(kind, &[rev], &attrs)?;
    let last = imp.scalar(DType::I64, n as f64 - 1.0)?;
    one(imp.bin(K::Sub, last, i)?)
}
