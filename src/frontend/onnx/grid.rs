//! Sampling ONNX ops: `GridSample`, `AffineGrid`, `RoiAlign` and `DeformConv`.
//!
//! Mapping choices:
//! - `GridSample` (1 to 3 spatial dims; cubic on 2) computes its sample positions at run time
//!   with ladder ops, per spatial axis: denormalize (`align_corners`), round half to even for
//!   nearest, clamp (`border`) or reflect (`reflection`) coordinates outside the sampled
//!   extent, then the taps (1 nearest, 2 linear, 4 cubic with a = -0.75) with their weights
//!   and the pixel index of each tap under the padding mode (`zeros` marks taps outside the
//!   input, which read 0). The per-axis taps combine by broadcasting into flat indices into
//!   the input flattened to `[N, C, H*W..]`; one `gather` fetches every tap, then a weighted
//!   `sum` over the taps. The input's spatial dims must be static.
//! - `RoiAlign` (a fixed `sampling_ratio`) builds each region's sample rows and columns the
//!   same way (bilinear, the reference's edge rules), gathers the planes of each region's
//!   batch index, then the samples, and averages or maxes them per bin.
//! - `DeformConv` (2-d) samples every kernel tap bilinearly at its offset position the same
//!   way (zero outside), scales by the mask, and contracts the sampled columns with the
//!   weights in one grouped `matmul`.
//! - `AffineGrid` is a `matmul` of a constant homogeneous base grid `[1, H*W.., D+1]` with
//!   `theta` transposed; `size` must be known at import.

use super::import::{a_float, a_int, a_ints, a_str, Importer, NResult};
use super::ops::Row;
use super::proto::NodeProto;
use super::spatial::{
    bin, bin_scalar, check_table, const_float, convert, dims_attr, dtype, int, ints, invalid, one, reshape, shape,
    slice, static_dim, sum_axes, un, unsupported, Outs,
};
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind;

/// The sampling ops, by ONNX name.
pub(super) const GRID: &[Row] = &[
    ("AffineGrid", |imp, node, _| affine_grid(imp, node)),
    ("DeformConv", |imp, node, _| deform_conv(imp, node)),
    ("GridSample", |imp, node, _| grid_sample(imp, node)),
    ("RoiAlign", |imp, node, _| roi_align(imp, node)),
];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

fn where_(imp: &mut Importer, c: Value, a: Value, b: Value) -> NResult<Value> {
    imp.emit(OpKind::Where, &[c, a, b], &[])
}

fn clamp(imp: &mut Importer, v: Value, lo: f64, hi: f64) -> NResult<Value> {
    imp.emit(OpKind::Clamp, &[v], &[("min", AttrValue::Float(lo)), ("max", AttrValue::Float(hi))])
}

/// `((a3 u + a2) u + a1) u + a0`.
fn horner(imp: &mut Importer, u: Value, a: [f64; 4]) -> NResult<Value> {
    let mut acc = bin_scalar(imp, OpKind::Mul, u, a[0])?;
    for &c in &a[1..3] {
        acc = bin_scalar(imp, OpKind::Add, acc, c)?;
        acc = bin(imp, OpKind::Mul, acc, u)?;
    }
    bin_scalar(imp, OpKind::Add, acc, a[3])
}

/// Reflects `v` into `[lo, hi]` by its nearer border, repeatedly (the reference rule); values
/// inside are kept.
fn reflect(imp: &mut Importer, v: Value, lo: f64, hi: f64) -> NResult<Value> {
    let rng = hi - lo;
    let below = bin_scalar(imp, OpKind::Lt, v, lo)?;
    let above = bin_scalar(imp, OpKind::Gt, v, hi)?;
    if rng <= 0.0 {
        let l = imp.scalar(dtype(imp, v), lo)?;
        let out = bin(imp, OpKind::Or, below, above)?;
        return where_(imp, out, l, v);
    }
    // Distance past the border, whole ranges crossed and the rest.
    let parts = |imp: &mut Importer, dx: Value| -> NResult<(Value, Value)> {
        let q = bin_scalar(imp, OpKind::Div, dx, rng)?;
        let n = un(imp, OpKind::Floor, q)?;
        let nr = bin_scalar(imp, OpKind::Mul, n, rng)?;
        let r = bin(imp, OpKind::Sub, dx, nr)?;
        let half = bin_scalar(imp, OpKind::Mul, n, 0.5)?;
        let fh = un(imp, OpKind::Floor, half)?;
        let even = bin(imp, OpKind::Eq, half, fh)?;
        Ok((r, even))
    };
    let lo_s = imp.scalar(dtype(imp, v), lo)?;
    let dx_lo = bin(imp, OpKind::Sub, lo_s, v)?;
    let (r, even) = parts(imp, dx_lo)?;
    let a = bin_scalar(imp, OpKind::Add, r, lo)?;
    let nr = un(imp, OpKind::Neg, r)?;
    let b = bin_scalar(imp, OpKind::Add, nr, hi)?;
    let from_lo = where_(imp, even, a, b)?;
    let dx_hi = bin_scalar(imp, OpKind::Sub, v, hi)?;
    let (r, even) = parts(imp, dx_hi)?;
    let nr = un(imp, OpKind::Neg, r)?;
    let a = bin_scalar(imp, OpKind::Add, nr, hi)?;
    let b = bin_scalar(imp, OpKind::Add, r, lo)?;
    let from_hi = where_(imp, even, a, b)?;
    let inner = where_(imp, above, from_hi, v)?;
    where_(imp, below, from_lo, inner)
}

/// One spatial axis: flat-index contribution `[N, t, P]` (i64, not yet scaled by the
/// stride), weights `[N, t, P]` (none for nearest) and, for zeros padding, validity.
struct AxisTaps {
    idx: Value,
    w: Option<Value>,
    valid: Option<Value>,
    taps: usize,
}

fn axis_taps(imp: &mut Importer, g: Value, len: u64, mode: Mode, pad: Padding, align: bool) -> NResult<AxisTaps> {
    let dt = dtype(imp, g);
    let l = len as f64;
    // Denormalize.
    let g1 = bin_scalar(imp, OpKind::Add, g, 1.0)?;
    let mut x = if align {
        bin_scalar(imp, OpKind::Mul, g1, (l - 1.0) / 2.0)?
    } else {
        let a = bin_scalar(imp, OpKind::Mul, g1, l)?;
        let b = bin_scalar(imp, OpKind::Sub, a, 1.0)?;
        bin_scalar(imp, OpKind::Mul, b, 0.5)?
    };
    if mode == Mode::Nearest {
        x = un(imp, OpKind::Round, x)?;
    }
    let (lo, hi) = if align { (0.0, l - 1.0) } else { (-0.5, l - 0.5) };
    match pad {
        Padding::Zeros => {}
        Padding::Border => {
            let below = bin_scalar(imp, OpKind::Lt, x, lo)?;
            let above = bin_scalar(imp, OpKind::Gt, x, hi)?;
            let out = bin(imp, OpKind::Or, below, above)?;
            let c = clamp(imp, x, 0.0, l - 1.0)?;
            x = where_(imp, out, c, x)?;
        }
        Padding::Reflection => x = reflect(imp, x, lo, hi)?,
    }
    let (base, offsets, w): (Value, Vec<f64>, Option<Value>) = match mode {
        Mode::Nearest => {
            // The reference truncates the (possibly reflected) coordinate to an integer.
            let i = convert(imp, x, DType::I64)?;
            (convert(imp, i, dt)?, vec![0.0], None)
        }
        Mode::Linear | Mode::Cubic => {
            let x0 = un(imp, OpKind::Floor, x)?;
            let f = bin(imp, OpKind::Sub, x, x0)?;
            let ws = if mode == Mode::Linear {
                let one_s = imp.scalar(dt, 1.0)?;
                vec![bin(imp, OpKind::Sub, one_s, f)?, f]
            } else {
                let a = -0.75;
                let u = bin_scalar(imp, OpKind::Add, f, 1.0)?;
                let c0 = horner(imp, u, [a, -5.0 * a, 8.0 * a, -4.0 * a])?;
                let c1 = horner(imp, f, [a + 2.0, -(a + 3.0), 0.0, 1.0])?;
                let one_s = imp.scalar(dt, 1.0)?;
                let v = bin(imp, OpKind::Sub, one_s, f)?;
                let c2 = horner(imp, v, [a + 2.0, -(a + 3.0), 0.0, 1.0])?;
                let two = imp.scalar(dt, 2.0)?;
                let w2 = bin(imp, OpKind::Sub, two, f)?;
                let c3 = horner(imp, w2, [a, -5.0 * a, 8.0 * a, -4.0 * a])?;
                vec![c0, c1, c2, c3]
            };
            let offs = if mode == Mode::Linear { vec![0.0, 1.0] } else { vec![-1.0, 0.0, 1.0, 2.0] };
            let w = imp.emit(OpKind::Cat, &ws, &[("axis", int(1))])?;
            (x0, offs, Some(w))
        }
    };
    let taps = offsets.len();
    let off = const_float(imp, "grid_taps", &[1, taps, 1], offsets, dt)?;
    let pos = bin(imp, OpKind::Add, base, off)?;
    let (pos, valid) = match pad {
        Padding::Zeros => {
            let ge = bin_scalar(imp, OpKind::Ge, pos, 0.0)?;
            let le = bin_scalar(imp, OpKind::Le, pos, l - 1.0)?;
            (pos, Some(bin(imp, OpKind::And, ge, le)?))
        }
        Padding::Border => (pos, None),
        Padding::Reflection => {
            let r = reflect(imp, pos, lo, hi)?;
            let i = convert(imp, r, DType::I64)?;
            (convert(imp, i, dt)?, None)
        }
    };
    let pos = clamp(imp, pos, 0.0, l - 1.0)?;
    let idx = convert(imp, pos, DType::I64)?;
    Ok(AxisTaps { idx, w, valid, taps })
}

pub(super) fn grid_sample(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let grid = imp.input(node, 1)?;
    let xs = shape(imp, x);
    let gs = shape(imp, grid);
    let r = xs.len();
    if !(3..=5).contains(&r) || gs.len() != r {
        return invalid(format!(
            "GridSample needs X [N, C, d..] (1 to 3 spatial dims) and a grid of the same rank, got ranks {r} and {}",
            gs.len()
        ));
    }
    let d = r - 2;
    if gs[r - 1].as_const() != Some(d as u64) {
        return invalid(format!("the grid's last dim must be {d}, got {}", gs[r - 1]));
    }
    let mode = match a_str(node, "mode", if imp.opset >= 20 { "linear" } else { "bilinear" }).as_str() {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        m => return invalid(format!("unknown GridSample mode `{m}`")),
    };
    if mode == Mode::Cubic && d != 2 {
        return unsupported(format!("GridSample cubic mode on {d} spatial dims (2 only)"));
    }
    let pad = match a_str(node, "padding_mode", "zeros").as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        m => return invalid(format!("unknown padding_mode `{m}`")),
    };
    let align = a_int(node, "align_corners", 0) != 0;
    let xdt = dtype(imp, x);
    if !xdt.is_float() {
        return unsupported(format!("GridSample of {xdt}"));
    }
    let gdt = dtype(imp, grid);
    let work = match gdt {
        DType::F64 | DType::F32 => gdt,
        t if t.is_float() => DType::F32,
        t => return invalid(format!("a grid of {t}")),
    };
    let sizes: Vec<u64> = xs[2..].iter().map(|s| static_dim(s, "GridSample")).collect::<NResult<_>>()?;
    let mul_all = |ds: &[Dim]| -> NResult<Dim> {
        ds.iter()
            .try_fold(Dim::new(1), |a, b| a.mul(b))
            .map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}")))
    };
    let p = mul_all(&gs[1..r - 1])?;
    let n = xs[0].clone();
    let g = convert(imp, grid, work)?;
    let g = reshape(imp, g, &[gs[0].clone(), p.clone(), Dim::new(d as u64)])?;
    let mut flat: Option<Value> = None;
    let mut weight: Option<Value> = None;
    let mut valid: Option<Value> = None;
    let mut taps_total = 1usize;
    let mut stride = 1u64;
    for i in (0..d).rev() {
        // Grid component 0 is the last spatial axis (x), 1 the one before (y), ...
        let comp = (d - 1 - i) as i64;
        let gi = slice(imp, g, 2, comp, comp + 1, 1)?;
        let gi = reshape(imp, gi, &[gs[0].clone(), Dim::new(1), p.clone()])?;
        let t = axis_taps(imp, gi, sizes[i], mode, pad, align)?;
        // Tap axes: [N, t_0, .., t_{d-1}, P]; this axis's taps at 1 + i.
        let mut shape = vec![gs[0].clone()];
        shape.extend((0..d).map(|j| Dim::new(if j == i { t.taps as u64 } else { 1 })));
        shape.push(p.clone());
        let idx = reshape(imp, t.idx, &shape)?;
        let idx = if stride != 1 { bin_scalar(imp, OpKind::Mul, idx, stride as f64)? } else { idx };
        flat = Some(match flat {
            None => idx,
            Some(f) => bin(imp, OpKind::Add, f, idx)?,
        });
        if let Some(w) = t.w {
            let w = reshape(imp, w, &shape)?;
            weight = Some(match weight {
                None => w,
                Some(a) => bin(imp, OpKind::Mul, a, w)?,
            });
        }
        if let Some(v) = t.valid {
            let v = reshape(imp, v, &shape)?;
            valid = Some(match valid {
                None => v,
                Some(a) => bin(imp, OpKind::And, a, v)?,
            });
        }
        taps_total *= t.taps;
        stride = stride.saturating_mul(sizes[i]);
    }
    let flat = flat.ok_or_else(|| NodeError::Invalid("no spatial dims".into()))?;
    let s_total = Dim::new(stride);
    let c = xs[1].clone();
    let t_dim = Dim::new(taps_total as u64);
    let tp = t_dim.mul(&p).map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}")))?;
    // Every axis contributes to the index, the weights and the validity, so each already
    // has the full tap shape [N, t_0, .., t_{d-1}, P].
    let idx = reshape(imp, flat, &[gs[0].clone(), Dim::new(1), tp.clone()])?;
    let idx = imp.emit(OpKind::Expand, &[idx], &[("shape", dims_attr(&[n.clone(), c.clone(), tp]))])?;
    let xf = reshape(imp, x, &[n.clone(), c.clone(), s_total])?;
    let got = imp.emit(OpKind::Gather, &[xf, idx], &[("axis", int(2))])?;
    let mut y = reshape(imp, got, &[n.clone(), c.clone(), t_dim.clone(), p.clone()])?;
    if let Some(v) = valid {
        let v = reshape(imp, v, &[gs[0].clone(), Dim::new(1), t_dim.clone(), p.clone()])?;
        let z = imp.scalar(xdt, 0.0)?;
        y = where_(imp, v, y, z)?;
    }
    if let Some(w) = weight {
        let w = reshape(imp, w, &[gs[0].clone(), Dim::new(1), t_dim.clone(), p.clone()])?;
        let w = convert(imp, w, xdt)?;
        y = bin(imp, OpKind::Mul, y, w)?;
    }
    let y = sum_axes(imp, y, &[2], false)?;
    let y = convert(imp, y, xdt)?;
    let mut out = vec![n, c];
    out.extend(gs[1..r - 1].iter().cloned());
    one(reshape(imp, y, &out)?)
}

pub(super) fn affine_grid(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let theta = imp.input(node, 0)?;
    let ts = shape(imp, theta);
    let size = imp.ints_input(node, 1, "size")?.ok_or_else(|| NodeError::Invalid("size is required".into()))?;
    if size.len() != 4 && size.len() != 5 {
        return invalid(format!("size must be [N, C, H, W] or [N, C, D, H, W], got {size:?}"));
    }
    let d = size.len() - 2;
    if ts.len() != 3 || ts[1].as_const() != Some(d as u64) || ts[2].as_const() != Some(d as u64 + 1) {
        return invalid(format!("theta must be [N, {d}, {}], got {ts:?}", d + 1));
    }
    let spatial = &size[2..];
    if spatial.iter().any(|&s| s < 0) {
        return invalid(format!("size {size:?}"));
    }
    let s_total = spatial.iter().try_fold(1u64, |a, &s| a.checked_mul(s as u64)).unwrap_or(u64::MAX);
    check_table(imp, s_total.saturating_mul(d as u64 + 1), 8, "the AffineGrid base grid")?;
    let align = a_int(node, "align_corners", 0) != 0;
    let coord = |len: i64, i: i64| -> f64 {
        if align {
            if len <= 1 {
                -1.0
            } else {
                -1.0 + i as f64 * 2.0 / (len - 1) as f64
            }
        } else {
            let step = 2.0 / len as f64;
            -1.0 + step / 2.0 + i as f64 * step
        }
    };
    let mut base = Vec::with_capacity(s_total as usize * (d + 1));
    let mut pos = vec![0i64; d];
    for _ in 0..s_total {
        // [x (last axis), y, (z), 1]
        for j in (0..d).rev() {
            base.push(coord(spatial[j], pos[j]));
        }
        base.push(1.0);
        for j in (0..d).rev() {
            pos[j] += 1;
            if pos[j] < spatial[j] {
                break;
            }
            pos[j] = 0;
        }
    }
    let dt = dtype(imp, theta);
    if !dt.is_float() {
        return invalid(format!("theta of {dt}"));
    }
    let b = const_float(imp, "affine_base", &[1, s_total as usize, d + 1], base, dt)?;
    let y = imp.emit(OpKind::Matmul, &[b, theta], &[("transpose_b", AttrValue::Bool(true))])?;
    let mut out = vec![ts[0].clone()];
    out.extend(spatial.iter().map(|&s| Dim::new(s as u64)));
    out.push(Dim::new(d as u64));
    one(reshape(imp, y, &out)?)
}

/// One axis of `RoiAlign`'s samples: bilinear rows (or columns) `[R, P, G, 2]` (low, high)
/// and their weights, zero for samples outside `[-1, len]`.
fn roi_axis(
    imp: &mut Importer,
    start: Value,
    bin_size: Value,
    pooled: usize,
    grid: usize,
    len: u64,
) -> NResult<(Value, Value)> {
    let dt = dtype(imp, start);
    let l = len as f64;
    // Sample v = start + bin_size * (p + (g + 0.5) / G), [R, P, G].
    let t: Vec<f64> =
        (0..pooled).flat_map(|p| (0..grid).map(move |g| p as f64 + (g as f64 + 0.5) / grid as f64)).collect();
    let t = const_float(imp, "roi_steps", &[1, pooled, grid], t, dt)?;
    let v = bin_mul_add(imp, bin_size, t, start)?;
    let ge = bin_scalar(imp, OpKind::Ge, v, -1.0)?;
    let le = bin_scalar(imp, OpKind::Le, v, l)?;
    let valid = bin(imp, OpKind::And, ge, le)?;
    let zero = imp.scalar(dt, 0.0)?;
    let v = bin(imp, OpKind::Max, v, zero)?;
    let low = un(imp, OpKind::Floor, v)?;
    let edge = bin_scalar(imp, OpKind::Ge, low, l - 1.0)?;
    let last = imp.scalar(dt, l - 1.0)?;
    let low = where_(imp, edge, last, low)?;
    let up = bin_scalar(imp, OpKind::Add, low, 1.0)?;
    let high = where_(imp, edge, last, up)?;
    let v = where_(imp, edge, low, v)?;
    let lw = bin(imp, OpKind::Sub, v, low)?;
    let one_s = imp.scalar(dt, 1.0)?;
    let hw = bin(imp, OpKind::Sub, one_s, lw)?;
    let u = |imp: &mut Importer, x: Value| -> NResult<Value> {
        let mut d = shape(imp, x);
        d.push(Dim::new(1));
        reshape(imp, x, &d)
    };
    let (hw, lw, low, high) = (u(imp, hw)?, u(imp, lw)?, u(imp, low)?, u(imp, high)?);
    let w = imp.emit(OpKind::Cat, &[hw, lw], &[("axis", int(3))])?;
    let vf = convert(imp, valid, dt)?;
    let vf = u(imp, vf)?;
    let w = bin(imp, OpKind::Mul, w, vf)?;
    let i = imp.emit(OpKind::Cat, &[low, high], &[("axis", int(3))])?;
    Ok((convert(imp, i, DType::I64)?, w))
}

/// `a * b + c`.
fn bin_mul_add(imp: &mut Importer, a: Value, b: Value, c: Value) -> NResult<Value> {
    let m = bin(imp, OpKind::Mul, a, b)?;
    bin(imp, OpKind::Add, m, c)
}

/// `RoiAlign` with a fixed `sampling_ratio`: per region, `G x G` bilinear samples in each
/// output bin (the reference's clamping at the last row and column, zero weight outside
/// `[-1, size]`), averaged or maxed. The regions are run-time data; the samples are gathered
/// from the input rows picked by `batch_indices`.
pub(super) fn roi_align(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let rois = imp.input(node, 1)?;
    let bidx = imp.input(node, 2)?;
    let xs = shape(imp, x);
    let rs = shape(imp, rois);
    if xs.len() != 4 || rs.len() != 2 || rs[1].as_const() != Some(4) || shape(imp, bidx).len() != 1 {
        return invalid("RoiAlign needs X [N, C, H, W], rois [R, 4] and batch_indices [R]");
    }
    let avg = match a_str(node, "mode", "avg").as_str() {
        "avg" => true,
        "max" => false,
        m => return invalid(format!("unknown RoiAlign mode `{m}`")),
    };
    let half = match a_str(
        node,
        "coordinate_transformation_mode",
        if imp.opset >= 16 { "half_pixel" } else { "output_half_pixel" },
    )
    .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => return invalid(format!("unknown coordinate_transformation_mode `{m}`")),
    };
    let (ph, pw) = (a_int(node, "output_height", 1), a_int(node, "output_width", 1));
    let g = a_int(node, "sampling_ratio", 0);
    let scale = a_float(node, "spatial_scale", 1.0);
    if ph < 1 || pw < 1 || g < 0 {
        return invalid(format!("output {ph}x{pw}, sampling_ratio {g}"));
    }
    if g == 0 {
        return unsupported("RoiAlign with an adaptive sampling_ratio (0): the sample count depends on the regions");
    }
    let taps = [ph, pw, g, g, 4].iter().try_fold(1u64, |a, &v| a.checked_mul(v as u64)).unwrap_or(u64::MAX);
    check_table(imp, taps, 8, "the RoiAlign samples per region")?;
    let (ph, pw, g) = (ph as usize, pw as usize, g as usize);
    let h = static_dim(&xs[2], "RoiAlign")?;
    let w = static_dim(&xs[3], "RoiAlign")?;
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return invalid(format!("RoiAlign of {dt}"));
    }
    let work = if dt == DType::F64 { dt } else { DType::F32 };
    let r = rs[0].clone();
    let rois = convert(imp, rois, work)?;
    let col = |imp: &mut Importer, k: i64| -> NResult<Value> {
        let c = slice(imp, rois, 1, k, k + 1, 1)?;
        let c = bin_scalar(imp, OpKind::Mul, c, scale)?;
        let c = if half { bin_scalar(imp, OpKind::Sub, c, 0.5)? } else { c };
        reshape(imp, c, &[r.clone(), Dim::new(1), Dim::new(1)])
    };
    let (sw, sh, ew, eh) = (col(imp, 0)?, col(imp, 1)?, col(imp, 2)?, col(imp, 3)?);
    let mut rw = bin(imp, OpKind::Sub, ew, sw)?;
    let mut rh = bin(imp, OpKind::Sub, eh, sh)?;
    if !half {
        let one_s = imp.scalar(work, 1.0)?;
        rw = bin(imp, OpKind::Max, rw, one_s)?;
        rh = bin(imp, OpKind::Max, rh, one_s)?;
    }
    let bh = bin_scalar(imp, OpKind::Div, rh, ph as f64)?;
    let bw = bin_scalar(imp, OpKind::Div, rw, pw as f64)?;
    let (iy, wy) = roi_axis(imp, sh, bh, ph, g, h)?;
    let (ix, wx) = roi_axis(imp, sw, bw, pw, g, w)?;
    // Combine to [R, PH, G, 2, PW, G, 2].
    let d = |v: u64| Dim::new(v);
    let ysh = [r.clone(), d(ph as u64), d(g as u64), d(2), d(1), d(1), d(1)];
    let xsh = [r.clone(), d(1), d(1), d(1), d(pw as u64), d(g as u64), d(2)];
    let iy = reshape(imp, iy, &ysh)?;
    let iy = bin_scalar(imp, OpKind::Mul, iy, w as f64)?;
    let ix = reshape(imp, ix, &xsh)?;
    let flat = bin(imp, OpKind::Add, iy, ix)?;
    let wy = reshape(imp, wy, &ysh)?;
    let wx = reshape(imp, wx, &xsh)?;
    let wt = bin(imp, OpKind::Mul, wy, wx)?;
    let t = d(taps);
    let c = xs[1].clone();
    let flat = reshape(imp, flat, &[r.clone(), d(1), t.clone()])?;
    let flat = imp.emit(OpKind::Expand, &[flat], &[("shape", dims_attr(&[r.clone(), c.clone(), t.clone()]))])?;
    // The input planes of each region's image.
    let hw = d(h * w);
    let xf = reshape(imp, x, &[xs[0].clone(), c.clone(), hw.clone()])?;
    let xf = convert(imp, xf, work)?;
    let b = convert(imp, bidx, DType::I64)?;
    let b = reshape(imp, b, &[r.clone(), d(1), d(1)])?;
    let b = imp.emit(OpKind::Expand, &[b], &[("shape", dims_attr(&[r.clone(), c.clone(), hw]))])?;
    let planes = imp.emit(OpKind::Gather, &[xf, b], &[("axis", int(0))])?;
    let got = imp.emit(OpKind::Gather, &[planes, flat], &[("axis", int(2))])?;
    let got =
        reshape(imp, got, &[r.clone(), c.clone(), d(ph as u64), d(g as u64), d(2), d(pw as u64), d(g as u64), d(2)])?;
    let wt = reshape(imp, wt, &[r.clone(), d(1), d(ph as u64), d(g as u64), d(2), d(pw as u64), d(g as u64), d(2)])?;
    let prod = bin(imp, OpKind::Mul, got, wt)?;
    let y = if avg {
        let s = sum_axes(imp, prod, &[3, 4, 6, 7], false)?;
        bin_scalar(imp, OpKind::Div, s, (g * g) as f64)?
    } else {
        // Each sample is the largest of its four weighted corners; the bin the largest sample.
        let m = imp.emit(OpKind::Amax, &[prod], &[("axes", ints(&[4, 7])), ("keepdim", AttrValue::Bool(false))])?;
        imp.emit(OpKind::Amax, &[m], &[("axes", ints(&[3, 5])), ("keepdim", AttrValue::Bool(false))])?
    };
    one(convert(imp, y, dt)?)
}

/// One axis of `DeformConv`'s bilinear taps at pixel coordinates `v [N, G, K, P]`: the two
/// rows (or columns) `floor(v)`, `floor(v) + 1` clamped into the input, their weights, and
/// whether each is inside (outside taps read 0).
fn deform_axis(imp: &mut Importer, v: Value, len: u64) -> NResult<(Value, Value, Value)> {
    let dt = dtype(imp, v);
    let l = len as f64;
    let v0 = un(imp, OpKind::Floor, v)?;
    let f = bin(imp, OpKind::Sub, v, v0)?;
    let one_s = imp.scalar(dt, 1.0)?;
    let g = bin(imp, OpKind::Sub, one_s, f)?;
    let v1 = bin_scalar(imp, OpKind::Add, v0, 1.0)?;
    let mut d = shape(imp, v);
    d.insert(2, Dim::new(1));
    let (v0, v1, f, g) = (reshape(imp, v0, &d)?, reshape(imp, v1, &d)?, reshape(imp, f, &d)?, reshape(imp, g, &d)?);
    let pos = imp.emit(OpKind::Cat, &[v0, v1], &[("axis", int(2))])?;
    let w = imp.emit(OpKind::Cat, &[g, f], &[("axis", int(2))])?;
    let ge = bin_scalar(imp, OpKind::Ge, pos, 0.0)?;
    let le = bin_scalar(imp, OpKind::Le, pos, l - 1.0)?;
    let valid = bin(imp, OpKind::And, ge, le)?;
    let pos = clamp(imp, pos, 0.0, (l - 1.0).max(0.0))?;
    Ok((convert(imp, pos, DType::I64)?, w, valid))
}

/// `DeformConv` (2-d): every kernel tap samples the input bilinearly (zero outside) at its
/// position moved by the run-time offsets, times the optional mask; the sampled columns are
/// then a grouped `matmul` with the weights, plus the bias.
pub(super) fn deform_conv(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let wt = imp.input(node, 1)?;
    let off = imp.input(node, 2)?;
    let bias = imp.opt_input(node, 3)?;
    let mask = imp.opt_input(node, 4)?;
    let xs = shape(imp, x);
    if xs.len() != 4 {
        return unsupported(format!("DeformConv on {} spatial dims (2 only)", xs.len().saturating_sub(2)));
    }
    let st = |v: Value, what: &str, imp: &Importer| -> NResult<Vec<u64>> {
        shape(imp, v).iter().map(|d| static_dim(d, what)).collect()
    };
    let xd = st(x, "DeformConv", imp)?;
    let wd = st(wt, "DeformConv weights", imp)?;
    let od = st(off, "DeformConv offsets", imp)?;
    if wd.len() != 4 || od.len() != 4 {
        return invalid("DeformConv needs W [O, C/group, kH, kW] and offset [N, 2*G*kH*kW, oH, oW]");
    }
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let kernel = a_ints(node, "kernel_shape").unwrap_or_else(|| vec![wd[2] as i64, wd[3] as i64]);
    let strides = a_ints(node, "strides").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1, 1]);
    let dil = a_ints(node, "dilations").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1, 1]);
    let pads = a_ints(node, "pads").filter(|s| !s.is_empty()).unwrap_or_else(|| vec![0; 4]);
    let group = a_int(node, "group", 1);
    let og = a_int(node, "offset_group", 1);
    let bounded = |v: &i64| (1..=1 << 20).contains(v);
    if kernel.len() != 2 || strides.len() != 2 || dil.len() != 2 || pads.len() != 4 {
        return invalid("kernel_shape, strides, dilations and pads need one entry per spatial dim");
    }
    if !kernel.iter().chain(&strides).chain(&dil).chain([&group, &og]).all(bounded)
        || !pads.iter().all(|p| (0..=1 << 20).contains(p))
    {
        return invalid(format!(
            "DeformConv kernel {kernel:?}, strides {strides:?}, dilations {dil:?}, pads {pads:?}, group {group}, offset_group {og}"
        ));
    }
    let (kh, kw, group, og) = (kernel[0] as u64, kernel[1] as u64, group as u64, og as u64);
    let o = wd[0];
    if wd[2] != kh || wd[3] != kw || wd[1] * group != c || o % group != 0 || c % og != 0 {
        return invalid(format!("W {wd:?} does not fit X {xd:?} with group {group}, offset_group {og}"));
    }
    let k = kh * kw;
    let (oh, ow) = (od[2], od[3]);
    let expect = |i: usize, len: u64, kk: u64| -> i64 {
        (len as i64 + pads[i] + pads[i + 2] - ((kk as i64 - 1) * dil[i] + 1)) / strides[i] + 1
    };
    if od[0] != n || od[1] != 2 * og * k || oh as i64 != expect(0, h, kh) || ow as i64 != expect(1, w, kw) {
        return invalid(format!("offset {od:?} does not fit X {xd:?} and the kernel {kernel:?}"));
    }
    let p = oh * ow;
    check_table(imp, k.saturating_mul(p), 16, "the DeformConv tap positions")?;
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return invalid(format!("DeformConv of {dt}"));
    }
    let work = if dt == DType::F64 { dt } else { DType::F32 };
    let dm = |v: &[u64]| -> Vec<Dim> { v.iter().map(|&d| Dim::new(d)).collect() };
    // Sample coordinates [N, G, K, P].
    let offv = convert(imp, off, work)?;
    let offv = reshape(imp, offv, &dm(&[n, og, k, 2, p]))?;
    let mut base_y = Vec::with_capacity((k * p) as usize);
    let mut base_x = Vec::with_capacity((k * p) as usize);
    for i in 0..kh as i64 {
        for j in 0..kw as i64 {
            for a in 0..oh as i64 {
                for b in 0..ow as i64 {
                    base_y.push((a * strides[0] - pads[0] + i * dil[0]) as f64);
                    base_x.push((b * strides[1] - pads[1] + j * dil[1]) as f64);
                }
            }
        }
    }
    let axis = |imp: &mut Importer, comp: i64, base: Vec<f64>, len: u64| -> NResult<(Value, Value, Value)> {
        let o = slice(imp, offv, 3, comp, comp + 1, 1)?;
        let o = reshape(imp, o, &dm(&[n, og, k, p]))?;
        let b = const_float(imp, "deform_base", &[1, 1, k as usize, p as usize], base, work)?;
        let v = bin(imp, OpKind::Add, o, b)?;
        deform_axis(imp, v, len)
    };
    let (iy, wy, vy) = axis(imp, 0, base_y, h)?;
    let (ix, wx, vx) = axis(imp, 1, base_x, w)?;
    // Taps [N, G, 2, 2, K, P].
    let ysh = dm(&[n, og, 2, 1, k, p]);
    let xsh = dm(&[n, og, 1, 2, k, p]);
    let iy = reshape(imp, iy, &ysh)?;
    let iy = bin_scalar(imp, OpKind::Mul, iy, w as f64)?;
    let ix = reshape(imp, ix, &xsh)?;
    let flat = bin(imp, OpKind::Add, iy, ix)?;
    let (wy, wx) = (reshape(imp, wy, &ysh)?, reshape(imp, wx, &xsh)?);
    let wgt = bin(imp, OpKind::Mul, wy, wx)?;
    let (vy, vx) = (reshape(imp, vy, &ysh)?, reshape(imp, vx, &xsh)?);
    let valid = bin(imp, OpKind::And, vy, vx)?;
    let cg = c / og;
    let t = 4 * k * p;
    let flat = reshape(imp, flat, &dm(&[n, og, 1, t]))?;
    let flat = imp.emit(OpKind::Expand, &[flat], &[("shape", dims_attr(&dm(&[n, og, cg, t])))])?;
    let xv = convert(imp, x, work)?;
    let xv = reshape(imp, xv, &dm(&[n, og, cg, h * w]))?;
    let got = imp.emit(OpKind::Gather, &[xv, flat], &[("axis", int(3))])?;
    let got = reshape(imp, got, &dm(&[n, og, cg, 4, k, p]))?;
    let valid = reshape(imp, valid, &dm(&[n, og, 1, 4, k, p]))?;
    let zero = imp.scalar(work, 0.0)?;
    let got = where_(imp, valid, got, zero)?;
    let wgt = reshape(imp, wgt, &dm(&[n, og, 1, 4, k, p]))?;
    let got = bin(imp, OpKind::Mul, got, wgt)?;
    let mut cols = sum_axes(imp, got, &[3], false)?; // [N, G, Cg, K, P]
    if let Some(m) = mask {
        let m = convert(imp, m, work)?;
        let m = reshape(imp, m, &dm(&[n, og, 1, k, p]))?;
        cols = bin(imp, OpKind::Mul, cols, m)?;
    }
    // Grouped product with the weights: [1, g, O/g, C/g*K] @ [N, g, C/g*K, P].
    let cols = reshape(imp, cols, &dm(&[n, group, (c / group) * k, p]))?;
    let wv = convert(imp, wt, work)?;
    let wv = reshape(imp, wv, &dm(&[1, group, o / group, (c / group) * k]))?;
    let y = imp.emit(OpKind::Matmul, &[wv, cols], &[])?;
    let mut y = reshape(imp, y, &dm(&[n, o, oh, ow]))?;
    if let Some(b) = bias {
        let b = convert(imp, b, work)?;
        let b = reshape(imp, b, &dm(&[o, 1, 1]))?;
        y = bin(imp, OpKind::Add, y, b)?;
    }
    one(convert(imp, y, dt)?)
}
