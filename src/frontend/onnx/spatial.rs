//! ONNX ops that move image patches around: `Col2Im`, `RoiAlign` and `DeformConv`, as
//! gathers and scatters over static shapes.
//!
//! Mapping choices:
//! - `Col2Im` is a `scatter_add` of the columns `[N, C, K*L]` into the zero padded image
//!   `[N, C, prod(padded dims)]` at a constant index table (block offset `k` and block
//!   position `l` to a flat position), then `reshape` and a `slice` per spatial dim removing
//!   the pads. `image_shape` and `block_shape` must be known at import.
//! - `RoiAlign` computes each sample point from the run-time `rois` with elementwise ops
//!   (`sampling_ratio` must be positive: an adaptive grid has a data-dependent size), clamps
//!   it as ONNX's reference does, and reads the four neighbours of every sample with one
//!   `gather` over `[C, N*H*W]` (offset by `batch_indices * H*W`). `avg` sums the weighted
//!   neighbours and divides by the sample count; `max` takes the largest weighted neighbour
//!   per sample, then the largest sample. Samples outside `[-1, H] x [-1, W]` count as 0.
//! - `DeformConv` (2-D) samples the input bilinearly at the kernel taps moved by `offset`
//!   (zero outside the image, as GridSample with zero padding), one `gather` per input for the
//!   four neighbours, scales by `mask`, and contracts the sampled columns with the weights as
//!   a grouped `matmul`; then adds `B`.

use super::import::{a_float, a_int, a_ints, a_str, Importer, NResult, Slot};
use super::proto::NodeProto;
use super::recur::{
    bin, bin_scalar, convert, dims_attr, dtype, full, int, invalid, permute, reshape, select, shape, slice, stack,
    static_dim, unsupported,
};
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind as K;
use crate::tensor::Tensor;

type Outs = Vec<Option<Slot>>;

fn one(v: Value) -> NResult<Outs> {
    Ok(vec![Some(Slot::Val(v))])
}

fn statics(d: &[Dim], what: &str) -> NResult<Vec<u64>> {
    d.iter().map(|x| static_dim(x, what)).collect()
}

/// Checks that a tensor of `numel` elements of `dt` fits the importer's tensor limit.
fn fits(imp: &Importer, numel: Option<u64>, dt: DType, what: &str) -> NResult<u64> {
    let limit = imp.opts.max_tensor_bytes;
    match numel.and_then(|n| n.checked_mul(dt.size_bytes() as u64)) {
        Some(bytes) if bytes <= limit => Ok(numel.unwrap_or(0)),
        other => Err(NodeError::Tensor(Box::new(super::ImportError::Limit {
            what: what.to_string(),
            size: other.unwrap_or(u64::MAX),
            limit,
        }))),
    }
}

fn product(v: &[u64]) -> Option<u64> {
    v.iter().try_fold(1u64, |a, &b| a.checked_mul(b))
}

fn ints_tensor(imp: &mut Importer, name: &str, dims: &[usize], data: Vec<i64>) -> NResult<Value> {
    let t = Tensor::from_i64(dims, data).map_err(|e| NodeError::Invalid(e.to_string()))?;
    Ok(imp.constant(name, t))
}

fn floats_tensor(imp: &mut Importer, name: &str, dims: &[usize], data: Vec<f64>, dt: DType) -> NResult<Value> {
    let t = Tensor::new(dims.to_vec(), crate::tensor::TensorData::F64(data))
        .map_err(|e| NodeError::Invalid(e.to_string()))?;
    let v = imp.constant(name, t);
    if dt == DType::F64 {
        return Ok(v);
    }
    imp.emit(K::ConvertElementType, &[v], &[("dtype", AttrValue::DType(dt))])
}

fn expand(imp: &mut Importer, v: Value, d: &[Dim]) -> NResult<Value> {
    if shape(imp, v) == d {
        return Ok(v);
    }
    imp.emit(K::Expand, &[v], &[("shape", dims_attr(d))])
}

fn un(imp: &mut Importer, op: K, v: Value) -> NResult<Value> {
    imp.emit(op, &[v], &[])
}

fn to_i64(imp: &mut Importer, v: Value) -> NResult<Value> {
    imp.emit(K::ConvertElementType, &[v], &[("dtype", AttrValue::DType(DType::I64))])
}

fn where_(imp: &mut Importer, c: Value, a: Value, b: Value) -> NResult<Value> {
    imp.emit(K::Where, &[c, a, b], &[])
}

fn reduce(imp: &mut Importer, op: K, v: Value, axes: &[i64]) -> NResult<Value> {
    imp.emit(op, &[v], &[("axes", AttrValue::Ints(axes.to_vec()))])
}

fn d(n: u64) -> Dim {
    Dim::new(n)
}

// ---------------------------------------------------------------------------------------------
// Col2Im

pub fn col2im(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let image =
        imp.ints_input(node, 1, "image_shape")?.ok_or_else(|| NodeError::Invalid("input 1 is required".into()))?;
    let block =
        imp.ints_input(node, 2, "block_shape")?.ok_or_else(|| NodeError::Invalid("input 2 is required".into()))?;
    let n = image.len();
    if n == 0 || block.len() != n {
        return invalid(format!("image_shape {image:?} and block_shape {block:?} must have the same non-zero length"));
    }
    if image.iter().chain(&block).any(|&v| v <= 0) {
        return invalid("image_shape and block_shape must be positive");
    }
    let list = |name: &str, default: i64, len: usize| -> NResult<Vec<i64>> {
        let v = a_ints(node, name).unwrap_or_else(|| vec![default; len]);
        if v.len() != len {
            return invalid(format!("`{name}` has {} entries, expected {len}", v.len()));
        }
        Ok(v)
    };
    let dil = list("dilations", 1, n)?;
    let strides = list("strides", 1, n)?;
    let pads = list("pads", 0, 2 * n)?;
    if dil.iter().chain(&strides).any(|&v| v <= 0) || pads.iter().any(|&p| p < 0) {
        return invalid("dilations and strides must be positive, pads non-negative");
    }
    let xs = shape(imp, x);
    if xs.len() != 3 {
        return invalid("the input must be 3-D [N, C*prod(block_shape), L]");
    }
    let img: Vec<u64> = image.iter().map(|&v| v as u64).collect();
    let blk: Vec<u64> = block.iter().map(|&v| v as u64).collect();
    let mut padded = Vec::with_capacity(n);
    let mut counts = Vec::with_capacity(n);
    for i in 0..n {
        let p = img[i]
            .checked_add(pads[i] as u64)
            .and_then(|v| v.checked_add(pads[i + n] as u64))
            .ok_or_else(|| NodeError::Invalid("padded image size overflow".into()))?;
        let span = (blk[i] - 1)
            .checked_mul(dil[i] as u64)
            .and_then(|v| v.checked_add(1))
            .ok_or_else(|| NodeError::Invalid("block span overflow".into()))?;
        if span > p {
            return invalid(format!("block {} (dilated to {span}) does not fit the padded size {p}", blk[i]));
        }
        padded.push(p);
        counts.push((p - span) / strides[i] as u64 + 1);
    }
    let k = product(&blk).ok_or_else(|| NodeError::Invalid("block size overflow".into()))?;
    let l = product(&counts).ok_or_else(|| NodeError::Invalid("block count overflow".into()))?;
    let ck = static_dim(&xs[1], "the column channels")?;
    if ck % k != 0 {
        return invalid(format!("input dim 1 ({ck}) is not a multiple of the block size {k}"));
    }
    if xs[2].as_const().is_some_and(|v| v != l) {
        return invalid(format!("input dim 2 is {} but the blocks number {l}", xs[2]));
    }
    let c = ck / k;
    let total = product(&padded).ok_or_else(|| NodeError::Invalid("image size overflow".into()))?;
    let kl = fits(imp, k.checked_mul(l), DType::I64, "Col2Im's index table")?;
    fits(imp, total.checked_mul(c), dtype(imp, x), "Col2Im's padded image")?;
    // Index table: block offset kk (row-major over block dims), block position ll (row-major
    // over the block counts) -> flat position in the padded image.
    let mut table = Vec::with_capacity(kl as usize);
    let mut kpos = vec![0u64; n];
    let mut lpos = vec![0u64; n];
    for kk in 0..k {
        let mut r = kk;
        for i in (0..n).rev() {
            kpos[i] = r % blk[i];
            r /= blk[i];
        }
        for ll in 0..l {
            let mut r = ll;
            for i in (0..n).rev() {
                lpos[i] = r % counts[i];
                r /= counts[i];
            }
            let mut flat = 0u64;
            for i in 0..n {
                let p = lpos[i] * strides[i] as u64 + kpos[i] * dil[i] as u64;
                flat = flat * padded[i] + p;
            }
            table.push(flat as i64);
        }
    }
    let dt = dtype(imp, x);
    let cols = reshape(imp, x, &[xs[0].clone(), d(c), d(kl)])?;
    let idx = ints_tensor(imp, "col2im_index", &[1, 1, kl as usize], table)?;
    let idx = expand(imp, idx, &[xs[0].clone(), d(c), d(kl)])?;
    let zero = full(imp, &[xs[0].clone(), d(c), d(total)], 0.0, dt)?;
    let y = imp.emit(K::ScatterAdd, &[zero, idx, cols], &[("axis", int(2))])?;
    let mut out_dims = vec![xs[0].clone(), d(c)];
    out_dims.extend(padded.iter().map(|&p| d(p)));
    let mut y = reshape(imp, y, &out_dims)?;
    for i in 0..n {
        if pads[i] != 0 || pads[i + n] != 0 {
            y = slice(imp, y, 2 + i, pads[i] as u64, pads[i] as u64 + img[i])?;
        }
    }
    one(y)
}

// ---------------------------------------------------------------------------------------------
// RoiAlign

/// Sample coordinates along one axis, clamped as ONNX's reference does: the low and high
/// neighbour indices (i64), their weights, and whether the sample lies inside `[-1, size]`.
struct Axis1 {
    lo: Value,
    hi: Value,
    w_lo: Value,
    w_hi: Value,
    valid: Value,
}

fn roi_axis(imp: &mut Importer, pos: Value, size: u64) -> NResult<Axis1> {
    let s = size as f64;
    let ge = bin_scalar(imp, K::Ge, pos, -1.0)?;
    let le = bin_scalar(imp, K::Le, pos, s)?;
    let valid = bin(imp, K::And, ge, le)?;
    let p = bin_scalar(imp, K::Max, pos, 0.0)?;
    let lo = un(imp, K::Floor, p)?;
    let top = imp.scalar(dtype(imp, p), s - 1.0)?;
    let at_end = bin(imp, K::Ge, lo, top)?;
    let lo = where_(imp, at_end, top, lo)?;
    let hi = bin_scalar(imp, K::Add, lo, 1.0)?;
    let hi = where_(imp, at_end, top, hi)?;
    let p = where_(imp, at_end, lo, p)?;
    let w_hi = bin(imp, K::Sub, p, lo)?;
    let one = imp.scalar(dtype(imp, p), 1.0)?;
    let w_lo = bin(imp, K::Sub, one, w_hi)?;
    Ok(Axis1 { lo: to_i64(imp, lo)?, hi: to_i64(imp, hi)?, w_lo, w_hi, valid })
}

pub fn roi_align(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let rois = imp.input(node, 1)?;
    let bidx = imp.input(node, 2)?;
    let xs = shape(imp, x);
    if xs.len() != 4 {
        return invalid("X must be 4-D [N, C, H, W]");
    }
    let dt = dtype(imp, x);
    if !dt.is_float() || dtype(imp, rois) != dt {
        return invalid("X and rois must be float tensors of one type");
    }
    let [nb, c, h, w] = <[u64; 4]>::try_from(statics(&xs, "X's shape")?).map_err(|_| NodeError::Invalid("X".into()))?;
    let rs = statics(&shape(imp, rois), "rois' shape")?;
    if rs.len() != 2 || rs[1] != 4 {
        return invalid("rois must be [R, 4]");
    }
    let r = rs[0];
    if shape(imp, bidx).len() != 1 || shape(imp, bidx)[0].as_const() != Some(r) {
        return invalid("batch_indices must be [R]");
    }
    let mode = a_str(node, "mode", "avg");
    if mode != "avg" && mode != "max" {
        return invalid(format!("mode `{mode}`"));
    }
    let half_pixel = match a_str(node, "coordinate_transformation_mode", "half_pixel").as_str() {
        "half_pixel" => imp.opset >= 16,
        "output_half_pixel" => false,
        m => return invalid(format!("coordinate_transformation_mode `{m}`")),
    };
    let (ph, pw) = (a_int(node, "output_height", 1), a_int(node, "output_width", 1));
    let ratio = a_int(node, "sampling_ratio", 0);
    let scale = a_float(node, "spatial_scale", 1.0);
    if ph <= 0 || pw <= 0 || ratio < 0 {
        return invalid("output_height/output_width must be positive and sampling_ratio non-negative");
    }
    if ratio == 0 {
        return unsupported("RoiAlign with sampling_ratio 0 (an adaptive grid whose size depends on the rois)");
    }
    if h == 0 || w == 0 {
        return invalid("RoiAlign needs a non-empty image");
    }
    let (ph, pw, g) = (ph as u64, pw as u64, ratio as u64);
    let samples = product(&[r, ph, g, pw, g, 4]);
    fits(imp, samples, DType::I64, "RoiAlign's sample indices")?;
    fits(imp, samples.and_then(|s| s.checked_mul(c)), dt, "RoiAlign's samples")?;
    let offset = if half_pixel { 0.5 } else { 0.0 };
    // Box edges [R] and bin sizes.
    let mut edge = Vec::with_capacity(4);
    for i in 0..4 {
        let e = select(imp, rois, 1, i)?;
        let e = bin_scalar(imp, K::Mul, e, scale)?;
        edge.push(bin_scalar(imp, K::Sub, e, offset)?);
    }
    let axis = |imp: &mut Importer, start: Value, end: Value, bins: u64, size: u64| -> NResult<Axis1> {
        let mut len = bin(imp, K::Sub, end, start)?;
        if !half_pixel {
            len = bin_scalar(imp, K::Max, len, 1.0)?;
        }
        let bin_size = bin_scalar(imp, K::Div, len, bins as f64)?;
        // pos[r, b, i] = start + b * bin + (i + 0.5) * bin / g
        let bcoef: Vec<f64> = (0..bins).map(|b| b as f64).collect();
        let icoef: Vec<f64> = (0..g).map(|i| (i as f64 + 0.5) / g as f64).collect();
        let bc = floats_tensor(imp, "roi_bins", &[1, bins as usize, 1], bcoef, dt)?;
        let ic = floats_tensor(imp, "roi_samples", &[1, 1, g as usize], icoef, dt)?;
        let bs = reshape(imp, bin_size, &[d(r), d(1), d(1)])?;
        let st = reshape(imp, start, &[d(r), d(1), d(1)])?;
        let a = bin(imp, K::Mul, bc, bs)?;
        let b = bin(imp, K::Mul, ic, bs)?;
        let s = bin(imp, K::Add, st, a)?;
        let pos = bin(imp, K::Add, s, b)?;
        roi_axis(imp, pos, size)
    };
    let ya = axis(imp, edge[1], edge[3], ph, h)?;
    let xa = axis(imp, edge[0], edge[2], pw, w)?;
    // To [R, PH, G, 1, 1] and [R, 1, 1, PW, G].
    let yv = |imp: &mut Importer, v: Value| reshape(imp, v, &[d(r), d(ph), d(g), d(1), d(1)]);
    let xv = |imp: &mut Importer, v: Value| reshape(imp, v, &[d(r), d(1), d(1), d(pw), d(g)]);
    let base = {
        let b = convert(imp, bidx, DType::I64)?;
        let b = bin_scalar(imp, K::Mul, b, (h * w) as f64)?;
        reshape(imp, b, &[d(r), d(1), d(1), d(1), d(1)])?
    };
    let mut idx = Vec::with_capacity(4);
    let mut wts = Vec::with_capacity(4);
    for (yi, wy) in [(ya.lo, ya.w_lo), (ya.hi, ya.w_hi)] {
        for (xi, wx) in [(xa.lo, xa.w_lo), (xa.hi, xa.w_hi)] {
            let yi = yv(imp, yi)?;
            let xi = xv(imp, xi)?;
            let row = bin_scalar(imp, K::Mul, yi, w as f64)?;
            let p = bin(imp, K::Add, row, xi)?;
            idx.push(bin(imp, K::Add, p, base)?);
            let wy = yv(imp, wy)?;
            let wx = xv(imp, wx)?;
            wts.push(bin(imp, K::Mul, wy, wx)?);
        }
    }
    let vy = yv(imp, ya.valid)?;
    let vx = xv(imp, xa.valid)?;
    let valid = bin(imp, K::And, vy, vx)?;
    let sample_dims = [d(r), d(ph), d(g), d(pw), d(g), d(4)];
    let idx = stack(imp, &idx, 5)?;
    let idx = expand(imp, idx, &sample_dims)?;
    let wts = stack(imp, &wts, 5)?;
    let m = samples.unwrap_or(0);
    let flat_idx = reshape(imp, idx, &[d(1), d(m)])?;
    let flat_idx = expand(imp, flat_idx, &[d(c), d(m)])?;
    // X as [C, N*H*W].
    let xp = permute(imp, x, &[1, 0, 2, 3])?;
    let xp = reshape(imp, xp, &[d(c), d(nb * h * w)])?;
    let vals = imp.emit(K::Gather, &[xp, flat_idx], &[("axis", int(1))])?;
    let mut vdims = vec![d(c)];
    vdims.extend(sample_dims.iter().cloned());
    let vals = reshape(imp, vals, &vdims)?;
    let weighted = bin(imp, K::Mul, vals, wts)?;
    let zero = imp.scalar(dt, 0.0)?;
    let per_sample =
        if mode == "avg" { reduce(imp, K::Sum, weighted, &[6])? } else { reduce(imp, K::Amax, weighted, &[6])? };
    let per_sample = where_(imp, valid, per_sample, zero)?;
    let y = if mode == "avg" {
        let s = reduce(imp, K::Sum, per_sample, &[3, 5])?;
        bin_scalar(imp, K::Div, s, (g * g) as f64)?
    } else {
        reduce(imp, K::Amax, per_sample, &[3, 5])?
    };
    // [C, R, PH, PW] -> [R, C, PH, PW]
    one(permute(imp, y, &[1, 0, 2, 3])?)
}

// ---------------------------------------------------------------------------------------------
// DeformConv

pub fn deform_conv(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let wt = imp.input(node, 1)?;
    let off = imp.input(node, 2)?;
    let bias = imp.opt_input(node, 3)?;
    let mask = imp.opt_input(node, 4)?;
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return invalid(format!("DeformConv on {dt}"));
    }
    let xs = shape(imp, x);
    if xs.len() != 4 {
        return unsupported(format!("DeformConv on a {}-D input (2-D images only)", xs.len().saturating_sub(2)));
    }
    let [n, c, h, w] = <[u64; 4]>::try_from(statics(&xs, "X's shape")?).map_err(|_| NodeError::Invalid("X".into()))?;
    let ws = statics(&shape(imp, wt), "W's shape")?;
    let os = statics(&shape(imp, off), "offset's shape")?;
    if ws.len() != 4 || os.len() != 4 {
        return invalid("W and offset must be 4-D");
    }
    let oc = ws[0];
    let kernel = a_ints(node, "kernel_shape").unwrap_or_else(|| vec![ws[2] as i64, ws[3] as i64]);
    let list = |name: &str, default: i64, len: usize| -> NResult<Vec<i64>> {
        let v = a_ints(node, name).unwrap_or_else(|| vec![default; len]);
        if v.len() != len {
            return invalid(format!("`{name}` has {} entries, expected {len}", v.len()));
        }
        Ok(v)
    };
    let dil = list("dilations", 1, 2)?;
    let strides = list("strides", 1, 2)?;
    let pads = list("pads", 0, 4)?;
    let group = a_int(node, "group", 1);
    let og = a_int(node, "offset_group", 1);
    if kernel.len() != 2
        || kernel[0] as u64 != ws[2]
        || kernel[1] as u64 != ws[3]
        || dil.iter().chain(&strides).any(|&v| v <= 0)
        || group <= 0
        || og <= 0
    {
        return invalid("bad kernel_shape, dilations, strides, group or offset_group");
    }
    const BOUND: i64 = 1 << 31;
    if dil.iter().chain(&strides).chain(&pads).any(|v| v.abs() > BOUND) {
        return invalid(format!("dilations, strides and pads must be within ±{BOUND}"));
    }
    let (group, og) = (group as u64, og as u64);
    if c % group != 0 || oc % group != 0 || ws[1] * group != c || c % og != 0 {
        return invalid(format!("channels {c} / output channels {oc} do not fit group {group} and offset_group {og}"));
    }
    let (kh, kw) = (ws[2], ws[3]);
    let k = kh * kw;
    let (oh, ow) = (os[2], os[3]);
    if os[0] != n || os[1] != og * k * 2 {
        return invalid(format!("offset has shape {os:?}, expected [{n}, {}, oH, oW]", og * k * 2));
    }
    for (i, (size, out)) in [(h, oh), (w, ow)].into_iter().enumerate() {
        let span = (i128::from(kernel[i]) - 1) * i128::from(dil[i]) + 1;
        let padded = i128::from(size) + i128::from(pads[i]) + i128::from(pads[i + 2]);
        let want = (padded - span).div_euclid(i128::from(strides[i])) + 1;
        if want != i128::from(out) {
            return invalid(format!("offset's spatial size {out} does not match the convolution's {want}"));
        }
    }
    let m = product(&[n, og, k, oh, ow, 4]);
    fits(imp, m, DType::I64, "DeformConv's sample indices")?;
    fits(imp, m.and_then(|v| v.checked_mul(c / og)), dt, "DeformConv's samples")?;
    // Tap positions without offsets: [1, 1, K, oH, oW].
    let mut by = Vec::with_capacity((k * oh * ow) as usize);
    let mut bx = Vec::with_capacity((k * oh * ow) as usize);
    for i in 0..kh as i64 {
        for j in 0..kw as i64 {
            for y in 0..oh as i64 {
                for xx in 0..ow as i64 {
                    by.push((y * strides[0] - pads[0] + i * dil[0]) as f64);
                    bx.push((xx * strides[1] - pads[1] + j * dil[1]) as f64);
                }
            }
        }
    }
    let tap = [1, 1, k as usize, oh as usize, ow as usize];
    let by = floats_tensor(imp, "deform_base_y", &tap, by, dt)?;
    let bx = floats_tensor(imp, "deform_base_x", &tap, bx, dt)?;
    let off6 = reshape(imp, off, &[d(n), d(og), d(k), d(2), d(oh), d(ow)])?;
    let oy = select(imp, off6, 3, 0)?;
    let ox = select(imp, off6, 3, 1)?;
    let py = bin(imp, K::Add, by, oy)?;
    let px = bin(imp, K::Add, bx, ox)?;
    // Corners: floor and floor + 1 along each axis, with linear weights and in-image flags.
    let corners = |imp: &mut Importer, p: Value, size: u64| -> NResult<[(Value, Value, Value); 2]> {
        let lo = un(imp, K::Floor, p)?;
        let frac = bin(imp, K::Sub, p, lo)?;
        let one = imp.scalar(dt, 1.0)?;
        let w_lo = bin(imp, K::Sub, one, frac)?;
        let hi = bin_scalar(imp, K::Add, lo, 1.0)?;
        let mut out = Vec::with_capacity(2);
        for (q, wq) in [(lo, w_lo), (hi, frac)] {
            let ge = bin_scalar(imp, K::Ge, q, 0.0)?;
            let le = bin_scalar(imp, K::Le, q, size as f64 - 1.0)?;
            let inside = bin(imp, K::And, ge, le)?;
            let cl = imp.emit(
                K::Clamp,
                &[q],
                &[("min", AttrValue::Float(0.0)), ("max", AttrValue::Float(size as f64 - 1.0))],
            )?;
            out.push((to_i64(imp, cl)?, wq, inside));
        }
        Ok([out[0], out[1]])
    };
    let cy = corners(imp, py, h)?;
    let cx = corners(imp, px, w)?;
    let mut idx = Vec::with_capacity(4);
    let mut wts = Vec::with_capacity(4);
    let mut oks = Vec::with_capacity(4);
    for &(yi, wy, iy) in &cy {
        for &(xi, wx, ix) in &cx {
            let row = bin_scalar(imp, K::Mul, yi, w as f64)?;
            idx.push(bin(imp, K::Add, row, xi)?);
            wts.push(bin(imp, K::Mul, wy, wx)?);
            oks.push(bin(imp, K::And, iy, ix)?);
        }
    }
    // [N, G, K, oH, oW, 4]
    let idx = stack(imp, &idx, 5)?;
    let wts = stack(imp, &wts, 5)?;
    let oks = stack(imp, &oks, 5)?;
    let cg = c / og;
    let mm = m.unwrap_or(0) / (n * og);
    let flat = reshape(imp, idx, &[d(n), d(og), d(1), d(mm)])?;
    let flat = expand(imp, flat, &[d(n), d(og), d(cg), d(mm)])?;
    let xg = reshape(imp, x, &[d(n), d(og), d(cg), d(h * w)])?;
    let vals = imp.emit(K::Gather, &[xg, flat], &[("axis", int(3))])?;
    let vals = reshape(imp, vals, &[d(n), d(og), d(cg), d(k), d(oh), d(ow), d(4)])?;
    let sd = [d(n), d(og), d(1), d(k), d(oh), d(ow), d(4)];
    let wts = reshape(imp, wts, &sd)?;
    let oks = reshape(imp, oks, &sd)?;
    let prod = bin(imp, K::Mul, vals, wts)?;
    let zero = imp.scalar(dt, 0.0)?;
    let prod = where_(imp, oks, prod, zero)?;
    let mut sampled = reduce(imp, K::Sum, prod, &[6])?; // [N, G, Cg, K, oH, oW]
    if let Some(mk) = mask {
        let ms = shape(imp, mk);
        if ms.len() != 4 || ms[1].as_const() != Some(og * k) {
            return invalid(format!("mask must be [N, {}, oH, oW]", og * k));
        }
        let mk = reshape(imp, mk, &[d(n), d(og), d(1), d(k), d(oh), d(ow)])?;
        sampled = bin(imp, K::Mul, sampled, mk)?;
    }
    // Columns [N, group, C/group * K, oH*oW] against W [1, group, oC/group, C/group * K].
    let cols = reshape(imp, sampled, &[d(n), d(group), d(c / group * k), d(oh * ow)])?;
    let wm = reshape(imp, wt, &[d(1), d(group), d(oc / group), d(c / group * k)])?;
    let y = imp.emit(K::Matmul, &[wm, cols], &[])?;
    let mut y = reshape(imp, y, &[d(n), d(oc), d(oh), d(ow)])?;
    if let Some(b) = bias {
        let b = reshape(imp, b, &[d(1), d(oc), d(1), d(1)])?;
        y = bin(imp, K::Add, y, b)?;
    }
    one(y)
}
