//! ONNX `Resize` (and the older `Upsample`), separable: per resized axis the importer builds,
//! from the static input size and the constant scales/sizes, a table of source indices and
//! weights (ONNX's reference rule for every coordinate transformation, `nearest_mode`,
//! `cubic_coeff_a`, `exclude_outside` and `antialias`), then emits one `gather` of the taps
//! along that axis, a multiply by the weights and a `sum` over the taps. Nearest mode is a
//! single `gather` (a `reshape`/`expand` repeat for integer factors), so it is exact for every
//! dtype. `tf_crop_and_resize` positions outside the input get `extrapolation_value`.

use super::import::{a_float, a_floats, a_int, a_ints, a_str, attr, Importer, NResult};
use super::proto::NodeProto;
use super::spatial::*;
use crate::ir::{DType, Dim, Value};
use crate::ops::OpKind;

#[derive(Clone, Copy, PartialEq)]
enum Interp {
    Nearest(NearestMode),
    Linear,
    Cubic(f64),
}

#[derive(Clone, Copy, PartialEq)]
enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

#[derive(Clone, Copy, PartialEq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// One axis of a resize: `taps` source indices (clamped into the input) and weights per
/// output position, row-major `[out, taps]`, and the positions that take the extrapolation
/// value.
struct AxisTable {
    out: usize,
    taps: usize,
    idx: Vec<i64>,
    coef: Vec<f64>,
    extrapolated: Option<Vec<bool>>,
}

/// Most taps per output position (antialiased downscaling by a tiny factor needs many).
const MAX_TAPS: usize = 1024;

fn is_close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn cubic_coeffs(r: f64, a: f64) -> Vec<f64> {
    vec![
        ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
        ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
        ((a + 2.0) * (1.0 - r) - (a + 3.0)) * (1.0 - r) * (1.0 - r) + 1.0,
        ((a * ((1.0 - r) + 1.0) - 5.0 * a) * ((1.0 - r) + 1.0) + 8.0 * a) * ((1.0 - r) + 1.0) - 4.0 * a,
    ]
}

/// The number of taps of an antialiased filter (`support` 1 for linear, 2 for cubic).
fn antialias_taps(scale: f64, support: f64) -> NResult<usize> {
    let s = scale.min(1.0);
    let start = (-support / s).floor() + 1.0;
    let n = 2.0 - 2.0 * start;
    if !n.is_finite() || n < 1.0 || n > MAX_TAPS as f64 {
        return unsupported(format!("Resize antialiasing by the scale {scale} ({n} taps, at most {MAX_TAPS})"));
    }
    Ok(n as usize)
}

fn coeffs(interp: Interp, antialias: bool, ratio: f64, scale: f64) -> Vec<f64> {
    match (interp, antialias) {
        (Interp::Nearest(m), _) => {
            if ratio == 1.0 {
                return vec![0.0, 1.0];
            }
            let hi = match m {
                NearestMode::RoundPreferFloor => ratio > 0.5,
                NearestMode::RoundPreferCeil => ratio >= 0.5,
                NearestMode::Floor => false,
                NearestMode::Ceil => true,
            };
            if hi {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        (Interp::Linear, false) => vec![1.0 - ratio, ratio],
        (Interp::Cubic(a), false) => cubic_coeffs(ratio, a),
        (Interp::Linear, true) => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() + 1.0;
            let n = (2.0 - 2.0 * start) as usize;
            let c: Vec<f64> = (0..n).map(|i| (1.0 - ((start + i as f64 - ratio) * s).abs()).clamp(0.0, 1.0)).collect();
            let total: f64 = c.iter().sum();
            c.into_iter().map(|v| v / total).collect()
        }
        (Interp::Cubic(a), true) => {
            let s = scale.min(1.0);
            let i_start = (-2.0 / s).floor() + 1.0;
            let n = (2.0 - 2.0 * i_start) as usize;
            let f = |x: f64| {
                let x = x.abs();
                let (x2, x3) = (x * x, x * x * x);
                if x <= 1.0 {
                    (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                } else if x < 2.0 {
                    a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                } else {
                    0.0
                }
            };
            let c: Vec<f64> = (0..n).map(|i| f(s * (i_start + i as f64 - ratio))).collect();
            let total: f64 = c.iter().sum();
            c.into_iter().map(|v| v / total).collect()
        }
    }
}

struct AxisSpec {
    in_w: u64,
    out_w: u64,
    scale: f64,
    roi: Option<(f64, f64)>,
}

/// The source coordinate of output position `y` (ONNX's reference rule).
fn source_coord(coord: Coord, y: f64, s: &AxisSpec) -> f64 {
    let (in_w, out_int) = (s.in_w as f64, s.out_w as f64);
    let out_w = s.scale * in_w;
    match coord {
        Coord::AlignCorners => {
            if out_w == 1.0 {
                0.0
            } else {
                y * (in_w - 1.0) / (out_w - 1.0)
            }
        }
        Coord::Asymmetric => y / s.scale,
        Coord::TfHalfPixelForNn => (y + 0.5) / s.scale,
        Coord::TfCropAndResize => {
            let (r0, r1) = s.roi.unwrap_or((0.0, 1.0));
            let x = if out_w == 1.0 {
                (r1 - r0) * (in_w - 1.0) / 2.0
            } else {
                y * (r1 - r0) * (in_w - 1.0) / (out_w - 1.0)
            };
            x + r0 * (in_w - 1.0)
        }
        Coord::PytorchHalfPixel => {
            if out_w == 1.0 {
                -0.5
            } else {
                (y + 0.5) / s.scale - 0.5
            }
        }
        Coord::HalfPixel => (y + 0.5) / s.scale - 0.5,
        Coord::HalfPixelSymmetric => {
            let adjustment = out_int / out_w;
            let offset = in_w / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / s.scale - 0.5
        }
    }
}

fn axis_table(
    imp: &Importer,
    s: &AxisSpec,
    coord: Coord,
    interp: Interp,
    antialias: bool,
    exclude_outside: bool,
) -> NResult<AxisTable> {
    let taps = match (interp, antialias) {
        (Interp::Nearest(_) | Interp::Linear, false) => 2,
        (Interp::Cubic(_), false) => 4,
        (Interp::Linear, true) => antialias_taps(s.scale, 1.0)?,
        (Interp::Cubic(_), true) => antialias_taps(s.scale, 2.0)?,
        (Interp::Nearest(_), true) => return unsupported("Resize antialias in nearest mode"),
    };
    if s.in_w == 0 && s.out_w > 0 {
        return invalid("Resize of an empty axis to a non-empty one");
    }
    // Indices and weights: 16 bytes per entry.
    let n_entries = s.out_w.saturating_mul(taps as u64);
    check_table(imp, n_entries, 16, "a Resize index table")?;
    let out = s.out_w as usize;
    let mut idx = Vec::with_capacity(out * taps);
    let mut coef = Vec::with_capacity(out * taps);
    let mut extrapolated = (coord == Coord::TfCropAndResize).then(|| Vec::with_capacity(out));
    let in_w = s.in_w as f64;
    let pad = taps.div_ceil(2) as f64;
    let half = (taps / 2) as f64;
    for y in 0..out {
        let x = source_coord(coord, y as f64, s);
        if !x.is_finite() {
            return invalid(format!("Resize maps output position {y} to the source coordinate {x}"));
        }
        if let Some(e) = extrapolated.as_mut() {
            e.push(x < 0.0 || x > in_w - 1.0);
        }
        let fl = x.floor();
        let ratio = if x == fl { 1.0 } else { x - fl };
        let mut c = coeffs(interp, antialias, ratio, s.scale);
        let xp = x + pad;
        let p = xp.floor();
        let frac = xp - p;
        let offset = if taps % 2 == 0 {
            if frac == 0.0 {
                -half
            } else {
                -half + 1.0
            }
        } else {
            let base = -(((taps - 1) / 2) as f64);
            if frac <= 0.5 {
                base
            } else {
                base + 1.0
            }
        };
        let start = p + offset;
        let nb: Vec<f64> = (0..taps).map(|j| start + j as f64 - pad).collect();
        if exclude_outside {
            for (cj, &i) in c.iter_mut().zip(&nb) {
                if i < 0.0 || i >= in_w {
                    *cj = 0.0;
                }
            }
            let total: f64 = c.iter().sum();
            let total = if total == 0.0 { 1.0 } else { total };
            for cj in &mut c {
                *cj /= total;
            }
        }
        for (&i, &cj) in nb.iter().zip(&c) {
            idx.push(i.clamp(0.0, in_w - 1.0) as i64);
            coef.push(cj);
        }
    }
    Ok(AxisTable { out, taps, idx, coef, extrapolated })
}

/// Applies one axis table to `x` (float `x` unless nearest).
fn apply_axis(imp: &mut Importer, x: Value, axis: usize, t: AxisTable, nearest: bool, ext: f64) -> NResult<Value> {
    let xs = shape(imp, x);
    let r = xs.len();
    let in_w = static_dim(&xs[axis], "Resize")?;
    let mut y = if nearest {
        let picked: Vec<i64> = (0..t.out)
            .map(|o| {
                let row = o * t.taps..(o + 1) * t.taps;
                let j = t.coef[row.clone()].iter().position(|&c| c != 0.0).unwrap_or(0);
                t.idx[row.start + j]
            })
            .collect();
        // An integer factor picking each source `f` times in order is a repeat.
        let f = (t.out as u64).checked_div(in_w).unwrap_or(0);
        let repeat =
            f >= 1 && f * in_w == t.out as u64 && picked.iter().enumerate().all(|(o, &i)| i == (o as u64 / f) as i64);
        if repeat {
            let mut inter = xs.clone();
            inter.insert(axis + 1, Dim::new(1));
            let mut big = xs.clone();
            big.insert(axis + 1, Dim::new(f));
            let mut fin = xs.clone();
            fin[axis] = Dim::new(t.out as u64);
            let a = reshape(imp, x, &inter)?;
            let b = imp.emit(OpKind::Expand, &[a], &[("shape", dims_attr(&big))])?;
            reshape(imp, b, &fin)?
        } else {
            take(imp, x, axis, picked)?
        }
    } else {
        let dt = dtype(imp, x);
        let g = take(imp, x, axis, t.idx)?;
        let mut split = xs.clone();
        split[axis] = Dim::new(t.out as u64);
        split.insert(axis + 1, Dim::new(t.taps as u64));
        let g = reshape(imp, g, &split)?;
        let mut wshape = vec![1; r + 1];
        wshape[axis] = t.out;
        wshape[axis + 1] = t.taps;
        let w = const_float(imp, "resize_weights", &wshape, t.coef, dt)?;
        let m = bin(imp, OpKind::Mul, g, w)?;
        let s = sum_axes(imp, m, &[axis as i64 + 1], false)?;
        convert(imp, s, dt)?
    };
    if let Some(mask) = t.extrapolated {
        if mask.iter().any(|&m| m) {
            let m = const_bool(imp, "resize_outside", &along(r, axis, t.out), mask)?;
            let e = imp.scalar(dtype(imp, y), ext)?;
            y = imp.emit(OpKind::Where, &[m, e, y], &[])?;
        }
    }
    Ok(y)
}

pub(super) fn resize(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xs = shape(imp, x);
    let r = xs.len();
    let legacy = node.op_type == "Upsample" || imp.opset < 11;
    let mode = a_str(node, "mode", "nearest");
    let interp = match mode.as_str() {
        "nearest" => {
            let nm = if legacy { "floor".to_string() } else { a_str(node, "nearest_mode", "round_prefer_floor") };
            Interp::Nearest(match nm.as_str() {
                "round_prefer_floor" => NearestMode::RoundPreferFloor,
                "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                "floor" => NearestMode::Floor,
                "ceil" => NearestMode::Ceil,
                m => return invalid(format!("unknown nearest_mode `{m}`")),
            })
        }
        "linear" | "bilinear" | "trilinear" => Interp::Linear,
        "cubic" | "bicubic" => Interp::Cubic(a_float(node, "cubic_coeff_a", -0.75)),
        m => return invalid(format!("unknown Resize mode `{m}`")),
    };
    let coord = if legacy {
        Coord::Asymmetric
    } else {
        match a_str(node, "coordinate_transformation_mode", "half_pixel").as_str() {
            "half_pixel" => Coord::HalfPixel,
            "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
            "tf_crop_and_resize" => Coord::TfCropAndResize,
            m => return invalid(format!("unknown coordinate_transformation_mode `{m}`")),
        }
    };
    let antialias = !legacy && a_int(node, "antialias", 0) != 0;
    let exclude_outside = !legacy && a_int(node, "exclude_outside", 0) != 0;
    let ext = a_float(node, "extrapolation_value", 0.0);
    let axes: Vec<usize> = match a_ints(node, "axes") {
        Some(a) if !legacy => {
            let v: Vec<usize> = a.iter().map(|&ax| norm_axis(ax, r)).collect::<NResult<_>>()?;
            let mut s = v.clone();
            s.sort_unstable();
            if s.windows(2).any(|w| w[0] == w[1]) {
                return invalid(format!("repeated axis in {a:?}"));
            }
            v
        }
        _ => (0..r).collect(),
    };
    // Scales: Upsample's attribute (opset 7) or input 1, Resize-10's input 1, Resize's input 2.
    let scales: Option<Vec<f64>> = if node.op_type == "Upsample" && attr(node, "scales").is_some() {
        a_floats(node, "scales").map(|s| s.iter().map(|&f| f64::from(f)).collect())
    } else {
        let i = if legacy { 1 } else { 2 };
        const_floats(imp, node, i, "scales")?.filter(|s| !s.is_empty())
    };
    let sizes = if legacy { None } else { imp.ints_input(node, 3, "sizes")?.filter(|s| !s.is_empty()) };
    let roi = if coord == Coord::TfCropAndResize {
        let roi = const_floats(imp, node, 1, "roi")?.unwrap_or_default();
        if roi.len() != 2 * axes.len() {
            return invalid(format!("roi has {} values for {} axes", roi.len(), axes.len()));
        }
        Some(roi)
    } else {
        None
    };
    // Per resized axis: input size, output size, scale.
    let mut specs: Vec<(usize, AxisSpec)> = Vec::with_capacity(axes.len());
    let in_sizes: Vec<u64> = axes.iter().map(|&a| static_dim(&xs[a], "Resize")).collect::<NResult<_>>()?;
    match (scales, sizes) {
        (Some(s), None) => {
            if s.len() != axes.len() {
                return invalid(format!("{} scales for {} axes", s.len(), axes.len()));
            }
            for (k, (&a, &sc)) in axes.iter().zip(&s).enumerate() {
                if !(sc.is_finite() && sc > 0.0) {
                    return invalid(format!("scale {sc}"));
                }
                let out = (sc * in_sizes[k] as f64).floor();
                if out > u32::MAX as f64 {
                    return unsupported(format!("Resize to {out} elements along an axis"));
                }
                specs.push((a, AxisSpec { in_w: in_sizes[k], out_w: out as u64, scale: sc, roi: None }));
            }
        }
        (None, Some(sz)) => {
            if sz.len() != axes.len() {
                return invalid(format!("{} sizes for {} axes", sz.len(), axes.len()));
            }
            if sz.iter().any(|&v| !(0..=u32::MAX as i64).contains(&v)) {
                return invalid(format!("sizes {sz:?}"));
            }
            if in_sizes.contains(&0) {
                return unsupported("Resize of an empty axis to sizes");
            }
            let mut sc: Vec<f64> = sz.iter().zip(&in_sizes).map(|(&o, &i)| o as f64 / i as f64).collect();
            let mut out: Vec<u64> = sz.iter().map(|&o| o as u64).collect();
            let policy =
                if legacy { "stretch".to_string() } else { a_str(node, "keep_aspect_ratio_policy", "stretch") };
            match policy.as_str() {
                "stretch" => {}
                p @ ("not_larger" | "not_smaller") => {
                    let pick = if p == "not_larger" { f64::min } else { f64::max };
                    let s = sc.iter().copied().reduce(pick).unwrap_or(1.0);
                    for k in 0..sc.len() {
                        sc[k] = s;
                        out[k] = (s * in_sizes[k] as f64 + 0.5) as u64;
                    }
                }
                p => return invalid(format!("unknown keep_aspect_ratio_policy `{p}`")),
            }
            for (k, &a) in axes.iter().enumerate() {
                specs.push((a, AxisSpec { in_w: in_sizes[k], out_w: out[k], scale: sc[k], roi: None }));
            }
        }
        (Some(_), Some(_)) => return invalid("Resize takes scales or sizes, not both"),
        (None, None) => return invalid("Resize needs scales or sizes"),
    }
    if let Some(roi) = &roi {
        let n = axes.len();
        for (k, (_, s)) in specs.iter_mut().enumerate() {
            s.roi = Some((roi[k], roi[n + k]));
        }
    }
    // Apply axis by axis, in the order the reference does (ascending axes).
    specs.sort_by_key(|(a, _)| *a);
    let nearest = matches!(interp, Interp::Nearest(_));
    let dt = dtype(imp, x);
    let work = if nearest || dt == DType::F64 || dt == DType::F32 {
        dt
    } else if dt.is_float() {
        DType::F32
    } else {
        return unsupported(format!("Resize mode `{mode}` on {dt}"));
    };
    let mut y = convert(imp, x, work)?;
    for (a, s) in specs {
        let identity =
            is_close(s.scale, 1.0) && s.out_w == s.in_w && s.roi.is_none_or(|(r0, r1)| r0 == 0.0 && is_close(r1, 1.0));
        if identity {
            continue;
        }
        let t = axis_table(imp, &s, coord, interp, antialias, exclude_outside)?;
        y = apply_axis(imp, y, a, t, nearest, ext)?;
    }
    one(convert(imp, y, dt)?)
}
