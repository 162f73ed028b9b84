//! Rules for the norm family over the last axis: softmax, log_softmax, layer_norm and
//! rms_norm as ladder's own decompositions write them (a model's `Softmax`, `LogSoftmax`,
//! `LayerNormalization`, `RMSNormalization`, or ladder's ops), and layer_norm and rms_norm as
//! exporters write them out of elementwise ONNX ops.

use super::{f32_rows, Rule, Variant};
use crate::ir::{AttrValue, Graph, Shape, TensorType, Value};
use crate::ops::OpKind;

pub(super) fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "softmax",
            op: OpKind::Softmax,
            structure: "exp(x - max(x)) / sum(exp(x - max(x))) over the last axis",
            anchor: softmax_anchor,
            variants: softmax_variants,
            arg_types: None,
            worth: None,
        },
        Rule {
            name: "log_softmax",
            op: OpKind::LogSoftmax,
            structure: "(x - max(x)) - log(sum(exp(x - max(x)))) over the last axis",
            anchor: log_softmax_anchor,
            variants: softmax_variants,
            arg_types: None,
            worth: None,
        },
        Rule {
            name: "layer_norm_onnx",
            op: OpKind::LayerNorm,
            structure: "ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul w, Add b as exporters write it",
            anchor: layer_norm_onnx_anchor,
            variants: layer_norm_onnx_variants,
            arg_types: None,
            worth: None,
        },
        Rule {
            name: "rms_norm_onnx",
            op: OpKind::RmsNorm,
            structure: "Pow 2, ReduceMean, Add eps, Sqrt, Reciprocal (or Div 1 / s, or Rsqrt), Mul x [, Mul w]; or \
                        Div x / s; as exporters write it",
            anchor: rms_norm_onnx_anchor,
            variants: rms_norm_onnx_variants,
            arg_types: None,
            worth: None,
        },
        Rule {
            name: "rms_norm",
            op: OpKind::RmsNorm,
            structure: "x * rsqrt(mean(x^2) + eps) [* w] over the last axis, rows prescaled",
            anchor: rms_norm_anchor,
            variants: rms_norm_variants,
            arg_types: None,
            worth: None,
        },
        Rule {
            name: "layer_norm",
            op: OpKind::LayerNorm,
            structure: "(x - mean) * rsqrt(var + eps) [* w [+ b]] over the last axis, rows prescaled",
            anchor: layer_norm_anchor,
            variants: layer_norm_variants,
            arg_types: None,
            worth: None,
        },
    ]
}

/// `div(exp(sub(x, _)), _)`: the root of a softmax, `x` three steps down.
fn softmax_anchor(g: &Graph, root: Value) -> Option<Value> {
    let n = g.node(root);
    if n.op != OpKind::Div {
        return None;
    }
    let e = g.node(n.args[0]);
    if e.op != OpKind::Exp {
        return None;
    }
    let d = g.node(e.args[0]);
    (d.op == OpKind::Sub).then(|| d.args[0])
}

fn softmax_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    Ok(vec![Variant { extra_args: vec![], attrs: vec![("axis", AttrValue::Int(-1))], infer: None, template: None }])
}

/// `sub(sub(x, _), log(_))` (the log broadcast): the root of a log_softmax.
fn log_softmax_anchor(g: &Graph, root: Value) -> Option<Value> {
    let n = g.node(root);
    if n.op != OpKind::Sub {
        return None;
    }
    let d = g.node(n.args[0]);
    let mut l = g.node(n.args[1]);
    if l.op == OpKind::BroadcastInDim {
        l = g.node(l.args[0]);
    }
    (d.op == OpKind::Sub && l.op == OpKind::Log).then(|| d.args[0])
}

/// `mul(mul(x, _), rsqrt(_))` (the rsqrt broadcast), or that times the weight: the root of
/// ladder's rms_norm.
fn rms_norm_anchor(g: &Graph, root: Value) -> Option<Value> {
    let core = |v: Value| {
        let n = g.node(v);
        if n.op != OpKind::Mul {
            return None;
        }
        let (a, mut b) = (g.node(n.args[0]), g.node(n.args[1]));
        if b.op == OpKind::BroadcastInDim {
            b = g.node(b.args[0]);
        }
        (a.op == OpKind::Mul && b.op == OpKind::Rsqrt).then(|| a.args[0])
    };
    core(root).or_else(|| (g.node(root).op == OpKind::Mul).then(|| core(g.node(root).args[0])).flatten())
}

fn rms_norm_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    let param = last_axis_param(x);
    let v = |n: usize, zero: bool| Variant {
        extra_args: vec![param.clone(); n],
        attrs: if zero {
            vec![("axis", AttrValue::Int(-1)), ("eps", AttrValue::Float(0.0))]
        } else {
            vec![("axis", AttrValue::Int(-1))]
        },
        infer: (!zero).then_some("eps"),
        template: None,
    };
    Ok(vec![v(1, false), v(0, false), v(1, true), v(0, true)])
}

/// A weight or bias over `x`'s last axis.
fn last_axis_param(x: &TensorType) -> TensorType {
    let d = x.shape.dims()[x.shape.rank() - 1].clone();
    TensorType::new(x.dtype, std::iter::once(d).collect::<Shape>())
}

/// `mul(x, inv)` or `div(x, s)` (or that times the weight, in either order), where `inv` is
/// a `reciprocal`, `rsqrt` or `div(_, sqrt(_))` and `s` a `sqrt` (broadcast): the
/// exporter's rms norm.
fn rms_norm_onnx_anchor(g: &Graph, root: Value) -> Option<Value> {
    let strip = |v: Value| {
        let n = g.node(v);
        if n.op == OpKind::BroadcastInDim {
            n.args[0]
        } else {
            v
        }
    };
    let scaled = |v: Value| {
        let n = g.node(v);
        let [a, b] = n.args[..] else { return None };
        let m = g.node(strip(b));
        let x = match (n.op, m.op) {
            (OpKind::Div, OpKind::Sqrt) | (OpKind::Mul, OpKind::Reciprocal | OpKind::Rsqrt) => a,
            (OpKind::Mul, OpKind::Div) if g.node(strip(m.args[1])).op == OpKind::Sqrt => a,
            _ => return None,
        };
        (g.ty(x) == g.ty(root)).then_some(x)
    };
    let n = g.node(root);
    match n.op {
        OpKind::Div => scaled(root),
        OpKind::Mul => scaled(root).or_else(|| n.args.iter().find_map(|&a| scaled(a))),
        _ => None,
    }
}

/// How an exporter's rms norm divides by the root mean square.
#[derive(Clone, Copy)]
enum Inv {
    /// `x * reciprocal(sqrt(ms + eps))` (PyTorch's `rsqrt` through ONNX).
    Reciprocal,
    /// `x * (1 / sqrt(ms + eps))`.
    DivOne,
    /// `x * rsqrt(ms + eps)` (the text form's `rsqrt`).
    Rsqrt,
    /// `x / sqrt(ms + eps)`.
    Div,
}

fn rms_norm_onnx_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    let param = last_axis_param(x);
    let v = |n: usize, template: super::Template| Variant {
        extra_args: vec![param.clone(); n],
        attrs: vec![("axis", AttrValue::Int(-1))],
        infer: Some("eps"),
        template: Some(template),
    };
    let mut out = Vec::new();
    for n in [1, 0] {
        out.push(v(n, |t, a| rms_onnx_form(t, a, Inv::Reciprocal)));
        out.push(v(n, |t, a| rms_onnx_form(t, a, Inv::DivOne)));
        out.push(v(n, |t, a| rms_onnx_form(t, a, Inv::Rsqrt)));
        out.push(v(n, |t, a| rms_onnx_form(t, a, Inv::Div)));
    }
    Ok(out)
}

/// The `eps` of a template's attributes as f32 ([`super::SENTINEL`] when not given).
fn eps_of(attrs: &[(&'static str, AttrValue)]) -> f32 {
    let eps = attrs.iter().find(|(n, _)| *n == "eps").and_then(|(_, v)| match v {
        AttrValue::Float(f) => Some(*f as f32),
        _ => None,
    });
    eps.unwrap_or(super::SENTINEL as f32)
}

/// The exporter's rms norm over the last axis, with a weight if `types` has one after `x`.
fn rms_onnx_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)], inv: Inv) -> String {
    let x = &types[0];
    let r = x.shape.rank();
    let s = &x.shape;
    let keep: Shape = s.dims().iter().take(r - 1).cloned().chain(std::iter::once(crate::ir::Dim::from(1u64))).collect();
    let all: Vec<String> = (0..r).map(|i| i.to_string()).collect();
    let all = all.join(", ");
    let eps = eps_of(attrs);
    let params = match types.get(1) {
        Some(w) => format!(", %w: {w}"),
        None => String::new(),
    };
    let mut body = format!(
        "blob @two: f32[] = [2.0]
blob @eps: f32[] = [{eps:?}]
blob @one: f32[] = [1.0]
graph form(%x: {x}{params}) {{
  %two = const @two : f32[]
  %twob = broadcast_in_dim(%two) {{shape={s}, broadcast_dims=[]}}
  %p = pow(%x, %twob)
  %v = mean(%p) {{axes=[-1], keepdim=true}}
  %eps = const @eps : f32[]
  %epsb = broadcast_in_dim(%eps) {{shape={keep}, broadcast_dims=[]}}
  %ve = add(%v, %epsb)
"
    );
    body.push_str(&match inv {
        Inv::Reciprocal => format!(
            "  %sd = sqrt(%ve)
  %iv = reciprocal(%sd)
  %ib = broadcast_in_dim(%iv) {{shape={s}, broadcast_dims=[{all}]}}
  %y0 = mul(%x, %ib)
"
        ),
        Inv::DivOne => format!(
            "  %sd = sqrt(%ve)
  %one = const @one : f32[]
  %oneb = broadcast_in_dim(%one) {{shape={keep}, broadcast_dims=[]}}
  %iv = div(%oneb, %sd)
  %ib = broadcast_in_dim(%iv) {{shape={s}, broadcast_dims=[{all}]}}
  %y0 = mul(%x, %ib)
"
        ),
        Inv::Rsqrt => format!(
            "  %iv = rsqrt(%ve)
  %ib = broadcast_in_dim(%iv) {{shape={s}, broadcast_dims=[{all}]}}
  %y0 = mul(%x, %ib)
"
        ),
        Inv::Div => format!(
            "  %sd = sqrt(%ve)
  %sb = broadcast_in_dim(%sd) {{shape={s}, broadcast_dims=[{all}]}}
  %y0 = div(%x, %sb)
"
        ),
    });
    if types.len() > 1 {
        body.push_str(&format!(
            "  %wb = broadcast_in_dim(%w) {{shape={s}, broadcast_dims=[{}]}}
  %y1 = mul(%y0, %wb)
  return %y1
}}
",
            r - 1
        ));
    } else {
        body.push_str(
            "  return %y0
}
",
        );
    }
    body
}

/// An `add` or `mul` whose cone (within a few steps) holds `abs(x)` with `x` of the root's
/// type: the prescale of ladder's layer_norm.
fn layer_norm_anchor(g: &Graph, root: Value) -> Option<Value> {
    if !matches!(g.node(root).op, OpKind::Add | OpKind::Mul) {
        return None;
    }
    let ty = g.ty(root);
    find_in_cone(g, root, 24, |n| (n.op == OpKind::Abs && g.ty(n.args[0]) == ty).then(|| n.args[0]))
}

fn layer_norm_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    let d = x.shape.dims()[x.shape.rank() - 1].clone();
    let param = TensorType::new(x.dtype, std::iter::once(d).collect::<Shape>());
    // `eps` is read off the model; `eps = 0` has a form of its own (no floor on the scaled
    // eps), so it is a variant with the value given.
    let v = |n: usize, zero: bool| Variant {
        extra_args: vec![param.clone(); n],
        attrs: if zero {
            vec![("axis", AttrValue::Int(-1)), ("eps", AttrValue::Float(0.0))]
        } else {
            vec![("axis", AttrValue::Int(-1))]
        },
        infer: (!zero).then_some("eps"),
        template: None,
    };
    Ok(vec![v(2, false), v(1, false), v(0, false), v(2, true), v(1, true), v(0, true)])
}

/// An `add` or `mul` whose cone holds the square of `sub(x, _)` (`pow(d, 2)` as exported,
/// `mul(d, d)` once simplified) with `x` of the root's type: the exporter's layer norm.
fn layer_norm_onnx_anchor(g: &Graph, root: Value) -> Option<Value> {
    if !matches!(g.node(root).op, OpKind::Add | OpKind::Mul | OpKind::Div) {
        return None;
    }
    let ty = g.ty(root);
    let x = find_in_cone(g, root, 16, |n| {
        let square = n.op == OpKind::Pow || (n.op == OpKind::Mul && n.args[0] == n.args[1]);
        (square && g.node(n.args[0]).op == OpKind::Sub).then(|| g.node(n.args[0]).args[0])
    })?;
    (g.ty(x) == ty).then_some(x)
}

/// The first node within `depth` steps of `root`'s cone (depth first, arguments in order)
/// for which `f` gives a value, and that value.
fn find_in_cone(g: &Graph, root: Value, depth: u32, f: impl Fn(&crate::ir::Node) -> Option<Value>) -> Option<Value> {
    let mut stack = vec![(root, 0u32)];
    let mut seen = std::collections::HashSet::new();
    while let Some((v, d)) = stack.pop() {
        if !seen.insert(v) || d > depth {
            continue;
        }
        let n = g.node(v);
        if let Some(x) = f(n) {
            return Some(x);
        }
        stack.extend(n.args.iter().map(|&a| (a, d + 1)));
    }
    None
}

fn layer_norm_onnx_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    let d = x.shape.dims()[x.shape.rank() - 1].clone();
    let param = TensorType::new(x.dtype, std::iter::once(d).collect::<Shape>());
    let v = |n: usize| Variant {
        extra_args: vec![param.clone(); n],
        attrs: vec![("axis", AttrValue::Int(-1))],
        infer: Some("eps"),
        template: Some(ln_onnx_form),
    };
    Ok(vec![v(2), v(1), v(0)])
}

/// The exporter's layer norm over the last axis, with as many of weight and bias as `types`
/// has after `x`.
fn ln_onnx_form(types: &[TensorType], attrs: &[(&'static str, AttrValue)]) -> String {
    let x = &types[0];
    let r = x.shape.rank();
    let s = &x.shape;
    let keep: Shape = s.dims().iter().take(r - 1).cloned().chain(std::iter::once(crate::ir::Dim::from(1u64))).collect();
    let all: Vec<String> = (0..r).map(|i| i.to_string()).collect();
    let all = all.join(", ");
    let eps = eps_of(attrs);
    let mut params = String::new();
    for (i, name) in ["w", "b"].iter().enumerate().take(types.len() - 1) {
        params.push_str(&format!(", %{name}: {}", types[i + 1]));
    }
    let mut body = format!(
        "blob @two: f32[] = [2.0]
blob @eps: f32[] = [{eps:?}]
graph form(%x: {x}{params}) {{
  %mu = mean(%x) {{axes=[-1], keepdim=true}}
  %mub = broadcast_in_dim(%mu) {{shape={s}, broadcast_dims=[{all}]}}
  %d = sub(%x, %mub)
  %two = const @two : f32[]
  %twob = broadcast_in_dim(%two) {{shape={s}, broadcast_dims=[]}}
  %p = pow(%d, %twob)
  %v = mean(%p) {{axes=[-1], keepdim=true}}
  %eps = const @eps : f32[]
  %epsb = broadcast_in_dim(%eps) {{shape={keep}, broadcast_dims=[]}}
  %ve = add(%v, %epsb)
  %sd = sqrt(%ve)
  %sb = broadcast_in_dim(%sd) {{shape={s}, broadcast_dims=[{all}]}}
  %y0 = div(%d, %sb)
"
    );
    let mut last = "y0".to_string();
    for (i, (name, op)) in [("w", "mul"), ("b", "add")].iter().enumerate().take(types.len() - 1) {
        body.push_str(&format!(
            "  %{name}b = broadcast_in_dim(%{name}) {{shape={s}, broadcast_dims=[{}]}}\n  %y{} = {op}(%{last}, %{name}b)\n",
            r - 1,
            i + 1
        ));
        last = format!("y{}", i + 1);
    }
    body.push_str(&format!("  return %{last}\n}}\n"));
    body
}
