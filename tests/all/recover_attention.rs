//! Recovery of `scaled_dot_product_attention` (`src/recover/attention.rs`): ladder's own op
//! with masks, and the forms PyTorch/HF exports take in ONNX as ladder imports them. Which
//! clusters come back (the op, the model values bound as q, k, v and mask, the attributes),
//! which do not and why, and the recovered plans (reference executor and native CPU) against
//! the interpreter on the unrecovered model, under the op's tolerance, on random and
//! adversarial inputs.

use ladder::gen::Source;
use ladder::ir::{AttrValue, Value};
use ladder::kernel::Step;
use ladder::numerics::{compare, random_data, CompareCtx};
use ladder::recover::{recover, Match, Recovered};
use ladder::{compile, CompileOptions, DType, Graph, OpKind, Tensor};

use crate::onnx_build::*;

fn imp(bytes: &[u8]) -> Graph {
    ladder::frontend::onnx::import(bytes, &Default::default()).unwrap_or_else(|e| panic!("import: {e}"))
}

fn parse(text: &str) -> Graph {
    ladder::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The simplified graph and its recovery.
fn recovered(g: &Graph) -> (Graph, Recovered) {
    let s = ladder::passes::lower(g).unwrap().simplified;
    let r = recover(&s).unwrap();
    (s, r)
}

/// How an exported model scales its scores.
#[derive(Clone, Copy, Debug)]
enum Scale {
    /// `Div` by sqrt(D), or by another constant.
    Div,
    DivBy(f32),
    /// `Mul` of the scores by a constant.
    Mul(f32),
    /// `Mul` of Q before the product.
    Pre(f32),
    /// Q and K^T each times D^-1/4 (PyTorch's sdpa export), or by another constant.
    Qk,
    QkBy(f32),
    None,
    /// `Mul` of the probabilities (after the softmax).
    AfterSoftmax(f32),
}

/// How an exported model masks its scores.
#[derive(Clone, Copy, Debug)]
enum Mask {
    None,
    /// `Add` of a float mask input of these dims.
    Float(&'static [&'static str]),
    /// PyTorch's sdpa export of a bool mask: `Add(scores, Where(mask, 0, -inf))`.
    Bool(&'static [&'static str]),
    /// HF eager: `Where(mask, scores, c)`.
    Replace(&'static [&'static str], f32),
    /// PyTorch's `is_causal` export: `Add` of `Where(Equal(Trilu(ones), 0), -inf, 0)`.
    Causal,
}

#[derive(Clone, Copy, Debug)]
struct Export {
    b: usize,
    l: usize,
    s: usize,
    h: usize,
    d: usize,
    scale: Scale,
    mask: Mask,
    /// K^T as `Transpose [0,2,1,3]` then `Transpose [0,1,3,2]` (else one `Transpose [0,2,3,1]`).
    k_twice: bool,
    softmax_axis: i64,
    /// Q, K, V projected from `x` (self-attention, L = S); else the heads are inputs
    /// `qi [B,L,H,D]`, `ki`, `vi [B,S,H,D]`.
    project: bool,
    /// The probabilities are also an output.
    probs_out: bool,
    /// Key and value heads (below `h`: grouped heads, K and V broadcast over Q's).
    kv_heads: usize,
    /// `k` (before its last-two-dims transpose, with `k_twice`) is also an output.
    k_out: bool,
    /// K^T is an input `kt [B,H,D,S]` (no transpose to undo).
    kt_input: bool,
    /// The value added as the mask is also used elsewhere (an output `-mask`).
    mask_shared: bool,
}

impl Export {
    fn new(scale: Scale, mask: Mask) -> Export {
        Export {
            b: 2,
            l: 5,
            s: 5,
            h: 3,
            d: 4,
            scale,
            mask,
            k_twice: false,
            softmax_axis: -1,
            project: true,
            probs_out: false,
            kv_heads: 3,
            k_out: false,
            kt_input: false,
            mask_shared: false,
        }
    }

    /// The model's bytes: outputs `y` (heads merged back) and `o` (the attention, [B,H,L,D]).
    fn onnx(&self) -> Vec<u8> {
        let Export { b, l, s, h, d, .. } = *self;
        let (b, l, s, h, d) = (b as i64, l as i64, s as i64, h as i64, d as i64);
        let e = h * d;
        let mut nodes = Vec::new();
        let mut inits = Vec::new();
        let mut inputs = Vec::new();
        let n = |op: &str, i: &[&str], o: &str| node(op, i, &[o], vec![]);
        let perm = |p: &[i64]| vec![a_ints("perm", p)];
        if self.project {
            inputs.push(vi("x", FLOAT, &[&b.to_string(), &s.to_string(), &e.to_string()]));
            for (k, name) in ["q", "k", "v"].iter().enumerate() {
                let w: Vec<f32> =
                    (0..e * e).map(|i| ((i as f32 + 1.0) * (0.37 + k as f32 * 0.21)).sin() * 0.4).collect();
                let bias: Vec<f32> = (0..e).map(|i| ((i as f32) * (0.11 + k as f32 * 0.05)).cos() * 0.1).collect();
                inits.push(tensor_f32(&format!("w{name}"), &[e, e], &w));
                inits.push(tensor_f32(&format!("b{name}"), &[e], &bias));
                nodes.push(n("MatMul", &["x", &format!("w{name}")], &format!("{name}0")));
                nodes.push(n("Add", &[&format!("{name}0"), &format!("b{name}")], &format!("{name}1")));
                nodes.push(n("Reshape", &[&format!("{name}1"), "heads"], &format!("{name}i")));
            }
            inits.push(tensor_i64("heads", &[4], &[b, s, h, d]));
        } else {
            inputs.push(vi("qi", FLOAT, &[&b.to_string(), &l.to_string(), &h.to_string(), &d.to_string()]));
            let kvh = self.kv_heads.to_string();
            inputs.push(vi("ki", FLOAT, &[&b.to_string(), &s.to_string(), &kvh, &d.to_string()]));
            inputs.push(vi("vi", FLOAT, &[&b.to_string(), &s.to_string(), &kvh, &d.to_string()]));
        }
        nodes.push(node("Transpose", &["qi"], &["q"], perm(&[0, 2, 1, 3])));
        nodes.push(node("Transpose", &["vi"], &["v"], perm(&[0, 2, 1, 3])));
        if self.kt_input {
            inputs.push(vi("kt", FLOAT, &[&b.to_string(), &h.to_string(), &d.to_string(), &s.to_string()]));
        } else if self.k_twice {
            nodes.push(node("Transpose", &["ki"], &["k"], perm(&[0, 2, 1, 3])));
            nodes.push(node("Transpose", &["k"], &["kt"], perm(&[0, 1, 3, 2])));
        } else {
            nodes.push(node("Transpose", &["ki"], &["kt"], perm(&[0, 2, 3, 1])));
        }
        let quarter = (1.0 / (d as f32).sqrt()).sqrt();
        let mut c = |name: &str, v: f32| inits.push(tensor_f32(name, &[], &[v]));
        let scores = match self.scale {
            Scale::Div | Scale::DivBy(_) => {
                let by = if let Scale::DivBy(x) = self.scale { x } else { (d as f32).sqrt() };
                c("c", by);
                nodes.push(n("MatMul", &["q", "kt"], "s0"));
                nodes.push(n("Div", &["s0", "c"], "s1"));
                "s1"
            }
            Scale::Mul(x) => {
                c("c", x);
                nodes.push(n("MatMul", &["q", "kt"], "s0"));
                nodes.push(n("Mul", &["s0", "c"], "s1"));
                "s1"
            }
            Scale::Pre(x) => {
                c("c", x);
                nodes.push(n("Mul", &["q", "c"], "qs"));
                nodes.push(n("MatMul", &["qs", "kt"], "s0"));
                "s0"
            }
            Scale::Qk | Scale::QkBy(_) => {
                let x = if let Scale::QkBy(x) = self.scale { x } else { quarter };
                c("c", x);
                nodes.push(n("Mul", &["q", "c"], "qs"));
                nodes.push(n("Mul", &["kt", "c"], "ks"));
                nodes.push(n("MatMul", &["qs", "ks"], "s0"));
                "s0"
            }
            Scale::None | Scale::AfterSoftmax(_) => {
                nodes.push(n("MatMul", &["q", "kt"], "s0"));
                "s0"
            }
        };
        let masked = match self.mask {
            Mask::None => scores.to_string(),
            Mask::Float(ds) => {
                inputs.push(vi("mask", FLOAT, ds));
                nodes.push(n("Add", &[scores, "mask"], "sm"));
                "sm".into()
            }
            Mask::Bool(ds) => {
                inputs.push(vi("mask", BOOL, ds));
                inits.push(tensor_f32("zero", &[1], &[0.0]));
                inits.push(tensor_f32("ninf", &[1], &[f32::NEG_INFINITY]));
                nodes.push(n("Where", &["mask", "zero", "ninf"], "bias"));
                nodes.push(n("Add", &[scores, "bias"], "sm"));
                "sm".into()
            }
            Mask::Replace(ds, x) => {
                inputs.push(vi("mask", BOOL, ds));
                inits.push(tensor_f32("fill", &[], &[x]));
                nodes.push(n("Where", &["mask", scores, "fill"], "sm"));
                "sm".into()
            }
            Mask::Causal => {
                inits.push(tensor_f32("ones", &[l, s], &vec![1.0; (l * s) as usize]));
                inits.push(tensor_f32("zero", &[], &[0.0]));
                inits.push(tensor_f32("ninf", &[], &[f32::NEG_INFINITY]));
                nodes.push(node("Trilu", &["ones"], &["tril"], vec![a_int("upper", 0)]));
                nodes.push(n("Equal", &["tril", "zero"], "above"));
                nodes.push(n("Where", &["above", "ninf", "zero"], "bias"));
                nodes.push(n("Add", &[scores, "bias"], "sm"));
                "sm".into()
            }
        };
        nodes.push(node("Softmax", &[&masked], &["p"], vec![a_int("axis", self.softmax_axis)]));
        let probs = if let Scale::AfterSoftmax(x) = self.scale {
            inits.push(tensor_f32("c", &[], &[x]));
            nodes.push(n("Mul", &["p", "c"], "ps"));
            "ps"
        } else {
            "p"
        };
        nodes.push(n("MatMul", &[probs, "v"], "o"));
        nodes.push(node("Transpose", &["o"], &["ot"], perm(&[0, 2, 1, 3])));
        inits.push(tensor_i64("merged", &[3], &[b, l, e]));
        nodes.push(n("Reshape", &["ot", "merged"], "y"));
        let mut outputs = vec![vi("y", FLOAT, &[]), vi("o", FLOAT, &[])];
        if self.probs_out {
            outputs.push(vi("p", FLOAT, &[]));
        }
        if self.k_out {
            outputs.push(vi("k", FLOAT, &[]));
        }
        if self.mask_shared {
            let bias = if matches!(self.mask, Mask::Float(_)) { "mask" } else { "bias" };
            nodes.push(n("Neg", &[bias], "neg_mask"));
            outputs.push(vi("neg_mask", FLOAT, &[]));
        }
        encode(&model_proto(graph(nodes, inputs, outputs, inits), 17))
    }

    fn graph(&self) -> Graph {
        imp(&self.onnx())
    }
}

// ---------------------------------------------------------------------------------------------
// Matches

/// A model value's name (its number when it has none).
fn name(g: &Graph, v: Value) -> String {
    g.name_of(v).map_or_else(|| v.to_string(), str::to_string)
}

/// A match's arguments by name, `permute(name, perm)` for one taken through a permute.
fn arg_names(g: &Graph, m: &Match) -> Vec<String> {
    m.args
        .iter()
        .zip(&m.layout)
        .map(|(&a, p)| match p {
            None => name(g, a),
            Some(p) => format!("permute({}, {p:?})", name(g, a)),
        })
        .collect()
}

/// `(causal, scale, safe_softmax)` of a match (the op's defaults where not given).
fn attrs_of(m: &Match) -> (bool, f64, bool) {
    let get = |k: &str| m.attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let causal = matches!(get("causal"), Some(AttrValue::Bool(true)));
    let scale = match get("scale") {
        Some(AttrValue::Float(f)) => f,
        _ => f64::NAN,
    };
    let safe = !matches!(get("safe_softmax"), Some(AttrValue::Bool(false)));
    (causal, scale, safe)
}

/// The recovery of `g`, which must be one attention and nothing else (the softmax rule does
/// not take the cluster's softmax).
#[track_caller]
fn one_attention(g: &Graph) -> (Graph, Recovered) {
    let (s, r) = recovered(g);
    let text = r.explain(&s);
    assert_eq!(r.matches.len(), 1, "{text}");
    assert_eq!(r.matches[0].op, OpKind::ScaledDotProductAttention, "{text}");
    (s, r)
}

/// One attention op on q [2, 3, 5, 4], k [2, 3, 7, 4], v [2, 3, 7, 3] and a mask of type
/// `mask` (none when empty).
fn own(mask: &str, attrs: &str) -> Graph {
    let (sig, arg) = if mask.is_empty() { (String::new(), "") } else { (format!(", %m: {mask}"), ", %m") };
    parse(&format!(
        "graph att(%q: f32[2, 3, 5, 4], %k: f32[2, 3, 7, 4], %v: f32[2, 3, 7, 3]{sig}) {{
  %y = scaled_dot_product_attention(%q, %k, %v{arg}) {{{attrs}}}
  return %y
}}"
    ))
}

const OWN_MASKS: [&str; 9] = [
    "",
    "f32[5, 7]",
    "f32[1, 1, 5, 7]",
    "f32[2, 1, 1, 7]",
    "f32[2, 3, 5, 7]",
    "bool[5, 7]",
    "bool[1, 1, 5, 7]",
    "bool[2, 1, 1, 7]",
    "bool[2, 3, 5, 7]",
];

/// `(attrs, causal, scale, safe_softmax)`: the scale recovered is the f32 constant the
/// decomposition multiplies by (1/sqrt(4) = 0.5 by default).
const OWN_ATTRS: [(&str, bool, f64, bool); 5] = [
    ("causal=false", false, 0.5, true),
    ("causal=true, scale=0.3", true, 0.3f32 as f64, true),
    ("safe_softmax=false", false, 0.5, false),
    ("causal=true, safe_softmax=false, scale=1.0", true, 1.0, false),
    ("causal=false, scale=-1.75", false, -1.75, true),
];

#[test]
fn ladder_op_with_masks_comes_back_from_its_prims() {
    for mask in OWN_MASKS {
        for (attrs, causal, scale, safe) in OWN_ATTRS {
            let g = own(mask, attrs);
            let (s, r) = one_attention(&g);
            let m = &r.matches[0];
            let want_args: &[&str] = if mask.is_empty() { &["q", "k", "v"] } else { &["q", "k", "v", "m"] };
            assert_eq!(arg_names(&s, m), want_args, "{mask} {attrs}");
            assert_eq!(attrs_of(m), (causal, scale, safe), "{mask} {attrs}");
            assert_eq!(m.rule, if safe { "attention" } else { "attention_unsafe" });
            // Nothing of the cluster is left.
            let text = ladder::text::print(&r.graph);
            for prim in ["exp(", "reduce_max(", "reduce_sum(", "matmul("] {
                assert!(!text.contains(prim), "{mask} {attrs}: {prim} left behind:\n{text}");
            }
        }
    }
}

#[test]
fn a_shared_bool_mask_bias_binds_as_the_float_mask_it_computes() {
    // Two attentions on one bool mask of the scores' shape: CSE leaves one
    // `where(m, 0, -inf)` that both add, so each takes that float bias as its mask
    // (recovering the bool mask would leave the bias used outside either cluster).
    let two = |mask: &str| {
        parse(&format!(
            "graph two(%q: f32[1, 2, 3, 4], %k: f32[1, 2, 6, 4], %v: f32[1, 2, 6, 4], %q2: f32[1, 2, 3, 4], %m: {mask}) {{
  %a = scaled_dot_product_attention(%q, %k, %v, %m)
  %b = scaled_dot_product_attention(%q2, %k, %v, %m) {{safe_softmax=false}}
  return %a, %b
}}"
        ))
    };
    let (s, r) = recovered(&two("bool[1, 2, 3, 6]"));
    let text = r.explain(&s);
    assert_eq!(r.matches.len(), 2, "{text}");
    for m in &r.matches {
        let mask = m.args[3];
        assert_eq!(s.node(mask).op, OpKind::Where, "{text}");
        assert_eq!(s.node(mask).args[0], s.inputs()[4], "{text}");
        assert_eq!(s.ty(mask).dtype, DType::F32);
    }
    // A smaller mask's bias is shared through its broadcast, a layout op each cluster may
    // hold: both take the bool mask.
    let (s, r) = recovered(&two("bool[3, 6]"));
    assert_eq!(r.matches.len(), 2, "{}", r.explain(&s));
    for m in &r.matches {
        assert_eq!(arg_names(&s, m)[3], "m");
    }
}

/// `(scale form, mask form, rule, scale recovered)` of the exporter cases (D = 4).
fn export_cases() -> Vec<(Scale, Mask, &'static str, f64)> {
    let quarter = (1.0f32 / 2.0f32).sqrt() as f64;
    vec![
        (Scale::Div, Mask::None, "attention_onnx_div", 0.5),
        (Scale::Div, Mask::Float(&["2", "1", "1", "5"]), "attention_onnx_div", 0.5),
        (Scale::Mul(0.3), Mask::Float(&["5", "5"]), "attention_onnx_mul", 0.3f32 as f64),
        (Scale::Mul(0.3), Mask::Float(&["1", "1", "5", "5"]), "attention_onnx_mul", 0.3f32 as f64),
        (Scale::Pre(0.125), Mask::Float(&["2", "3", "5", "5"]), "attention_onnx_prescaled", 0.125),
        (Scale::Pre(0.3), Mask::Bool(&["2", "1", "1", "5"]), "attention_onnx_prescaled", 0.3f32 as f64),
        (Scale::Qk, Mask::None, "attention_onnx_qk_scaled", quarter * quarter),
        (Scale::Qk, Mask::Bool(&["2", "3", "5", "5"]), "attention_onnx_qk_scaled", quarter * quarter),
        (Scale::Qk, Mask::Bool(&["5", "5"]), "attention_onnx_qk_scaled", quarter * quarter),
        (Scale::None, Mask::None, "attention_onnx_unscaled", 1.0),
        (Scale::None, Mask::Causal, "attention_onnx_unscaled", 1.0),
        (Scale::Div, Mask::Causal, "attention_onnx_div", 0.5),
        (Scale::Qk, Mask::Causal, "attention_onnx_qk_scaled", quarter * quarter),
    ]
}

#[test]
fn exporter_forms_come_back_with_their_arguments_and_attributes() {
    for (scale, mask, rule, want_scale) in export_cases() {
        for k_twice in [false, true] {
            let e = Export { k_twice, ..Export::new(scale, mask) };
            let g = e.graph();
            let (s, r) = one_attention(&g);
            let m = &r.matches[0];
            assert_eq!(m.rule, rule, "{e:?}");
            let mut want = vec!["q".to_string(), "permute(ki, [0, 2, 1, 3])".into(), "v".into()];
            if matches!(mask, Mask::Float(_) | Mask::Bool(_)) {
                want.push("mask".into());
            }
            assert_eq!(arg_names(&s, m), want, "{e:?}\n{}", r.explain(&s));
            let causal = matches!(mask, Mask::Causal);
            assert_eq!(attrs_of(m), (causal, want_scale, false), "{e:?}");
            // The cluster's root is the product with V; the heads' transposes stay.
            assert_eq!(name(&s, m.root), "o");
            let text = ladder::text::print(&r.graph);
            assert!(!text.contains("exp(") && !text.contains("reduce_max("), "{e:?}:\n{text}");
        }
    }
}

#[test]
fn keys_bind_to_an_existing_untransposed_value() {
    // K before its last-two-dims transpose is also an output (a KV cache's present key): it
    // is bound as k, with no permute added.
    let e = Export { k_twice: true, k_out: true, ..Export::new(Scale::Div, Mask::None) };
    let g = e.graph();
    let (s, r) = one_attention(&g);
    let m = &r.matches[0];
    assert_eq!(m.layout, vec![None, None, None]);
    assert_eq!(arg_names(&s, m), ["q", "k", "v"], "{}", r.explain(&s));
    // With D = 16 and the heads as inputs, L != S.
    let e = Export { project: false, l: 3, s: 6, d: 16, ..Export::new(Scale::Div, Mask::Float(&["3", "6"])) };
    let (s, r) = one_attention(&e.graph());
    let m = &r.matches[0];
    assert_eq!(arg_names(&s, m), ["q", "permute(ki, [0, 2, 1, 3])", "v", "mask"]);
    assert_eq!(attrs_of(m), (false, 0.25, false));
}

#[test]
fn a_later_permute_of_the_keys_is_not_used_before_it_is_defined() {
    // The untransposed keys exist, but only after the attention: the op gets a permute of its
    // own (the rewrite emits it where the op stands).
    let g = parse(
        "blob @c: f32[] = [2.0]
graph late(%qi: f32[1, 3, 2, 4], %ki: f32[1, 5, 2, 4], %vi: f32[1, 5, 2, 4]) {
  %q = permute(%qi) {perm=[0, 2, 1, 3]}
  %kt = permute(%ki) {perm=[0, 2, 3, 1]}
  %v = permute(%vi) {perm=[0, 2, 1, 3]}
  %s = matmul(%q, %kt)
  %c = const @c : f32[]
  %sd = div(%s, %c)
  %p = softmax(%sd) {axis=-1}
  %o = matmul(%p, %v)
  %k = permute(%ki) {perm=[0, 2, 1, 3]}
  return %o, %k
}",
    );
    let (s, r) = one_attention(&g);
    assert_eq!(arg_names(&s, &r.matches[0]), ["q", "permute(ki, [0, 2, 1, 3])", "v"], "{}", r.explain(&s));
    let plan = compile(&g, &CompileOptions { recover: true, ..CompileOptions::reference() }).unwrap();
    let mut rng = ladder::models::Rng::new(7);
    let inputs: Vec<Tensor> = [[1, 3, 2, 4], [1, 5, 2, 4], [1, 5, 2, 4]]
        .iter()
        .map(|sh| ladder::models::random_tensor(&mut rng, DType::F32, sh).unwrap())
        .collect();
    let want = ladder::interp::run(&g, &inputs, &Default::default()).unwrap().outputs;
    let got = plan.run(&inputs).unwrap().outputs;
    assert!(got[1].bit_eq(&want[1]));
    for (a, b) in got[0].to_f64_vec().iter().zip(want[0].to_f64_vec()) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
}

#[test]
fn a_mask_used_elsewhere_is_fine() {
    for mask in [Mask::Float(&["2", "1", "1", "5"]), Mask::Bool(&["2", "1", "1", "5"])] {
        let e = Export { mask_shared: true, ..Export::new(Scale::Div, mask) };
        let (s, r) = one_attention(&e.graph());
        let m = &r.matches[0];
        let mask_arg = m.args[3];
        // The float mask input itself; a bool mask's bias, shared, binds as the float bias.
        assert_eq!(s.ty(mask_arg).dtype, DType::F32, "{}", r.explain(&s));
        if matches!(mask, Mask::Float(_)) {
            assert_eq!(name(&s, mask_arg), "mask");
        } else {
            assert_eq!(s.node(mask_arg).op, OpKind::Where);
        }
    }
}

/// The near-miss reasons of `g`'s recovery at its attention root `o`, with no attention
/// recovered.
#[track_caller]
fn refused(g: &Graph) -> Vec<String> {
    let (s, r) = recovered(g);
    let text = r.explain(&s);
    assert!(r.matches.iter().all(|m| m.op != OpKind::ScaledDotProductAttention), "{text}");
    let reasons: Vec<String> =
        r.near_misses.iter().filter(|n| n.rule.starts_with("attention")).map(|n| n.reason.clone()).collect();
    assert!(!reasons.is_empty(), "no attention near-miss:\n{text}");
    reasons
}

#[test]
fn near_misses_say_why() {
    let base = |scale, mask| Export::new(scale, mask);
    let cases: Vec<(Export, &[&str])> = vec![
        // Softmax over the heads' query axis: the row maximum has another shape.
        (Export { softmax_axis: 2, ..base(Scale::Div, Mask::None) }, &["f32[2, 3, 1, 5]", "f32[2, 3, 5, 1]"]),
        // The scale after the softmax.
        (base(Scale::AfterSoftmax(0.5), Mask::None), &["mul where the form has div"]),
        // A divisor or factors the rules do not read a scale off.
        (base(Scale::DivBy(3.0), Mask::None), &["divided by 3", "sqrt(D) is 2"]),
        (base(Scale::QkBy(0.7), Mask::None), &["scaled by 0.699999988079071", "D^-1/4"]),
        // HF eager's masked_fill: replacing is not adding.
        (
            base(Scale::Div, Mask::Replace(&["2", "1", "1", "5"], f32::NEG_INFINITY)),
            &["replaces masked scores", "NaN and +inf scores"],
        ),
        (
            base(Scale::Div, Mask::Replace(&["2", "1", "1", "5"], f32::MIN)),
            &["replaces masked scores", "every score is masked"],
        ),
        // The probabilities are an output: an inner value used outside the cluster.
        (Export { probs_out: true, ..base(Scale::Div, Mask::None) }, &["graph output"]),
        // Grouped heads: K and V broadcast over Q's heads.
        (
            Export { project: false, kv_heads: 1, ..base(Scale::Div, Mask::None) },
            &["different leading dims", "f32[2, 1, 5, 4]"],
        ),
        // K^T given as it is: no transpose to undo.
        (Export { project: false, kt_input: true, ..base(Scale::Div, Mask::None) }, &["through a permute"]),
    ];
    for (e, needles) in cases {
        let reasons = refused(&e.graph());
        for n in needles {
            assert!(reasons.iter().any(|r| r.contains(n)), "{e:?}: no reason mentions {n:?}: {reasons:#?}");
        }
    }
    // ladder's own op whose scores are also used elsewhere.
    let g = parse(
        "graph att(%q: f32[1, 2, 3, 4], %k: f32[1, 2, 5, 4], %v: f32[1, 2, 5, 4], %m: f32[3, 5]) {
  %y = scaled_dot_product_attention(%q, %k, %v, %m) {safe_softmax=false}
  %s = matmul(%q, %k) {transpose_b=true}
  return %y, %s
}",
    );
    let reasons = refused(&g);
    assert!(reasons.iter().any(|r| r.contains("graph output") || r.contains("also used by")), "{reasons:#?}");
}

// ---------------------------------------------------------------------------------------------
// Values

/// The recovered graph's attention node as a one-op graph over its arguments, and the
/// arguments' values for `inputs`: the context the tolerance table's bound is formed in.
fn probe(rec: &Graph, inputs: &[Tensor]) -> (Graph, Value, Vec<Tensor>) {
    let (_, node) = rec
        .nodes()
        .find(|(_, n)| n.op == OpKind::ScaledDotProductAttention)
        .unwrap_or_else(|| panic!("no attention in\n{}", ladder::text::print(rec)));
    let mut with = rec.clone();
    for (i, &a) in node.args.iter().enumerate() {
        with.add_output(&format!("arg{i}"), a).unwrap();
    }
    let outs = ladder::interp::run(&with, inputs, &Default::default()).unwrap().outputs;
    let values = outs[rec.outputs().len()..].to_vec();
    let mut p = Graph::new("probe");
    let args: Vec<Value> =
        node.args.iter().enumerate().map(|(i, &a)| p.add_input(&format!("a{i}"), rec.ty(a).clone()).unwrap()).collect();
    let y = p.add_node(OpKind::ScaledDotProductAttention, &args, node.attrs.clone()).unwrap();
    p.add_output("o", y).unwrap();
    (p, y, values)
}

fn dims(g: &Graph, v: Value) -> Vec<usize> {
    g.ty(v).shape.dims().iter().map(|d| d.as_const().unwrap() as usize).collect()
}

/// Input sets for `g` (static shapes): uniform values, the generator's adversarial profiles
/// (NaN, ±inf, huge, tiny), and hand-made ones: scores in the 1e5s (exp overflows without
/// the max shift), mask rows that mask everything (-inf or all false), NaN in q and v.
fn input_sets(g: &Graph, seed: u64) -> Vec<Vec<Tensor>> {
    let is_mask = |i: usize| matches!(g.input_name(i).as_str(), "m" | "mask");
    let mut sets = Vec::new();
    for k in 0..8u64 {
        let mut rng = ladder::models::Rng::new(seed * 1000 + k);
        sets.push(
            g.inputs()
                .iter()
                .map(|&x| ladder::models::random_tensor(&mut rng, g.ty(x).dtype, &dims(g, x)).unwrap())
                .collect::<Vec<_>>(),
        );
    }
    for k in 0..16u64 {
        let bytes = ladder::gen::seeded_bytes(seed * 1000 + 500 + k, 64);
        let mut src = Source::new(&bytes);
        sets.push(g.inputs().iter().map(|&x| random_data(&mut src, g.ty(x).dtype, &dims(g, x))).collect());
    }
    let map = |t: &Tensor, f: &dyn Fn(usize, f32) -> f32| {
        let v: Vec<f32> = t.as_f32().unwrap().iter().enumerate().map(|(i, &x)| f(i, x)).collect();
        Tensor::from_f32(t.shape(), v).unwrap()
    };
    let base = sets[0].clone();
    // Huge scores.
    sets.push(
        base.iter()
            .enumerate()
            .map(|(i, t)| if is_mask(i) || t.dtype() != DType::F32 { t.clone() } else { map(t, &|_, x| x * 300.0) })
            .collect(),
    );
    // The first row of the mask masks everything; a -1e30 float mask on the rest.
    sets.push(
        base.iter()
            .enumerate()
            .map(|(i, t)| {
                if !is_mask(i) {
                    return t.clone();
                }
                let s = *t.shape().last().unwrap();
                match t.dtype() {
                    DType::Bool => {
                        let v: Vec<bool> =
                            t.to_f64_vec().iter().enumerate().map(|(j, &b)| j >= s && b != 0.0).collect();
                        Tensor::from_bool(t.shape(), v).unwrap()
                    }
                    _ => map(t, &|j, x| {
                        if j < s {
                            f32::NEG_INFINITY
                        } else if j % 3 == 0 {
                            -1e30
                        } else {
                            x
                        }
                    }),
                }
            })
            .collect(),
    );
    // NaN in q (the first input) and in v (the third).
    sets.push(
        base.iter()
            .enumerate()
            .map(|(i, t)| if i == 0 || i == 2 { map(t, &|j, x| if j == 1 { f32::NAN } else { x }) } else { t.clone() })
            .collect(),
    );
    sets
}

/// `g` (one attention's worth of model, output `out` its result) recovered into a library
/// call on the reference executor and (with `native`) on the native CPU backend, each run
/// against the precise interpreter on `g` itself, under the op's tolerance.
#[track_caller]
fn check_values(label: &str, g: &Graph, out: usize, native: bool, seed: u64) -> usize {
    let (_, r) = one_attention(g);
    let mut plans =
        vec![("reference", compile(g, &CompileOptions { recover: true, ..CompileOptions::reference() }).unwrap())];
    if native {
        plans.push(("native", compile(g, &CompileOptions::native_cpu(2).unwrap()).unwrap()));
    }
    for (which, plan) in &plans {
        let program = plan.program().unwrap();
        assert!(
            program.steps.iter().any(|st| matches!(st, Step::Library(l) if l.op == OpKind::ScaledDotProductAttention)),
            "{label} on {which}: not a library call:\n{}",
            plan.explanation()
        );
    }
    let precise = ladder::interp::Options { precise: true, ..Default::default() };
    let mut compared = 0;
    for (k, inputs) in input_sets(g, seed).iter().enumerate() {
        let want = ladder::interp::run(g, inputs, &precise).unwrap().outputs;
        let (pg, node, args) = probe(&r.graph, inputs);
        let ctx = CompareCtx { graph: &pg, node, inputs: &args, output: "o" };
        for (which, plan) in &plans {
            let got = plan.run(inputs).unwrap_or_else(|e| panic!("{label} on {which}, input set {k}: {e}")).outputs;
            if let Err(m) = compare(OpKind::ScaledDotProductAttention, &want[out], &got[out], &ctx) {
                panic!("{label} on {which}, input set {k}: {m}\ninputs: {inputs:?}");
            }
            compared += 1;
        }
    }
    compared
}

fn own_values(masked: bool, native: bool) {
    let mut compared = 0;
    for (mi, mask) in OWN_MASKS.iter().enumerate() {
        if mask.is_empty() == masked {
            continue;
        }
        for (ai, (attrs, ..)) in OWN_ATTRS.iter().enumerate() {
            let g = own(mask, attrs);
            compared += check_values(&format!("{mask} {{{attrs}}}"), &g, 0, native, (mi * 10 + ai) as u64);
        }
    }
    eprintln!("{compared} outputs compared");
}

#[test]
fn ladder_op_recovered_meets_the_tolerance_table() {
    own_values(false, true);
}

#[test]
fn ladder_op_masked_recovered_meets_the_tolerance_table_on_the_reference_executor() {
    own_values(true, false);
}

#[test]
fn ladder_op_native_masked_meets_the_tolerance_table() {
    own_values(true, true);
}

/// The exporter cases with the heads as inputs (so q, k and v are exact), L != S.
fn export_values(masked: bool, native: bool) {
    let mut compared = 0;
    for (ci, (scale, mask, ..)) in export_cases().into_iter().enumerate() {
        if matches!(mask, Mask::Float(_) | Mask::Bool(_)) != masked {
            continue;
        }
        let mask = match mask {
            Mask::Float(d) if d.len() == 2 => Mask::Float(&["4", "6"]),
            Mask::Float(d) if d[1] == "3" => Mask::Float(&["2", "3", "4", "6"]),
            Mask::Float(d) if d[0] == "1" => Mask::Float(&["1", "1", "4", "6"]),
            Mask::Float(_) => Mask::Float(&["2", "1", "1", "6"]),
            Mask::Bool(d) if d.len() == 2 => Mask::Bool(&["4", "6"]),
            Mask::Bool(d) if d[1] == "3" => Mask::Bool(&["2", "3", "4", "6"]),
            Mask::Bool(_) => Mask::Bool(&["2", "1", "1", "6"]),
            m => m,
        };
        let e = Export { project: false, l: 4, s: 6, ..Export::new(scale, mask) };
        compared += check_values(&format!("{e:?}"), &e.graph(), 1, native, 100 + ci as u64);
    }
    for (ci, (e, _, _, with_mask)) in large_cases().into_iter().enumerate() {
        if with_mask == masked {
            compared += check_values(&format!("{e:?}"), &e.graph(), 1, native, 200 + ci as u64);
        }
    }
    eprintln!("{compared} outputs compared");
}

#[test]
fn exporter_forms_recovered_meet_the_tolerance_table() {
    export_values(false, true);
}

#[test]
fn exporter_forms_masked_recovered_meet_the_tolerance_table_on_the_reference_executor() {
    export_values(true, false);
}

#[test]
fn exporter_forms_native_masked_meet_the_tolerance_table() {
    export_values(true, true);
}

// ---------------------------------------------------------------------------------------------
// The text fixture

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/models/attention_exporter.lad");

#[test]
fn the_exporter_fixture_is_recovered_and_explained_by_the_cli() {
    let text = std::fs::read_to_string(FIXTURE).unwrap();
    let g = parse(&text);
    let (s, r) = one_attention(&g);
    assert_eq!(arg_names(&s, &r.matches[0]), ["q", "permute(ki, [0, 2, 1, 3])", "v", "mask"]);
    assert_eq!(attrs_of(&r.matches[0]), (false, 0.5, false));

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ladder"))
        .args(["dump", FIXTURE, "--stage", "recovered", "--explain"])
        .output()
        .expect("the ladder binary runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let line = "%o = scaled_dot_product_attention(%q, permute(%ki, [0, 2, 1, 3]), %v, %mask) \
                {causal=false, scale=0.5, safe_softmax=false}: rule `attention_onnx_div`";
    assert!(stdout.contains("; recovery: 1 match(es), 0 near-miss(es)"), "{stdout}");
    assert!(stdout.contains(line), "{stdout}");
    // The recovered graph itself: the op on a permute of the keys, and no softmax left.
    assert!(stdout.contains("scaled_dot_product_attention("), "{stdout}");
    assert!(!stdout.contains("exp(") && !stdout.contains("softmax("), "{stdout}");
}

/// Exporter cases too large for constant folding (more than 4096 elements): the broadcasts
/// of scalars and masks stay in the graph, and the forms still match.
fn large_cases() -> Vec<(Export, &'static str, bool, bool)> {
    let big = |scale, mask, l, s| Export { project: false, l, s, ..Export::new(scale, mask) };
    vec![
        // (model, rule, causal, masked)
        (big(Scale::Div, Mask::Causal, 40, 70), "attention_onnx_div", true, false),
        (big(Scale::Mul(0.3), Mask::Float(&["2", "1", "1", "130"]), 70, 130), "attention_onnx_mul", false, true),
        (big(Scale::Pre(0.3), Mask::Bool(&["70", "130"]), 70, 130), "attention_onnx_prescaled", false, true),
        (big(Scale::Div, Mask::Bool(&["2", "1", "1", "130"]), 70, 130), "attention_onnx_div", false, true),
        // A causal bias of more than 4096 elements is not folded at import: it is recovered
        // as the float mask it computes.
        (big(Scale::Qk, Mask::Causal, 70, 130), "attention_onnx_qk_scaled", false, true),
    ]
}

#[test]
fn large_exporter_forms_come_back() {
    for (e, rule, causal, masked) in large_cases() {
        let (s, r) = one_attention(&e.graph());
        let m = &r.matches[0];
        assert_eq!(m.rule, rule, "{e:?}");
        assert_eq!(m.args.len(), 3 + usize::from(masked), "{e:?}: {}", r.explain(&s));
        assert_eq!(attrs_of(m).0, causal, "{e:?}");
        assert_eq!(&arg_names(&s, m)[..3], ["q", "permute(ki, [0, 2, 1, 3])", "v"]);
    }
}
