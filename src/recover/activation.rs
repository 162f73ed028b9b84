//! Rules for activations: gelu (erf and tanh forms) as ladder's decomposition writes them.

use super::{f32_rows, Rule, Variant};
use crate::ir::{AttrValue, Graph, TensorType, Value};
use crate::ops::OpKind;

pub(super) fn rules() -> Vec<Rule> {
    vec![Rule {
        name: "gelu",
        op: OpKind::Gelu,
        structure: "x * Phi(x), erf form (with its accurate tail) or tanh form",
        anchor: gelu_anchor,
        variants: gelu_variants,
    }]
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
        .map(|a| Variant { extra_args: vec![], attrs: vec![("approximate", AttrValue::Str(a.into()))], infer: None })
        .collect())
}
