//! Quantization and integer ops: `QuantizeLinear`, `DequantizeLinear`,
//! `DynamicQuantizeLinear`, `MatMulInteger`, `ConvInteger`, `QLinearMatMul`, `QLinearConv`,
//! `BitShift` and `BitwiseAnd`/`Or`/`Xor`/`Not`, each a composition of ladder ops.
//!
//! - Scales and zero points broadcast per tensor (a scalar or a one-element tensor), per axis
//!   (a 1-D tensor along `axis`) or per block (`block_size`: the parameter has x's rank and
//!   `ceil(d / block_size)` entries along `axis`; it is repeated with `expand` and cut to d).
//!   Block layouts need the blocked dim known at import.
//! - `QuantizeLinear` divides in x's type (or `precision`), rounds half to even, adds the
//!   zero point in f32 (f64 for f64 or integer x), saturates to the target range and
//!   converts: u8 (the default), i8, u16 or i16. 4-bit, 2-bit and float8 targets are
//!   unsupported (ladder has no such dtypes). A NaN quantizes to 0.
//! - `DequantizeLinear` computes `(x - zero_point) * scale` in f32 (f64 for i32 x or an f64
//!   scale, as NumPy promotes) and converts to the scale's type or `output_dtype`.
//! - The integer products widen both operands to i32, subtract the zero points (a 1-D
//!   zero point of the left operand is per row, of the right operand per column, of a
//!   convolution's weight per output channel) and use ladder's `matmul`, which wraps in i32,
//!   or `conv` in f64 (ladder's `conv` takes floats): every partial sum of 8-bit products is
//!   an integer far below 2^53, so it is exact, and the result converts through i64 to i32,
//!   wrapping as an i32 accumulation would. `QLinearMatMul`/`QLinearConv` then requantize in f64: `acc * (sa * sb / sy) + zy`,
//!   rounded half to even and saturated to the output type (the scale product is computed
//!   in the scales' own type).
//! - `BitShift` (unsigned types): left is `x * 2^y`, right is `x / 2^y`, both wrapping, and
//!   0 for a shift of at least the type's width. `BitwiseAnd`/`Or` are ladder's `and`/`or`
//!   on integers; `Xor` is `or - and` and `Not` is `-x - 1` (both exact in wrapping
//!   arithmetic).

use super::build::{
    bin, bin_scalar, convert, dims_attr, dtype, invalid, norm_axis, one, reshape, shape, unsupported, Outs,
};
use super::import::{a_int, a_str, Importer, NResult, Slot};
use super::ops::Row;
use super::proto::NodeProto;
use super::tensor::{dtype_name, dtype_of};
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind;

/// The quantization and integer ops, by ONNX name.
pub(super) const QUANT: &[Row] = &[
    ("BitShift", |imp, node, _| bit_shift(imp, node)),
    ("BitwiseAnd", |imp, node, _| bitwise(imp, node)),
    ("BitwiseNot", |imp, node, _| bitwise(imp, node)),
    ("BitwiseOr", |imp, node, _| bitwise(imp, node)),
    ("BitwiseXor", |imp, node, _| bitwise(imp, node)),
    ("ConvInteger", |imp, node, _| conv_integer(imp, node)),
    ("DequantizeLinear", |imp, node, _| dequantize_linear(imp, node)),
    ("DynamicQuantizeLinear", |imp, node, _| dynamic_quantize_linear(imp, node)),
    ("MatMulInteger", |imp, node, _| matmul_integer(imp, node)),
    ("QLinearConv", |imp, node, _| qlinear_conv(imp, node)),
    ("QLinearMatMul", |imp, node, _| qlinear_matmul(imp, node)),
    ("QuantizeLinear", |imp, node, _| quantize_linear(imp, node)),
];

fn clamp(imp: &mut Importer, v: Value, lo: f64, hi: f64) -> NResult<Value> {
    imp.emit(OpKind::Clamp, &[v], &[("min", AttrValue::Float(lo)), ("max", AttrValue::Float(hi))])
}

/// The statically known number of elements of `v`.
fn static_numel(imp: &Importer, v: Value) -> Option<u64> {
    shape(imp, v).iter().try_fold(1u64, |a, d| a.checked_mul(d.as_const()?))
}

/// A quantization parameter (scale or zero point) shaped to broadcast against `x_dims`: per
/// tensor, per axis or per block (see the module doc).
fn param_for(imp: &mut Importer, p: Value, x_dims: &[Dim], axis: i64, block: i64, what: &str) -> NResult<Value> {
    let pd = shape(imp, p);
    if pd.is_empty() {
        return Ok(p);
    }
    if static_numel(imp, p) == Some(1) {
        return reshape(imp, p, &[]);
    }
    let axis = norm_axis(axis, x_dims.len())?;
    if block == 0 {
        if pd.len() != 1 {
            return invalid(format!("{what} must be a scalar or 1-D without block_size, not of rank {}", pd.len()));
        }
        if let (Some(n), Some(d)) = (pd[0].as_const(), x_dims[axis].as_const()) {
            if n != d {
                return invalid(format!("{what} has {n} entries but x has {d} along axis {axis}"));
            }
        }
        let mut to = vec![Dim::new(1); x_dims.len()];
        to[axis] = pd[0].clone();
        return reshape(imp, p, &to);
    }
    if block < 0 {
        return invalid(format!("block_size must be positive, got {block}"));
    }
    if pd.len() != x_dims.len() {
        return invalid(format!("a blocked {what} must have x's rank {}, not {}", x_dims.len(), pd.len()));
    }
    for (i, (a, b)) in pd.iter().zip(x_dims).enumerate() {
        if i != axis && a != b {
            return invalid(format!("{what} has dim {i} = {a} but x has {b}"));
        }
    }
    let (Some(nb), Some(d)) = (pd[axis].as_const(), x_dims[axis].as_const()) else {
        return unsupported(format!("blocked quantization along the symbolic dim {}", x_dims[axis]));
    };
    // A block never needs to be longer than the dim, which also bounds the repeat below.
    let b = (block as u64).min(d.max(1));
    if nb.checked_mul(b).is_none_or(|t| t < d) || (nb > 0 && (nb - 1) * b >= d.max(1)) {
        return invalid(format!(
            "{what} has {nb} blocks along axis {axis}; x's {d} in blocks of {block} need {}",
            d.div_ceil(b)
        ));
    }
    let mut split = pd.clone();
    split.insert(axis + 1, Dim::new(1));
    let v = reshape(imp, p, &split)?;
    split[axis + 1] = Dim::new(b);
    let v = imp.emit(OpKind::Expand, &[v], &[("shape", dims_attr(&split))])?;
    let mut merged = pd;
    merged[axis] = Dim::new(nb * b);
    let v = reshape(imp, v, &merged)?;
    if nb * b == d {
        return Ok(v);
    }
    imp.emit(
        OpKind::Slice,
        &[v],
        &[
            ("axis", AttrValue::Int(axis as i64)),
            ("start", AttrValue::Int(0)),
            ("end", AttrValue::Int(d as i64)),
            ("step", AttrValue::Int(1)),
        ],
    )
}

/// The integer types a quantized tensor may have.
fn quant_range(d: DType) -> Option<(f64, f64)> {
    match d {
        DType::U8 | DType::I8 | DType::U16 | DType::I16 => d.int_range().map(|(lo, hi)| (lo as f64, hi as f64)),
        _ => None,
    }
}

fn output_dtype_attr(node: &NodeProto, name: &str) -> NResult<Option<DType>> {
    match a_int(node, name, 0) as i32 {
        0 => Ok(None),
        t => dtype_of(t)
            .map(Some)
            .ok_or_else(|| NodeError::Unsupported(format!("{name} {} (ladder has no such dtype)", dtype_name(t)))),
    }
}

pub fn quantize_linear(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let zp = imp.opt_input(node, 2)?;
    let (axis, block) = (a_int(node, "axis", 1), a_int(node, "block_size", 0));
    let attr_dt = output_dtype_attr(node, "output_dtype")?;
    let out = match (zp, attr_dt) {
        (Some(z), Some(a)) if dtype(imp, z) != a => {
            return invalid(format!("output_dtype {a} disagrees with the zero point's {}", dtype(imp, z)))
        }
        (Some(z), _) => dtype(imp, z),
        (None, Some(a)) => a,
        (None, None) => DType::U8,
    };
    let Some((qmin, qmax)) = quant_range(out) else {
        return unsupported(format!("QuantizeLinear to {out} (ladder quantizes to u8, i8, u16 and i16)"));
    };
    let (xt, st) = (dtype(imp, x), dtype(imp, scale));
    if !st.is_float() || !(xt.is_float() || xt == DType::I32) {
        return invalid(format!("QuantizeLinear of {xt} by a {st} scale"));
    }
    let xd = shape(imp, x);
    let s = param_for(imp, scale, &xd, axis, block, "y_scale")?;
    // The division's type: `precision`, else x's (an integer x divides in f64, as NumPy does).
    let cdt = match output_dtype_attr(node, "precision")? {
        Some(p) if p.is_float() => p,
        Some(p) => return invalid(format!("precision must be a float type, not {p}")),
        None if xt.is_int() => DType::F64,
        None => DType::promote(xt, st),
    };
    let (xc, sc) = (convert(imp, x, cdt)?, convert(imp, s, cdt)?);
    let q = bin(imp, OpKind::Div, xc, sc)?;
    let q = imp.emit(OpKind::Round, &[q], &[])?;
    let acc = if cdt == DType::F64 { DType::F64 } else { DType::F32 };
    let mut q = convert(imp, q, acc)?;
    if let Some(z) = zp {
        let z = param_for(imp, z, &xd, axis, block, "y_zero_point")?;
        let z = convert(imp, z, acc)?;
        q = bin(imp, OpKind::Add, q, z)?;
    }
    let q = clamp(imp, q, qmin, qmax)?;
    one(convert(imp, q, out)?)
}

pub fn dequantize_linear(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let zp = imp.opt_input(node, 2)?;
    let (axis, block) = (a_int(node, "axis", 1), a_int(node, "block_size", 0));
    let (xt, st) = (dtype(imp, x), dtype(imp, scale));
    if quant_range(xt).is_none() && xt != DType::I32 {
        return unsupported(format!("DequantizeLinear of {xt} (ladder dequantizes u8, i8, u16, i16 and i32)"));
    }
    if !st.is_float() {
        return invalid(format!("the scale must be a float type, not {st}"));
    }
    let out = output_dtype_attr(node, "output_dtype")?.unwrap_or(st);
    if !out.is_float() {
        return invalid(format!("output_dtype must be a float type, not {out}"));
    }
    let cdt = if xt == DType::I32 || st == DType::F64 { DType::F64 } else { DType::F32 };
    let xd = shape(imp, x);
    let mut d = convert(imp, x, cdt)?;
    if let Some(z) = zp {
        if dtype(imp, z) != xt {
            return invalid(format!("the zero point is {} but x is {xt}", dtype(imp, z)));
        }
        let z = param_for(imp, z, &xd, axis, block, "x_zero_point")?;
        let z = convert(imp, z, cdt)?;
        d = bin(imp, OpKind::Sub, d, z)?;
    }
    let s = param_for(imp, scale, &xd, axis, block, "x_scale")?;
    let s = convert(imp, s, cdt)?;
    let y = bin(imp, OpKind::Mul, d, s)?;
    one(convert(imp, y, out)?)
}

pub fn dynamic_quantize_linear(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xt = dtype(imp, x);
    if xt != DType::F32 {
        return invalid(format!("DynamicQuantizeLinear takes f32, not {xt}"));
    }
    let all: Vec<i64> = (0..shape(imp, x).len() as i64).collect();
    let axes = [("axes", AttrValue::Ints(all))];
    // Over everything, with 0 included (the reduce prims' identities make an empty x give 0).
    let hi = imp.emit(OpKind::ReduceMax, &[x], &axes)?;
    let hi = bin_scalar(imp, OpKind::Max, hi, 0.0)?;
    let lo = imp.emit(OpKind::ReduceMin, &[x], &axes)?;
    let lo = bin_scalar(imp, OpKind::Min, lo, 0.0)?;
    let same = bin(imp, OpKind::Eq, hi, lo)?;
    let range = bin(imp, OpKind::Sub, hi, lo)?;
    let one_f = imp.scalar(DType::F32, 1.0)?;
    let range = imp.emit(OpKind::Where, &[same, one_f, range], &[])?;
    let scale = bin_scalar(imp, OpKind::Div, range, 255.0)?;
    let m = bin(imp, OpKind::Div, lo, scale)?;
    let zero_f = imp.scalar(DType::F32, 0.0)?;
    let zp = bin(imp, OpKind::Sub, zero_f, m)?;
    let zp = clamp(imp, zp, 0.0, 255.0)?;
    let zp = imp.emit(OpKind::Round, &[zp], &[])?;
    let q = bin(imp, OpKind::Div, x, scale)?;
    let q = imp.emit(OpKind::Round, &[q], &[])?;
    let q = bin(imp, OpKind::Add, q, zp)?;
    let q = clamp(imp, q, 0.0, 255.0)?;
    let y = convert(imp, q, DType::U8)?;
    let zp = convert(imp, zp, DType::U8)?;
    Ok(vec![Some(Slot::Val(y)), Some(Slot::Val(scale)), Some(Slot::Val(zp))])
}

/// `x` widened to i32 minus its zero point (input `zi` of the node, if present), the zero
/// point reshaped to `zp_dims` when it is 1-D with more than one element.
fn widen_minus_zero(
    imp: &mut Importer,
    node: &NodeProto,
    x: Value,
    zi: usize,
    zp_dims: impl Fn(Dim) -> Vec<Dim>,
) -> NResult<Value> {
    let xt = dtype(imp, x);
    if !matches!(xt, DType::U8 | DType::I8) {
        return unsupported(format!("{} of {xt} (ladder takes u8 and i8 here)", node.op_type));
    }
    let w = convert(imp, x, DType::I32)?;
    let Some(z) = imp.opt_input(node, zi)? else { return Ok(w) };
    if dtype(imp, z) != xt {
        return invalid(format!("zero point {zi} is {} but its operand is {xt}", dtype(imp, z)));
    }
    let z = per_entry(imp, z, &zp_dims)?;
    let z = convert(imp, z, DType::I32)?;
    bin(imp, OpKind::Sub, w, z)
}

/// A scale or zero point: a scalar when it has one element, else a 1-D tensor reshaped by
/// `to` (which places its entries on the axis they belong to).
fn per_entry(imp: &mut Importer, p: Value, to: &dyn Fn(Dim) -> Vec<Dim>) -> NResult<Value> {
    let pd = shape(imp, p);
    if pd.is_empty() {
        return Ok(p);
    }
    if static_numel(imp, p) == Some(1) {
        return reshape(imp, p, &[]);
    }
    if pd.len() != 1 {
        return invalid(format!("a scale or zero point must be a scalar or 1-D, not of rank {}", pd.len()));
    }
    let target = to(pd[0].clone());
    reshape(imp, p, &target)
}

/// NumPy `matmul` of two i32 operands (1-D operands get a unit axis, removed after).
fn matmul(imp: &mut Importer, a: Value, b: Value) -> NResult<Value> {
    let (ra, rb) = (shape(imp, a).len(), shape(imp, b).len());
    if ra == 0 || rb == 0 {
        return invalid("matmul operands must have rank >= 1");
    }
    let unit = |imp: &mut Importer, v: Value, at: usize| {
        let mut d = shape(imp, v);
        d.insert(at, Dim::new(1));
        reshape(imp, v, &d)
    };
    let a2 = if ra == 1 { unit(imp, a, 0)? } else { a };
    let b2 = if rb == 1 { unit(imp, b, 1)? } else { b };
    let y = bin(imp, OpKind::Matmul, a2, b2)?;
    let mut yd = shape(imp, y);
    if rb == 1 {
        yd.pop();
    }
    if ra == 1 {
        let at = yd.len() - if rb == 1 { 1 } else { 2 };
        yd.remove(at);
    }
    reshape(imp, y, &yd)
}

/// Row zero points or scales of the left operand: `[M]` → `[M, 1]`.
fn rows(d: Dim) -> Vec<Dim> {
    vec![d, Dim::new(1)]
}

/// Column zero points or scales of the right operand: `[N]` stays `[N]`.
fn cols(d: Dim) -> Vec<Dim> {
    vec![d]
}

pub fn matmul_integer(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let a = imp.input(node, 0)?;
    let b = imp.input(node, 1)?;
    let a = widen_minus_zero(imp, node, a, 2, rows)?;
    let b = widen_minus_zero(imp, node, b, 3, cols)?;
    one(matmul(imp, a, b)?)
}

/// Output-channel entries of a convolution of `rank` (`[M]` → `[M, 1, ...]`).
fn out_channels(rank: usize) -> impl Fn(Dim) -> Vec<Dim> {
    move |d| std::iter::once(d).chain(std::iter::repeat_n(Dim::new(1), rank.saturating_sub(1))).collect()
}

pub fn conv_integer(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 1)?;
    let wr = shape(imp, w).len();
    let x = widen_minus_zero(imp, node, x, 2, |d| vec![d])?;
    let w = widen_minus_zero(imp, node, w, 3, out_channels(wr))?;
    one(int_conv(imp, node, x, w)?)
}

/// `conv` of two i32 tensors, exactly, through f64 (see the module doc).
fn int_conv(imp: &mut Importer, node: &NodeProto, x: Value, w: Value) -> NResult<Value> {
    let (xf, wf) = (convert(imp, x, DType::F64)?, convert(imp, w, DType::F64)?);
    let y = super::nn::conv_values(imp, node, xf, wf)?;
    let y = convert(imp, y, DType::I64)?;
    convert(imp, y, DType::I32)
}

/// Requantizes an i32 accumulator: `acc * (sa * sb / sy) + zy`, rounded half to even and
/// saturated to `out`.
fn requantize(imp: &mut Importer, acc: Value, scale: Value, zy: Option<Value>, out: DType) -> NResult<Value> {
    let Some((lo, hi)) = quant_range(out) else {
        return unsupported(format!("{out} results (ladder requantizes to u8, i8, u16 and i16)"));
    };
    let accf = convert(imp, acc, DType::F64)?;
    let s = convert(imp, scale, DType::F64)?;
    let mut r = bin(imp, OpKind::Mul, accf, s)?;
    if let Some(z) = zy {
        let z = convert(imp, z, DType::F64)?;
        r = bin(imp, OpKind::Add, r, z)?;
    }
    let r = imp.emit(OpKind::Round, &[r], &[])?;
    let r = clamp(imp, r, lo, hi)?;
    convert(imp, r, out)
}

/// `sa * sb / sy` in the scales' type, each shaped by its placement.
fn combined_scale(
    imp: &mut Importer,
    node: &NodeProto,
    (ia, fa): (usize, &dyn Fn(Dim) -> Vec<Dim>),
    (ib, fb): (usize, &dyn Fn(Dim) -> Vec<Dim>),
    iy: usize,
) -> NResult<Value> {
    let mut ss = Vec::with_capacity(3);
    for (i, f) in [(ia, fa), (ib, fb), (iy, &(|d| vec![d]) as &dyn Fn(Dim) -> Vec<Dim>)] {
        let s = imp.input(node, i)?;
        if !dtype(imp, s).is_float() {
            return invalid(format!("input {i} (a scale) must be a float type, not {}", dtype(imp, s)));
        }
        if i == iy && static_numel(imp, s) != Some(1) {
            return unsupported("a per-channel output scale");
        }
        ss.push(per_entry(imp, s, f)?);
    }
    let p = bin(imp, OpKind::Mul, ss[0], ss[1])?;
    bin(imp, OpKind::Div, p, ss[2])
}

/// The output zero point (input `i`, a scalar) and the output type it sets (else `default`).
fn output_zero(imp: &mut Importer, node: &NodeProto, i: usize, default: DType) -> NResult<(Option<Value>, DType)> {
    match imp.opt_input(node, i)? {
        None => Ok((None, default)),
        Some(z) => {
            if static_numel(imp, z) != Some(1) {
                return unsupported("a per-channel output zero point");
            }
            let z = reshape(imp, z, &[])?;
            Ok((Some(z), dtype(imp, z)))
        }
    }
}

pub fn qlinear_matmul(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let a = imp.input(node, 0)?;
    let b = imp.input(node, 3)?;
    let at = dtype(imp, a);
    let a = widen_minus_zero(imp, node, a, 2, rows)?;
    let b = widen_minus_zero(imp, node, b, 5, cols)?;
    let acc = matmul(imp, a, b)?;
    let scale = combined_scale(imp, node, (1, &rows), (4, &cols), 6)?;
    let (zy, out) = output_zero(imp, node, 7, at)?;
    one(requantize(imp, acc, scale, zy, out)?)
}

pub fn qlinear_conv(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 3)?;
    let (xt, r) = (dtype(imp, x), shape(imp, x).len());
    let wr = shape(imp, w).len();
    let x = widen_minus_zero(imp, node, x, 2, |d| vec![d])?;
    let w = widen_minus_zero(imp, node, w, 5, out_channels(wr))?;
    let mut acc = int_conv(imp, node, x, w)?;
    if let Some(bias) = imp.opt_input(node, 8)? {
        if dtype(imp, bias) != DType::I32 || shape(imp, bias).len() != 1 {
            return invalid("the bias must be a 1-D i32 tensor");
        }
        let bd = shape(imp, bias);
        let bias = reshape(imp, bias, &out_channels(r.saturating_sub(1))(bd[0].clone()))?;
        acc = bin(imp, OpKind::Add, acc, bias)?;
    }
    // Per-output-channel weight scales sit on dim 1 of the result.
    let channel = out_channels(r.saturating_sub(1));
    let scale = combined_scale(imp, node, (1, &|d| vec![d]), (4, &channel), 6)?;
    let (zy, out) = output_zero(imp, node, 7, xt)?;
    one(requantize(imp, acc, scale, zy, out)?)
}

pub fn bit_shift(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let y = imp.input(node, 1)?;
    let dt = dtype(imp, x);
    if !dt.is_unsigned() || dtype(imp, y) != dt {
        return invalid(format!("BitShift takes two tensors of one unsigned type, not {dt} and {}", dtype(imp, y)));
    }
    let bits = dt.int_bits().unwrap_or(64) as f64;
    let two = imp.scalar(dt, 2.0)?;
    match a_str(node, "direction", "").as_str() {
        "LEFT" => {
            // 2^y wraps to 0 once y reaches the width, and so does the product.
            let p = bin(imp, OpKind::Pow, two, y)?;
            one(bin(imp, OpKind::Mul, x, p)?)
        }
        "RIGHT" => {
            let fits = bin_scalar(imp, OpKind::Lt, y, bits)?;
            let ym = bin_scalar(imp, OpKind::Min, y, bits - 1.0)?;
            let p = bin(imp, OpKind::Pow, two, ym)?;
            let q = bin(imp, OpKind::Div, x, p)?;
            let zero = imp.scalar(dt, 0.0)?;
            one(imp.emit(OpKind::Where, &[fits, q, zero], &[])?)
        }
        d => invalid(format!("direction must be LEFT or RIGHT, not `{d}`")),
    }
}

pub fn bitwise(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let dt = dtype(imp, x);
    if !dt.is_int() {
        return invalid(format!("{} takes integers, not {dt}", node.op_type));
    }
    if node.op_type == "BitwiseNot" {
        let n = imp.emit(OpKind::Neg, &[x], &[])?;
        return one(bin_scalar(imp, OpKind::Sub, n, 1.0)?);
    }
    let y = imp.input(node, 1)?;
    if dtype(imp, y) != dt {
        return invalid(format!("{} of {dt} and {}", node.op_type, dtype(imp, y)));
    }
    one(match node.op_type.as_str() {
        "BitwiseAnd" => bin(imp, OpKind::And, x, y)?,
        "BitwiseOr" => bin(imp, OpKind::Or, x, y)?,
        _ => {
            let o = bin(imp, OpKind::Or, x, y)?;
            let a = bin(imp, OpKind::And, x, y)?;
            bin(imp, OpKind::Sub, o, a)?
        }
    })
}
