//! Spatial ONNX ops: `Resize`/`Upsample`, pooling that the 2-d pool ops do not cover (3-d,
//! dilated or asymmetric averages, indices, `LpPool`), `LRN`, `MaxUnpool`, `Col2Im` and
//! `CenterCropPad`.
//!
//! Mapping choices:
//! - `Resize`/`Upsample`: see `resize.rs`.
//! - Pooling (`MaxPool`/`AveragePool` beyond the 2-d ops, `LpPool`) is separable too: per
//!   spatial axis, pad (`-inf` for max, `0` for sums) and combine `kernel` strided slices with
//!   `max` or `add`. Averages divide by a per-position count built from per-axis counts
//!   (inside the padded extent with `count_include_pad`, inside the input without). Max
//!   pooling propagates NaN like `max_pool2d`.
//! - `LRN` is a windowed sum of squares over channels (zero-padded), `x / (bias + alpha/size *
//!   sum)^beta`.
//! - `Col2Im` is one `scatter_add` of the columns with a constant index table.
//! - `MaxUnpool` scatters the values to their flat indices (over the whole inferred output)
//!   with `scatter_add` and divides by the number of values that landed on each position, so
//!   a repeated index holding equal values (overlapping pool windows) gives that value;
//!   a larger `output_shape` pads with zeros at the end of each axis, as the reference does.

pub(super) use super::build::{
    bin, bin_scalar, convert, dims_attr, dtype, int, ints, invalid, norm_axis, one, reshape, shape, unsupported, Outs,
};
use super::import::{a_float, a_int, a_ints, a_str, Importer, NResult, Slot};
use super::ops::Row;
use super::proto::NodeProto;
use super::{ImportError, NodeError};
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind;
use crate::tensor::{Tensor, TensorData};

/// The spatial ops of this file, by ONNX name.
pub(super) const SPATIAL: &[Row] = &[
    ("CenterCropPad", |imp, node, _| center_crop_pad(imp, node)),
    ("Col2Im", |imp, node, _| col2im(imp, node)),
    ("LRN", |imp, node, _| lrn(imp, node)),
    ("LpPool", |imp, node, _| pool_nd(imp, node)),
    ("MaxUnpool", |imp, node, _| max_unpool(imp, node)),
    ("Resize", |imp, node, _| super::resize::resize(imp, node)),
    ("Upsample", |imp, node, _| super::resize::resize(imp, node)),
];

/// A dim that must be known at import.
pub(super) fn static_dim(d: &Dim, what: &str) -> NResult<u64> {
    d.as_const().ok_or_else(|| NodeError::NeedsStatic(format!("{what} on the symbolic dim {d}")))
}

/// Checks that a constant table of `n` elements of `elem_bytes` fits the importer's limit
/// before it is built.
pub(super) fn check_table(imp: &Importer, n: u64, elem_bytes: u64, what: &str) -> NResult<()> {
    let size = n.saturating_mul(elem_bytes);
    if size > imp.opts.limits.max_tensor_bytes {
        return Err(NodeError::Tensor(Box::new(ImportError::Limit {
            what: what.to_string(),
            size,
            limit: "max_tensor_bytes",
            max: imp.opts.limits.max_tensor_bytes,
        })));
    }
    Ok(())
}

pub(super) fn un(imp: &mut Importer, op: OpKind, v: Value) -> NResult<Value> {
    imp.emit(op, &[v], &[])
}

pub(super) fn slice(imp: &mut Importer, v: Value, axis: usize, start: i64, end: i64, step: i64) -> NResult<Value> {
    imp.emit(
        OpKind::Slice,
        &[v],
        &[("axis", int(axis as i64)), ("start", int(start)), ("end", int(end)), ("step", int(step))],
    )
}

pub(super) fn permute(imp: &mut Importer, v: Value, perm: &[i64]) -> NResult<Value> {
    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Ok(v);
    }
    imp.emit(OpKind::Permute, &[v], &[("perm", ints(perm))])
}

pub(super) fn sum_axes(imp: &mut Importer, v: Value, axes: &[i64], keep: bool) -> NResult<Value> {
    imp.emit(OpKind::Sum, &[v], &[("axes", ints(axes)), ("keepdim", AttrValue::Bool(keep))])
}

/// A float constant of `dtype` (f32 or f64 data; other float types convert from f32).
pub(super) fn const_float(
    imp: &mut Importer,
    hint: &str,
    shape: &[usize],
    vals: Vec<f64>,
    dtype: DType,
) -> NResult<Value> {
    let data = if dtype == DType::F64 {
        TensorData::F64(vals)
    } else {
        TensorData::F32(vals.into_iter().map(|v| v as f32).collect())
    };
    let t = Tensor::new(shape.to_vec(), data).map_err(|e| NodeError::Invalid(e.to_string()))?;
    let c = imp.constant(hint, t);
    convert(imp, c, dtype)
}

pub(super) fn const_i64(imp: &mut Importer, hint: &str, shape: &[usize], vals: Vec<i64>) -> NResult<Value> {
    let t = Tensor::from_i64(shape, vals).map_err(|e| NodeError::Invalid(e.to_string()))?;
    Ok(imp.constant(hint, t))
}

pub(super) fn const_bool(imp: &mut Importer, hint: &str, shape: &[usize], vals: Vec<bool>) -> NResult<Value> {
    let t = Tensor::from_bool(shape, vals).map_err(|e| NodeError::Invalid(e.to_string()))?;
    Ok(imp.constant(hint, t))
}

/// `[1, .., n, .., 1]` of rank `rank` with `n` at `axis`.
pub(super) fn along(rank: usize, axis: usize, n: usize) -> Vec<usize> {
    let mut s = vec![1; rank];
    s[axis] = n;
    s
}

/// `x` indexed along `axis` by the constant indices `idx` (each in range): NumPy `take`.
pub(super) fn take(imp: &mut Importer, x: Value, axis: usize, idx: Vec<i64>) -> NResult<Value> {
    let xs = shape(imp, x);
    let n = idx.len();
    let i = const_i64(imp, "take_index", &along(xs.len(), axis, n), idx)?;
    let mut full = xs.clone();
    full[axis] = Dim::new(n as u64);
    let i = imp.emit(OpKind::Expand, &[i], &[("shape", dims_attr(&full))])?;
    imp.emit(OpKind::Gather, &[x, i], &[("axis", int(axis as i64))])
}

/// A float scalar or 1-element input known at import; `None` when absent.
pub(super) fn const_floats(imp: &mut Importer, node: &NodeProto, i: usize, what: &str) -> NResult<Option<Vec<f64>>> {
    match imp.opt_input(node, i)? {
        None => Ok(None),
        Some(v) => match imp.const_of(v) {
            Some(t) => Ok(Some(t.to_f64_vec())),
            None => Err(NodeError::NeedsValue { input: i, what: what.to_string() }),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Pooling

#[derive(Clone, Copy, PartialEq)]
enum Reduce {
    Max,
    Sum,
}

/// Most slices one pooling may emit (the sum of its kernel sizes).
const MAX_WINDOW: i64 = 4096;

/// One spatial axis of a pooling window.
struct Window {
    k: i64,
    s: i64,
    d: i64,
    begin: i64,
    end: i64,
}

impl Window {
    fn span(&self) -> i64 {
        (self.k - 1) * self.d + 1
    }
}

/// The output size of `w` over an input of `n` (ONNX's reference rule, with `ceil_mode`).
fn window_out(n: i64, w: &Window, ceil: bool) -> i64 {
    let num = n + w.begin + w.end - w.span();
    if num < 0 {
        return 0;
    }
    if ceil {
        let mut o = num.div_euclid(w.s) + i64::from(num.rem_euclid(w.s) != 0) + 1;
        if (o - 1) * w.s >= n + w.begin {
            o -= 1;
        }
        o
    } else {
        num / w.s + 1
    }
}

/// Reduces `x` over a 1-d window along `axis`: pads (`value`), then combines `k` strided
/// slices. The result has `out` positions along `axis`.
fn window_reduce(
    imp: &mut Importer,
    x: Value,
    axis: usize,
    n: i64,
    w: &Window,
    out: i64,
    op: Reduce,
) -> NResult<Value> {
    let r = shape(imp, x).len();
    if out == 0 {
        return slice(imp, x, axis, 0, 0, 1);
    }
    let need = (out - 1) * w.s + w.span();
    let high = need - n - w.begin;
    let mut low_v = vec![0i64; r];
    let mut high_v = vec![0i64; r];
    low_v[axis] = w.begin;
    high_v[axis] = high;
    let value = match op {
        Reduce::Max => f64::NEG_INFINITY,
        Reduce::Sum => 0.0,
    };
    let p = if w.begin == 0 && high == 0 {
        x
    } else {
        imp.emit(
            OpKind::Pad,
            &[x],
            &[("low", ints(&low_v)), ("high", ints(&high_v)), ("value", AttrValue::Float(value))],
        )?
    };
    let mut acc: Option<Value> = None;
    for j in 0..w.k {
        let start = j * w.d;
        let s = slice(imp, p, axis, start, start + (out - 1) * w.s + 1, w.s)?;
        acc = Some(match acc {
            None => s,
            Some(a) => bin(imp, if op == Reduce::Max { OpKind::Max } else { OpKind::Add }, a, s)?,
        });
    }
    acc.ok_or_else(|| NodeError::Invalid("an empty kernel".into()))
}

/// Per output position, how many window positions `o*s - begin + j*d` (`j < k`) fall in
/// `[lo, hi)`.
fn window_counts(w: &Window, out: i64, lo: i64, hi: i64) -> Vec<f64> {
    (0..out)
        .map(|o| {
            let p0 = o * w.s - w.begin;
            let first = (lo - p0).max(0);
            let j_min = (first + w.d - 1) / w.d;
            let j_max = if hi - 1 - p0 < 0 { -1 } else { ((hi - 1 - p0) / w.d).min(w.k - 1) };
            (j_max - j_min + 1).max(0) as f64
        })
        .collect()
}

/// Bound on pads, strides and dilations, keeping the window arithmetic far from overflow.
const MAX_EXTENT: i64 = 1 << 32;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum PoolKind {
    Max,
    Avg { include_pad: bool },
    Lp { p: i64 },
}

/// N-d pooling as separable 1-d window reductions.
pub(super) fn pool_nd(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let kind = match node.op_type.as_str() {
        "MaxPool" => {
            if node.output.get(1).is_some_and(|s| !s.is_empty()) {
                return max_pool_with_indices(imp, node);
            }
            PoolKind::Max
        }
        "AveragePool" => PoolKind::Avg { include_pad: a_int(node, "count_include_pad", 0) != 0 },
        _ => PoolKind::Lp { p: a_int(node, "p", 2) },
    };
    let x = imp.input(node, 0)?;
    let xs = shape(imp, x);
    if xs.len() < 3 {
        return invalid("pooling needs an input of rank >= 3");
    }
    let n = xs.len() - 2;
    let kernel = a_ints(node, "kernel_shape").ok_or_else(|| NodeError::Invalid("kernel_shape is required".into()))?;
    let strides = a_ints(node, "strides").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1; n]);
    if kernel.len() != n || strides.len() != n || dil.len() != n {
        return invalid("kernel_shape, strides and dilations need one entry per spatial dim");
    }
    if kernel.iter().chain(&strides).chain(&dil).any(|&v| v < 1) {
        return invalid("kernel_shape, strides and dilations must be positive");
    }
    if strides.iter().chain(&dil).any(|&v| v > MAX_EXTENT) {
        return unsupported(format!("strides {strides:?} or dilations {dil:?} above {MAX_EXTENT}"));
    }
    if kernel.iter().fold(0i64, |a, &k| a.saturating_add(k)) > MAX_WINDOW {
        return unsupported(format!("a pooling window of {kernel:?} (at most {MAX_WINDOW} taps over all axes)"));
    }
    let pads = super::nn::auto_pads(
        &a_str(node, "auto_pad", "NOTSET"),
        &xs[2..],
        &kernel,
        &strides,
        &dil,
        a_ints(node, "pads").filter(|p| !p.is_empty()),
    )?;
    if pads.iter().any(|&p| p < 0) {
        return invalid(format!("negative pads {pads:?}"));
    }
    if pads.iter().any(|&p| p > MAX_EXTENT) {
        return unsupported(format!("pads {pads:?} above {MAX_EXTENT}"));
    }
    let ceil = a_int(node, "ceil_mode", 0) != 0;
    let dt = dtype(imp, x);
    if !matches!(kind, PoolKind::Max) && !dt.is_float() {
        return unsupported(format!("{} on {dt}", node.op_type));
    }
    let mut y = match kind {
        PoolKind::Lp { p } => match p {
            1 => un(imp, OpKind::Abs, x)?,
            2 => bin(imp, OpKind::Mul, x, x)?,
            p if p > 0 => {
                let a = un(imp, OpKind::Abs, x)?;
                bin_scalar(imp, OpKind::Pow, a, p as f64)?
            }
            p => return invalid(format!("LpPool p = {p}")),
        },
        _ => x,
    };
    let op = if kind == PoolKind::Max { Reduce::Max } else { Reduce::Sum };
    let mut counts: Vec<Vec<f64>> = Vec::with_capacity(n);
    let mut outs = Vec::with_capacity(n);
    for i in 0..n {
        let len = static_dim(&xs[2 + i], &node.op_type)? as i64;
        let w = Window { k: kernel[i], s: strides[i], d: dil[i], begin: pads[i], end: pads[n + i] };
        let out = window_out(len, &w, ceil);
        check_table(imp, out as u64, 8, "a pooling count table")?;
        y = window_reduce(imp, y, 2 + i, len, &w, out, op)?;
        if let PoolKind::Avg { include_pad } = kind {
            let (lo, hi) = if include_pad { (-w.begin, len + w.end) } else { (0, len) };
            counts.push(window_counts(&w, out, lo, hi));
        }
        outs.push(out as usize);
    }
    match kind {
        PoolKind::Avg { .. } => {
            let r = xs.len();
            let mut den: Option<Value> = None;
            for (i, c) in counts.into_iter().enumerate() {
                let cv = const_float(imp, "pool_count", &along(r, 2 + i, outs[i]), c, dt)?;
                den = Some(match den {
                    None => cv,
                    Some(d) => bin(imp, OpKind::Mul, d, cv)?,
                });
            }
            if let Some(d) = den {
                y = bin(imp, OpKind::Div, y, d)?;
            }
        }
        PoolKind::Lp { p } => {
            y = match p {
                1 => y,
                2 => un(imp, OpKind::Sqrt, y)?,
                p => bin_scalar(imp, OpKind::Pow, y, 1.0 / p as f64)?,
            };
        }
        PoolKind::Max => {}
    }
    one(y)
}

/// Most window positions `MaxPool` with indices visits (the product of its kernel sizes).
const MAX_WINDOW_POSITIONS: i64 = 1024;

/// `MaxPool` with its `Indices` output: every window position in row-major order, keeping
/// the first valid one strictly greater than the best so far (the reference rule, so a NaN
/// is picked only when it comes first). Indices are flat over the whole input, row-major
/// (`storage_order` 0) or with the spatial dims reversed (1). A window wholly in the padding
/// gives 0 and index -1.
fn max_pool_with_indices(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xs = shape(imp, x);
    if xs.len() < 3 {
        return invalid("pooling needs an input of rank >= 3");
    }
    let n = xs.len() - 2;
    let kernel = a_ints(node, "kernel_shape").ok_or_else(|| NodeError::Invalid("kernel_shape is required".into()))?;
    let strides = a_ints(node, "strides").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1; n]);
    if kernel.len() != n || strides.len() != n || dil.len() != n {
        return invalid("kernel_shape, strides and dilations need one entry per spatial dim");
    }
    if kernel.iter().chain(&strides).chain(&dil).any(|&v| v < 1) {
        return invalid("kernel_shape, strides and dilations must be positive");
    }
    if strides.iter().chain(&dil).any(|&v| v > MAX_EXTENT) {
        return unsupported(format!("strides {strides:?} or dilations {dil:?} above {MAX_EXTENT}"));
    }
    let positions = kernel.iter().try_fold(1i64, |a, &k| a.checked_mul(k)).unwrap_or(i64::MAX);
    if positions > MAX_WINDOW_POSITIONS {
        return unsupported(format!(
            "MaxPool indices over a window of {kernel:?} (at most {MAX_WINDOW_POSITIONS} positions)"
        ));
    }
    let pads = super::nn::auto_pads(
        &a_str(node, "auto_pad", "NOTSET"),
        &xs[2..],
        &kernel,
        &strides,
        &dil,
        a_ints(node, "pads").filter(|p| !p.is_empty()),
    )?;
    if pads.iter().any(|&p| !(0..=MAX_EXTENT).contains(&p)) {
        return invalid(format!("pads {pads:?}"));
    }
    let ceil = a_int(node, "ceil_mode", 0) != 0;
    let column_major = a_int(node, "storage_order", 0) != 0;
    let sizes: Vec<i64> = xs[2..].iter().map(|d| static_dim(d, "MaxPool").map(|v| v as i64)).collect::<NResult<_>>()?;
    let wins: Vec<Window> =
        (0..n).map(|i| Window { k: kernel[i], s: strides[i], d: dil[i], begin: pads[i], end: pads[n + i] }).collect();
    let outs: Vec<i64> = (0..n).map(|i| window_out(sizes[i], &wins[i], ceil)).collect();
    let n_out = outs.iter().try_fold(1u64, |a, &o| a.checked_mul(o as u64)).unwrap_or(u64::MAX);
    check_table(imp, n_out.saturating_mul(positions as u64), 9, "a MaxPool index table")?;
    let n_out = n_out as usize;
    let dt = dtype(imp, x);
    if n_out == 0 || sizes.contains(&0) {
        let mut shape = vec![xs[0].clone(), xs[1].clone()];
        shape.extend(outs.iter().map(|&o| Dim::new(o as u64)));
        let full = |imp: &mut Importer, value: f64, dtype: DType| {
            imp.emit(
                OpKind::Full,
                &[],
                &[("shape", dims_attr(&shape)), ("value", AttrValue::Float(value)), ("dtype", AttrValue::DType(dtype))],
            )
        };
        let y = full(imp, 0.0, dt)?;
        let i = full(imp, -1.0, DType::I64)?;
        return Ok(vec![Some(Slot::Val(y)), Some(Slot::Val(i))]);
    }
    // Element strides of the spatial dims in the flat index.
    let mut elem_stride = vec![1i64; n];
    if column_major {
        for i in 1..n {
            elem_stride[i] = elem_stride[i - 1] * sizes[i - 1];
        }
    } else {
        for i in (0..n.saturating_sub(1)).rev() {
            elem_stride[i] = elem_stride[i + 1] * sizes[i + 1];
        }
    }
    let x_step: i64 = sizes.iter().product();
    // Pad once (the value is never picked: padded positions are invalid).
    let r = xs.len();
    let mut low = vec![0i64; r];
    let mut high = vec![0i64; r];
    for i in 0..n {
        low[2 + i] = wins[i].begin;
        high[2 + i] =
            if outs[i] == 0 { 0 } else { (outs[i] - 1) * wins[i].s + wins[i].span() - sizes[i] - wins[i].begin };
    }
    let xp =
        imp.emit(OpKind::Pad, &[x], &[("low", ints(&low)), ("high", ints(&high)), ("value", AttrValue::Float(0.0))])?;
    // Flat offset of each (n, c) plane.
    let mut nc_shape = vec![xs[0].clone(), xs[1].clone()];
    nc_shape.extend(std::iter::repeat_n(Dim::new(1), n));
    let iota = |imp: &mut Importer, axis: i64| {
        imp.emit(
            OpKind::Iota,
            &[],
            &[("shape", dims_attr(&nc_shape)), ("axis", int(axis)), ("dtype", AttrValue::DType(DType::I64))],
        )
    };
    let i0 = iota(imp, 0)?;
    let i1 = iota(imp, 1)?;
    let c = static_dim(&xs[1], "MaxPool")? as f64;
    let plane = bin_scalar(imp, OpKind::Mul, i0, c)?;
    let plane = bin(imp, OpKind::Add, plane, i1)?;
    let plane = bin_scalar(imp, OpKind::Mul, plane, x_step as f64)?;
    let mut out_shape = vec![1usize, 1];
    out_shape.extend(outs.iter().map(|&o| o as usize));
    let mut best: Option<(Value, Value, Value)> = None; // (value, index, any valid)
    let mut j = vec![0i64; n];
    for _ in 0..positions {
        let mut v = xp;
        for i in 0..n {
            let start = j[i] * wins[i].d;
            v = slice(imp, v, 2 + i, start, start + (outs[i] - 1) * wins[i].s + 1, wins[i].s)?;
        }
        // Validity and flat spatial index of this window position at each output.
        let mut valid = Vec::with_capacity(n_out);
        let mut flat = Vec::with_capacity(n_out);
        let mut o = vec![0i64; n];
        for _ in 0..n_out {
            let mut ok = true;
            let mut f = 0i64;
            for i in 0..n {
                let p = o[i] * wins[i].s - wins[i].begin + j[i] * wins[i].d;
                ok &= p >= 0 && p < sizes[i];
                if ok {
                    f += p * elem_stride[i];
                }
            }
            valid.push(ok);
            flat.push(if ok { f } else { 0 });
            for i in (0..n).rev() {
                o[i] += 1;
                if o[i] < outs[i] {
                    break;
                }
                o[i] = 0;
            }
        }
        let valid = const_bool(imp, "pool_valid", &out_shape, valid)?;
        let flat = const_i64(imp, "pool_index", &out_shape, flat)?;
        let idx = bin(imp, OpKind::Add, plane, flat)?;
        best = Some(match best {
            None => (v, idx, valid),
            Some((bv, bi, any)) => {
                let gt = bin(imp, OpKind::Gt, v, bv)?;
                let none = un(imp, OpKind::LogicalNot, any)?;
                let take = bin(imp, OpKind::Or, gt, none)?;
                let take = bin(imp, OpKind::And, take, valid)?;
                let nv = imp.emit(OpKind::Where, &[take, v, bv], &[])?;
                let ni = imp.emit(OpKind::Where, &[take, idx, bi], &[])?;
                let na = bin(imp, OpKind::Or, any, valid)?;
                (nv, ni, na)
            }
        });
        for i in (0..n).rev() {
            j[i] += 1;
            if j[i] < kernel[i] {
                break;
            }
            j[i] = 0;
        }
    }
    let (bv, bi, any) = best.ok_or_else(|| NodeError::Invalid("an empty kernel".into()))?;
    let zero = imp.scalar(dt, 0.0)?;
    let y = imp.emit(OpKind::Where, &[any, bv, zero], &[])?;
    let neg = imp.scalar(DType::I64, -1.0)?;
    let i = imp.emit(OpKind::Where, &[any, bi, neg], &[])?;
    Ok(vec![Some(Slot::Val(y)), Some(Slot::Val(i))])
}

// ---------------------------------------------------------------------------------------------
// LRN, MaxUnpool, CenterCropPad

pub(super) fn lrn(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xs = shape(imp, x);
    if xs.len() < 3 {
        return invalid("LRN needs an input [N, C, d...]");
    }
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return invalid(format!("LRN on {dt}"));
    }
    let size = a_int(node, "size", 0);
    if !(1..=MAX_WINDOW).contains(&size) {
        return invalid(format!("LRN size {size} (1 to {MAX_WINDOW})"));
    }
    let (alpha, beta, bias) = (a_float(node, "alpha", 1e-4), a_float(node, "beta", 0.75), a_float(node, "bias", 1.0));
    let c = static_dim(&xs[1], "LRN")? as i64;
    let w = Window { k: size, s: 1, d: 1, begin: (size - 1) / 2, end: (size - 1) - (size - 1) / 2 };
    let sq = bin(imp, OpKind::Mul, x, x)?;
    let s = window_reduce(imp, sq, 1, c, &w, c, Reduce::Sum)?;
    let s = bin_scalar(imp, OpKind::Mul, s, alpha / size as f64)?;
    let s = bin_scalar(imp, OpKind::Add, s, bias)?;
    let d = bin_scalar(imp, OpKind::Pow, s, beta)?;
    one(bin(imp, OpKind::Div, x, d)?)
}

pub(super) fn max_unpool(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let i = imp.input(node, 1)?;
    let xs = shape(imp, x);
    if xs.len() < 3 {
        return invalid("MaxUnpool needs an input [N, C, d...]");
    }
    if shape(imp, i) != xs {
        return invalid("MaxUnpool's indices must have the input's shape");
    }
    let n = xs.len() - 2;
    let kernel = a_ints(node, "kernel_shape").ok_or_else(|| NodeError::Invalid("kernel_shape is required".into()))?;
    let strides = a_ints(node, "strides").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1; n]);
    let pads = a_ints(node, "pads").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![0; 2 * n]);
    if kernel.len() != n || strides.len() != n || pads.len() != 2 * n {
        return invalid("kernel_shape, strides and pads need one entry per spatial dim");
    }
    let sd: Vec<i64> = xs.iter().map(|d| static_dim(d, "MaxUnpool").map(|v| v as i64)).collect::<NResult<_>>()?;
    let mut inferred: Vec<i64> = sd[..2].to_vec();
    for k in 0..n {
        let o = (sd[2 + k] - 1)
            .checked_mul(strides[k])
            .and_then(|v| v.checked_sub(pads[k].checked_add(pads[n + k])?))
            .and_then(|v| v.checked_add(kernel[k]))
            .filter(|&v| v >= 0)
            .ok_or_else(|| NodeError::Invalid("MaxUnpool's output size is negative or too large".into()))?;
        inferred.push(o);
    }
    let total = inferred.iter().try_fold(1i64, |a, &d| a.checked_mul(d)).filter(|&t| t <= u32::MAX as i64 * 16);
    let Some(total) = total else { return unsupported("MaxUnpool to an output this large") };
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return unsupported(format!("MaxUnpool on {dt}"));
    }
    let numel: u64 = sd.iter().map(|&d| d as u64).product();
    let flat = [Dim::new(numel)];
    let xf = reshape(imp, x, &flat)?;
    let ifl = reshape(imp, i, &flat)?;
    let ifl = convert(imp, ifl, DType::I64)?;
    let zeros = |imp: &mut Importer| {
        imp.emit(
            OpKind::Full,
            &[],
            &[
                ("shape", dims_attr(&[Dim::new(total as u64)])),
                ("value", AttrValue::Float(0.0)),
                ("dtype", AttrValue::DType(dt)),
            ],
        )
    };
    let z = zeros(imp)?;
    let sum = imp.emit(OpKind::ScatterAdd, &[z, ifl, xf], &[("axis", int(0))])?;
    let ones = imp.emit(
        OpKind::Full,
        &[],
        &[("shape", dims_attr(&flat)), ("value", AttrValue::Float(1.0)), ("dtype", AttrValue::DType(dt))],
    )?;
    let z = zeros(imp)?;
    let cnt = imp.emit(OpKind::ScatterAdd, &[z, ifl, ones], &[("axis", int(0))])?;
    let one_s = imp.scalar(dt, 1.0)?;
    let cnt = bin(imp, OpKind::Max, cnt, one_s)?;
    let y = bin(imp, OpKind::Div, sum, cnt)?;
    let shape: Vec<Dim> = inferred.iter().map(|&d| Dim::new(d as u64)).collect();
    let mut y = reshape(imp, y, &shape)?;
    if let Some(out) = imp.ints_input(node, 2, "output_shape")? {
        if out.len() != inferred.len() {
            return invalid(format!("output_shape {out:?} does not have rank {}", inferred.len()));
        }
        if out.iter().zip(&inferred).any(|(&o, &f)| o < f) {
            return unsupported(format!("MaxUnpool to output_shape {out:?}, smaller than the inferred {inferred:?}"));
        }
        let high: Vec<i64> = out.iter().zip(&inferred).map(|(&o, &f)| o - f).collect();
        if high.iter().any(|&h| h != 0) {
            let low = vec![0i64; high.len()];
            y = imp.emit(OpKind::Pad, &[y], &[("low", ints(&low)), ("high", ints(&high))])?;
        }
    }
    one(y)
}

/// `Col2Im`: column `l` of block row `c*K + k` adds into the image position of block `l`'s
/// window offset `k`, one `scatter_add` with a constant index table (positions in the padding
/// go to a dropped extra slot).
pub(super) fn col2im(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xs = shape(imp, x);
    if xs.len() != 3 {
        return invalid("Col2Im needs an input [N, C * prod(block_shape), L]");
    }
    let image =
        imp.ints_input(node, 1, "image_shape")?.ok_or_else(|| NodeError::Invalid("image_shape is required".into()))?;
    let block =
        imp.ints_input(node, 2, "block_shape")?.ok_or_else(|| NodeError::Invalid("block_shape is required".into()))?;
    let n = image.len();
    let dil = a_ints(node, "dilations").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1; n]);
    let strides = a_ints(node, "strides").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1; n]);
    let pads = a_ints(node, "pads").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![0; 2 * n]);
    if n == 0 || block.len() != n || dil.len() != n || strides.len() != n || pads.len() != 2 * n {
        return invalid("image_shape, block_shape, dilations, strides and pads need one entry per image dim");
    }
    if block.iter().chain(&dil).chain(&strides).any(|&v| !(1..=MAX_EXTENT).contains(&v))
        || image.iter().chain(&pads).any(|&v| !(0..=MAX_EXTENT).contains(&v))
    {
        return invalid(format!(
            "Col2Im sizes: image {image:?}, block {block:?}, dilations {dil:?}, strides {strides:?}, pads {pads:?}"
        ));
    }
    let ck = static_dim(&xs[1], "Col2Im")?;
    let l = static_dim(&xs[2], "Col2Im")?;
    let k = block.iter().try_fold(1u64, |a, &b| a.checked_mul(b as u64)).unwrap_or(u64::MAX);
    if k == 0 || !ck.is_multiple_of(k) {
        return invalid(format!("input dim 1 ({ck}) is not a multiple of the block size {k}"));
    }
    let wins: Vec<Window> =
        (0..n).map(|i| Window { k: block[i], s: strides[i], d: dil[i], begin: pads[i], end: pads[n + i] }).collect();
    let outs: Vec<i64> = (0..n).map(|i| window_out(image[i], &wins[i], false)).collect();
    let blocks = outs.iter().try_fold(1u64, |a, &o| a.checked_mul(o as u64)).unwrap_or(u64::MAX);
    if blocks != l {
        return invalid(format!("input dim 2 is {l} but the image holds {blocks} blocks ({outs:?})"));
    }
    let s = image.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64)).unwrap_or(u64::MAX);
    check_table(imp, k.saturating_mul(l), 8, "a Col2Im index table")?;
    check_table(imp, s, 1, "the Col2Im image")?;
    let mut idx = Vec::with_capacity((k * l) as usize);
    let mut off = vec![0i64; n];
    for _ in 0..k {
        let mut o = vec![0i64; n];
        for _ in 0..l {
            let mut flat = 0i64;
            let mut inside = true;
            for i in 0..n {
                let p = o[i] * wins[i].s - wins[i].begin + off[i] * wins[i].d;
                inside &= p >= 0 && p < image[i];
                flat = flat * image[i] + p;
            }
            idx.push(if inside { flat } else { s as i64 });
            for i in (0..n).rev() {
                o[i] += 1;
                if o[i] < outs[i] {
                    break;
                }
                o[i] = 0;
            }
        }
        for i in (0..n).rev() {
            off[i] += 1;
            if off[i] < block[i] {
                break;
            }
            off[i] = 0;
        }
    }
    let c = Dim::new(ck / k);
    let kl = Dim::new(k * l);
    let x3 = reshape(imp, x, &[xs[0].clone(), c.clone(), kl.clone()])?;
    let i = const_i64(imp, "col2im_index", &[1, 1, (k * l) as usize], idx)?;
    let i = imp.emit(OpKind::Expand, &[i], &[("shape", dims_attr(&[xs[0].clone(), c.clone(), kl]))])?;
    let dt = dtype(imp, x);
    let z = imp.emit(
        OpKind::Full,
        &[],
        &[
            ("shape", dims_attr(&[xs[0].clone(), c.clone(), Dim::new(s + 1)])),
            ("value", AttrValue::Float(0.0)),
            ("dtype", AttrValue::DType(dt)),
        ],
    )?;
    let y = imp.emit(OpKind::ScatterAdd, &[z, i, x3], &[("axis", int(2))])?;
    let y = slice(imp, y, 2, 0, s as i64, 1)?;
    let mut out = vec![xs[0].clone(), c];
    out.extend(image.iter().map(|&d| Dim::new(d as u64)));
    one(reshape(imp, y, &out)?)
}

pub(super) fn center_crop_pad(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xs = shape(imp, x);
    let r = xs.len();
    let shape = imp.ints_input(node, 1, "shape")?.ok_or_else(|| NodeError::Invalid("shape is required".into()))?;
    let axes: Vec<usize> = match a_ints(node, "axes") {
        Some(a) => a.iter().map(|&v| norm_axis(v, r)).collect::<NResult<_>>()?,
        None => (0..r).collect(),
    };
    if shape.len() != axes.len() {
        return invalid(format!("{} sizes for {} axes", shape.len(), axes.len()));
    }
    let mut y = x;
    let mut low = vec![0i64; r];
    let mut high = vec![0i64; r];
    let mut seen = vec![false; r];
    for (&a, &want) in axes.iter().zip(&shape) {
        if std::mem::replace(&mut seen[a], true) {
            return invalid(format!("axis {a} is listed twice"));
        }
        if want < 0 {
            return invalid(format!("size {want}"));
        }
        let dim = static_dim(&xs[a], "CenterCropPad")? as i64;
        if want < dim {
            let start = (dim - want) / 2;
            y = slice(imp, y, a, start, start + want, 1)?;
        } else if want > dim {
            let d = want - dim;
            low[a] = d / 2;
            high[a] = d - d / 2;
        }
    }
    if low.iter().chain(&high).any(|&p| p != 0) {
        y = imp.emit(OpKind::Pad, &[y], &[("low", ints(&low)), ("high", ints(&high))])?;
    }
    one(y)
}
