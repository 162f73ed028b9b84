//! Constants, shapes and data movement: `Constant`, `Shape`, `Size`, `ConstantOfShape`,
//! `Range`, `EyeLike`, `Reshape`, `Flatten`, `Transpose`, `Squeeze`/`Unsqueeze`, `Concat`,
//! `Split`, `Slice`, `Gather`/`GatherElements`, `Expand`, `Tile`, `Pad`, `Trilu`,
//! `DepthToSpace`/`SpaceToDepth` and `OneHot`.
//!
//! Mapping choices:
//! - `Gather` (NumPy take) is `reshape` + `expand` of the indices to the data's rank, then
//!   ladder's `gather` (torch.gather), then `reshape`; a constant scalar index is a `select`.
//!   Constant indices are range-checked at import. `GatherElements` is `gather` itself.
//! - `Reshape`/`Expand`/`ConstantOfShape`/`Range`/`Tile`/`Slice`/`Split`/`Squeeze`/
//!   `Unsqueeze`/`Pad` need their shape-like inputs known at import (constant, or computed
//!   from shapes, see `shapes.rs`); both the attribute and the input forms are read.
//! - `Slice` with a negative step is `rev` + `slice`; on a symbolic dim only step 1 works.
//! - `Tile` is `reshape` + `expand` + `reshape`; `DepthToSpace`/`SpaceToDepth` are `reshape`
//!   + `permute` + `reshape`; `EyeLike` and `OneHot` compare `iota`s.

use super::build::{dim_err, dims_attr, int, ints, invalid, norm_axis, one, unsupported, Outs};
use super::import::{a_float, a_int, a_ints, a_str, attr, Importer, NResult, Slot, SymInt, SymList};
use super::ops::Row;
use super::proto::NodeProto;
use super::tensor::{dtype_name, dtype_of};
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Shape, SizeExpr, Value};
use crate::ops::OpKind as K;
use crate::tensor::Tensor;

/// The shape and data-movement ops, by ONNX name.
pub(super) const SHAPE: &[Row] = &[
    ("Concat", |imp, node, _| concat(imp, node)),
    ("Constant", |imp, node, _| constant(imp, node)),
    ("ConstantOfShape", |imp, node, _| constant_of_shape(imp, node)),
    ("DepthToSpace", |imp, node, _| depth_space(imp, node)),
    ("Expand", |imp, node, _| expand(imp, node)),
    ("EyeLike", |imp, node, _| eye_like(imp, node)),
    ("Flatten", |imp, node, _| flatten(imp, node)),
    ("Gather", |imp, node, _| gather(imp, node)),
    ("GatherElements", |imp, node, _| gather_elements(imp, node)),
    ("OneHot", |imp, node, _| one_hot(imp, node)),
    ("Pad", |imp, node, _| pad(imp, node)),
    ("Range", |imp, node, _| super::shapes::range(imp, node)),
    ("Reshape", |imp, node, _| reshape(imp, node)),
    ("Shape", |imp, node, _| shape(imp, node)),
    ("Size", |imp, node, _| size(imp, node)),
    ("Slice", |imp, node, _| slice(imp, node)),
    ("SpaceToDepth", |imp, node, _| depth_space(imp, node)),
    ("Split", |imp, node, _| split(imp, node)),
    ("Squeeze", |imp, node, _| squeeze(imp, node)),
    ("Tile", |imp, node, _| tile(imp, node)),
    ("Transpose", |imp, node, _| transpose(imp, node)),
    ("Trilu", |imp, node, _| trilu(imp, node)),
    ("Unsqueeze", |imp, node, _| unsqueeze(imp, node)),
];

// --- Constants and shapes ---

fn constant(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let name = node.output.first().cloned().unwrap_or_default();
    let t = if let Some(a) = attr(node, "value") {
        let t = a.t.as_ref().ok_or_else(|| NodeError::Invalid("`value` has no tensor".into()))?;
        imp.tensor(t)?
    } else if let Some(a) = attr(node, "value_float") {
        Tensor::scalar_f32(a.f)
    } else if let Some(a) = attr(node, "value_floats") {
        Tensor::from_f32(&[a.floats.len()], a.floats.clone()).map_err(|e| NodeError::Invalid(e.to_string()))?
    } else if let Some(a) = attr(node, "value_int") {
        Tensor::from_i64(&[], vec![a.i]).map_err(|e| NodeError::Invalid(e.to_string()))?
    } else if let Some(a) = attr(node, "value_ints") {
        Tensor::from_i64(&[a.ints.len()], a.ints.clone()).map_err(|e| NodeError::Invalid(e.to_string()))?
    } else {
        return unsupported("a Constant that is not a numeric tensor (string or sparse)");
    };
    one(imp.constant(&name, t))
}

fn shape(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dims = imp.shape_of(x);
    let r = dims.len() as i64;
    let clamp = |a: i64| (if a < 0 { a + r } else { a }).clamp(0, r) as usize;
    let start = clamp(a_int(node, "start", 0));
    let end = clamp(a_int(node, "end", r));
    let elems: Vec<SymInt> = if start < end { dims[start..end].iter().map(SymInt::from_dim).collect() } else { vec![] };
    super::shapes::shape_list(imp, SymList { elems, scalar: false, dtype: DType::I64 }, node)
}

fn size(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let n = imp.numel_of(&imp.shape_of(x))?;
    super::shapes::shape_list(imp, SymList { elems: vec![SymInt::from_dim(&n)], scalar: true, dtype: DType::I64 }, node)
}

fn constant_of_shape(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let shape = imp.sym_input(node, 0)?.ok_or_else(|| NodeError::NeedsValue { input: 0, what: "the shape".into() })?;
    let dims = shape
        .elems
        .iter()
        .map(|e| e.to_dim().ok_or_else(|| NodeError::Invalid(format!("negative dim {e:?}"))))
        .collect::<NResult<Vec<_>>>()?;
    let (value, dtype) = match attr(node, "value").and_then(|a| a.t.as_ref()) {
        Some(t) => {
            let t = imp.tensor(t)?;
            if t.numel() != 1 {
                return invalid("`value` must hold one element");
            }
            (t.to_f64_vec()[0], t.dtype())
        }
        None => (0.0, DType::F32),
    };
    one(imp.emit(
        K::Full,
        &[],
        &[("shape", dims_attr(&dims)), ("value", AttrValue::Float(value)), ("dtype", AttrValue::DType(dtype))],
    )?)
}

fn eye_like(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let shape = imp.shape_of(x);
    if shape.len() != 2 {
        return invalid("EyeLike needs a 2-D input");
    }
    let dtype = match attr(node, "dtype") {
        Some(a) => dtype_of(a.i as i32)
            .ok_or_else(|| NodeError::Unsupported(format!("element type {}", dtype_name(a.i as i32))))?,
        None => imp.dtype_of_v(x),
    };
    let k = a_int(node, "k", 0);
    let rows = imp.emit(
        K::Iota,
        &[],
        &[("shape", dims_attr(&shape)), ("axis", int(0)), ("dtype", AttrValue::DType(DType::I64))],
    )?;
    let cols = imp.emit(
        K::Iota,
        &[],
        &[("shape", dims_attr(&shape)), ("axis", int(1)), ("dtype", AttrValue::DType(DType::I64))],
    )?;
    let shifted = imp.bin_scalar(K::Add, rows, k as f64)?;
    let eq = imp.bin(K::Eq, shifted, cols)?;
    one(imp.convert_to(eq, dtype)?)
}

// --- Shape manipulation ---

fn reshape(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let target = match imp.sym_input(node, 1)? {
        Some(t) => t,
        None if imp.opset < 5 => {
            let s = a_ints(node, "shape").unwrap_or_default();
            SymList { elems: s.into_iter().map(SymInt::I).collect(), scalar: false, dtype: DType::I64 }
        }
        None => return Err(NodeError::NeedsValue { input: 1, what: "the shape".into() }),
    };
    let allowzero = a_int(node, "allowzero", 0) != 0;
    let xs = imp.shape_of(x);
    let mut dims = Vec::with_capacity(target.elems.len());
    for (i, e) in target.elems.iter().enumerate() {
        dims.push(match e {
            SymInt::I(0) if !allowzero => Some(
                xs.get(i)
                    .cloned()
                    .ok_or_else(|| NodeError::Invalid(format!("0 at {i} copies a dim the input does not have")))?,
            ),
            SymInt::I(-1) => None,
            SymInt::I(n) if *n < 0 => return invalid(format!("shape entry {n}")),
            e => e.to_dim(),
        });
    }
    one(imp.emit(K::Reshape, &[x], &[("shape", AttrValue::Dims(dims))])?)
}

fn flatten(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dims = imp.shape_of(x);
    let r = dims.len() as i64;
    let axis = a_int(node, "axis", 1);
    let axis = if axis < 0 { axis + r } else { axis };
    if !(0..=r).contains(&axis) {
        return invalid(format!("axis {axis} is out of range for rank {r}"));
    }
    let a = imp.numel_of(&dims[..axis as usize])?;
    let b = imp.numel_of(&dims[axis as usize..])?;
    one(imp.reshape(x, &[a, b])?)
}

fn transpose(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let r = imp.rank_of(x) as i64;
    let perm = a_ints(node, "perm").unwrap_or_else(|| (0..r).rev().collect());
    one(imp.emit(K::Permute, &[x], &[("perm", ints(&perm))])?)
}

fn squeeze(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let axes = match a_ints(node, "axes") {
        Some(a) => a,
        None => imp.ints_input(node, 1, "axes")?.unwrap_or_default(),
    };
    if axes.is_empty() {
        return one(imp.squeeze(x, &[])?);
    }
    // Drop the listed dims with a reshape, so symbolic dims known to be 1 at run
    // time can be squeezed too.
    let dims = imp.shape_of(x);
    let norm: Vec<usize> = axes.iter().map(|&a| norm_axis(a, dims.len())).collect::<NResult<_>>()?;
    for &a in &norm {
        if dims[a].as_const().is_some_and(|d| d != 1) {
            return invalid(format!("cannot squeeze axis {a} of size {}", dims[a]));
        }
    }
    let kept: Vec<Dim> = dims.iter().enumerate().filter(|(i, _)| !norm.contains(i)).map(|(_, d)| d.clone()).collect();
    if norm.iter().all(|&a| dims[a].as_const() == Some(1)) {
        return one(imp.squeeze(x, &axes)?);
    }
    one(imp.reshape(x, &kept)?)
}

fn unsqueeze(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let axes = match a_ints(node, "axes") {
        Some(a) => a,
        None => imp.ints_input(node, 1, "axes")?.ok_or_else(|| NodeError::Invalid("axes are required".into()))?,
    };
    one(imp.unsqueeze(x, &axes)?)
}

fn concat(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let mut args = Vec::new();
    for i in 0..node.input.len() {
        if let Some(v) = imp.opt_input(node, i)? {
            args.push(v);
        }
    }
    if args.is_empty() {
        return invalid("needs at least one input");
    }
    let axis = attr(node, "axis").ok_or_else(|| NodeError::Invalid("attribute `axis` is required".into()))?.i;
    one(imp.emit(K::Cat, &args, &[("axis", int(axis))])?)
}

/// One `split` per output, along `axis`, by the `split` sizes or into equal parts.
fn split(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dims = imp.shape_of(x);
    let axis = norm_axis(a_int(node, "axis", 0), dims.len())?;
    let n_out = node.output.len();
    let sizes = match imp.ints_input(node, 1, "split")?.or_else(|| a_ints(node, "split")) {
        Some(s) => s,
        None => {
            let d =
                dims[axis].as_const().ok_or_else(|| NodeError::Unsupported("Split of a symbolic dim".into()))? as i64;
            if let Some(k) = attr(node, "num_outputs").map(|a| a.i) {
                if k <= 0 {
                    return invalid("num_outputs must be positive");
                }
                let c = (d + k - 1) / k;
                (0..k).map(|i| (d - i * c).clamp(0, c)).collect()
            } else {
                let k = n_out as i64;
                if k == 0 || d % k != 0 {
                    return invalid(format!("cannot split {d} into {k} equal parts"));
                }
                vec![d / k; n_out]
            }
        }
    };
    if sizes.len() != n_out {
        return invalid(format!("{} split sizes for {n_out} outputs", sizes.len()));
    }
    let mut outs = Vec::with_capacity(n_out);
    for i in 0..n_out {
        let v =
            imp.emit(K::Split, &[x], &[("axis", int(axis as i64)), ("sizes", ints(&sizes)), ("index", int(i as i64))])?;
        outs.push(Some(Slot::Val(v)));
    }
    Ok(outs)
}

/// A `Slice` bound: a number, or a size (then counted from the front, assumed in range).
fn size_attr(e: &SymInt) -> NResult<AttrValue> {
    match e {
        SymInt::I(n) => Ok(int(*n)),
        SymInt::D(d) => SizeExpr::from_dim(d)
            .map(AttrValue::Size)
            .map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}"))),
    }
}

fn slice(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dims = imp.shape_of(x);
    let r = dims.len();
    let list = |v: Vec<i64>| v.into_iter().map(SymInt::I).collect::<Vec<_>>();
    let bounds = |imp: &mut Importer, i: usize, what: &str| -> NResult<Vec<SymInt>> {
        match imp.sym_input(node, i)? {
            Some(s) => Ok(s.elems),
            None if imp.slot(node, i)?.is_none() => invalid(format!("{what} are required")),
            None => Err(NodeError::NeedsValue { input: i, what: what.to_string() }),
        }
    };
    let (starts, ends, axes, steps) = if imp.opset < 10 {
        (
            list(a_ints(node, "starts").unwrap_or_default()),
            list(a_ints(node, "ends").unwrap_or_default()),
            a_ints(node, "axes"),
            None,
        )
    } else {
        (
            bounds(imp, 1, "starts")?,
            bounds(imp, 2, "ends")?,
            imp.ints_input(node, 3, "axes")?,
            imp.ints_input(node, 4, "steps")?,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return invalid("starts, ends, axes and steps differ in length");
    }
    let mut y = x;
    let mut seen = Vec::new();
    for i in 0..starts.len() {
        let axis = norm_axis(axes[i], r)?;
        if seen.contains(&axis) {
            return invalid(format!("axis {axis} is sliced twice"));
        }
        seen.push(axis);
        let step = steps[i];
        if step == 0 {
            return invalid("step 0");
        }
        match (dims[axis].as_const(), &starts[i], &ends[i]) {
            (Some(n), SymInt::I(start), SymInt::I(end)) => {
                let (start, end) = (*start, *end);
                let n = n as i128;
                let (mut s, mut e) = (start as i128, end as i128);
                if s < 0 {
                    s += n;
                }
                if e < 0 {
                    e += n;
                }
                if step > 0 {
                    s = s.clamp(0, n);
                    e = e.clamp(0, n);
                    if s == 0 && e == n && step == 1 {
                        continue;
                    }
                    y = imp.emit(
                        K::Slice,
                        &[y],
                        &[
                            ("axis", int(axis as i64)),
                            ("start", int(s as i64)),
                            ("end", int(e.max(s) as i64)),
                            ("step", int(step)),
                        ],
                    )?;
                } else {
                    // (An empty axis has no element to start from: the result is empty.)
                    s = s.clamp(0, (n - 1).max(0));
                    e = e.clamp(-1, n - 1);
                    let st = -(step as i128);
                    let count = if n > 0 && s > e { (s - e + st - 1) / st } else { 0 };
                    if count == 0 {
                        y = imp.emit(
                            K::Slice,
                            &[y],
                            &[("axis", int(axis as i64)), ("start", int(0)), ("end", int(0))],
                        )?;
                        continue;
                    }
                    let rev = imp.emit(K::Rev, &[y], &[("axes", ints(&[axis as i64]))])?;
                    let s2 = n - 1 - s;
                    let e2 = s2 + (count - 1) * st + 1;
                    y = imp.emit(
                        K::Slice,
                        &[rev],
                        &[
                            ("axis", int(axis as i64)),
                            ("start", int(s2 as i64)),
                            ("end", int(e2 as i64)),
                            ("step", int(st as i64)),
                        ],
                    )?;
                }
            }
            (_, start, end) => {
                // A symbolic dim or bound: ladder's slice counts a size bound from the front
                // and assumes the slice in range (checked when the plan runs), where ONNX
                // would clamp.
                if step < 0 {
                    return unsupported(format!("Slice with step {step} on the symbolic dim {}", dims[axis]));
                }
                let end = match end {
                    SymInt::I(e) if *e >= i64::from(i32::MAX) => SymInt::I(i64::MAX),
                    e => e.clone(),
                };
                if matches!((start, &end), (SymInt::I(0), SymInt::I(i64::MAX))) && step == 1 {
                    continue;
                }
                if let SymInt::D(d) = &end {
                    if *d == dims[axis] && matches!(start, SymInt::I(0)) && step == 1 {
                        continue;
                    }
                }
                y = imp.emit(
                    K::Slice,
                    &[y],
                    &[
                        ("axis", int(axis as i64)),
                        ("start", size_attr(start)?),
                        ("end", size_attr(&end)?),
                        ("step", int(step)),
                    ],
                )?;
            }
        }
    }
    one(y)
}

fn gather(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let idx = imp.input(node, 1)?;
    let xs = imp.shape_of(x);
    let r = xs.len();
    if r == 0 {
        return invalid("Gather needs data of rank >= 1");
    }
    let axis = norm_axis(a_int(node, "axis", 0), r)?;
    if !imp.dtype_of_v(idx).is_int() {
        return invalid("indices must be int32 or int64");
    }
    if let (Some(t), Some(n)) = (imp.const_of(idx), xs[axis].as_const()) {
        let n = n as i64;
        for i in t.to_f64_vec() {
            let i = i as i64;
            if i < -n || i >= n {
                return Err(NodeError::IndexOutOfRange { index: i, axis, size: n as u64 });
            }
        }
        if t.shape().is_empty() {
            let i = t.to_f64_vec()[0] as i64;
            return one(imp.emit(K::Select, &[x], &[("axis", int(axis as i64)), ("index", int(i))])?);
        }
    }
    let is = imp.shape_of(idx);
    let k = imp.numel_of(&is)?;
    let mut rdims = vec![Dim::new(1); r];
    rdims[axis] = k.clone();
    let idx_r = imp.reshape(idx, &rdims)?;
    let mut target = xs.clone();
    target[axis] = k;
    let idx_b = if target == rdims { idx_r } else { imp.emit(K::Expand, &[idx_r], &[("shape", dims_attr(&target))])? };
    let g = imp.emit(K::Gather, &[x, idx_b], &[("axis", int(axis as i64))])?;
    let mut out: Vec<Dim> = xs[..axis].to_vec();
    out.extend(is);
    out.extend_from_slice(&xs[axis + 1..]);
    one(imp.reshape(g, &out)?)
}

fn gather_elements(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let idx = imp.input(node, 1)?;
    one(imp.emit(K::Gather, &[x, idx], &[("axis", int(a_int(node, "axis", 0)))])?)
}

fn expand(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let target = imp.sym_input(node, 1)?.ok_or_else(|| NodeError::NeedsValue { input: 1, what: "the shape".into() })?;
    let dims = target
        .elems
        .iter()
        .map(|e| e.to_dim().ok_or_else(|| NodeError::Invalid(format!("negative dim {e:?}"))))
        .collect::<NResult<Vec<_>>>()?;
    let out = crate::ops::util::broadcast_shapes(&imp.ty(x).shape.clone(), &Shape(dims.into()))
        .map_err(|e| NodeError::Invalid(e.to_string()))?;
    if out == imp.ty(x).shape {
        return one(x);
    }
    one(imp.emit(K::Expand, &[x], &[("shape", dims_attr(out.dims()))])?)
}

fn tile(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let reps = imp.ints_input(node, 1, "repeats")?.ok_or_else(|| NodeError::Invalid("repeats are required".into()))?;
    let dims = imp.shape_of(x);
    if reps.len() != dims.len() || reps.iter().any(|&r| r < 0) {
        return invalid(format!("repeats {reps:?} do not fit rank {}", dims.len()));
    }
    if reps.iter().all(|&r| r == 1) {
        return one(x);
    }
    let mut inter = Vec::new();
    let mut big = Vec::new();
    let mut fin = Vec::new();
    for (d, &r) in dims.iter().zip(&reps) {
        inter.push(Dim::new(1));
        inter.push(d.clone());
        big.push(Dim::new(r as u64));
        big.push(d.clone());
        fin.push(d.mul(&Dim::new(r as u64)).map_err(dim_err)?);
    }
    let a = imp.reshape(x, &inter)?;
    let b = imp.emit(K::Expand, &[a], &[("shape", dims_attr(&big))])?;
    one(imp.reshape(b, &fin)?)
}

fn pad(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let r = imp.rank_of(x);
    let mode = a_str(node, "mode", "constant");
    let mut run_time_value = None;
    let (pads, value, axes) = if imp.opset < 11 {
        (a_ints(node, "pads").unwrap_or_default(), a_float(node, "value", 0.0), None)
    } else {
        let pads = imp.ints_input(node, 1, "pads")?.ok_or_else(|| NodeError::Invalid("pads are required".into()))?;
        let value = match imp.float_input(node, 2)? {
            None => 0.0,
            Some(Ok(v)) => v,
            Some(Err(v)) => {
                run_time_value = Some(v);
                0.0
            }
        };
        (pads, value, imp.ints_input(node, 3, "axes")?)
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&a| norm_axis(a, r)).collect::<NResult<_>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return invalid(format!("{} pads for {} axes", pads.len(), axes.len()));
    }
    let mut low = vec![0i64; r];
    let mut high = vec![0i64; r];
    for (i, &a) in axes.iter().enumerate() {
        low[a] = pads[i];
        high[a] = pads[i + axes.len()];
    }
    if let (Some(v), "constant") = (run_time_value, mode.as_str()) {
        return super::index::pad_runtime_value(imp, x, &low, &high, v);
    }
    if mode == "constant" {
        return one(imp.emit(
            K::Pad,
            &[x],
            &[("low", ints(&low)), ("high", ints(&high)), ("value", AttrValue::Float(value))],
        )?);
    }
    // edge / reflect / wrap: per axis, assemble slices. On a symbolic axis the slices count
    // from the end (`n - 1 - p : n - 1` is `-1 - p : -1`) and assume the axis long enough,
    // which the plan checks when it runs.
    let mut y = x;
    for a in 0..r {
        let (l, h) = (low[a], high[a]);
        if l == 0 && h == 0 {
            continue;
        }
        let n = imp.shape_of(y)[a].as_const().map(|n| n as i64);
        if l < 0 || h < 0 || n == Some(0) {
            return unsupported(format!("{mode} padding with negative pads or an empty axis"));
        }
        let sl = |imp: &mut Importer, v: Value, s: i64, e: i64| -> NResult<Value> {
            imp.emit(K::Slice, &[v], &[("axis", int(a as i64)), ("start", int(s)), ("end", int(e))])
        };
        // Position `k` counted from the end: `n - k`, or `-k` on a symbolic axis (`i64::MAX`
        // for the end itself).
        let back = |k: i64| match n {
            Some(n) => n - k,
            None if k == 0 => i64::MAX,
            None => -k,
        };
        let rev = |imp: &mut Importer, v: Value| imp.emit(K::Rev, &[v], &[("axes", ints(&[a as i64]))]);
        let mut parts = Vec::new();
        let piece = |imp: &mut Importer, y: Value, p: i64, left: bool| -> NResult<Option<Value>> {
            if p == 0 {
                return Ok(None);
            }
            Ok(Some(match mode.as_str() {
                "edge" => {
                    let e = if left { sl(imp, y, 0, 1)? } else { sl(imp, y, back(1), back(0))? };
                    let mut shape = imp.shape_of(e);
                    shape[a] = Dim::new(p as u64);
                    imp.emit(K::Expand, &[e], &[("shape", dims_attr(&shape))])?
                }
                "reflect" => {
                    if n.is_some_and(|n| p > n - 1) {
                        return Err(NodeError::Invalid(format!(
                            "reflect padding of {p} on an axis of {}",
                            n.unwrap_or(0)
                        )));
                    }
                    let s = if left { sl(imp, y, 1, p + 1)? } else { sl(imp, y, back(1 + p), back(1))? };
                    rev(imp, s)?
                }
                "wrap" => {
                    if n.is_some_and(|n| p > n) {
                        return Err(NodeError::Invalid(format!(
                            "wrap padding of {p} on an axis of {}",
                            n.unwrap_or(0)
                        )));
                    }
                    if left {
                        sl(imp, y, back(p), back(0))?
                    } else {
                        sl(imp, y, 0, p)?
                    }
                }
                m => return Err(NodeError::Invalid(format!("unknown pad mode `{m}`"))),
            }))
        };
        if let Some(p) = piece(imp, y, l, true)? {
            parts.push(p);
        }
        parts.push(y);
        if let Some(p) = piece(imp, y, h, false)? {
            parts.push(p);
        }
        y = imp.emit(K::Cat, &parts, &[("axis", int(a as i64))])?;
    }
    one(y)
}

fn trilu(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let k = imp.ints_input(node, 1, "k")?.map_or(0, |v| v.first().copied().unwrap_or(0));
    let kind = if a_int(node, "upper", 1) != 0 { K::Triu } else { K::Tril };
    one(imp.emit(kind, &[x], &[("diagonal", int(k))])?)
}

/// `DepthToSpace` or `SpaceToDepth`.
fn depth_space(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let d = imp.shape_of(x);
    if d.len() != 4 {
        return invalid("needs a 4-D input");
    }
    let b = a_int(node, "blocksize", 0);
    if b <= 0 {
        return invalid("blocksize must be positive");
    }
    let bd = Dim::new(b as u64);
    let bb = bd.mul(&bd).map_err(dim_err)?;
    let (n, c, h, w) = (d[0].clone(), d[1].clone(), d[2].clone(), d[3].clone());
    let div = |x: &Dim, y: &Dim| x.div_exact(y).map_err(|_| NodeError::Invalid(format!("{x} is not divisible by {y}")));
    let (inter, perm, fin): (Vec<Dim>, Vec<i64>, Vec<Dim>) = if node.op_type == "DepthToSpace" {
        let cb = div(&c, &bb)?;
        let fin = vec![n.clone(), cb.clone(), h.mul(&bd).map_err(dim_err)?, w.mul(&bd).map_err(dim_err)?];
        if a_str(node, "mode", "DCR") == "CRD" {
            (vec![n, cb, bd.clone(), bd, h, w], vec![0, 1, 4, 2, 5, 3], fin)
        } else {
            (vec![n, bd.clone(), bd, cb, h, w], vec![0, 3, 4, 1, 5, 2], fin)
        }
    } else {
        let (hb, wb) = (div(&h, &bd)?, div(&w, &bd)?);
        let fin = vec![n.clone(), c.mul(&bb).map_err(dim_err)?, hb.clone(), wb.clone()];
        (vec![n, c, hb, bd.clone(), wb, bd], vec![0, 3, 5, 1, 2, 4], fin)
    };
    let a = imp.reshape(x, &inter)?;
    let p = imp.emit(K::Permute, &[a], &[("perm", ints(&perm))])?;
    one(imp.reshape(p, &fin)?)
}

fn one_hot(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let idx = imp.input(node, 0)?;
    let depth = match imp.float_input(node, 1)? {
        Some(Ok(d)) if d >= 0.0 && d <= (1u64 << 32) as f64 => d as u64,
        Some(Err(_)) => return Err(NodeError::NeedsValue { input: 1, what: "the depth".into() }),
        _ => return unsupported("OneHot needs a non-negative depth below 2^32"),
    };
    let values = imp.input(node, 2)?;
    if imp.ty(values).shape.numel().ok().and_then(|n| n.as_const()) != Some(2) {
        return invalid("values must hold [off, on]");
    }
    let r = imp.rank_of(idx);
    let axis = norm_axis(a_int(node, "axis", -1), r + 1)?;
    let i64v = imp.convert_to(idx, DType::I64)?;
    let neg = imp.bin_scalar(K::Lt, i64v, 0.0)?;
    let wrapped = imp.bin_scalar(K::Add, i64v, depth as f64)?;
    let norm = imp.emit(K::Where, &[neg, wrapped, i64v], &[])?;
    let u = imp.unsqueeze(norm, &[axis as i64])?;
    let mut shape = vec![Dim::new(1); r + 1];
    shape[axis] = Dim::new(depth);
    let iota = imp.emit(
        K::Iota,
        &[],
        &[("shape", dims_attr(&shape)), ("axis", int(axis as i64)), ("dtype", AttrValue::DType(DType::I64))],
    )?;
    let eq = imp.bin(K::Eq, u, iota)?;
    // off and on as scalars (read at run time when `values` is not a constant).
    let flat = imp.reshape(values, &[Dim::new(2)])?;
    let pick = |imp: &mut Importer, i: i64| -> NResult<Value> {
        let s = imp.emit(K::Slice, &[flat], &[("axis", int(0)), ("start", int(i)), ("end", int(i + 1))])?;
        imp.reshape(s, &[])
    };
    let (off, on) = (pick(imp, 0)?, pick(imp, 1)?);
    one(imp.emit(K::Where, &[eq, on, off], &[])?)
}
