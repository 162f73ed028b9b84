//! Rules for attention: `scaled_dot_product_attention(q, k, v, mask?) {causal, scale,
//! safe_softmax}`, as ladder's decomposition writes it and as exporters write it.
//!
//! - `attention`: ladder's op (safe softmax): `matmul(q, k) {transpose_b} * scale`, the mask
//!   (a float mask added; a bool mask through `where(mask, 0, -inf)`), the causal bias, a
//!   softmax, `matmul(p, v)`, and the root `where(max == -inf, 0, _)` that zeroes rows with
//!   nothing to attend.
//! - `attention_unsafe`: the same with `safe_softmax=false` (no zeroing `where`).
//! - `attention_onnx_*`: the PyTorch/HF export as ladder imports it: `MatMul(Q, K^T)` with
//!   `K^T` a `Transpose` of the keys, the scale in one of the common places (`_div`: `Div` by
//!   the constant sqrt(D); `_mul`: `Mul` of the scores by a constant; `_prescaled`: `Mul` of
//!   Q before the product; `_qk_scaled`: Q and K^T each times D^-1/4, PyTorch's
//!   `scaled_dot_product_attention` export; `_unscaled`: none), an optional `Add` of a mask
//!   (a float mask, or PyTorch's `Where(mask, 0, -inf)` of a bool mask), `Softmax(axis=-1)`,
//!   `MatMul(P, V)`. ONNX's softmax gives NaN rows where every score is -inf, so these
//!   recover with `safe_softmax=false`. The head reshapes and transposes around the cluster
//!   stay; `k` binds to the keys before their last two dims are swapped (see the engine's
//!   arguments taken through a permute).
//!
//! A candidate's mask is read off the model: the values added to the scores, with ladder's
//! causal bias (a constant, or `where(col > row, -inf, 0)` over iotas) recognised and tried as
//! `causal`. A bool mask whose `where(mask, 0, -inf)` has another user than the cluster's `add`
//! or broadcast (a bias of the scores' shape shared by several layers) binds as the float mask
//! that `where` computes: binding the bool mask would leave the `where` used outside.
//!
//! Not recovered, with the reason: HF's eager `Where(mask, scores, c)`, which replaces masked
//! scores instead of adding to them (with `c = -inf` it differs from the op on NaN and +inf
//! scores at masked positions, with `c = finfo.min` also on rows where every score is masked,
//! which it averages instead of making NaN); a divisor other than sqrt(D) and a Q/K factor
//! other than D^-1/4 (the scale is read off a `Mul` only); leading dims of q, k, v that differ
//! (the library kernel does not broadcast them).

use super::{Rule, Template, Variant, SENTINEL};
use crate::ir::{AttrValue, DType, Graph, Shape, TensorType, Value};
use crate::ops::OpKind;

pub(super) fn rules() -> Vec<Rule> {
    let rule = |name, structure, anchor, variants| Rule {
        name,
        op: OpKind::ScaledDotProductAttention,
        structure,
        anchor,
        variants,
        arg_types: Some(arg_types),
        worth: None,
    };
    vec![
        rule(
            "attention",
            "softmax(q k^T * scale [+ mask] [+ causal bias]) v over [..., L, D] heads, rows with nothing to attend zeroed",
            anchor_own_safe as fn(&Graph, Value) -> Option<Value>,
            own_safe_variants as fn(&TensorType) -> Result<Vec<Variant>, String>,
        ),
        rule(
            "attention_unsafe",
            "softmax(q k^T * scale [+ mask] [+ causal bias]) v over [..., L, D] heads, plain softmax",
            anchor_own_unsafe,
            own_unsafe_variants,
        ),
        rule(
            "attention_onnx_div",
            "Softmax(MatMul(Q, K^T) / sqrt(D) [+ mask]) V as exporters write it",
            anchor_div,
            div_variants,
        ),
        rule("attention_onnx_mul", "Softmax(MatMul(Q, K^T) * scale [+ mask]) V as exporters write it", anchor_mul, mul_variants),
        rule(
            "attention_onnx_prescaled",
            "Softmax(MatMul(Q * scale, K^T) [+ mask]) V as exporters write it",
            anchor_prescaled,
            prescaled_variants,
        ),
        rule(
            "attention_onnx_qk_scaled",
            "Softmax(MatMul(Q * D^-1/4, K^T * D^-1/4) [+ mask]) V, PyTorch's scaled_dot_product_attention export",
            anchor_qk_scaled,
            qk_scaled_variants,
        ),
        rule(
            "attention_onnx_unscaled",
            "Softmax(MatMul(Q, K^T) [+ mask]) V as exporters write it",
            anchor_unscaled,
            unscaled_variants,
        ),
    ]
}

/// How a candidate's scores are scaled.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Style {
    /// ladder's own `matmul(q, k) {transpose_b}` (scaled by a `mul`, or by 1).
    Own,
    /// The exporter's `div(scores, c)` (`c` a scalar constant, see [`full_value`]).
    Div(Value),
    /// The exporter's `mul(scores, c)`.
    Mul(Value),
    /// `matmul(mul(q, c), k^T)`.
    Prescaled(Value),
    /// `matmul(mul(q, c), mul(k^T, c'))`.
    QkScaled(Value, Value),
    Unscaled,
}

/// The parts of a candidate, read off the model from its root.
struct Parts {
    /// The root is the safe softmax's `where(_, 0, matmul(p, v))`.
    safe: bool,
    v: Value,
    /// `q` as the score product takes it (under a prescale).
    q: Value,
    /// The keys as the product takes them (`k` itself, or `k^T` for the exporter).
    k_in: Value,
    /// Values added to the scores, outermost first.
    biases: Vec<Value>,
    /// A `where(mask, scores, c)` on the way from the softmax to the product.
    replaced: Option<Value>,
    style: Style,
}

/// The value of a scalar constant: a `full`, a one-element `const`, or either broadcast (the
/// form folding leaves at shapes too large to fold).
fn full_value(g: &Graph, v: Value) -> Option<f64> {
    let mut x = v;
    if g.node(x).op == OpKind::BroadcastInDim {
        x = g.node(x).args[0];
    }
    let n = g.node(x);
    match (n.op, n.attrs.get("value")) {
        (OpKind::Full, Some(AttrValue::Float(f))) => Some(*f),
        (OpKind::Const, _) => {
            let t = &g.blob(g.const_blob(x)?).tensor;
            (t.numel() == 1 && t.dtype().is_float()).then(|| t.to_f64_vec()[0])
        }
        _ => None,
    }
}

/// `matmul(_, _)` with neither operand transposed.
fn plain_matmul(g: &Graph, v: Value) -> bool {
    let n = g.node(v);
    n.op == OpKind::Matmul && !n.attrs.bool("transpose_a") && !n.attrs.bool("transpose_b")
}

fn parts(g: &Graph, root: Value) -> Option<Parts> {
    let n = g.node(root);
    let (safe, pv) = match n.op {
        OpKind::Where if plain_matmul(g, n.args[2]) => (true, n.args[2]),
        OpKind::Matmul if plain_matmul(g, root) => (false, root),
        _ => return None,
    };
    let (p, v) = (g.node(pv).args[0], g.node(pv).args[1]);
    // The softmax's `exp(sub(scores, max))`, a few steps up from `p` (a scale after the
    // softmax is a near-miss of its own, found here).
    let mut scores = None;
    let mut frontier = vec![p];
    for _ in 0..6 {
        let mut next = Vec::new();
        for &x in &frontier {
            let m = g.node(x);
            if m.op == OpKind::Exp && g.node(m.args[0]).op == OpKind::Sub {
                scores = Some(g.node(m.args[0]).args[0]);
                break;
            }
            if m.op != OpKind::Matmul {
                next.extend(m.args.iter().copied());
            }
        }
        if scores.is_some() || next.is_empty() {
            break;
        }
        frontier = next;
    }
    let mut s = scores?;
    let (mut biases, mut replaced, mut scale) = (Vec::new(), None, None);
    for _ in 0..12 {
        let m = g.node(s);
        match m.op {
            OpKind::Add => {
                biases.push(m.args[1]);
                s = m.args[0];
            }
            OpKind::Where if replaced.is_none() => {
                replaced = Some(s);
                s = m.args[1];
            }
            OpKind::Mul | OpKind::Div if scale.is_none() && full_value(g, m.args[1]).is_some() => {
                scale = Some((m.op, m.args[1]));
                s = m.args[0];
            }
            OpKind::Matmul => break,
            _ => return None,
        }
    }
    let mm = g.node(s);
    if mm.op != OpKind::Matmul || mm.attrs.bool("transpose_a") {
        return None;
    }
    let (a, b) = (mm.args[0], mm.args[1]);
    let scaled_by = |x: Value| {
        let n = g.node(x);
        (n.op == OpKind::Mul && full_value(g, n.args[1]).is_some()).then(|| (n.args[0], n.args[1]))
    };
    let (q, k_in, style) = if mm.attrs.bool("transpose_b") {
        (a, b, Style::Own)
    } else {
        match (scale, scaled_by(a), scaled_by(b)) {
            (Some((OpKind::Div, c)), _, _) => (a, b, Style::Div(c)),
            (Some((_, c)), _, _) => (a, b, Style::Mul(c)),
            (None, Some((q, cq)), Some((k, ck))) => (q, k, Style::QkScaled(cq, ck)),
            (None, Some((q, c)), None) => (q, b, Style::Prescaled(c)),
            (None, _, _) => (a, b, Style::Unscaled),
        }
    };
    if style == Style::Own && matches!(scale, Some((OpKind::Div, _))) {
        return None;
    }
    Some(Parts { safe, v, q, k_in, biases, replaced, style })
}

fn anchor_own_safe(g: &Graph, root: Value) -> Option<Value> {
    parts(g, root).filter(|p| p.safe && p.style == Style::Own).map(|p| p.q)
}

fn anchor_own_unsafe(g: &Graph, root: Value) -> Option<Value> {
    parts(g, root).filter(|p| !p.safe && p.style == Style::Own).map(|p| p.q)
}

/// An exporter candidate of the style `which` accepts.
fn anchor_onnx(g: &Graph, root: Value, which: fn(Style) -> bool) -> Option<Value> {
    parts(g, root).filter(|p| !p.safe && which(p.style)).map(|p| p.q)
}

fn anchor_div(g: &Graph, root: Value) -> Option<Value> {
    anchor_onnx(g, root, |s| matches!(s, Style::Div(_)))
}

fn anchor_mul(g: &Graph, root: Value) -> Option<Value> {
    anchor_onnx(g, root, |s| matches!(s, Style::Mul(_)))
}

fn anchor_prescaled(g: &Graph, root: Value) -> Option<Value> {
    anchor_onnx(g, root, |s| matches!(s, Style::Prescaled(_)))
}

fn anchor_qk_scaled(g: &Graph, root: Value) -> Option<Value> {
    anchor_onnx(g, root, |s| matches!(s, Style::QkScaled(..)))
}

fn anchor_unscaled(g: &Graph, root: Value) -> Option<Value> {
    anchor_onnx(g, root, |s| s == Style::Unscaled)
}

/// `[..., a, b]` as `[..., b, a]`.
fn swap_last(ty: &TensorType) -> TensorType {
    let mut dims = ty.shape.dims().to_vec();
    let r = dims.len();
    dims.swap(r - 2, r - 1);
    TensorType::new(ty.dtype, dims.into_iter().collect::<Shape>())
}

/// ladder's causal bias over the last two dims: `-inf` where column > row, `+0` elsewhere, as
/// a constant (folded; a `full` of +0 when S = 1) or as `where(gt(iota 1, iota 0), -inf, 0)`,
/// either maybe broadcast.
fn is_causal_bias(g: &Graph, x: Value) -> bool {
    let mut x = x;
    if g.node(x).op == OpKind::BroadcastInDim {
        x = g.node(x).args[0];
    }
    let ty = g.ty(x);
    let r = ty.shape.rank();
    if ty.dtype != DType::F32 || r < 2 {
        return false;
    }
    let n = g.node(x);
    // A bias with no column right of the diagonal (S = 1) folds to a `full` of +0.
    if n.op == OpKind::Full {
        return ty.shape.dims()[r - 1].as_const() == Some(1)
            && full_value(g, x).is_some_and(|z| z == 0.0 && z.is_sign_positive());
    }
    if let Some(blob) = g.const_blob(x) {
        let t = &g.blob(blob).tensor;
        let sh = t.shape();
        let (l, s) = (sh[r - 2], sh[r - 1]);
        return t.to_f64_vec().iter().enumerate().all(|(at, &val)| {
            let (i, j) = ((at / s.max(1)) % l.max(1), at % s.max(1));
            if j > i {
                val == f64::NEG_INFINITY
            } else {
                val == 0.0 && val.is_sign_positive()
            }
        });
    }
    if n.op != OpKind::Where || r != 2 {
        return false;
    }
    let above = g.node(n.args[0]);
    let iota_axis = |v: Value| {
        let m = g.node(v);
        (m.op == OpKind::Iota).then(|| m.attrs.int("axis"))
    };
    above.op == OpKind::Gt
        && iota_axis(above.args[0]) == Some(1)
        && iota_axis(above.args[1]) == Some(0)
        && full_value(g, n.args[1]) == Some(f64::NEG_INFINITY)
        && full_value(g, n.args[2]).is_some_and(|z| z == 0.0 && z.is_sign_positive())
}

/// The mask a bias adds: a bool mask through `where(mask, 0, -inf)` used only here, else the
/// float value added (under its broadcast).
fn mask_of(g: &Graph, bias: Value) -> Value {
    let mut x = bias;
    if g.node(x).op == OpKind::BroadcastInDim {
        x = g.node(x).args[0];
    }
    let n = g.node(x);
    let bool_where = n.op == OpKind::Where
        && g.ty(n.args[0]).dtype == DType::Bool
        && full_value(g, n.args[1]).is_some_and(|z| z == 0.0 && z.is_sign_positive())
        && full_value(g, n.args[2]) == Some(f64::NEG_INFINITY);
    let uses =
        g.nodes().filter(|(_, m)| m.args.contains(&x)).count() + g.outputs().iter().filter(|o| o.value == x).count();
    if bool_where && uses == 1 {
        n.args[0]
    } else {
        x
    }
}

fn arg_types(g: &Graph, root: Value) -> Result<Vec<TensorType>, String> {
    let p = parts(g, root).ok_or("no attention scores under this node")?;
    if let Some(w) = p.replaced {
        let c = g.node(w).args[2];
        let what = match full_value(g, c) {
            Some(f) if f == f64::NEG_INFINITY => "they differ on NaN and +inf scores at masked positions".to_string(),
            Some(f) => format!("with {f:e} they also differ on rows where every score is masked"),
            None => "with a computed replacement they differ wherever it is not -inf".to_string(),
        };
        return Err(format!(
            "the scores go through where({}, scores, {}), which replaces masked scores where the op adds its mask: {what}",
            g.node(w).args[0],
            c
        ));
    }
    let (tq, tk, tv) = (g.ty(p.q), g.ty(p.k_in), g.ty(p.v));
    if [tq, tk, tv].iter().any(|t| t.dtype != DType::F32 || t.shape.rank() < 2) {
        return Err("q, k and v must be f32 of rank >= 2 (the library kernel's operands)".into());
    }
    let tk = if p.style == Style::Own { tk.clone() } else { swap_last(tk) };
    let batch = |t: &TensorType| t.shape.dims()[..t.shape.rank() - 2].to_vec();
    if batch(tq) != batch(&tk) || batch(tq) != batch(tv) {
        return Err(format!(
            "q {tq}, k {tk} and v {tv} have different leading dims (the library kernel does not broadcast them)"
        ));
    }
    let d = tq.shape.dims()[tq.shape.rank() - 1].as_const();
    match p.style {
        Style::Div(c) => {
            let want = d.map(|d| sqrt_d(d) as f64);
            let got = full_value(g, c);
            if want.is_none() || got != want {
                return Err(format!(
                    "the scores are divided by {} where sqrt(D) is {}: a divisor is recovered only as the default \
                     scale 1/sqrt(D) (the scale is read off a Mul)",
                    got.map_or("?".into(), |f| f.to_string()),
                    want.map_or("unknown (a symbolic head dim)".into(), |f| f.to_string())
                ));
            }
        }
        Style::QkScaled(cq, ck) => {
            let (a, b) = (full_value(g, cq), full_value(g, ck));
            let want = d.map(quarter).unwrap_or_default();
            if a != b || !a.is_some_and(|a| want.iter().any(|&w| w as f64 == a)) {
                return Err(format!(
                    "q and k^T are scaled by {} and {}: only both by D^-1/4 ({}) is recovered",
                    a.unwrap_or(f64::NAN),
                    b.unwrap_or(f64::NAN),
                    want.first().map_or("unknown (a symbolic head dim)".into(), |w| w.to_string())
                ));
            }
        }
        _ => {}
    }
    let mut biases = p.biases.clone();
    if biases.first().is_some_and(|&b| is_causal_bias(g, b)) {
        biases.remove(0);
    }
    let mut types = vec![tk, tv.clone()];
    match biases.as_slice() {
        [] => {}
        [b] => types.push(g.ty(mask_of(g, *b)).clone()),
        _ => return Err(format!("{} values are added to the scores (the op takes one mask)", biases.len())),
    }
    Ok(types)
}

/// f32 sqrt(D), the divisor exporters write.
fn sqrt_d(d: u64) -> f32 {
    (d as f32).sqrt()
}

/// The f32 values of D^-1/4 an export holds: PyTorch folds `sqrt(1 / sqrt(D))` in f32; the
/// correctly rounded value may differ in the last place.
fn quarter(d: u64) -> Vec<f32> {
    let folded = (1.0 / (d as f32).sqrt()).sqrt();
    let exact = (d as f64).powf(-0.25) as f32;
    if folded == exact {
        vec![folded]
    } else {
        vec![folded, exact]
    }
}

fn attrs(causal: bool, safe: bool, scale: Option<f64>) -> Vec<(&'static str, AttrValue)> {
    let mut a = vec![("causal", AttrValue::Bool(causal))];
    if let Some(s) = scale {
        a.push(("scale", AttrValue::Float(s)));
    }
    if !safe {
        a.push(("safe_softmax", AttrValue::Bool(false)));
    }
    a
}

/// ladder's own forms: the scale read off the model (a `full` after the scores); a scale of
/// exactly 1 is simplified away, so it is a variant of its own.
fn own_variants(safe: bool) -> Vec<Variant> {
    let v = |causal: bool, one: bool| Variant {
        extra_args: vec![],
        attrs: attrs(causal, safe, one.then_some(1.0)),
        infer: (!one).then_some("scale"),
        template: None,
    };
    vec![v(false, false), v(true, false), v(false, true), v(true, true)]
}

fn own_safe_variants(_: &TensorType) -> Result<Vec<Variant>, String> {
    Ok(own_variants(true))
}

fn own_unsafe_variants(_: &TensorType) -> Result<Vec<Variant>, String> {
    Ok(own_variants(false))
}

/// The exporter's forms of one style, non-causal first.
fn onnx_variants(scale: Option<f64>, template: Template) -> Vec<Variant> {
    [false, true]
        .into_iter()
        .map(|causal| Variant {
            extra_args: vec![],
            attrs: attrs(causal, false, scale),
            infer: scale.is_none().then_some("scale"),
            template: Some(template),
        })
        .collect()
}

fn head_dim(q: &TensorType) -> Result<u64, String> {
    q.shape.dims().last().and_then(|d| d.as_const()).ok_or_else(|| format!("q {q}: the head dim must be static"))
}

fn div_variants(q: &TensorType) -> Result<Vec<Variant>, String> {
    Ok(onnx_variants(Some(1.0 / sqrt_d(head_dim(q)?) as f64), div_form))
}

fn mul_variants(_: &TensorType) -> Result<Vec<Variant>, String> {
    Ok(onnx_variants(None, mul_form))
}

fn prescaled_variants(_: &TensorType) -> Result<Vec<Variant>, String> {
    Ok(onnx_variants(None, prescaled_form))
}

fn qk_scaled_variants(q: &TensorType) -> Result<Vec<Variant>, String> {
    Ok(quarter(head_dim(q)?).into_iter().flat_map(|c| onnx_variants(Some(c as f64 * c as f64), qk_form)).collect())
}

fn unscaled_variants(_: &TensorType) -> Result<Vec<Variant>, String> {
    Ok(onnx_variants(Some(1.0), unscaled_form))
}

fn div_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)]) -> String {
    onnx_form(types, attrs, "div")
}

fn mul_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)]) -> String {
    onnx_form(types, attrs, "mul")
}

fn prescaled_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)]) -> String {
    onnx_form(types, attrs, "prescaled")
}

fn qk_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)]) -> String {
    onnx_form(types, attrs, "qk")
}

fn unscaled_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)]) -> String {
    onnx_form(types, attrs, "none")
}

/// The exporter's attention on `types` (q, k, v, and a mask if given) with the scale written
/// in the `style`'s place; `causal` adds ladder's causal bias after the mask.
fn onnx_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)], style: &str) -> String {
    let attr = |name: &str| attrs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
    let scale = match attr("scale") {
        Some(AttrValue::Float(f)) => f,
        _ => SENTINEL,
    };
    let causal = matches!(attr("causal"), Some(AttrValue::Bool(true)));
    // The constant the model holds: the divisor, the scale, or each operand's factor.
    let c = match style {
        "div" => (1.0 / scale) as f32,
        "qk" => scale.sqrt() as f32,
        _ => scale as f32,
    };
    let (tq, tk, tv) = (&types[0], &types[1], &types[2]);
    let r = tk.shape.rank();
    let mut perm: Vec<String> = (0..r).map(|i| i.to_string()).collect();
    perm.swap(r - 2, r - 1);
    let mut params = format!("%q: {tq}, %k: {tk}, %v: {tv}");
    if let Some(m) = types.get(3) {
        params.push_str(&format!(", %m: {m}"));
    }
    let mut text = format!(
        "blob @c: f32[] = [{c:?}]\nblob @zero: f32[] = [0.0]\nblob @ninf: f32[] = [-inf]\nblob @zero1: f32[1] = [0.0]\n\
         blob @ninf1: f32[1] = [-inf]\ngraph form({params}) {{\n  \
         %c = const @c : f32[]\n  %zero = const @zero : f32[]\n  %ninf = const @ninf : f32[]\n  \
         %kt = permute(%k) {{perm=[{}]}}\n",
        perm.join(", ")
    );
    let (qs, ks) = match style {
        "prescaled" => {
            text.push_str("  %qs = mul(%q, %c)\n");
            ("%qs", "%kt")
        }
        "qk" => {
            text.push_str("  %qs = mul(%q, %c)\n  %ks = mul(%kt, %c)\n");
            ("%qs", "%ks")
        }
        _ => ("%q", "%kt"),
    };
    text.push_str(&format!("  %s0 = matmul({qs}, {ks})\n"));
    let mut last = "%s0";
    if matches!(style, "div" | "mul") {
        text.push_str(&format!("  %s1 = {style}(%s0, %c)\n"));
        last = "%s1";
    }
    match types.get(3).map(|m| m.dtype) {
        Some(DType::Bool) => {
            // PyTorch's constants are one-element vectors (which broadcast differently from
            // scalars where the bias is too large to fold).
            text.push_str(&format!(
                "  %zero1 = const @zero1 : f32[1]\n  %ninf1 = const @ninf1 : f32[1]\n  \
                 %mb = where(%m, %zero1, %ninf1)\n  %s2 = add({last}, %mb)\n"
            ));
            last = "%s2";
        }
        Some(_) => {
            text.push_str(&format!("  %s2 = add({last}, %m)\n"));
            last = "%s2";
        }
        None => {}
    }
    if causal {
        let (l, s) = (&tq.shape.dims()[tq.shape.rank() - 2], &tk.shape.dims()[r - 2]);
        text.push_str(&format!(
            "  %row = iota() {{shape=[{l}, {s}], axis=0, dtype=i64}}\n  %col = iota() {{shape=[{l}, {s}], axis=1, \
             dtype=i64}}\n  %above = gt(%col, %row)\n  %cb = where(%above, %ninf, %zero)\n  %s3 = add({last}, %cb)\n"
        ));
        last = "%s3";
    }
    text.push_str(&format!("  %p = softmax({last}) {{axis=-1}}\n  %y = matmul(%p, %v)\n  return %y\n}}\n"));
    text
}
