//! Rules for the norm family: softmax and layer_norm over the last axis, as ladder's own
//! decompositions write them (a model's `Softmax`/`LayerNormalization`, or ladder's ops).

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
        },
        Rule {
            name: "layer_norm_onnx",
            op: OpKind::LayerNorm,
            structure: "ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul w, Add b as exporters write it",
            anchor: layer_norm_onnx_anchor,
            variants: layer_norm_onnx_variants,
            arg_types: None,
        },
        Rule {
            name: "layer_norm",
            op: OpKind::LayerNorm,
            structure: "(x - mean) * rsqrt(var + eps) [* w [+ b]] over the last axis, rows prescaled",
            anchor: layer_norm_anchor,
            variants: layer_norm_variants,
            arg_types: None,
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

/// An `add` or `mul` whose cone (within a few steps) holds `abs(x)` with `x` of the root's
/// type: the prescale of ladder's layer_norm.
fn layer_norm_anchor(g: &Graph, root: Value) -> Option<Value> {
    if !matches!(g.node(root).op, OpKind::Add | OpKind::Mul) {
        return None;
    }
    let ty = g.ty(root);
    let mut stack = vec![(root, 0u32)];
    let mut seen = std::collections::HashSet::new();
    while let Some((v, depth)) = stack.pop() {
        if !seen.insert(v) || depth > 24 {
            continue;
        }
        let n = g.node(v);
        if n.op == OpKind::Abs && g.ty(n.args[0]) == ty {
            return Some(n.args[0]);
        }
        for &a in &n.args {
            stack.push((a, depth + 1));
        }
    }
    None
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

/// An `add` or `mul` whose cone holds `pow(sub(x, _), _)` with `x` of the root's type: the
/// exporter's layer norm.
fn layer_norm_onnx_anchor(g: &Graph, root: Value) -> Option<Value> {
    if !matches!(g.node(root).op, OpKind::Add | OpKind::Mul | OpKind::Div) {
        return None;
    }
    let ty = g.ty(root);
    let mut stack = vec![(root, 0u32)];
    let mut seen = std::collections::HashSet::new();
    while let Some((v, depth)) = stack.pop() {
        if !seen.insert(v) || depth > 16 {
            continue;
        }
        let n = g.node(v);
        if n.op == OpKind::Pow && g.node(n.args[0]).op == OpKind::Sub {
            let x = g.node(n.args[0]).args[0];
            return (g.ty(x) == ty).then_some(x);
        }
        for &a in &n.args {
            stack.push((a, depth + 1));
        }
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
    let eps = attrs.iter().find(|(n, _)| *n == "eps").and_then(|(_, v)| match v {
        AttrValue::Float(f) => Some(*f as f32),
        _ => None,
    });
    let eps = eps.unwrap_or(super::SENTINEL as f32);
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
