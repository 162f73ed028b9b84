//! ONNX attention-family ops: `Attention` (opsets 23 and 24) and `RotaryEmbedding` (23).
//!
//! Mapping choices:
//! - `Attention` works on 4-D `[B, heads, L, D]` operands: 3-D inputs `[B, L, heads*D]` are
//!   reshaped and permuted with `q_num_heads`/`kv_num_heads`, and the output goes back the same
//!   way. `past_key`/`past_value` are concatenated in front of K and V (axis 2); the results are
//!   `present_key`/`present_value`.
//! - Grouped-query attention (`q_num_heads = g * kv_num_heads`, query head `h` reading key/value
//!   head `h / g`) is expressed by broadcasting, not by copying K and V: Q becomes
//!   `[B, kv, g, L, D]`, K and V `[B, kv, 1, S, D]`, the mask `[.., kv, g, L, S]` or
//!   `[.., 1, 1, L, S]`, and the result is reshaped back to `[B, heads, L, Dv]`. Head counts
//!   must be static.
//! - The mask terms are combined into one: a mask whose last dim is shorter than the total
//!   length `S` is padded to `S` with `-inf` (float) or false (bool); `is_causal` keeps
//!   `j <= i + past` (`tril` with the past length as its diagonal, which must be static);
//!   `nonpad_kv_seqlen` (opset 24) keeps `j < nonpad[b]`. Bool terms are `and`ed; with a float
//!   mask they are added as `where(keep, 0, -inf)`. A bool mask combined with `is_causal` keeps
//!   what both keep.
//! - Without `softcap`, the `qk_matmul_output` output, a `softmax_precision` below the input's
//!   precision, or a negative or non-finite `scale`, the op is one
//!   `scaled_dot_product_attention` (a causal mask without a past uses its `causal` flag) with
//!   `safe_softmax=false`, so a row with nothing to attend is NaN, as ONNX's softmax gives. It
//!   applies the scale to the product (rounded once) rather than `sqrt(scale)` to each operand;
//!   the two agree up to rounding.
//! - Otherwise it is the ONNX function body spelled out: `matmul(Q*sqrt(scale),
//!   K*sqrt(scale), transpose_b)`, softcap `c*tanh(x/c)`, the mask added, softmax (in
//!   `softmax_precision`), `matmul` with V. `qk_matmul_output_mode` 0..3 picks the product, the
//!   softcapped product, the masked scores or the softmax.
//! - `RotaryEmbedding` slices the first `rotary_embedding_dim` features of each head, splits
//!   them into halves (or even/odd pairs when `interleaved`), rotates each pair by the cached
//!   cos/sin (`embedding` of the caches at `position_ids` when given), and concatenates the
//!   untouched rest. Negative position ids are an error (the interpreter's `embedding` rule).

use super::build::{bin, bin_scalar, convert, dims_attr, dtype, invalid, permute, reshape, shape, unsupported, Outs};
use super::import::{a_float, a_int, attr, Importer, NResult, Slot};
use super::ops::Row;
use super::proto::NodeProto;
use super::tensor::dtype_of;
use super::NodeError;
use crate::ir::{AttrValue, DType, Dim, Value};
use crate::ops::OpKind as K;

/// The attention-family ops, by ONNX name.
pub(super) const ATTENTION: &[Row] = &[
    ("Attention", |imp, node, _| attention(imp, node)),
    ("CausalConvWithState", |imp, node, _| causal_conv_with_state(imp, node)),
    ("LinearAttention", |imp, node, _| linear_attention(imp, node)),
    ("RotaryEmbedding", |imp, node, _| rotary_embedding(imp, node)),
];

/// `x[start..end]` along `axis`.
fn slice(imp: &mut Importer, v: Value, axis: usize, start: u64, end: u64) -> NResult<Value> {
    imp.emit(
        K::Slice,
        &[v],
        &[
            ("axis", AttrValue::Int(axis as i64)),
            ("start", AttrValue::Int(start as i64)),
            ("end", AttrValue::Int(end as i64)),
        ],
    )
}

fn cat(imp: &mut Importer, args: &[Value], axis: usize) -> NResult<Value> {
    imp.emit(K::Cat, args, &[("axis", AttrValue::Int(axis as i64))])
}

fn static_dim(d: &Dim, what: &str) -> NResult<u64> {
    d.as_const().ok_or_else(|| NodeError::NeedsStatic(format!("{what} is the symbolic size `{d}`")))
}

/// The output slots the node asks for (`node.output[i]` present and non-empty).
fn wants(node: &NodeProto, i: usize) -> bool {
    node.output.get(i).is_some_and(|s| !s.is_empty())
}

/// An optional non-negative integer attribute.
fn opt_count(node: &NodeProto, name: &str) -> NResult<Option<u64>> {
    match attr(node, name) {
        None => Ok(None),
        Some(a) if a.i > 0 => Ok(Some(a.i as u64)),
        Some(a) => invalid(format!("`{name}` must be positive, got {}", a.i)),
    }
}

// ---------------------------------------------------------------------------------------------
// Attention

/// `[B, L, heads*D]` to `[B, heads, L, D]`.
fn split_heads(imp: &mut Importer, v: Value, heads: u64, what: &str) -> NResult<Value> {
    let s = shape(imp, v);
    let hidden = static_dim(&s[2], &format!("the hidden size of {what}"))?;
    if hidden % heads != 0 {
        return invalid(format!("the hidden size {hidden} of {what} is not a multiple of its {heads} heads"));
    }
    let r = reshape(imp, v, &[s[0].clone(), s[1].clone(), Dim::new(heads), Dim::new(hidden / heads)])?;
    permute(imp, r, &[0, 2, 1, 3])
}

/// Whether the fused op computes softmax at least as precisely as `precision` asks.
fn precision_covered(input: DType, precision: DType) -> bool {
    precision == input || precision == DType::F64 || (precision == DType::F32 && input != DType::F64)
}

pub fn attention(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    if node.input.len() > 7 || (imp.opset < 24 && node.input.len() > 6) {
        return invalid(format!("Attention-{} takes at most {} inputs", imp.opset, if imp.opset < 24 { 6 } else { 7 }));
    }
    let q = imp.input(node, 0)?;
    let k = imp.input(node, 1)?;
    let v = imp.input(node, 2)?;
    let mask = imp.opt_input(node, 3)?;
    let past_k = imp.opt_input(node, 4)?;
    let past_v = imp.opt_input(node, 5)?;
    let nonpad = imp.opt_input(node, 6)?;
    let dt = dtype(imp, q);
    if !dt.is_float() {
        return invalid(format!("Q must be a float tensor, got {dt}"));
    }
    for (x, what) in [(k, "K"), (past_k.unwrap_or(k), "past_key")] {
        if dtype(imp, x) != dt {
            return invalid(format!("{what} is {} but Q is {dt}", dtype(imp, x)));
        }
    }
    for (x, what) in [(v, "V"), (past_v.unwrap_or(v), "past_value")] {
        if dtype(imp, x) != dt {
            return unsupported(format!("{what} of dtype {} with Q of dtype {dt}", dtype(imp, x)));
        }
    }
    if past_k.is_some() != past_v.is_some() {
        return invalid("past_key and past_value must be given together");
    }

    // Attributes.
    let causal = match a_int(node, "is_causal", 0) {
        0 => false,
        1 => true,
        c => return invalid(format!("is_causal must be 0 or 1, got {c}")),
    };
    let softcap = a_float(node, "softcap", 0.0);
    if softcap.is_nan() || softcap < 0.0 {
        return invalid(format!("softcap must be >= 0, got {softcap}"));
    }
    let mode = a_int(node, "qk_matmul_output_mode", 0);
    if !(0..=3).contains(&mode) {
        return invalid(format!("qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode}"));
    }
    let qk_wanted = wants(node, 3);
    if qk_wanted && mode == 0 && softcap > 0.0 {
        return unsupported(
            "qk_matmul_output_mode 0 with softcap: the spec (the raw product) and the reference implementation (the softcapped product) disagree",
        );
    }
    let precision = match attr(node, "softmax_precision") {
        None => dt,
        Some(a) => match dtype_of(a.i as i32) {
            Some(d) if d.is_float() => d,
            _ => return invalid(format!("softmax_precision must be a float type, got {}", a.i)),
        },
    };
    let scale = attr(node, "scale").map(|a| f64::from(a.f));

    // Operands as [B, heads, len, head_size].
    let rank = imp.ty(q).rank();
    if imp.ty(k).rank() != rank || imp.ty(v).rank() != rank || !(rank == 3 || rank == 4) {
        return invalid(format!(
            "Q, K and V must all be 3-D or all 4-D, got ranks {}, {} and {}",
            rank,
            imp.ty(k).rank(),
            imp.ty(v).rank()
        ));
    }
    let q_heads_attr = opt_count(node, "q_num_heads")?;
    let kv_heads_attr = opt_count(node, "kv_num_heads")?;
    let (q4, k4, v4) = if rank == 3 {
        let (Some(qh), Some(kvh)) = (q_heads_attr, kv_heads_attr) else {
            return invalid("3-D inputs need the q_num_heads and kv_num_heads attributes");
        };
        (split_heads(imp, q, qh, "Q")?, split_heads(imp, k, kvh, "K")?, split_heads(imp, v, kvh, "V")?)
    } else {
        (q, k, v)
    };
    let (qs, ks, vs) = (shape(imp, q4), shape(imp, k4), shape(imp, v4));
    if ks[1] != vs[1] {
        return invalid(format!("K has {} heads but V has {}", ks[1], vs[1]));
    }
    if ks[3] != qs[3] {
        return invalid(format!("the head size of K ({}) differs from Q's ({})", ks[3], qs[3]));
    }
    if rank == 4 {
        for (given, d, what) in [(q_heads_attr, &qs[1], "q_num_heads"), (kv_heads_attr, &ks[1], "kv_num_heads")] {
            if let (Some(n), Some(m)) = (given, d.as_const()) {
                if n != m {
                    return invalid(format!("{what} is {n} but the input has {m} heads"));
                }
            }
        }
    }

    // The key/value cache.
    let cache = |imp: &mut Importer, past: Option<Value>, x: Value, what: &str| -> NResult<Value> {
        let Some(p) = past else { return Ok(x) };
        if imp.ty(p).rank() != 4 {
            return invalid(format!("{what} must be 4-D, got rank {}", imp.ty(p).rank()));
        }
        cat(imp, &[p, x], 2)
    };
    let present_k = cache(imp, past_k, k4, "past_key")?;
    let present_v = cache(imp, past_v, v4, "past_value")?;
    let past_len = past_k.map(|p| shape(imp, p)[2].clone()).unwrap_or_else(|| Dim::new(0));
    let total = shape(imp, present_k)[2].clone();
    let l = qs[2].clone();

    // Grouped-query attention: [B, kv, g, ., .] operands.
    let (q_heads, kv_heads) = (qs[1].clone(), ks[1].clone());
    let group = if q_heads == kv_heads {
        None
    } else {
        let qh = static_dim(&q_heads, "the number of query heads in grouped-query attention")?;
        let kvh = static_dim(&kv_heads, "the number of key/value heads in grouped-query attention")?;
        if kvh == 0 || qh % kvh != 0 {
            return invalid(format!("{qh} query heads are not a multiple of {kvh} key/value heads"));
        }
        Some((qh, kvh))
    };

    // The mask terms.
    let mut keep: Option<Value> = None;
    let mut float_mask: Option<Value> = None;
    let and_keep = |imp: &mut Importer, keep: &mut Option<Value>, b: Value| -> NResult<()> {
        *keep = Some(match *keep {
            None => b,
            Some(a) => bin(imp, K::And, a, b)?,
        });
        Ok(())
    };
    if let Some(m) = mask {
        let md = dtype(imp, m);
        if md != DType::Bool && md != dt {
            return invalid(format!("attn_mask must be bool or {dt}, got {md}"));
        }
        let ms = shape(imp, m);
        if ms.is_empty() || ms.len() > 4 {
            return invalid(format!("attn_mask must have rank 1 to 4, got {}", ms.len()));
        }
        let last = ms[ms.len() - 1].clone();
        let m = if last == total {
            m
        } else {
            let short = match (total.as_const(), last.as_const()) {
                (Some(t), Some(n)) if n > t => {
                    return invalid(format!(
                        "attn_mask's last dim {n} is longer than the total sequence length {t}"
                    ))
                }
                (Some(t), Some(n)) => t - n,
                _ => total.sub(&last).ok().and_then(|d| d.as_const()).ok_or_else(|| {
                    NodeError::Unsupported(format!(
                        "attn_mask's last dim {last} against the total sequence length {total}: the padding must be a static size"
                    ))
                })?,
            };
            let short = i64::try_from(short).map_err(|_| NodeError::Invalid("attn_mask padding too large".into()))?;
            let mut high = vec![0; ms.len()];
            high[ms.len() - 1] = short;
            let value = if md == DType::Bool { 0.0 } else { f64::NEG_INFINITY };
            imp.emit(
                K::Pad,
                &[m],
                &[
                    ("low", AttrValue::Ints(vec![0; ms.len()])),
                    ("high", AttrValue::Ints(high)),
                    ("value", AttrValue::Float(value)),
                ],
            )?
        };
        if md == DType::Bool {
            keep = Some(m);
        } else {
            float_mask = Some(m);
        }
    }
    if let Some(n) = nonpad {
        if dtype(imp, n) != DType::I64 || imp.ty(n).rank() != 1 {
            return invalid("nonpad_kv_seqlen must be a 1-D int64 tensor");
        }
        let b = shape(imp, n)[0].clone();
        let col = imp.emit(
            K::Iota,
            &[],
            &[
                ("shape", dims_attr(&[b.clone(), total.clone()])),
                ("axis", AttrValue::Int(1)),
                ("dtype", AttrValue::DType(DType::I64)),
            ],
        )?;
        let lim = reshape(imp, n, &[b.clone(), Dim::new(1)])?;
        let pad_keep = bin(imp, K::Lt, col, lim)?;
        let pad_keep = reshape(imp, pad_keep, &[b, Dim::new(1), Dim::new(1), total.clone()])?;
        and_keep(imp, &mut keep, pad_keep)?;
    }

    let fused_scale = match scale {
        None => Some(f64::NAN),
        Some(s) if s.is_finite() && s >= 0.0 => Some(s),
        Some(_) => None,
    };
    let fused = softcap == 0.0 && !qk_wanted && precision_covered(dt, precision) && fused_scale.is_some();
    // The fused op's own causal flag is top-left aligned: it serves only without a past.
    let causal_flag = fused && causal && past_len.as_const() == Some(0);
    if causal && !causal_flag {
        let p = static_dim(&past_len, "the past length of a causal attention")?;
        let p = i64::try_from(p).map_err(|_| NodeError::Invalid("past length too large".into()))?;
        let ones = imp.emit(
            K::Full,
            &[],
            &[
                ("shape", dims_attr(&[l.clone(), total.clone()])),
                ("value", AttrValue::Float(1.0)),
                ("dtype", AttrValue::DType(DType::Bool)),
            ],
        )?;
        let tri = imp.emit(K::Tril, &[ones], &[("diagonal", AttrValue::Int(p))])?;
        and_keep(imp, &mut keep, tri)?;
    }
    let mask = match (float_mask, keep) {
        (None, k) => k,
        (Some(f), None) => Some(f),
        (Some(f), Some(k)) => {
            let zero = imp.scalar(dt, 0.0)?;
            let ninf = imp.scalar(dt, f64::NEG_INFINITY)?;
            let bias = imp.emit(K::Where, &[k, zero, ninf], &[])?;
            Some(bin(imp, K::Add, f, bias)?)
        }
    };

    // To the grouped form.
    let (qg, kg, vg, mg) = match group {
        None => (q4, present_k, present_v, mask),
        Some((qh, kvh)) => {
            let g = qh / kvh;
            let (b, d, dv) = (qs[0].clone(), qs[3].clone(), vs[3].clone());
            let qg = reshape(imp, q4, &[b.clone(), Dim::new(kvh), Dim::new(g), l.clone(), d.clone()])?;
            let kb = shape(imp, present_k)[0].clone();
            let kg = reshape(imp, present_k, &[kb.clone(), Dim::new(kvh), Dim::new(1), total.clone(), d])?;
            let vg = reshape(imp, present_v, &[kb, Dim::new(kvh), Dim::new(1), total.clone(), dv])?;
            let mg = match mask {
                None => None,
                Some(m) => {
                    let mut ms = shape(imp, m);
                    while ms.len() < 4 {
                        ms.insert(0, Dim::new(1));
                    }
                    let heads = match ms[1].as_const() {
                        Some(1) => [Dim::new(1), Dim::new(1)],
                        Some(h) if h == qh => [Dim::new(kvh), Dim::new(g)],
                        _ => return invalid(format!("attn_mask's head dim {} is neither 1 nor {qh}", ms[1])),
                    };
                    let dims = [ms[0].clone(), heads[0].clone(), heads[1].clone(), ms[2].clone(), ms[3].clone()];
                    Some(reshape(imp, m, &dims)?)
                }
            };
            (qg, kg, vg, mg)
        }
    };

    let mut qk_out = None;
    let yg = if let (true, Some(sc)) = (fused, fused_scale) {
        let mut args = vec![qg, kg, vg];
        args.extend(mg);
        imp.emit(
            K::ScaledDotProductAttention,
            &args,
            &[
                ("causal", AttrValue::Bool(causal_flag)),
                ("scale", AttrValue::Float(sc)),
                ("safe_softmax", AttrValue::Bool(false)),
            ],
        )?
    } else {
        let sc = match scale {
            Some(s) => s,
            None => {
                let d = static_dim(&qs[3], "the head size (for the default scale)")?;
                1.0 / (d as f64).sqrt()
            }
        };
        let root = sc.sqrt();
        let qsc = bin_scalar(imp, K::Mul, qg, root)?;
        let ksc = bin_scalar(imp, K::Mul, kg, root)?;
        let raw = imp.emit(K::Matmul, &[qsc, ksc], &[("transpose_b", AttrValue::Bool(true))])?;
        let capped = if softcap > 0.0 {
            let x = bin_scalar(imp, K::Div, raw, softcap)?;
            let t = imp.emit(K::Tanh, &[x], &[])?;
            bin_scalar(imp, K::Mul, t, softcap)?
        } else {
            raw
        };
        let biased = match mg {
            None => capped,
            Some(m) if dtype(imp, m) == DType::Bool => {
                let zero = imp.scalar(dt, 0.0)?;
                let ninf = imp.scalar(dt, f64::NEG_INFINITY)?;
                let bias = imp.emit(K::Where, &[m, zero, ninf], &[])?;
                bin(imp, K::Add, capped, bias)?
            }
            Some(m) => bin(imp, K::Add, capped, m)?,
        };
        let wide = convert(imp, biased, precision)?;
        let p = imp.emit(K::Softmax, &[wide], &[("axis", AttrValue::Int(-1))])?;
        let p = convert(imp, p, dt)?;
        qk_out = Some(match mode {
            0 => raw,
            1 => capped,
            2 => biased,
            _ => p,
        });
        imp.emit(K::Matmul, &[p, vg], &[])?
    };

    // Back to [B, heads, L, Dv] (and [B, L, heads*Dv] for 3-D inputs).
    let ungroup = |imp: &mut Importer, x: Value| -> NResult<Value> {
        let mut s = shape(imp, x);
        if group.is_none() {
            return Ok(x);
        }
        let last = s.pop().unwrap_or_else(|| Dim::new(1));
        reshape(imp, x, &[s[0].clone(), q_heads.clone(), l.clone(), last])
    };
    let y4 = ungroup(imp, yg)?;
    let y = if rank == 3 {
        let t = permute(imp, y4, &[0, 2, 1, 3])?;
        let ts = shape(imp, t);
        let hidden = ts[2].mul(&ts[3]).map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}")))?;
        reshape(imp, t, &[ts[0].clone(), ts[1].clone(), hidden])?
    } else {
        y4
    };
    let mut outs: Outs = vec![Some(Slot::Val(y)), Some(Slot::Val(present_k)), Some(Slot::Val(present_v))];
    if let Some(qk) = qk_out {
        outs.push(Some(Slot::Val(ungroup(imp, qk)?)));
    }
    Ok(outs)
}

// ---------------------------------------------------------------------------------------------
// RotaryEmbedding

pub fn rotary_embedding(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let cos = imp.input(node, 1)?;
    let sin = imp.input(node, 2)?;
    let pos = imp.opt_input(node, 3)?;
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return invalid(format!("the input must be a float tensor, got {dt}"));
    }
    for (c, what) in [(cos, "cos_cache"), (sin, "sin_cache")] {
        if dtype(imp, c) != dt {
            return invalid(format!("{what} is {} but the input is {dt}", dtype(imp, c)));
        }
    }
    let interleaved = match a_int(node, "interleaved", 0) {
        0 => false,
        1 => true,
        i => return invalid(format!("interleaved must be 0 or 1, got {i}")),
    };
    let xs = shape(imp, x);
    // Work on [B, S, H, D] (3-D input) or [B, H, S, D] (4-D); `seq_axis` is S's position.
    let (xh, seq_axis) = match xs.len() {
        3 => {
            let heads = match attr(node, "num_heads") {
                Some(a) if a.i > 0 => a.i as u64,
                _ => return invalid("a 3-D input needs a positive num_heads attribute"),
            };
            let hidden = static_dim(&xs[2], "the hidden size")?;
            if hidden % heads != 0 {
                return invalid(format!("the hidden size {hidden} is not a multiple of num_heads {heads}"));
            }
            let dims = [xs[0].clone(), xs[1].clone(), Dim::new(heads), Dim::new(hidden / heads)];
            (reshape(imp, x, &dims)?, 1)
        }
        4 => (x, 2),
        r => return invalid(format!("the input must be 3-D or 4-D, got rank {r}")),
    };
    let hs = shape(imp, xh);
    let head = static_dim(&hs[3], "the head size")?;
    let rot = match a_int(node, "rotary_embedding_dim", 0) {
        0 => head,
        r if r > 0 && (r as u64) <= head && r % 2 == 0 => r as u64,
        r => return invalid(format!("rotary_embedding_dim must be even and at most the head size {head}, got {r}")),
    };
    if rot % 2 != 0 {
        return invalid(format!("the rotated size {rot} must be even"));
    }
    let half = rot / 2;
    // The caches as [B, S, half], then with a unit head axis.
    let mut caches = Vec::with_capacity(2);
    for (c, what) in [(cos, "cos_cache"), (sin, "sin_cache")] {
        let cs = shape(imp, c);
        let c = match pos {
            Some(p) => {
                if cs.len() != 2 {
                    return invalid(format!("with position_ids, {what} must be 2-D, got rank {}", cs.len()));
                }
                if !dtype(imp, p).is_int() {
                    return invalid("position_ids must be an integer tensor");
                }
                imp.emit(K::Embedding, &[p, c], &[])?
            }
            None => {
                if cs.len() != 3 {
                    return invalid(format!("without position_ids, {what} must be 3-D, got rank {}", cs.len()));
                }
                c
            }
        };
        let cs = shape(imp, c);
        if cs.len() != 3 || cs[2].as_const() != Some(half) {
            return invalid(format!(
                "{what} rows must have rotary_embedding_dim / 2 = {half} entries, got shape {cs:?}"
            ));
        }
        let unit = if seq_axis == 1 { 2 } else { 1 };
        let mut dims = cs.clone();
        dims.insert(unit, Dim::new(1));
        caches.push(reshape(imp, c, &dims)?);
    }
    let (cos, sin) = (caches[0], caches[1]);
    let rotated = if rot == head { xh } else { slice(imp, xh, 3, 0, rot)? };
    let (x1, x2) = if interleaved {
        let mut pairs = shape(imp, rotated);
        pairs.pop();
        pairs.extend([Dim::new(half), Dim::new(2)]);
        let p = reshape(imp, rotated, &pairs)?;
        let a = imp.emit(K::Select, &[p], &[("axis", AttrValue::Int(4)), ("index", AttrValue::Int(0))])?;
        let b = imp.emit(K::Select, &[p], &[("axis", AttrValue::Int(4)), ("index", AttrValue::Int(1))])?;
        (a, b)
    } else {
        (slice(imp, rotated, 3, 0, half)?, slice(imp, rotated, 3, half, rot)?)
    };
    let c1 = bin(imp, K::Mul, cos, x1)?;
    let s2 = bin(imp, K::Mul, sin, x2)?;
    let real = bin(imp, K::Sub, c1, s2)?;
    let s1 = bin(imp, K::Mul, sin, x1)?;
    let c2 = bin(imp, K::Mul, cos, x2)?;
    let imag = bin(imp, K::Add, s1, c2)?;
    let mut y = if interleaved {
        let st = imp.emit(K::Stack, &[real, imag], &[("axis", AttrValue::Int(4))])?;
        reshape(imp, st, &shape(imp, rotated))?
    } else {
        cat(imp, &[real, imag], 3)?
    };
    if rot < head {
        let rest = slice(imp, xh, 3, rot, head)?;
        y = cat(imp, &[y, rest], 3)?;
    }
    Ok(vec![Some(Slot::Val(reshape(imp, y, &xs)?))])
}

// ---------------------------------------------------------------------------------------------
// CausalConvWithState

pub fn causal_conv_with_state(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let x = imp.input(node, 0)?;
    let w = imp.input(node, 1)?;
    let bias = imp.opt_input(node, 2)?;
    let past = imp.opt_input(node, 3)?;
    let dt = dtype(imp, x);
    if !dt.is_float() {
        return invalid(format!("the input must be a float tensor, got {dt}"));
    }
    let (xs, ws) = (shape(imp, x), shape(imp, w));
    if xs.len() != 3 || ws.len() != 3 {
        return invalid(format!(
            "input [B, C, L] and weight [C, 1, k] must be 3-D, got ranks {} and {}",
            xs.len(),
            ws.len()
        ));
    }
    let c = static_dim(&xs[1], "the channel count")?;
    let k = static_dim(&ws[2], "the kernel size")?;
    if ws[0].as_const() != Some(c) || ws[1].as_const() != Some(1) || k == 0 {
        return invalid(format!("the weight must be [{c}, 1, k] with k >= 1, got {ws:?}"));
    }
    let activation = super::import::a_str(node, "activation", "none");
    let silu = match activation.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        a => return invalid(format!("unknown activation `{a}` (none, silu or swish)")),
    };
    let state_dims = [xs[0].clone(), xs[1].clone(), Dim::new(k - 1)];
    let padded = match past {
        Some(p) => {
            if shape(imp, p) != state_dims || dtype(imp, p) != dt {
                return invalid(format!(
                    "past_state must be {dt} {state_dims:?}, got {} {:?}",
                    dtype(imp, p),
                    shape(imp, p)
                ));
            }
            cat(imp, &[p, x], 2)?
        }
        None => imp.emit(
            K::Pad,
            &[x],
            &[("low", AttrValue::Ints(vec![0, 0, (k - 1) as i64])), ("high", AttrValue::Ints(vec![0, 0, 0]))],
        )?,
    };
    // Half-precision convolutions accumulate in f32 and round once, like the reference.
    let work = if matches!(dt, DType::F16 | DType::BF16) { DType::F32 } else { dt };
    let (pw, ww) = (convert(imp, padded, work)?, convert(imp, w, work)?);
    let y = imp.emit(K::Conv, &[pw, ww], &[("groups", AttrValue::Int(c as i64))])?;
    let y = match bias {
        None => y,
        Some(b) => {
            if shape(imp, b) != [Dim::new(c)] || dtype(imp, b) != dt {
                return invalid(format!("the bias must be {dt} [{c}], got {} {:?}", dtype(imp, b), shape(imp, b)));
            }
            let b = reshape(imp, b, &[Dim::new(c), Dim::new(1)])?;
            let b = convert(imp, b, work)?;
            bin(imp, K::Add, y, b)?
        }
    };
    let y = convert(imp, y, dt)?;
    let y = if silu { imp.emit(K::Silu, &[y], &[])? } else { y };
    let present = if k == 1 {
        imp.emit(
            K::Full,
            &[],
            &[("shape", dims_attr(&state_dims)), ("value", AttrValue::Float(0.0)), ("dtype", AttrValue::DType(dt))],
        )?
    } else {
        imp.emit(K::Slice, &[padded], &[("axis", AttrValue::Int(2)), ("start", AttrValue::Int(1 - k as i64))])?
    };
    Ok(vec![Some(Slot::Val(y)), Some(Slot::Val(present))])
}

// ---------------------------------------------------------------------------------------------
// LinearAttention

/// The most time steps `LinearAttention` unrolls at import.
const MAX_LINEAR_ATTENTION_STEPS: u64 = 512;

pub fn linear_attention(imp: &mut Importer, node: &NodeProto) -> NResult<Outs> {
    let q = imp.input(node, 0)?;
    let k = imp.input(node, 1)?;
    let v = imp.input(node, 2)?;
    let past = imp.opt_input(node, 3)?;
    let decay = imp.opt_input(node, 4)?;
    let beta = imp.opt_input(node, 5)?;
    let dt = dtype(imp, q);
    if !dt.is_float() {
        return invalid(format!("query must be a float tensor, got {dt}"));
    }
    for (x, what) in [(k, "key"), (v, "value"), (decay.unwrap_or(q), "decay"), (beta.unwrap_or(q), "beta")] {
        if dtype(imp, x) != dt {
            return invalid(format!("{what} is {} but query is {dt}", dtype(imp, x)));
        }
    }
    let rule = super::import::a_str(node, "update_rule", "gated_delta");
    let (gating, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        r => return invalid(format!("unknown update_rule `{r}` (linear, gated, delta or gated_delta)")),
    };
    if gating != decay.is_some() {
        return invalid(format!("update_rule `{rule}` {} the decay input", if gating { "needs" } else { "forbids" }));
    }
    if delta != beta.is_some() {
        return invalid(format!("update_rule `{rule}` {} the beta input", if delta { "needs" } else { "forbids" }));
    }
    let (Some(qh), Some(kvh)) = (opt_count(node, "q_num_heads")?, opt_count(node, "kv_num_heads")?) else {
        return invalid("q_num_heads and kv_num_heads are required");
    };
    if qh % kvh != 0 {
        return invalid(format!("q_num_heads {qh} is not a multiple of kv_num_heads {kvh}"));
    }
    let g = qh / kvh;
    for (x, what) in [(q, "query"), (k, "key"), (v, "value")] {
        if imp.ty(x).rank() != 3 {
            return invalid(format!("{what} must be 3-D [B, T, heads*d], got rank {}", imp.ty(x).rank()));
        }
    }
    let qs = shape(imp, q);
    let (b, t) = (qs[0].clone(), qs[1].clone());
    let steps = static_dim(&t, "the sequence length of LinearAttention (its recurrence is unrolled at import)")?;
    if steps > MAX_LINEAR_ATTENTION_STEPS {
        return unsupported(format!(
            "LinearAttention over {steps} steps: its recurrence is unrolled at import, up to {MAX_LINEAR_ATTENTION_STEPS} steps"
        ));
    }
    // Computed in f32 (or f64), like the reference; results convert back.
    let work = if dt == DType::F64 { DType::F64 } else { DType::F32 };
    let q4 = split_heads(imp, q, qh, "query")?;
    let k4 = split_heads(imp, k, kvh, "key")?;
    let v4 = split_heads(imp, v, kvh, "value")?;
    let (dk, dv) = (shape(imp, k4)[3].clone(), shape(imp, v4)[3].clone());
    if shape(imp, q4)[3] != dk {
        return invalid(format!("query head size {} differs from key head size {dk}", shape(imp, q4)[3]));
    }
    for (x, what) in [(k, "key"), (v, "value")] {
        let s = shape(imp, x);
        if s[0] != b || s[1] != t {
            return invalid(format!("{what} must share query's batch and length, got {s:?}"));
        }
    }
    let dkn = static_dim(&dk, "the key head size")?;
    // [B, kv, g, T, dk] queries; [B, kv, T, .] keys and values.
    let qg = reshape(imp, q4, &[b.clone(), Dim::new(kvh), Dim::new(g), t.clone(), dk.clone()])?;
    let qg = convert(imp, qg, work)?;
    let k4 = convert(imp, k4, work)?;
    let v4 = convert(imp, v4, work)?;
    // decay as [B, kv, T, dk or 1], beta as [B, kv or 1, T, 1].
    let per_head = |imp: &mut Importer, x: Value, what: &str, allowed: &[u64]| -> NResult<Value> {
        let s = shape(imp, x);
        if s.len() != 3 || s[0] != b || s[1] != t {
            return invalid(format!("{what} must be [B, T, n], got {s:?}"));
        }
        let n = static_dim(&s[2], &format!("the last dim of {what}"))?;
        let (heads, inner) = if n == kvh && allowed.contains(&kvh) {
            (kvh, 1)
        } else if allowed.contains(&n) && n == 1 {
            (1, 1)
        } else if allowed.contains(&n) && n == kvh * dkn {
            (kvh, dkn)
        } else {
            return invalid(format!("the last dim of {what} must be one of {allowed:?}, got {n}"));
        };
        let r = reshape(imp, x, &[b.clone(), t.clone(), Dim::new(heads), Dim::new(inner)])?;
        let r = permute(imp, r, &[0, 2, 1, 3])?;
        convert(imp, r, work)
    };
    let gate = match decay {
        None => None,
        Some(d) => {
            let d4 = per_head(imp, d, "decay", &[kvh, kvh * dkn])?;
            Some(imp.emit(K::Exp, &[d4], &[])?)
        }
    };
    let beta4 = match beta {
        None => None,
        Some(bt) => Some(per_head(imp, bt, "beta", &[kvh, 1])?),
    };
    let state_dims = [b.clone(), Dim::new(kvh), dk.clone(), dv.clone()];
    let state_dtype = match past {
        Some(p) => {
            if shape(imp, p) != state_dims {
                return invalid(format!("past_state must be {state_dims:?}, got {:?}", shape(imp, p)));
            }
            if !dtype(imp, p).is_float() {
                return invalid("past_state must be a float tensor");
            }
            dtype(imp, p)
        }
        None => dt,
    };
    let mut state = match past {
        Some(p) => convert(imp, p, work)?,
        None => imp.emit(
            K::Full,
            &[],
            &[("shape", dims_attr(&state_dims)), ("value", AttrValue::Float(0.0)), ("dtype", AttrValue::DType(work))],
        )?,
    };
    // 0 (the default) means 1/sqrt(d_k).
    let scale = match a_float(node, "scale", 0.0) {
        0.0 => 1.0 / (dkn as f64).sqrt(),
        s => s,
    };
    let at = |imp: &mut Importer, x: Value, axis: usize, i: u64| slice(imp, x, axis, i, i + 1);
    let mut outs = Vec::with_capacity(steps as usize);
    for i in 0..steps {
        // [B, kv, 1, dk] and [B, kv, 1, dv].
        let kt = at(imp, k4, 2, i)?;
        let mut vt = at(imp, v4, 2, i)?;
        if let Some(e) = gate {
            // state *= exp(decay_t) over dk (or the whole head), broadcast over dv.
            let et = at(imp, e, 2, i)?;
            let es = shape(imp, et);
            let et = reshape(imp, et, &[es[0].clone(), es[1].clone(), es[3].clone(), Dim::new(1)])?;
            state = bin(imp, K::Mul, state, et)?;
        }
        if let Some(bt) = beta4 {
            // v_t = beta_t * (v_t - k_t S).
            let got = imp.emit(K::Matmul, &[kt, state], &[])?;
            let diff = bin(imp, K::Sub, vt, got)?;
            let bt = at(imp, bt, 2, i)?;
            vt = bin(imp, K::Mul, bt, diff)?;
        }
        // S += k_t^T v_t (an outer product).
        let kcol = reshape(imp, kt, &[b.clone(), Dim::new(kvh), dk.clone(), Dim::new(1)])?;
        let outer = bin(imp, K::Mul, kcol, vt)?;
        state = bin(imp, K::Add, state, outer)?;
        // o_t = scale * q_t S, each query head reading its key/value head's state.
        let qt = at(imp, qg, 3, i)?;
        let sg = reshape(imp, state, &[b.clone(), Dim::new(kvh), Dim::new(1), dk.clone(), dv.clone()])?;
        let ot = imp.emit(K::Matmul, &[qt, sg], &[])?;
        outs.push(bin_scalar(imp, K::Mul, ot, scale)?);
    }
    // [B, kv, g, T, dv] -> [B, T, heads*dv].
    let o = if outs.is_empty() {
        imp.emit(
            K::Full,
            &[],
            &[
                ("shape", dims_attr(&[b.clone(), Dim::new(kvh), Dim::new(g), Dim::new(0), dv.clone()])),
                ("value", AttrValue::Float(0.0)),
                ("dtype", AttrValue::DType(work)),
            ],
        )?
    } else {
        cat(imp, &outs, 3)?
    };
    let o = reshape(imp, o, &[b.clone(), Dim::new(qh), t.clone(), dv.clone()])?;
    let o = permute(imp, o, &[0, 2, 1, 3])?;
    let hidden = Dim::new(qh).mul(&dv).map_err(|e| NodeError::Unsupported(format!("size arithmetic: {e}")))?;
    let o = reshape(imp, o, &[b, t, hidden])?;
    let o = convert(imp, o, dt)?;
    let present = convert(imp, state, state_dtype)?;
    Ok(vec![Some(Slot::Val(o)), Some(Slot::Val(present))])
}
