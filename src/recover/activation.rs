//! Rules for activations: gelu (erf and tanh forms) as ladder's decomposition writes them, and
//! as exporters write them out of elementwise ONNX ops.

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
            worth: None,
        },
        Rule {
            name: "gelu_onnx",
            op: OpKind::Gelu,
            structure: "x * (erf(x / sqrt 2) + 1) * 0.5 as exporters write it (Div or Mul by 1/sqrt 2; the \
                        product in any order)",
            anchor: gelu_onnx_anchor,
            variants: gelu_onnx_variants,
            arg_types: None,
            worth: None,
        },
        Rule {
            name: "gelu_tanh_onnx",
            op: OpKind::Gelu,
            structure: "0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) as exporters write it (Pow 3 \
                        or x*x*x; the product in any order)",
            anchor: gelu_tanh_onnx_anchor,
            variants: gelu_tanh_onnx_variants,
            arg_types: None,
            worth: None,
        },
        Rule {
            name: "silu",
            op: OpKind::Silu,
            structure: "x * sigmoid(x), the sigmoid in its stable form (ladder's silu, and an exporter's \
                        Sigmoid then Mul)",
            anchor: silu_anchor,
            variants: silu_variants,
            arg_types: None,
            worth: Some(not_a_view),
        },
        Rule {
            name: "sigmoid",
            op: OpKind::Sigmoid,
            structure: "where(x >= 0, 1 / (1 + e), e / (1 + e)) with e = exp(-|x|)",
            anchor: sigmoid_anchor,
            variants: plain_variants,
            arg_types: None,
            worth: Some(not_a_view),
        },
    ]
}

/// Sigmoid and SiLU pay as library kernels on whole buffers (a convolution's or a GEMM's
/// output, in place while it is in cache). On a slice (an LSTM's gates) or a broadcast the
/// library call would need the view copied out first, while the prims fuse into the loop that
/// reads it. A permutation (a detection head's `[N, A, C, H, W] → [N, A, H, W, C]`) is
/// recovered all the same: the transposing loop the prims would fuse into stores with a
/// stride, so it runs on 4-lane generated code with scattered stores, and the permuted copy
/// plus the library call took 7 µs where the fused loop took 21 (8960 elements, Xeon,
/// AVX-512).
fn not_a_view(g: &Graph, x: Value) -> Result<(), String> {
    let n = g.node(x);
    match n.op {
        OpKind::Slice | OpKind::BroadcastInDim => {
            Err(format!("the argument {x} is a {} (its consumer's loop reads it in place; the prims fuse there)", n.op))
        }
        _ => Ok(()),
    }
}

/// The stable sigmoid's root: `where(ge(x, 0), reciprocal(1 + e), div(e, 1 + e))`; `x` the
/// comparison's argument.
fn sigmoid_anchor(g: &Graph, root: Value) -> Option<Value> {
    let n = g.node(root);
    if n.op != OpKind::Where {
        return None;
    }
    let (c, a) = (g.node(n.args[0]), g.node(n.args[1]));
    (c.op == OpKind::Ge && a.op == OpKind::Reciprocal).then(|| c.args[0])
}

/// Exporters' SiLU, `mul(x, s)` or `mul(s, x)` with `s` a stable sigmoid of `x`; or ladder's
/// own decomposition, `where(ge(x, 0), div(x, 1 + e), ...)`.
fn silu_anchor(g: &Graph, root: Value) -> Option<Value> {
    let n = g.node(root);
    match n.op {
        OpKind::Mul => {
            let [a, b] = n.args[..] else { return None };
            [(a, b), (b, a)].into_iter().find_map(|(x, s)| (sigmoid_anchor(g, s) == Some(x)).then_some(x))
        }
        OpKind::Where => {
            let (c, a) = (g.node(n.args[0]), g.node(n.args[1]));
            (c.op == OpKind::Ge && a.op == OpKind::Div && a.args[0] == c.args[0]).then(|| c.args[0])
        }
        _ => None,
    }
}

/// SiLU as ladder decomposes it, or as exporters write it (`Sigmoid` then `Mul`).
fn silu_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    Ok(vec![
        Variant { extra_args: vec![], attrs: vec![], infer: None, template: None },
        // The unfused product is NaN at -inf (0 * -inf), the op's limit -0.
        Variant {
            extra_args: vec![],
            attrs: vec![("nan_at_neg_inf", AttrValue::Bool(true))],
            infer: None,
            template: Some(silu_exporter_form),
        },
    ])
}

fn silu_exporter_form(types: &[TensorType], _: &[(&'static str, AttrValue)]) -> String {
    let t = &types[0];
    format!("graph form(%x: {t}) {{\n  %s = sigmoid(%x)\n  %y = mul(%x, %s)\n  return %y\n}}\n")
}

/// The op itself on `x` (no attributes to read).
fn plain_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    Ok(vec![Variant { extra_args: vec![], attrs: vec![], infer: None, template: None }])
}

/// The first node within `depth` steps of `root` through `mul` and `add` nodes (the root
/// included) that `is` accepts.
fn within_products(g: &Graph, root: Value, depth: u32, is: impl Fn(Value) -> bool) -> Option<Value> {
    let mut stack = vec![(root, 0u32)];
    while let Some((v, d)) = stack.pop() {
        if is(v) {
            return Some(v);
        }
        let n = g.node(v);
        if d < depth && matches!(n.op, OpKind::Mul | OpKind::Add) {
            stack.extend(n.args.iter().rev().map(|&a| (a, d + 1)));
        }
    }
    None
}

/// Of a binary node's two arguments, the one that is not a (broadcast) constant.
fn operand(g: &Graph, v: Value) -> Value {
    let n = g.node(v);
    let constant = |a: Value| {
        let mut m = g.node(a);
        if m.op == OpKind::BroadcastInDim {
            m = g.node(m.args[0]);
        }
        matches!(m.op, OpKind::Const | OpKind::Full)
    };
    match n.args[..] {
        [a, b] if constant(a) => b,
        [a, ..] => a,
        [] => v,
    }
}

/// A `mul` whose products (within three steps) hold an `erf`: the exporter's GELU, `x` the
/// argument of the `erf`'s division or product.
fn gelu_onnx_anchor(g: &Graph, root: Value) -> Option<Value> {
    if g.node(root).op != OpKind::Mul {
        return None;
    }
    let erf = within_products(g, root, 3, |v| g.node(v).op == OpKind::Erf)?;
    let x = operand(g, g.node(erf).args[0]);
    (g.ty(x) == g.ty(root)).then_some(x)
}

/// `x * 0.5 * (1 + t)` associated as `(x * (1 + t)) * 0.5` (0), `(x * 0.5) * (1 + t)` (1) or
/// `x * (0.5 * (1 + t))` (2), from `%x`, `%tp` (1 + t) and `%hb` (0.5).
fn half_product(assoc: u8) -> &'static str {
    match assoc {
        0 => "  %m = mul(%x, %tp)\n  %y = mul(%m, %hb)\n",
        1 => "  %m = mul(%x, %hb)\n  %y = mul(%m, %tp)\n",
        _ => "  %m = mul(%hb, %tp)\n  %y = mul(%x, %m)\n",
    }
}

fn gelu_onnx_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    let forms: [Template; 6] = [
        gelu_erf_form::<true, 0>,
        gelu_erf_form::<true, 1>,
        gelu_erf_form::<true, 2>,
        gelu_erf_form::<false, 0>,
        gelu_erf_form::<false, 1>,
        gelu_erf_form::<false, 2>,
    ];
    Ok(forms.into_iter().map(|f| exporter_variant("none", f)).collect())
}

fn exporter_variant(approximate: &str, template: Template) -> Variant {
    Variant {
        extra_args: vec![],
        // The unfused product is NaN at -inf ((1 + erf or tanh) = 0 times -inf).
        attrs: vec![("approximate", AttrValue::Str(approximate.into())), ("nan_at_neg_inf", AttrValue::Bool(true))],
        infer: None,
        template: Some(template),
    }
}

/// PyTorch's export: `Div(x, 1.4142135)` (`DIV`) or `Mul(x, 0.70710677)`, `Erf`, `Add(1)`,
/// then the product with `x` and 0.5 associated as `ASSOC` says ([`half_product`]).
fn gelu_erf_form<const DIV: bool, const ASSOC: u8>(types: &[TensorType], _: &[(&'static str, AttrValue)]) -> String {
    let (t, s) = (&types[0], &types[0].shape);
    let (op, c) = if DIV { ("div", "1.4142135") } else { ("mul", "0.70710677") };
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
  %tp = add(%e, %ob)
  %h = const @half : f32[]
  %hb = broadcast_in_dim(%h) {{shape={s}, broadcast_dims=[]}}
{}  return %y
}}
",
        half_product(ASSOC)
    )
}

/// A `mul` whose products (within three steps) hold `add(tanh(_), _)`: the exporter's tanh
/// GELU, `x` the operand of the `add` under the `tanh` that the other operand (the cubic
/// term) is computed from.
fn gelu_tanh_onnx_anchor(g: &Graph, root: Value) -> Option<Value> {
    if g.node(root).op != OpKind::Mul {
        return None;
    }
    let tanh = within_products(g, root, 4, |v| g.node(v).op == OpKind::Tanh)?;
    let inner = within_products(g, g.node(tanh).args[0], 1, |v| g.node(v).op == OpKind::Add)?;
    let [a, b] = g.node(inner).args[..] else { return None };
    let uses = |term: Value, x: Value| within_products(g, term, 3, |v| g.node(v).args.contains(&x)).is_some();
    let x = if uses(b, a) { a } else { b };
    (g.ty(x) == g.ty(root)).then_some(x)
}

fn gelu_tanh_onnx_variants(x: &TensorType) -> Result<Vec<Variant>, String> {
    f32_rows(x)?;
    let forms: [Template; 12] = [
        gelu_tanh_form::<true, 0, 0>,
        gelu_tanh_form::<true, 0, 1>,
        gelu_tanh_form::<true, 0, 2>,
        gelu_tanh_form::<true, 1, 0>,
        gelu_tanh_form::<true, 1, 1>,
        gelu_tanh_form::<true, 1, 2>,
        gelu_tanh_form::<false, 0, 0>,
        gelu_tanh_form::<false, 0, 1>,
        gelu_tanh_form::<false, 0, 2>,
        gelu_tanh_form::<false, 1, 0>,
        gelu_tanh_form::<false, 1, 1>,
        gelu_tanh_form::<false, 1, 2>,
    ];
    Ok(forms.into_iter().map(|f| exporter_variant("tanh", f)).collect())
}

/// The tanh GELU as PyTorch exports it: the cube as `Pow(x, 3)` (`POW`) or `x * (x * x)`,
/// `Mul(0.044715, _)`, `Add(x, _)`, `Mul(sqrt(2/pi), _)`, `Tanh`, `Add(1)`, then the product
/// with `x` and 0.5 associated as `ASSOC` says ([`half_product`]). `sqrt(2/pi)` is the f32
/// nearest to it (`BETA` 0, a constant computed in double and cast) or the f32 square root of
/// the f32 quotient `2 / pi` (`BETA` 1, `Sqrt(Div(2, pi))` folded in f32).
fn gelu_tanh_form<const POW: bool, const BETA: u8, const ASSOC: u8>(
    types: &[TensorType],
    _: &[(&'static str, AttrValue)],
) -> String {
    let (t, s) = (&types[0], &types[0].shape);
    let beta =
        if BETA == 0 { (2.0 / std::f64::consts::PI).sqrt() as f32 } else { (2.0f32 / std::f32::consts::PI).sqrt() };
    let cube = if POW {
        format!(
            "  %three = const @three : f32[]\n  %threeb = broadcast_in_dim(%three) {{shape={s}, broadcast_dims=[]}}\n  %c = pow(%x, %threeb)\n"
        )
    } else {
        "  %x2 = mul(%x, %x)\n  %c = mul(%x, %x2)\n".to_string()
    };
    format!(
        "blob @three: f32[] = [3.0]
blob @k: f32[] = [{k:?}]
blob @b: f32[] = [{beta:?}]
blob @one: f32[] = [1.0]
blob @half: f32[] = [0.5]
graph form(%x: {t}) {{
{cube}  %k = const @k : f32[]
  %kb = broadcast_in_dim(%k) {{shape={s}, broadcast_dims=[]}}
  %kc = mul(%kb, %c)
  %a = add(%x, %kc)
  %b = const @b : f32[]
  %bb = broadcast_in_dim(%b) {{shape={s}, broadcast_dims=[]}}
  %u = mul(%bb, %a)
  %th = tanh(%u)
  %o = const @one : f32[]
  %ob = broadcast_in_dim(%o) {{shape={s}, broadcast_dims=[]}}
  %tp = add(%th, %ob)
  %h = const @half : f32[]
  %hb = broadcast_in_dim(%h) {{shape={s}, broadcast_dims=[]}}
{}  return %y
}}
",
        half_product(ASSOC),
        k = 0.044715f32,
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
