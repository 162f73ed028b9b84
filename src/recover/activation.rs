//! Rules for activations: gelu (erf and tanh forms) as ladder's decomposition writes them.

use super::{f32_rows, Rule, Template, Variant};
use crate::ir::{AttrValue, Graph, TensorType, Value};
use crate::ops::OpKind;

pub(super) fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "gelu",
            op: OpKind::Gelu,
            structure: "x * Phi(x), erf form (with its accurate tail) or tanh form",
            anchor: gelu_anchor,
            variants: gelu_variants,
            arg_types: None,
        },
        Rule {
            name: "gelu_onnx",
            op: OpKind::Gelu,
            structure: "x * (erf(x / sqrt 2) + 1) * 0.5 as exporters write it (Div or Mul by 1/sqrt 2)",
            anchor: gelu_onnx_anchor,
            variants: gelu_onnx_variants,
            arg_types: None,
        },
    ]
}

/// `mul(mul(x, add(erf(_), _)), _)`: the exporter's GELU, `x` the inner product's first
/// argument.
fn gelu_onnx_anchor(g: &Graph, root: Value) -> Option<Value> {
    let n = g.node(root);
    if n.op != OpKind::Mul {
        return None;
    }
    let m = g.node(n.args[0]);
    if m.op != OpKind::Mul || g.node(m.args[1]).op != OpKind::Add {
        return None;
    }
    (g.node(g.node(m.args[1]).args[0]).op == OpKind::Erf).then(|| m.args[0])
}

fn gelu_onnx_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    let v = |template: Template| Variant {
        extra_args: vec![],
        attrs: vec![("approximate", AttrValue::Str("none".into()))],
        infer: None,
        template: Some(template),
    };
    Ok(vec![v(gelu_div_form), v(gelu_mul_form)])
}

/// PyTorch's export: `Div(x, 1.4142135)`, `Erf`, `Add(1)`, `Mul(x, _)`, `Mul(_, 0.5)`.
fn gelu_div_form(types: &[TensorType], _: &[(&'static str, AttrValue)]) -> String {
    gelu_form(types, "div", "1.4142135")
}

/// The same with `Mul(x, 0.70710677)`.
fn gelu_mul_form(types: &[TensorType], _: &[(&'static str, AttrValue)]) -> String {
    gelu_form(types, "mul", "0.70710677")
}

fn gelu_form(types: &[TensorType], op: &str, c: &str) -> String {
    let (t, s) = (&types[0], &types[0].shape);
    format!(
        "blob @c: f32[] = [{c}]
blob @one: f32[] = [1.0]
blob @half: f32[] = [0.5]
graph form(%x: {t}) {{
  %c = const @c : f32[]
  %cb = broadcast_in_dim(%c) {{shape={s}, broadcast_dims=[]}}
  %d = {op}(%x, %cb)
  %e = erf(%d)
  %o = const @one : f32[]
  %ob = broadcast_in_dim(%o) {{shape={s}, broadcast_dims=[]}}
  %a = add(%e, %ob)
  %m = mul(%x, %a)
  %h = const @half : f32[]
  %hb = broadcast_in_dim(%h) {{shape={s}, broadcast_dims=[]}}
  %y = mul(%m, %hb)
  return %y
}}
"
    )
}

/// The erf form's root is `where(lt(x, -1), tail, x * (1 + erf(x / sqrt 2)) / 2)`; the tanh
/// form's is `where(ge(u, 0), x / (1 + e), ...)`, a stable sigmoid times `x`.
fn gelu_anchor(g: &Graph, root: Value) -> Option<Value> {
    let n = g.node(root);
    if n.op != OpKind::Where {
        return None;
    }
    let (c, a) = (g.node(n.args[0]), g.node(n.args[1]));
    match (c.op, a.op) {
        (OpKind::Lt, _) => Some(c.args[0]),
        (OpKind::Ge, OpKind::Div) => Some(a.args[0]),
        _ => None,
    }
}

fn gelu_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    Ok(["none", "tanh"]
        .into_iter()
        .map(|a| Variant {
            extra_args: vec![],
            attrs: vec![("approximate", AttrValue::Str(a.into()))],
            infer: None,
            template: None,
        })
        .collect())
}
