//! Convolution, pooling, normalisation, softmax and losses: `Conv`, `ConvTranspose`,
//! `MaxPool`/`AveragePool`, `GlobalAveragePool`/`GlobalMaxPool`, `BatchNormalization`,
//! `InstanceNormalization`, `GroupNormalization`, `LayerNormalization`, `RMSNormalization`,
//! `LpNormalization`, `MeanVarianceNormalization`, `Softmax`/`LogSoftmax`/`Hardmax`,
//! `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`.
//!
//! Mapping choices:
//! - Pools: 1-D and 2-D (`max_pool2d`/`avg_pool2d`, 1-D through an inserted axis; integer
//!   `MaxPool` of up to 32 bits through f64);
//!   asymmetric or large pads become an explicit `pad` (-inf for max, 0 for average with
//!   `count_include_pad`); `auto_pad` SAME_* needs static spatial dims. Other pools (3-D,
//!   dilated averages, asymmetric averages without `count_include_pad`, `MaxPool` with
//!   indices) are `spatial.rs`'s. The global pools are `mean`/`amax` over the spatial axes.
//! - `ConvTranspose` is a `conv` of the stride-dilated, padded input (`pad` with interior
//!   padding) with the flipped, regrouped kernel.
//! - `InstanceNormalization` is `group_norm` with one group per channel; opset 18's
//!   per-group `GroupNormalization` scale and bias are repeated per channel.
//!   `LayerNormalization`/`RMSNormalization` with a scale or bias that does not span the
//!   normalized axes normalize first and multiply (add) after; `LayerNormalization`'s mean
//!   and inverse standard deviation outputs are computed separately.
//!   `BatchNormalization` in training mode is `index.rs`'s.
//! - `Softmax`/`LogSoftmax`/`Hardmax` before opset 13 flatten to 2-D at `axis` first.
//!   `Hardmax` compares an `iota` with the `argmax`.
//! - The losses gather the target's log-probability (`log_softmax` first for
//!   `SoftmaxCrossEntropyLoss`), weigh it and reduce as ONNX says.

use super::build::{dim_err, dims_attr, int, ints, invalid, norm_axis, one, unsupported, Outs};
use super::import::{a_float, a_int, a_ints, a_str, attr, Importer, NResult, Slot};
use super::ops::Row;
use super::proto::NodeProto;
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind as K;

/// The convolution, pooling, normalisation, softmax and loss ops, by ONNX name.
pub(super) const NN: &[Row] = &[
    ("AveragePool", |imp, node, _| pool(imp, node)),
    ("BatchNormalization", |imp, node, _| batch_norm(imp, node)),
    ("Conv", |imp, node, _| conv(imp, node)),
    ("ConvTranspose", |imp, node, _| conv_transpose(imp, node)),
    ("GlobalAveragePool", |imp, node, _| global_pool(imp, node, K::Mean)),
    ("GlobalMaxPool", |imp, node, _| global_pool(imp, node, K::Amax)),
    ("GroupNormalization", |imp, node, _| group_norm(imp, node)),
    ("Hardmax", |imp, node, _| softmax(imp, node)),
    ("InstanceNormalization", |imp, node, _| instance_norm(imp, node)),
    ("LayerNormalization", |imp, node, _| layer_norm(imp, node)),
    ("LogSoftmax", |imp, node, _| softmax(imp, node)),
    ("LpNormalization", |imp, node, _| lp_norm(imp, node)),
    ("MaxPool", |imp, node, _| pool(imp, node)),
    ("MeanVarianceNormalization", |imp, node, _| mean_variance_norm(imp, node)),
    ("NegativeLogLikelihoodLoss", |imp, node, _| loss(imp, node)),
    ("RMSNormalization", |imp, node, _| rms_norm(imp, node)),
    ("Softmax", |imp, node, _| softmax(imp, node)),
    ("SoftmaxCrossEntropyLoss", |imp, node, _| loss(imp, node)),
];

// --- Convolution and pooling ---

/// Explicit (begin.., end..) pads for `auto_pad`, from static input dims.
pub(super) fn auto_pads(
    mode: &str,
    spatial: &[Dim],
    kernel: &[i64],
    strides: &[i64],
    dil: &[i64],
    explicit: Option<Vec<i64>>,
) -> NResult<Vec<i64>> {
    let n = kernel.len();
    match mode {
        "NOTSET" | "" => {
            let p = explicit.unwrap_or_else(|| vec![0; 2 * n]);
            if p.len() != 2 * n {
                return invalid(format!("{} pads for {n} spatial dims", p.len()));
            }
            Ok(p)
        }
        "VALID" => Ok(vec![0; 2 * n]),
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut begin = vec![0; n];
            let mut end = vec![0; n];
            for i in 0..n {
                let d = spatial[i].as_const().ok_or_else(|| {
                    NodeError::Unsupported(format!("auto_pad {mode} on the symbolic dim {}", spatial[i]))
                })? as i128;
                let (s, k, dl) = (strides[i] as i128, kernel[i] as i128, dil[i] as i128);
                if s < 1 || k < 1 || dl < 1 {
                    return invalid(format!(
                        "auto_pad {mode} with stride {s}, kernel {k}, dilation {dl} (each must be >= 1)"
                    ));
                }
                // In i128: every term is below 2^64 squared, so nothing overflows.
                let out = (d + s - 1) / s;
                let total = ((out - 1) * s + (k - 1) * dl + 1 - d).max(0);
                let total = i64::try_from(total)
                    .map_err(|_| NodeError::Invalid(format!("auto_pad {mode}: padding overflows")))?;
                let small = total / 2;
                let (b, e) = if mode == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
                begin[i] = b;
                end[i] = e;
            }
            begin.extend(end);
            Ok(begin)
        }
        m => invalid(format!("unknown auto_pad `{m}`")),
    }
}

fn conv(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 1)?;
    let y = conv_values(imp, node, x, w)?;
    one(add_channel_bias(imp, node, y, 2)?)
}

/// `conv` of `x` and `w` with the node's geometry attributes (no bias).
pub(super) fn conv_values(imp: &mut Importer, node: &NodeProto, x: Value, w: Value) -> NResult<Value> {
    let xs = imp.shape_of(x);
    let ws = imp.shape_of(w);
    if xs.len() < 3 || ws.len() != xs.len() {
        return invalid("Conv needs x [N, C, ...] and w [O, C/group, ...] of the same rank");
    }
    let n = xs.len() - 2;
    let kernel: Vec<i64> = match a_ints(node, "kernel_shape") {
        Some(k) => k,
        None => ws[2..]
            .iter()
            .map(|d| d.as_const().map(|v| v as i64).ok_or_else(|| NodeError::Unsupported("symbolic kernel".into())))
            .collect::<NResult<_>>()?,
    };
    let strides = a_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    if kernel.len() != n || strides.len() != n || dil.len() != n {
        return invalid("kernel_shape, strides and dilations must have one entry per spatial dim");
    }
    let pads = auto_pads(&a_str(node, "auto_pad", "NOTSET"), &xs[2..], &kernel, &strides, &dil, a_ints(node, "pads"))?;
    let group = a_int(node, "group", 1);
    imp.emit(
        K::Conv,
        &[x, w],
        &[("stride", ints(&strides)), ("padding", ints(&pads)), ("dilation", ints(&dil)), ("groups", int(group))],
    )
}

/// Adds input `i` (a `[C]` bias) along dim 1 of `y`, when present.
fn add_channel_bias(imp: &mut Importer, node: &NodeProto, y: Value, i: usize) -> NResult<Value> {
    let Some(b) = imp.opt_input(node, i)? else { return Ok(y) };
    let r = imp.rank_of(y);
    let mut dims = imp.shape_of(b);
    if dims.len() != 1 {
        return invalid("the bias must be 1-D");
    }
    dims.extend(std::iter::repeat_n(Dim::new(1), r.saturating_sub(2)));
    let b = imp.reshape(b, &dims)?;
    imp.bin(K::Add, y, b)
}

fn conv_transpose(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 1)?;
    let xs = imp.shape_of(x);
    let ws = imp.shape_of(w);
    if xs.len() < 3 || ws.len() != xs.len() {
        return invalid("ConvTranspose needs x [N, C, ...] and w [C, O/group, ...] of the same rank");
    }
    let n = xs.len() - 2;
    let wst: Vec<i64> = ws
        .iter()
        .map(|d| d.as_const().map(|v| v as i64).ok_or_else(|| NodeError::Unsupported("a symbolic weight shape".into())))
        .collect::<NResult<_>>()?;
    let kernel = a_ints(node, "kernel_shape").unwrap_or_else(|| wst[2..].to_vec());
    let strides = a_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    let out_pad = a_ints(node, "output_padding").unwrap_or_else(|| vec![0; n]);
    let group = a_int(node, "group", 1);
    if kernel.len() != n || strides.len() != n || dil.len() != n || out_pad.len() != n || group <= 0 {
        return invalid("kernel_shape, strides, dilations and output_padding need one entry per spatial dim");
    }
    let auto = a_str(node, "auto_pad", "NOTSET");
    let mut pads = match a_ints(node, "pads") {
        Some(p) if p.len() == 2 * n => p,
        Some(_) => return invalid("pads need two entries per spatial dim"),
        None => vec![0; 2 * n],
    };
    let output_shape = a_ints(node, "output_shape");
    if output_shape.is_some() || auto == "SAME_UPPER" || auto == "SAME_LOWER" {
        for i in 0..n {
            let d = xs[2 + i]
                .as_const()
                .ok_or_else(|| NodeError::Unsupported("output_shape/auto_pad on a symbolic dim".into()))?
                as i64;
            let full = strides[i] * (d - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1;
            let want = match &output_shape {
                Some(o) => {
                    *o.get(o.len().wrapping_sub(n) + i).ok_or_else(|| NodeError::Invalid("output_shape".into()))?
                }
                None => d * strides[i],
            };
            let total = full - want;
            let (b, e) = if auto == "SAME_UPPER" || (output_shape.is_some() && auto != "SAME_LOWER") {
                (total / 2, total - total / 2)
            } else {
                (total - total / 2, total / 2)
            };
            pads[i] = b;
            pads[i + n] = e;
        }
    } else if auto == "VALID" {
        pads = vec![0; 2 * n];
    }
    // Input dilated by the stride, padded by (k-1)*d - pad on each side (+ output_padding).
    let mut low = vec![0i64; n + 2];
    let mut high = vec![0i64; n + 2];
    let mut interior = vec![0i64; n + 2];
    for i in 0..n {
        let k = (kernel[i] - 1) * dil[i];
        low[2 + i] = k - pads[i];
        high[2 + i] = k - pads[i + n] + out_pad[i];
        interior[2 + i] = strides[i] - 1;
    }
    let xp = imp.emit(K::Pad, &[x], &[("low", ints(&low)), ("high", ints(&high)), ("interior", ints(&interior))])?;
    // Kernel [C, O/g, k...] -> [O, C/g, k...], spatially flipped.
    let (c, og) = (wst[0], wst[1]);
    if c % group != 0 {
        return invalid("input channels are not divisible by group");
    }
    let cg = c / group;
    let spatial: Vec<Dim> = ws[2..].to_vec();
    let mut d1 = vec![Dim::new(group as u64), Dim::new(cg as u64), Dim::new(og as u64)];
    d1.extend(spatial.iter().cloned());
    let w1 = imp.reshape(w, &d1)?;
    let mut perm = vec![0i64, 2, 1];
    perm.extend((3..3 + n as i64).collect::<Vec<_>>());
    let w2 = imp.emit(K::Permute, &[w1], &[("perm", ints(&perm))])?;
    let mut d3 = vec![Dim::new((group * og) as u64), Dim::new(cg as u64)];
    d3.extend(spatial);
    let w3 = imp.reshape(w2, &d3)?;
    let flip: Vec<i64> = (2..2 + n as i64).collect();
    let wf = imp.emit(K::Rev, &[w3], &[("axes", ints(&flip))])?;
    let y = imp.emit(
        K::Conv,
        &[xp, wf],
        &[("stride", ints(&vec![1; n])), ("dilation", ints(&dil)), ("groups", int(group))],
    )?;
    one(add_channel_bias(imp, node, y, 2)?)
}

fn pool(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let is_max = node.op_type == "MaxPool";
    if is_max && node.output.get(1).is_some_and(|s| !s.is_empty()) {
        return super::spatial::pool_nd(imp, node);
    }
    let x = imp.input(node, 0)?;
    // Integer max pooling runs in f64, exact for integers of up to 32 bits, and converts back.
    let in_dtype = imp.dtype_of_v(x);
    let x = match in_dtype.int_bits() {
        Some(b) if is_max && b <= 32 => imp.convert_to(x, DType::F64)?,
        Some(_) => return unsupported(format!("{} of {in_dtype}", node.op_type)),
        None => x,
    };
    let xs = imp.shape_of(x);
    let n = xs.len().saturating_sub(2);
    if !(1..=2).contains(&n) {
        return super::spatial::pool_nd(imp, node);
    }
    let kernel = a_ints(node, "kernel_shape").ok_or_else(|| NodeError::Invalid("kernel_shape is required".into()))?;
    let strides = a_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dil = a_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    if kernel.len() != n || strides.len() != n || dil.len() != n {
        return invalid("kernel_shape, strides and dilations need one entry per spatial dim");
    }
    let pads = auto_pads(&a_str(node, "auto_pad", "NOTSET"), &xs[2..], &kernel, &strides, &dil, a_ints(node, "pads"))?;
    let ceil = a_int(node, "ceil_mode", 0) != 0;
    let include_pad = a_int(node, "count_include_pad", 0) != 0;
    if !is_max && dil.iter().any(|&d| d != 1) {
        return super::spatial::pool_nd(imp, node);
    }
    // To 2-d.
    let (mut k2, mut s2, mut d2, mut b2, mut e2) =
        (kernel.clone(), strides.clone(), dil.clone(), pads[..n].to_vec(), pads[n..].to_vec());
    let mut y = x;
    if n == 1 {
        y = imp.unsqueeze(y, &[2])?;
        k2.insert(0, 1);
        s2.insert(0, 1);
        d2.insert(0, 1);
        b2.insert(0, 0);
        e2.insert(0, 0);
    }
    let symmetric = b2 == e2 && b2.iter().zip(&k2).all(|(&p, &k)| p >= 0 && 2 * p <= k);
    let padding = if symmetric {
        b2.clone()
    } else {
        if !is_max && !include_pad {
            return super::spatial::pool_nd(imp, node);
        }
        let mut low = vec![0, 0];
        low.extend(&b2);
        let mut high = vec![0, 0];
        high.extend(&e2);
        let value = if is_max { f64::NEG_INFINITY } else { 0.0 };
        y =
            imp.emit(K::Pad, &[y], &[("low", ints(&low)), ("high", ints(&high)), ("value", AttrValue::Float(value))])?;
        vec![0, 0]
    };
    y = if is_max {
        imp.emit(
            K::MaxPool2d,
            &[y],
            &[
                ("kernel", ints(&k2)),
                ("stride", ints(&s2)),
                ("padding", ints(&padding)),
                ("dilation", ints(&d2)),
                ("ceil_mode", AttrValue::Bool(ceil)),
            ],
        )?
    } else {
        imp.emit(
            K::AvgPool2d,
            &[y],
            &[
                ("kernel", ints(&k2)),
                ("stride", ints(&s2)),
                ("padding", ints(&padding)),
                ("ceil_mode", AttrValue::Bool(ceil)),
                ("count_include_pad", AttrValue::Bool(include_pad)),
            ],
        )?
    };
    if n == 1 {
        y = imp.squeeze(y, &[2])?;
    }
    one(imp.convert_to(y, in_dtype)?)
}

/// `GlobalAveragePool` (`kind` is `mean`) or `GlobalMaxPool` (`amax`).
fn global_pool(imp: &mut Importer, node: &NodeProto, kind: K) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let r = imp.rank_of(x) as i64;
    if r < 3 {
        return invalid("needs an input of rank >= 3");
    }
    let axes: Vec<i64> = (2..r).collect();
    one(imp.emit(kind, &[x], &[("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true))])?)
}

// --- Normalisation ---

fn batch_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    if a_int(node, "training_mode", 0) != 0 || node.output.iter().skip(1).any(|s| !s.is_empty()) {
        return super::index::batch_norm_training(imp, node);
    }
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let b = imp.input(node, 2)?;
    let mean = imp.input(node, 3)?;
    let var = imp.input(node, 4)?;
    let eps = a_float(node, "epsilon", 1e-5);
    one(imp.emit(K::BatchNorm, &[x, mean, var, scale, b], &[("eps", AttrValue::Float(eps))])?)
}

fn instance_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let b = imp.input(node, 2)?;
    let c = imp
        .shape_of(x)
        .get(1)
        .and_then(Dim::as_const)
        .ok_or_else(|| NodeError::Unsupported("InstanceNormalization needs a static channel dim".into()))?;
    let eps = a_float(node, "epsilon", 1e-5);
    one(imp.emit(K::GroupNorm, &[x, scale, b], &[("groups", int(c as i64)), ("eps", AttrValue::Float(eps))])?)
}

fn group_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let mut scale = imp.input(node, 1)?;
    let mut b = imp.input(node, 2)?;
    let groups = a_int(node, "num_groups", 0);
    let eps = a_float(node, "epsilon", 1e-5);
    let c = imp.shape_of(x).get(1).cloned().ok_or_else(|| NodeError::Invalid("rank < 2".into()))?;
    if imp.shape_of(scale) != [c.clone()] {
        // Opset 18: scale and bias per group; repeat them per channel.
        let g = Dim::new(groups.max(1) as u64);
        let per = c.div_exact(&g).map_err(dim_err)?;
        for v in [&mut scale, &mut b] {
            let r = imp.reshape(*v, &[g.clone(), Dim::new(1)])?;
            let e = imp.emit(K::Expand, &[r], &[("shape", dims_attr(&[g.clone(), per.clone()]))])?;
            *v = imp.reshape(e, std::slice::from_ref(&c))?;
        }
    }
    one(imp.emit(K::GroupNorm, &[x, scale, b], &[("groups", int(groups)), ("eps", AttrValue::Float(eps))])?)
}

fn layer_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let bias = imp.opt_input(node, 2)?;
    let xs = imp.shape_of(x);
    let r = xs.len();
    let axis = norm_axis(a_int(node, "axis", -1), r)?;
    let eps = a_float(node, "epsilon", 1e-5);
    let span = &xs[axis..];
    let fits = |imp: &Importer, v: Value| imp.shape_of(v) == span;
    let attrs = [("axis", int(axis as i64)), ("eps", AttrValue::Float(eps))];
    let y = if fits(imp, scale) && bias.is_none_or(|b| fits(imp, b)) {
        match bias {
            Some(b) => imp.emit(K::LayerNorm, &[x, scale, b], &attrs)?,
            None => imp.emit(K::LayerNorm, &[x, scale], &attrs)?,
        }
    } else {
        let n = imp.emit(K::LayerNorm, &[x], &attrs)?;
        let m = imp.bin(K::Mul, n, scale)?;
        match bias {
            Some(b) => imp.bin(K::Add, m, b)?,
            None => m,
        }
    };
    let mut outs = vec![Some(Slot::Val(y))];
    let want = |i: usize| node.output.get(i).is_some_and(|s| !s.is_empty());
    if want(1) || want(2) {
        let axes: Vec<i64> = (axis as i64..r as i64).collect();
        let keep = [("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true))];
        let mean = imp.emit(K::Mean, &[x], &keep)?;
        outs.push(Some(Slot::Val(mean)));
        if want(2) {
            let var = imp.emit(
                K::Var,
                &[x],
                &[("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true)), ("correction", int(0))],
            )?;
            let ve = imp.bin_scalar(K::Add, var, eps)?;
            outs.push(Some(Slot::Val(imp.un(K::Rsqrt, ve)?)));
        }
    }
    Ok(outs)
}

fn rms_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let scale = imp.input(node, 1)?;
    let xs = imp.shape_of(x);
    let axis = norm_axis(a_int(node, "axis", -1), xs.len())?;
    let attrs = [("axis", int(axis as i64)), ("eps", AttrValue::Float(a_float(node, "epsilon", 1e-5)))];
    if imp.shape_of(scale) == xs[axis..] {
        one(imp.emit(K::RmsNorm, &[x, scale], &attrs)?)
    } else {
        let n = imp.emit(K::RmsNorm, &[x], &attrs)?;
        one(imp.bin(K::Mul, n, scale)?)
    }
}

fn lp_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let axis = a_int(node, "axis", -1);
    let p = a_int(node, "p", 2);
    let keep = [("axes", ints(&[axis])), ("keepdim", AttrValue::Bool(true))];
    let norm = match p {
        1 => {
            let a = imp.un(K::Abs, x)?;
            imp.emit(K::Sum, &[a], &keep)?
        }
        2 => {
            let sq = imp.bin(K::Mul, x, x)?;
            let s = imp.emit(K::Sum, &[sq], &keep)?;
            imp.un(K::Sqrt, s)?
        }
        _ => return invalid(format!("p = {p} (1 or 2)")),
    };
    // A zero norm gives 0 (ONNX's reference), not NaN.
    let zero = imp.bin_scalar(K::Eq, norm, 0.0)?;
    let q = imp.bin(K::Div, x, norm)?;
    let z = imp.scalar(imp.dtype_of_v(x), 0.0)?;
    one(imp.emit(K::Where, &[zero, z, q], &[])?)
}

fn mean_variance_norm(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let axes = a_ints(node, "axes").unwrap_or_else(|| vec![0, 2, 3]);
    let keep = [("axes", ints(&axes)), ("keepdim", AttrValue::Bool(true))];
    let m = imp.emit(K::Mean, &[x], &keep)?;
    let d = imp.bin(K::Sub, x, m)?;
    let sq = imp.bin(K::Mul, d, d)?;
    let v = imp.emit(K::Mean, &[sq], &keep)?;
    let s = imp.un(K::Sqrt, v)?;
    let s = imp.bin_scalar(K::Add, s, 1e-9)?;
    one(imp.bin(K::Div, d, s)?)
}

// --- Softmax and losses ---

fn softmax(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let xs = imp.shape_of(x);
    let r = xs.len();
    let legacy = imp.opset < 13;
    let axis = norm_axis(a_int(node, "axis", if legacy { 1 } else { -1 }), r)?;
    let (v, ax) = if legacy && axis + 1 != r {
        let a = imp.numel_of(&xs[..axis])?;
        let b = imp.numel_of(&xs[axis..])?;
        (imp.reshape(x, &[a, b])?, 1)
    } else {
        (x, axis)
    };
    let y = match node.op_type.as_str() {
        "Softmax" => imp.emit(K::Softmax, &[v], &[("axis", int(ax as i64))])?,
        "LogSoftmax" => imp.emit(K::LogSoftmax, &[v], &[("axis", int(ax as i64))])?,
        _ => {
            let i = imp.emit(K::Argmax, &[v], &[("axis", int(ax as i64)), ("keepdim", AttrValue::Bool(true))])?;
            let shape = imp.shape_of(v);
            let iota = imp.emit(
                K::Iota,
                &[],
                &[("shape", dims_attr(&shape)), ("axis", int(ax as i64)), ("dtype", AttrValue::DType(DType::I64))],
            )?;
            let eq = imp.bin(K::Eq, iota, i)?;
            imp.convert_to(eq, imp.dtype_of_v(x))?
        }
    };
    one(imp.reshape(y, &xs)?)
}

/// `NegativeLogLikelihoodLoss` or `SoftmaxCrossEntropyLoss`.
fn loss(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let t = imp.input(node, 1)?;
    let w = imp.opt_input(node, 2)?;
    let reduction = a_str(node, "reduction", "mean");
    let ignore = attr(node, "ignore_index").map(|a| a.i);
    let logp = if node.op_type == "SoftmaxCrossEntropyLoss" {
        Some(imp.emit(K::LogSoftmax, &[x], &[("axis", int(1))])?)
    } else {
        None
    };
    let loss = nll(imp, logp.unwrap_or(x), t, w, ignore, &reduction)?;
    let mut outs = vec![Some(Slot::Val(loss))];
    if let Some(lp) = logp {
        outs.push(Some(Slot::Val(lp)));
    }
    Ok(outs)
}

/// Negative log-likelihood of log-probabilities `logp [N, C, d...]` at integer `target
/// [N, d...]`, with optional class weights `[C]` and an ignored class, reduced as ONNX says
/// ("mean" divides by the total weight of the counted targets).
fn nll(
    imp: &mut Importer,
    logp: Value,
    target: Value,
    weight: Option<Value>,
    ignore: Option<i64>,
    reduction: &str,
) -> NResult<Value> {
    let dt = imp.dtype_of_v(logp);
    let t = imp.convert_to(target, DType::I64)?;
    let (t_safe, valid) = match ignore {
        Some(ii) => {
            let valid = imp.bin_scalar(K::Ne, t, ii as f64)?;
            let zero = imp.scalar(DType::I64, 0.0)?;
            (imp.emit(K::Where, &[valid, t, zero], &[])?, Some(valid))
        }
        None => (t, None),
    };
    let idx = imp.unsqueeze(t_safe, &[1])?;
    let g = imp.emit(K::Gather, &[logp, idx], &[("axis", int(1))])?;
    let g = imp.squeeze(g, &[1])?;
    let mut loss = imp.un(K::Neg, g)?;
    // Per-target weights (1 where no weights are given), 0 where ignored.
    let mut wt: Option<Value> = None;
    if let Some(w) = weight {
        let ts = imp.shape_of(t_safe);
        let k = imp.numel_of(&ts)?;
        let flat = imp.reshape(t_safe, &[k])?;
        let picked = imp.emit(K::Gather, &[w, flat], &[("axis", int(0))])?;
        wt = Some(imp.reshape(picked, &ts)?);
    }
    if let Some(valid) = valid {
        let vf = imp.convert_to(valid, dt)?;
        wt = Some(match wt {
            Some(w) => imp.bin(K::Mul, w, vf)?,
            None => vf,
        });
    }
    if let Some(w) = wt {
        loss = imp.bin(K::Mul, loss, w)?;
    }
    match reduction {
        "none" => Ok(loss),
        "sum" => imp.emit(K::Sum, &[loss], &[]),
        "mean" => match wt {
            None => imp.emit(K::Mean, &[loss], &[]),
            Some(w) => {
                let num = imp.emit(K::Sum, &[loss], &[])?;
                let den = imp.emit(K::Sum, &[w], &[])?;
                imp.bin(K::Div, num, den)
            }
        },
        r => invalid(format!("reduction `{r}`")),
    }
}
