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
        },
        Rule {
            name: "layer_norm",
            op: OpKind::LayerNorm,
            structure: "(x - mean) * rsqrt(var + eps) [* w [+ b]] over the last axis, rows prescaled",
            anchor: layer_norm_anchor,
            variants: layer_norm_variants,
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
    Ok(vec![Variant { extra_args: vec![], attrs: vec![("axis", AttrValue::Int(-1))], infer: None }])
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
    };
    Ok(vec![v(2, false), v(1, false), v(0, false), v(2, true), v(1, true), v(0, true)])
}
