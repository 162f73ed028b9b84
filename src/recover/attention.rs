//! Rules for attention: `scaled_dot_product_attention` (no mask argument; causal or not) as
//! ladder's decomposition writes it: `matmul(q, k^T) * scale`, the causal bias, a softmax
//! whose all-masked rows give zeros, `matmul(p, v)`.

use super::{Rule, Variant};
use crate::ir::{AttrValue, DType, Graph, TensorType, Value};
use crate::ops::OpKind;

pub(super) fn rules() -> Vec<Rule> {
    vec![Rule {
        name: "attention",
        op: OpKind::ScaledDotProductAttention,
        structure: "softmax(q k^T * scale [+ causal bias]) v over [..., L, D] heads",
        anchor,
        variants,
        arg_types: Some(arg_types),
    }]
}

/// `where(_, 0, matmul(p, v))` (the safe softmax's zero rows), `q` the first argument of the
/// `matmul(q, k) {transpose_b}` in `p`'s cone.
fn anchor(g: &Graph, root: Value) -> Option<Value> {
    scores(g, root).map(|(q, _, _)| q)
}

/// `(q, k, v)` of a candidate root.
fn scores(g: &Graph, root: Value) -> Option<(Value, Value, Value)> {
    let n = g.node(root);
    if n.op != OpKind::Where {
        return None;
    }
    let pv = g.node(n.args[2]);
    if pv.op != OpKind::Matmul || pv.attrs.bool("transpose_a") || pv.attrs.bool("transpose_b") {
        return None;
    }
    let v = pv.args[1];
    let mut stack = vec![(pv.args[0], 0u32)];
    let mut seen = std::collections::HashSet::new();
    while let Some((x, depth)) = stack.pop() {
        if !seen.insert(x) || depth > 12 {
            continue;
        }
        let m = g.node(x);
        if m.op == OpKind::Matmul && m.attrs.bool("transpose_b") && !m.attrs.bool("transpose_a") {
            return Some((m.args[0], m.args[1], v));
        }
        for &a in &m.args {
            stack.push((a, depth + 1));
        }
    }
    None
}

fn arg_types(g: &Graph, root: Value) -> Result<Vec<TensorType>, String> {
    let (q, k, v) = scores(g, root).ok_or("no attention scores under this node")?;
    let (tq, tk, tv) = (g.ty(q), g.ty(k), g.ty(v));
    if [tq, tk, tv].iter().any(|t| t.dtype != DType::F32 || t.shape.rank() < 2) {
        return Err("q, k and v must be f32 of rank >= 2 (the library kernel's operands)".into());
    }
    let batch = |t: &TensorType| t.shape.dims()[..t.shape.rank() - 2].to_vec();
    if batch(tq) != batch(tk) || batch(tq) != batch(tv) {
        return Err("q, k and v have different leading dims (the library kernel does not broadcast)".into());
    }
    Ok(vec![tk.clone(), tv.clone()])
}

fn variants(_: &TensorType) -> Result<Vec<Variant>, String> {
    // The scale is read off the model (a `full` after the scores); a scale of exactly 1 is
    // simplified away, so it is a variant of its own.
    let v = |causal: bool, one: bool| Variant {
        extra_args: vec![],
        attrs: if one {
            vec![("causal", AttrValue::Bool(causal)), ("scale", AttrValue::Float(1.0))]
        } else {
            vec![("causal", AttrValue::Bool(causal))]
        },
        infer: (!one).then_some("scale"),
        template: None,
    };
    Ok(vec![v(false, false), v(true, false), v(false, true), v(true, true)])
}
