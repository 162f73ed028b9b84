//! Signal ONNX ops: `DFT`, `STFT`, `HannWindow`/`HammingWindow`/`BlackmanWindow` and
//! `MelWeightMatrix`.
//!
//! Mapping choices:
//! - `DFT` on a static axis is one `matmul` with a constant table of cosines and sines: the
//!   signal axis is moved last with the real/imaginary pairs interleaved (`[.., L*c]`), the
//!   table maps those to interleaved output pairs (`[L*c, K*2]`), so real and complex inputs,
//!   truncation or zero padding to `dft_length`, `onesided` outputs, the inverse (scaled by
//!   `1/n`) and the one-sided inverse (a real signal from Hermitian bins) are all one table.
//!   Angles are reduced modulo `n` in integers before the `sin`/`cos`, in f64.
//! - `STFT` gathers the frames with a constant index table, multiplies by the window and
//!   takes the same DFT along the frame axis.
//! - The window ops and `MelWeightMatrix` need their sizes at import and become constants
//!   (computed in f64 as ONNX's reference does).

use super::import::{a_int, Importer, NResult};
use super::ops::Row;
use super::proto::NodeProto;
use super::spatial::{
    check_table, const_float, convert, dtype, invalid, norm_axis, one, permute, reshape, shape, static_dim, take,
    unsupported, Outs,
};
use super::tensor::{dtype_name, dtype_of as onnx_dtype};
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind;
use std::f64::consts::PI;

/// The signal ops, by ONNX name.
pub(super) const SIGNAL: &[Row] = &[
    ("BlackmanWindow", |imp, node, _| window(imp, node)),
    ("DFT", |imp, node, _| dft(imp, node)),
    ("HammingWindow", |imp, node, _| window(imp, node)),
    ("HannWindow", |imp, node, _| window(imp, node)),
    ("MelWeightMatrix", |imp, node, _| mel_weight_matrix(imp, node)),
    ("STFT", |imp, node, _| stft(imp, node)),
];

/// `2π (k t mod n) / n`, the angle of bin `k` at sample `t`.
fn angle(k: usize, t: usize, n: usize) -> f64 {
    let m = ((k as u128 * t as u128) % n as u128) as f64;
    2.0 * PI * m / n as f64
}

/// The DFT of `x [.., L, c]` (c = 1 real, 2 complex pairs) along `axis` with length `n`.
/// Returns `[.., K, 2]` (or `[.., n, 1]` for the one-sided inverse).
fn dft_core(imp: &mut Importer, x: Value, axis: usize, n: usize, inverse: bool, onesided: bool) -> NResult<Value> {
    let xs = shape(imp, x);
    let r = xs.len();
    if r < 2 || axis >= r - 1 {
        return invalid(format!(
            "DFT axis {axis} must be a signal axis of an input of rank {r} (the last holds the complex parts)"
        ));
    }
    let c = static_dim(&xs[r - 1], "DFT")? as usize;
    if c != 1 && c != 2 {
        return invalid(format!("the last dim must be 1 (real) or 2 (complex), got {c}"));
    }
    let l = static_dim(&xs[axis], "DFT")? as usize;
    if n == 0 {
        return invalid("dft_length must be positive");
    }
    let dt = dtype(imp, x);
    let work = match dt {
        DType::F64 | DType::F32 => dt,
        d if d.is_float() => DType::F32,
        d => return invalid(format!("DFT on {d}")),
    };
    let (k_out, oc) = match (inverse, onesided) {
        (false, true) => (n / 2 + 1, 2),
        (true, true) => (n, 1),
        _ => (n, 2),
    };
    let rows = l * c;
    let cols = k_out * oc;
    check_table(imp, (rows as u64).saturating_mul(cols as u64), 8, "a DFT table")?;
    let mut table = vec![0.0f64; rows * cols];
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    // Input positions used: forward and inverse read the first n, the one-sided inverse the
    // first n/2 + 1 bins.
    let used = if inverse && onesided { l.min(n / 2 + 1) } else { l.min(n) };
    for t in 0..used {
        for k in 0..k_out {
            let th = angle(t, k, n);
            let (cs, sn) = (th.cos(), th.sin());
            if inverse && onesided {
                // out[k] = 1/n sum_t w_t (Re X_t cos - Im X_t sin), w = 1 at 0 and n/2, else 2.
                let edge = t == 0 || (n.is_multiple_of(2) && t == n / 2);
                let w = if edge { 1.0 } else { 2.0 };
                table[(t * c) * cols + k] = w * cs * scale;
                if c == 2 && !edge {
                    table[(t * c + 1) * cols + k] = -w * sn * scale;
                }
                continue;
            }
            // e^{∓iθ}: forward uses -θ, inverse +θ.
            let sn = if inverse { sn } else { -sn };
            table[(t * c) * cols + 2 * k] = cs * scale;
            table[(t * c) * cols + 2 * k + 1] = sn * scale;
            if c == 2 {
                table[(t * c + 1) * cols + 2 * k] = -sn * scale;
                table[(t * c + 1) * cols + 2 * k + 1] = cs * scale;
            }
        }
    }
    let xw = convert(imp, x, work)?;
    // [b.., L, c] with the batch dims in order, flattened to [M, L*c].
    let mut perm: Vec<i64> = (0..r as i64 - 1).filter(|&i| i != axis as i64).collect();
    perm.push(axis as i64);
    perm.push(r as i64 - 1);
    let xp = permute(imp, xw, &perm)?;
    let batch: Vec<Dim> = perm[..r - 2].iter().map(|&i| xs[i as usize].clone()).collect();
    let m = batch
        .iter()
        .try_fold(Dim::new(1), |a, d| a.mul(d))
        .map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}")))?;
    let x2 = reshape(imp, xp, &[m, Dim::new(rows as u64)])?;
    let tbl = const_float(imp, "dft_table", &[rows, cols], table, work)?;
    let y = imp.emit(OpKind::Matmul, &[x2, tbl], &[])?;
    let mut ydims = batch;
    ydims.push(Dim::new(k_out as u64));
    ydims.push(Dim::new(oc as u64));
    let y = reshape(imp, y, &ydims)?;
    // Back: the transformed axis to `axis`, the pairs last.
    let mut back: Vec<i64> = Vec::with_capacity(r);
    for i in 0..r - 1 {
        back.push(if i == axis {
            r as i64 - 2
        } else if i < axis {
            i as i64
        } else {
            i as i64 - 1
        });
    }
    back.push(r as i64 - 1);
    let y = permute(imp, y, &back)?;
    convert(imp, y, dt)
}

/// A scalar integer input known at import (`None` when absent).
fn int_scalar(imp: &mut Importer, node: &NodeProto, i: usize, what: &str) -> NResult<Option<i64>> {
    match imp.ints_input(node, i, what)? {
        None => Ok(None),
        Some(v) if v.len() == 1 => Ok(Some(v[0])),
        Some(v) => invalid(format!("{what} must be a scalar, got {} values", v.len())),
    }
}

fn float_scalar(imp: &mut Importer, node: &NodeProto, i: usize, what: &str) -> NResult<f64> {
    let v = imp.input(node, i)?;
    match imp.const_of(v) {
        Some(t) if t.numel() == 1 => Ok(t.to_f64_vec()[0]),
        Some(_) => invalid(format!("{what} must be a scalar")),
        None => Err(NodeError::NeedsValue { input: i, what: what.to_string() }),
    }
}

/// A size from the model, bounded so that a table of `size` elements fits the limits.
fn size_of(imp: &Importer, v: i64, what: &str) -> NResult<usize> {
    if v < 0 {
        return invalid(format!("{what} {v}"));
    }
    check_table(imp, v as u64, 8, what)?;
    Ok(v as usize)
}

pub(super) fn dft(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let r = shape(imp, x).len();
    let axis = if imp.opset >= 20 { int_scalar(imp, node, 2, "axis")?.unwrap_or(-2) } else { a_int(node, "axis", 1) };
    let axis = norm_axis(axis, r)?;
    let inverse = a_int(node, "inverse", 0) != 0;
    let onesided = a_int(node, "onesided", 0) != 0;
    let l = static_dim(&shape(imp, x)[axis], "DFT")? as i64;
    let n = match int_scalar(imp, node, 1, "dft_length")? {
        Some(n) if n > 0 => n,
        Some(n) => return invalid(format!("dft_length {n}")),
        None if inverse && onesided => 2 * (l - 1),
        None => l,
    };
    let n = size_of(imp, n, "dft_length")?;
    one(dft_core(imp, x, axis, n, inverse, onesided)?)
}

pub(super) fn stft(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xs = shape(imp, x);
    if xs.len() != 3 {
        return invalid("STFT needs a signal [batch, length, 1 or 2]");
    }
    let l = static_dim(&xs[1], "STFT")? as i64;
    let step =
        int_scalar(imp, node, 1, "frame_step")?.ok_or_else(|| NodeError::Invalid("frame_step is required".into()))?;
    let window = imp.opt_input(node, 2)?;
    let wlen = match window {
        Some(w) => {
            let ws = shape(imp, w);
            if ws.len() != 1 {
                return invalid("the window must be 1-D");
            }
            Some(static_dim(&ws[0], "STFT window")? as i64)
        }
        None => None,
    };
    let fl = match (int_scalar(imp, node, 3, "frame_length")?, wlen) {
        (Some(f), Some(w)) if f != w => return invalid(format!("frame_length {f} but the window has {w}")),
        (Some(f), _) => f,
        (None, Some(w)) => w,
        (None, None) => l,
    };
    if step <= 0 || fl <= 0 || fl > l {
        return invalid(format!("frame_step {step} and frame_length {fl} for a signal of {l}"));
    }
    let frames = 1 + (l - fl) / step;
    let n_idx = frames.checked_mul(fl).ok_or_else(|| NodeError::Invalid("too many frames".into()))?;
    size_of(imp, n_idx, "the STFT frame table")?;
    let idx: Vec<i64> = (0..frames).flat_map(|f| (0..fl).map(move |j| f * step + j)).collect();
    let g = take(imp, x, 1, idx)?;
    let mut fd = vec![xs[0].clone(), Dim::new(frames as u64), Dim::new(fl as u64), xs[2].clone()];
    let mut y = reshape(imp, g, &fd)?;
    if let Some(w) = window {
        fd = vec![Dim::new(1), Dim::new(1), Dim::new(fl as u64), Dim::new(1)];
        let w = reshape(imp, w, &fd)?;
        let w = convert(imp, w, dtype(imp, y))?;
        y = imp.emit(OpKind::Mul, &[y, w], &[])?;
    }
    let onesided = a_int(node, "onesided", 1) != 0;
    one(dft_core(imp, y, 2, fl as usize, false, onesided)?)
}

fn out_dtype(node: &NodeProto) -> NResult<DType> {
    let code = a_int(node, "output_datatype", 1) as i32;
    match onnx_dtype(code) {
        Some(d) => Ok(d),
        None => unsupported(format!("output_datatype {}", dtype_name(code))),
    }
}

fn const_out(imp: &mut Importer, hint: &str, shape: &[usize], vals: Vec<f64>, dtype: DType) -> NResult<Value> {
    if dtype.is_float() {
        return const_float(imp, hint, shape, vals, dtype);
    }
    let c = const_float(imp, hint, shape, vals, DType::F64)?;
    imp.emit(OpKind::ConvertElementType, &[c], &[("dtype", AttrValue::DType(dtype))])
}

pub(super) fn window(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let size = int_scalar(imp, node, 0, "size")?.ok_or_else(|| NodeError::Invalid("size is required".into()))?;
    let size = size_of(imp, size, "the window size")?;
    let periodic = a_int(node, "periodic", 1) != 0;
    let dtype = out_dtype(node)?;
    let n1 = if periodic { size as f64 } else { size as f64 - 1.0 };
    let vals: Vec<f64> = (0..size)
        .map(|i| {
            let i = i as f64;
            match node.op_type.as_str() {
                "HannWindow" => (i * PI / n1).sin().powi(2),
                "HammingWindow" => {
                    let alpha = 25.0 / 46.0;
                    alpha - (i * PI * 2.0 / n1).cos() * (1.0 - alpha)
                }
                _ => 0.42 - 0.5 * (i * PI * 2.0 / n1).cos() + 0.08 * (i * PI * 4.0 / n1).cos(),
            }
        })
        .collect();
    one(const_out(imp, "window", &[size], vals, dtype)?)
}

pub(super) fn mel_weight_matrix(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let need = |imp: &mut Importer, i: usize, what: &str| -> NResult<i64> {
        int_scalar(imp, node, i, what)?.ok_or_else(|| NodeError::Invalid(format!("{what} is required")))
    };
    let bins = need(imp, 0, "num_mel_bins")?;
    let dft_len = need(imp, 1, "dft_length")?;
    let rate = need(imp, 2, "sample_rate")?;
    let lo = float_scalar(imp, node, 3, "lower_edge_hertz")?;
    let hi = float_scalar(imp, node, 4, "upper_edge_hertz")?;
    if bins <= 0 || dft_len <= 0 || rate <= 0 || !(lo.is_finite() && hi.is_finite()) {
        return invalid(format!("num_mel_bins {bins}, dft_length {dft_len}, sample_rate {rate}, edges {lo}..{hi}"));
    }
    let spec = (dft_len / 2 + 1) as usize;
    check_table(imp, (spec as u64).saturating_mul(bins as u64), 8, "the mel weight matrix")?;
    let bins = bins as usize;
    let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let (lo_m, hi_m) = (mel(lo), mel(hi));
    let step = (hi_m - lo_m) / (bins + 2) as f64;
    let mut points = Vec::with_capacity(bins + 2);
    for i in 0..bins + 2 {
        let m = i as f64 * step + lo_m;
        let hz = 700.0 * (10f64.powf(m / 2595.0) - 1.0);
        let p = ((dft_len + 1) as f64 * hz / rate as f64).floor();
        if !(0.0..spec as f64).contains(&p) {
            return invalid(format!("mel band edge {hz} Hz falls outside the {spec} spectrogram bins"));
        }
        points.push(p as usize);
    }
    let mut out = vec![0.0f64; spec * bins];
    for i in 0..bins {
        let (l, c, h) = (points[i], points[i + 1], points[i + 2]);
        if c == l {
            out[c * bins + i] = 1.0;
        } else {
            for j in l..=c {
                out[j * bins + i] = (j - l) as f64 / (c - l) as f64;
            }
        }
        if h > c {
            for j in c..h {
                out[j * bins + i] = (h - j) as f64 / (h - c) as f64;
            }
        }
    }
    let dtype = out_dtype(node)?;
    one(const_out(imp, "mel_weights", &[spec, bins], out, dtype)?)
}
