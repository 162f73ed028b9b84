//! ONNX `Attention` and `RotaryEmbedding` on small models built in code: hand-computed values
//! on the interpreter and on the graph lowered to prims, the mapping choices (grouped heads,
//! causal alignment with a past, short masks, padding lengths, softcap, the qk output modes,
//! rows with nothing to attend), empty and size-1 dims, and bad models as typed errors. Also
//! `scaled_dot_product_attention`'s `safe_softmax` flag that the import relies on.

use ladder::frontend::onnx::proto::{AttributeProto, TensorProto};
use ladder::frontend::onnx::{import, ImportError, ImportOptions, NodeError};
use ladder::interp::{self, Options};
use ladder::{Graph, Tensor};

use crate::common;
use crate::decomp_util;
use crate::onnx_build::*;

fn imp(bytes: &[u8]) -> Graph {
    import(bytes, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

fn import_err(bytes: &[u8]) -> NodeError {
    match import(bytes, &ImportOptions::default()) {
        Err(ImportError::Node { error, .. }) => error,
        Err(e) => panic!("expected a node error, got {e}"),
        Ok(g) => panic!("expected a node error, got\n{}", ladder::text::print(&g)),
    }
}

/// Every output on the interpreter, and on the graph lowered to prims (f32 mode both).
fn run_both(g: &Graph, inputs: &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>) {
    let hi = interp::run(g, inputs, &Options::default()).unwrap_or_else(|e| panic!("run failed: {e}")).outputs;
    let f = ladder::passes::functionalize(g).unwrap_or_else(|e| panic!("functionalize: {e}"));
    let p = ladder::passes::decompose(&f.graph).unwrap_or_else(|e| panic!("decompose: {e}"));
    let lo = interp::run(&p, inputs, &Options::default()).unwrap_or_else(|e| panic!("prims run failed: {e}")).outputs;
    (hi, lo)
}

fn tb(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::from_bool(shape, v.to_vec()).unwrap()
}

/// Output `i` checked on both the interpreter and the prims lowering.
#[track_caller]
fn check(g: &Graph, inputs: &[Tensor], i: usize, shape: &[usize], want: &[f64]) {
    let (hi, lo) = run_both(g, inputs);
    close(&hi[i], shape, want);
    close(&lo[i], shape, want);
}

/// One `op` node with typed inputs (`""` for an absent optional input), outputs by name.
fn model(
    op: &str,
    ins: &[(&str, i32, &[&str])],
    inputs_used: &[&str],
    outs: &[&str],
    attrs: Vec<AttributeProto>,
    opset: i64,
    inits: Vec<TensorProto>,
) -> Vec<u8> {
    let inputs = ins.iter().map(|(n, e, d)| vi(n, *e, d)).collect();
    let n = node(op, inputs_used, outs, attrs);
    let outputs = outs.iter().filter(|o| !o.is_empty()).map(|o| vi(o, FLOAT, &[])).collect();
    encode(&model_proto(graph(vec![n], inputs, outputs, inits), opset))
}

/// A 4-D attention over Q [1, 1, L, D], K [1, 1, S, D], V [1, 1, S, Dv] (plus extra inputs).
fn attn4(l: &str, s: &str, d: &str, dv: &str, extra: &[(&str, i32, &[&str])], attrs: Vec<AttributeProto>) -> Vec<u8> {
    let mut ins: Vec<(&str, i32, &[&str])> = Vec::new();
    let (qd, kd, vd) = (["1", "1", l, d], ["1", "1", s, d], ["1", "1", s, dv]);
    ins.push(("q", FLOAT, &qd));
    ins.push(("k", FLOAT, &kd));
    ins.push(("v", FLOAT, &vd));
    ins.extend_from_slice(extra);
    let names: Vec<&str> = ins.iter().map(|i| i.0).collect();
    model("Attention", &ins, &names, &["y"], attrs, 23, vec![])
}

// ---------------------------------------------------------------------------------------------
// Attention

#[test]
fn attention_hand_values() {
    // One query [1, 0] against keys [1, 0] and [0, 0] with scale ln 3: scores [ln 3, 0],
    // weights [3/4, 1/4], so the output is 0.75 * 2 + 0.25 * 4 = 2.5.
    let g = imp(&attn4("1", "2", "2", "1", &[], vec![a_float("scale", 3f32.ln())]));
    let ins = [t(&[1, 1, 1, 2], &[1., 0.]), t(&[1, 1, 2, 2], &[1., 0., 0., 0.]), t(&[1, 1, 2, 1], &[2., 4.])];
    check(&g, &ins, 0, &[1, 1, 1, 1], &[2.5]);
    // The default scale is 1/sqrt(D): q.k = 2 with D = 4 gives the same scores as scale 1 with
    // q.k = 1; here scores [1, 0], weights e/(e+1), 1/(e+1).
    let g = imp(&attn4("1", "2", "4", "1", &[], vec![]));
    let ins = [
        t(&[1, 1, 1, 4], &[1., 1., 0., 0.]),
        t(&[1, 1, 2, 4], &[1., 1., 0., 0., 0., 0., 0., 0.]),
        t(&[1, 1, 2, 1], &[1., 0.]),
    ];
    let e = std::f64::consts::E;
    check(&g, &ins, 0, &[1, 1, 1, 1], &[e / (e + 1.0)]);
}

#[test]
fn attention_masks_short_bool_and_all_masked_rows() {
    // Zero queries: uniform weights over what the mask keeps. V = [1, 2, 4].
    let ins = |m: Tensor| {
        vec![t(&[1, 1, 2, 1], &[0., 0.]), t(&[1, 1, 3, 1], &[0., 0., 0.]), t(&[1, 1, 3, 1], &[1., 2., 4.]), m]
    };
    // A bool mask: row 0 keeps keys 0 and 2, row 1 keeps nothing (NaN, as ONNX's softmax).
    let g = imp(&attn4("2", "3", "1", "1", &[("m", BOOL, &["2", "3"])], vec![]));
    check(&g, &ins(tb(&[2, 3], &[true, false, true, false, false, false])), 0, &[1, 1, 2, 1], &[2.5, f64::NAN]);
    // A float mask shorter than S is padded with -inf: only keys 0 and 1 take part.
    let g = imp(&attn4("2", "3", "1", "1", &[("m", FLOAT, &["1", "2"])], vec![]));
    check(&g, &ins(t(&[1, 2], &[0., 0.])), 0, &[1, 1, 2, 1], &[1.5, 1.5]);
    // A short bool mask is padded with false; a float mask of -inf everywhere is NaN too.
    let g = imp(&attn4("2", "3", "1", "1", &[("m", BOOL, &["2", "1"])], vec![]));
    check(&g, &ins(tb(&[2, 1], &[true, false])), 0, &[1, 1, 2, 1], &[1.0, f64::NAN]);
    let g = imp(&attn4("2", "3", "1", "1", &[("m", FLOAT, &["3"])], vec![]));
    let ninf = f32::NEG_INFINITY;
    check(&g, &ins(t(&[3], &[ninf, ninf, ninf])), 0, &[1, 1, 2, 1], &[f64::NAN, f64::NAN]);
    // A float mask adds to the scores: ln 3 on key 2 gives weights [1/5, 1/5, 3/5].
    check(&g, &ins(t(&[3], &[0., 0., 3f32.ln()])), 0, &[1, 1, 2, 1], &[3.0, 3.0]);
}

#[test]
fn attention_causal_with_and_without_past() {
    // Without a past: row i keeps keys 0..=i (top-left). V = [1, 2, 4].
    let g = imp(&attn4("2", "3", "1", "1", &[], vec![a_int("is_causal", 1)]));
    let ins = [t(&[1, 1, 2, 1], &[0., 0.]), t(&[1, 1, 3, 1], &[0., 0., 0.]), t(&[1, 1, 3, 1], &[1., 2., 4.])];
    check(&g, &ins, 0, &[1, 1, 2, 1], &[1.0, 1.5]);
    // With a past of 1: K = past ++ new (S = 3), row i keeps keys 0..=i+1; the present
    // outputs are the concatenations.
    let q = ["1", "1", "2", "1"];
    let kv = ["1", "1", "2", "1"];
    let past = ["1", "1", "1", "1"];
    let bytes = model(
        "Attention",
        &[("q", FLOAT, &q), ("k", FLOAT, &kv), ("v", FLOAT, &kv), ("pk", FLOAT, &past), ("pv", FLOAT, &past)],
        &["q", "k", "v", "", "pk", "pv"],
        &["y", "present_k", "present_v"],
        vec![a_int("is_causal", 1)],
        23,
        vec![],
    );
    let g = imp(&bytes);
    let ins = [
        t(&[1, 1, 2, 1], &[0., 0.]),
        t(&[1, 1, 2, 1], &[5., 6.]),
        t(&[1, 1, 2, 1], &[2., 4.]),
        t(&[1, 1, 1, 1], &[0.]),
        t(&[1, 1, 1, 1], &[1.]),
    ];
    check(&g, &ins, 0, &[1, 1, 2, 1], &[1.5, 7.0 / 3.0]);
    check(&g, &ins, 1, &[1, 1, 3, 1], &[0., 5., 6.]);
    check(&g, &ins, 2, &[1, 1, 3, 1], &[1., 2., 4.]);
}

#[test]
fn attention_grouped_heads_read_their_group() {
    // 4 query heads over 2 key/value heads: heads 0, 1 read kv head 0, heads 2, 3 kv head 1
    // (not 0, 1, 0, 1). Zero queries average V: kv0 = [1, 3] -> 2, kv1 = [10, 30] -> 20.
    let bytes = model(
        "Attention",
        &[
            ("q", FLOAT, &["1", "4", "1", "1"]),
            ("k", FLOAT, &["1", "2", "2", "1"]),
            ("v", FLOAT, &["1", "2", "2", "1"]),
        ],
        &["q", "k", "v"],
        &["y"],
        vec![],
        23,
        vec![],
    );
    let g = imp(&bytes);
    let ins = [t(&[1, 4, 1, 1], &[0.; 4]), t(&[1, 2, 2, 1], &[0.; 4]), t(&[1, 2, 2, 1], &[1., 3., 10., 30.])];
    check(&g, &ins, 0, &[1, 4, 1, 1], &[2., 2., 20., 20.]);
    // The same through the composed path (softcap) and with a per-head mask [1, 4, 1, 2] that
    // hides key 1 from heads 1 and 3.
    let bytes = model(
        "Attention",
        &[
            ("q", FLOAT, &["1", "4", "1", "1"]),
            ("k", FLOAT, &["1", "2", "2", "1"]),
            ("v", FLOAT, &["1", "2", "2", "1"]),
            ("m", BOOL, &["1", "4", "1", "2"]),
        ],
        &["q", "k", "v", "m"],
        &["y"],
        vec![a_float("softcap", 5.0)],
        23,
        vec![],
    );
    let g = imp(&bytes);
    let mut ins = ins.to_vec();
    ins.push(tb(&[1, 4, 1, 2], &[true, true, true, false, true, true, true, false]));
    check(&g, &ins, 0, &[1, 4, 1, 1], &[2., 1., 20., 10.]);
}

#[test]
fn attention_3d_inputs_split_and_merge_heads() {
    // Q [1, 1, 4] with 2 heads of size 2; K, V [1, 2, 4] with 2 heads. Zero queries average
    // each head's values: V rows [1, 2, 3, 4] and [3, 4, 5, 6] give [2, 3, 4, 5].
    let bytes = model(
        "Attention",
        &[("q", FLOAT, &["1", "1", "4"]), ("k", FLOAT, &["1", "2", "4"]), ("v", FLOAT, &["1", "2", "4"])],
        &["q", "k", "v"],
        &["y"],
        vec![a_int("q_num_heads", 2), a_int("kv_num_heads", 2)],
        23,
        vec![],
    );
    let g = imp(&bytes);
    let ins = [t(&[1, 1, 4], &[0.; 4]), t(&[1, 2, 4], &[0.; 8]), t(&[1, 2, 4], &[1., 2., 3., 4., 3., 4., 5., 6.])];
    check(&g, &ins, 0, &[1, 1, 4], &[2., 3., 4., 5.]);
    // Head 1's query picks its key: q head 1 = [10, 0] against keys [1, 0] and [0, 0] (head 1
    // of each K row) with scale 1: weights [e^10, 1] / (e^10 + 1) on V's head 1.
    let bytes = model(
        "Attention",
        &[("q", FLOAT, &["1", "1", "4"]), ("k", FLOAT, &["1", "2", "4"]), ("v", FLOAT, &["1", "2", "4"])],
        &["q", "k", "v"],
        &["y"],
        vec![a_int("q_num_heads", 2), a_int("kv_num_heads", 2), a_float("scale", 1.0)],
        23,
        vec![],
    );
    let g = imp(&bytes);
    let ins = [
        t(&[1, 1, 4], &[0., 0., 10., 0.]),
        t(&[1, 2, 4], &[0., 0., 1., 0., 0., 0., 0., 0.]),
        t(&[1, 2, 4], &[1., 2., 3., 4., 3., 4., 5., 6.]),
    ];
    let w = 1.0 / (1.0 + (-10f64).exp());
    check(&g, &ins, 0, &[1, 1, 4], &[2., 3., 3. * w + 5. * (1. - w), 4. * w + 6. * (1. - w)]);
}

#[test]
fn attention_softcap_and_qk_outputs() {
    // D = 1, scale 1: the product is [2, 0]; softcap 1 makes it [tanh 2, 0]; the mask adds
    // [0, 0.5]. V = [1, 0], so the output is the first weight.
    let capped = 2f64.tanh();
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let ins =
        [t(&[1, 1, 1, 1], &[2.]), t(&[1, 1, 2, 1], &[1., 0.]), t(&[1, 1, 2, 1], &[1., 0.]), t(&[1, 2], &[0., 0.5])];
    for (mode, softcap, want_y, want_qk) in [
        (0, 0.0, sigmoid(1.5), [2.0, 0.0]),
        (1, 1.0, sigmoid(capped - 0.5), [capped, 0.0]),
        (2, 1.0, sigmoid(capped - 0.5), [capped, 0.5]),
        (3, 0.0, sigmoid(1.5), [sigmoid(1.5), sigmoid(-1.5)]),
    ] {
        let ins_all: [(&str, i32, &[&str]); 4] = [
            ("q", FLOAT, &["1", "1", "1", "1"]),
            ("k", FLOAT, &["1", "1", "2", "1"]),
            ("v", FLOAT, &["1", "1", "2", "1"]),
            ("m", FLOAT, &["1", "2"]),
        ];
        let mut attrs = vec![a_float("scale", 1.0), a_int("qk_matmul_output_mode", mode)];
        if softcap > 0.0 {
            attrs.push(a_float("softcap", softcap as f32));
        }
        let bytes = model("Attention", &ins_all, &["q", "k", "v", "m"], &["y", "", "", "qk"], attrs, 23, vec![]);
        let g = imp(&bytes);
        check(&g, &ins, 0, &[1, 1, 1, 1], &[want_y]);
        check(&g, &ins, 1, &[1, 1, 1, 2], &want_qk);
    }
    // Softcap keeps a -inf mask entry -inf (it is applied before the mask).
    let bytes =
        attn4("1", "2", "1", "1", &[("m", FLOAT, &["1", "2"])], vec![a_float("softcap", 1.0), a_float("scale", 1.0)]);
    let g = imp(&bytes);
    let ins = [
        t(&[1, 1, 1, 1], &[2.]),
        t(&[1, 1, 2, 1], &[1., 0.]),
        t(&[1, 1, 2, 1], &[3., 5.]),
        t(&[1, 2], &[f32::NEG_INFINITY, 0.]),
    ];
    check(&g, &ins, 0, &[1, 1, 1, 1], &[5.0]);
}

#[test]
fn attention_nonpad_kv_seqlen() {
    // Opset 24: batch 0 sees 1 key, batch 1 sees 2 of 3. V = [1, 2, 4] in both batches.
    let bytes = model(
        "Attention",
        &[
            ("q", FLOAT, &["2", "1", "1", "1"]),
            ("k", FLOAT, &["2", "1", "3", "1"]),
            ("v", FLOAT, &["2", "1", "3", "1"]),
            ("n", INT64, &["2"]),
        ],
        &["q", "k", "v", "", "", "", "n"],
        &["y"],
        vec![],
        24,
        vec![],
    );
    let g = imp(&bytes);
    let ins = [
        t(&[2, 1, 1, 1], &[0.; 2]),
        t(&[2, 1, 3, 1], &[0.; 6]),
        t(&[2, 1, 3, 1], &[1., 2., 4., 1., 2., 4.]),
        ti(&[2], &[1, 2]),
    ];
    check(&g, &ins, 0, &[2, 1, 1, 1], &[1.0, 1.5]);
}

#[test]
fn attention_softmax_precision_and_scale_paths() {
    let ins = [t(&[1, 1, 1, 2], &[1., 0.]), t(&[1, 1, 2, 2], &[1., 0., 0., 0.]), t(&[1, 1, 2, 1], &[2., 4.])];
    // Softmax in f16 for f32 operands takes the composed path: close to 2.5 at f16 precision.
    let g = imp(&attn4("1", "2", "2", "1", &[], vec![a_float("scale", 3f32.ln()), a_int("softmax_precision", 10)]));
    let (hi, lo) = run_both(&g, &ins);
    for y in [&hi[0], &lo[0]] {
        assert!((y.to_f64_vec()[0] - 2.5).abs() < 2e-3, "{:?}", y.to_f64_vec());
    }
    // A negative scale is sqrt(scale) = NaN on each operand, as the function body computes.
    let g = imp(&attn4("1", "2", "2", "1", &[], vec![a_float("scale", -1.0)]));
    check(&g, &ins, 0, &[1, 1, 1, 1], &[f64::NAN]);
}

#[test]
fn attention_empty_and_size_one_dims() {
    // S = 0: nothing to attend and nothing to sum: zeros (an empty product), not NaN.
    let g = imp(&attn4("2", "0", "2", "3", &[], vec![]));
    let ins = [t(&[1, 1, 2, 2], &[1., 2., 3., 4.]), t(&[1, 1, 0, 2], &[]), t(&[1, 1, 0, 3], &[])];
    check(&g, &ins, 0, &[1, 1, 2, 3], &[0.; 6]);
    // L = 0: an empty result.
    let g = imp(&attn4("0", "2", "2", "1", &[], vec![a_int("is_causal", 1)]));
    let ins = [t(&[1, 1, 0, 2], &[]), t(&[1, 1, 2, 2], &[0.; 4]), t(&[1, 1, 2, 1], &[1., 2.])];
    check(&g, &ins, 0, &[1, 1, 0, 1], &[]);
    // A single key: its value, whatever the score (NaN-free inputs).
    let g = imp(&attn4("1", "1", "1", "1", &[], vec![]));
    let ins = [t(&[1, 1, 1, 1], &[1e3]), t(&[1, 1, 1, 1], &[-7.]), t(&[1, 1, 1, 1], &[42.])];
    check(&g, &ins, 0, &[1, 1, 1, 1], &[42.]);
    // NaN in a score poisons its row only.
    let g = imp(&attn4("2", "2", "1", "1", &[], vec![]));
    let ins = [t(&[1, 1, 2, 1], &[f32::NAN, 0.]), t(&[1, 1, 2, 1], &[1., 1.]), t(&[1, 1, 2, 1], &[1., 3.])];
    check(&g, &ins, 0, &[1, 1, 2, 1], &[f64::NAN, 2.0]);
}

#[test]
fn attention_symbolic_batch_and_lengths() {
    let bytes = model(
        "Attention",
        &[
            ("q", FLOAT, &["b", "2", "l", "1"]),
            ("k", FLOAT, &["b", "2", "s", "1"]),
            ("v", FLOAT, &["b", "2", "s", "1"]),
        ],
        &["q", "k", "v"],
        &["y"],
        vec![a_int("is_causal", 1)],
        23,
        vec![],
    );
    let g = imp(&bytes);
    let ins = [t(&[1, 2, 2, 1], &[0.; 4]), t(&[1, 2, 2, 1], &[0.; 4]), t(&[1, 2, 2, 1], &[1., 3., 5., 7.])];
    check(&g, &ins, 0, &[1, 2, 2, 1], &[1., 2., 5., 6.]);
}

#[test]
fn attention_bad_models_are_typed_errors() {
    let invalid = |bytes: Vec<u8>, what: &str| match import_err(&bytes) {
        NodeError::Invalid(m) => assert!(m.contains(what), "{m}"),
        e => panic!("expected Invalid({what}), got {e}"),
    };
    let q3: (&str, i32, &[&str]) = ("q", FLOAT, &["1", "2", "4"]);
    let k3: (&str, i32, &[&str]) = ("k", FLOAT, &["1", "2", "4"]);
    let v3: (&str, i32, &[&str]) = ("v", FLOAT, &["1", "2", "4"]);
    let m3 = |attrs| model("Attention", &[q3, k3, v3], &["q", "k", "v"], &["y"], attrs, 23, vec![]);
    invalid(m3(vec![]), "q_num_heads");
    invalid(m3(vec![a_int("q_num_heads", 3), a_int("kv_num_heads", 2)]), "not a multiple");
    invalid(m3(vec![a_int("q_num_heads", 0), a_int("kv_num_heads", 2)]), "positive");
    // 4 query heads of size 1 over 2 kv heads of size 2: head sizes disagree.
    invalid(m3(vec![a_int("q_num_heads", 4), a_int("kv_num_heads", 2)]), "head size");
    invalid(attn4("1", "2", "2", "1", &[], vec![a_int("is_causal", 2)]), "is_causal");
    invalid(attn4("1", "2", "2", "1", &[], vec![a_int("qk_matmul_output_mode", 4)]), "qk_matmul_output_mode");
    invalid(attn4("1", "2", "2", "1", &[], vec![a_int("softmax_precision", 7)]), "softmax_precision");
    invalid(attn4("1", "2", "2", "1", &[], vec![a_float("softcap", -1.0)]), "softcap");
    invalid(attn4("1", "2", "2", "1", &[("m", FLOAT, &["1", "3"])], vec![]), "longer");
    invalid(attn4("1", "2", "2", "1", &[("m", INT64, &["1", "2"])], vec![]), "attn_mask");
    // Mixed ranks, GQA that does not divide, a past without its value half.
    invalid(
        model(
            "Attention",
            &[("q", FLOAT, &["1", "1", "1", "2"]), k3, ("v", FLOAT, &["1", "1", "2", "1"])],
            &["q", "k", "v"],
            &["y"],
            vec![],
            23,
            vec![],
        ),
        "3-D or all 4-D",
    );
    invalid(
        model(
            "Attention",
            &[
                ("q", FLOAT, &["1", "3", "1", "2"]),
                ("k", FLOAT, &["1", "2", "1", "2"]),
                ("v", FLOAT, &["1", "2", "1", "2"]),
            ],
            &["q", "k", "v"],
            &["y"],
            vec![],
            23,
            vec![],
        ),
        "multiple",
    );
    invalid(
        attn4("1", "2", "2", "1", &[("m", FLOAT, &["1", "2"]), ("pk", FLOAT, &["1", "1", "1", "2"])], vec![]),
        "together",
    );
    // nonpad_kv_seqlen does not exist at opset 23.
    let bytes = model(
        "Attention",
        &[
            ("q", FLOAT, &["1", "1", "1", "1"]),
            ("k", FLOAT, &["1", "1", "1", "1"]),
            ("v", FLOAT, &["1", "1", "1", "1"]),
            ("n", INT64, &["1"]),
        ],
        &["q", "k", "v", "", "", "", "n"],
        &["y"],
        vec![],
        23,
        vec![],
    );
    invalid(bytes, "at most 6 inputs");
    // Unsupported, with the reason: mode 0 with softcap (spec and reference disagree), a
    // causal mask behind a past of symbolic length.
    let bytes = model(
        "Attention",
        &[
            ("q", FLOAT, &["1", "1", "1", "1"]),
            ("k", FLOAT, &["1", "1", "2", "1"]),
            ("v", FLOAT, &["1", "1", "2", "1"]),
        ],
        &["q", "k", "v"],
        &["y", "", "", "qk"],
        vec![a_float("softcap", 2.0)],
        23,
        vec![],
    );
    assert!(matches!(import_err(&bytes), NodeError::Unsupported(m) if m.contains("softcap")));
    let bytes = model(
        "Attention",
        &[
            ("q", FLOAT, &["1", "1", "1", "1"]),
            ("k", FLOAT, &["1", "1", "1", "1"]),
            ("v", FLOAT, &["1", "1", "1", "1"]),
            ("pk", FLOAT, &["1", "1", "p", "1"]),
            ("pv", FLOAT, &["1", "1", "p", "1"]),
        ],
        &["q", "k", "v", "", "pk", "pv"],
        &["y"],
        vec![a_int("is_causal", 1)],
        23,
        vec![],
    );
    assert!(matches!(import_err(&bytes), NodeError::NeedsStatic(m) if m.contains("past length")));
}

// ---------------------------------------------------------------------------------------------
// scaled_dot_product_attention {safe_softmax}

#[test]
fn sdpa_safe_softmax_flag() {
    use decomp_util::{boolt, case, f32t, graph, Tol};
    let sig = "%q: f32[2, 1], %k: f32[2, 1], %v: f32[2, 1], %m: bool[2, 2]";
    let ins = [
        f32t(&[2, 1], &[0., 0.]),
        f32t(&[2, 1], &[0., 0.]),
        f32t(&[2, 1], &[1., 3.]),
        boolt(&[2, 2], &[true, true, false, false]),
    ];
    let safe = common::run1(&graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m)"), &ins);
    assert_eq!(safe, vec![2.0, 0.0]);
    let plain = graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m) {safe_softmax=false}");
    let y = common::run1(&plain, &ins);
    assert_eq!(y[0], 2.0);
    assert!(y[1].is_nan());
    case("sdpa plain softmax", &plain, &ins, Tol { atol: 1e-6, rtol: 1e-6 });
    // S = 0 sums nothing: zeros either way.
    let sig0 = "%q: f32[2, 1], %k: f32[0, 1], %v: f32[0, 3]";
    let ins0 = [f32t(&[2, 1], &[1., 2.]), f32t(&[0, 1], &[]), f32t(&[0, 3], &[])];
    let empty = graph(sig0, "scaled_dot_product_attention(%q, %k, %v) {safe_softmax=false}");
    assert_eq!(common::run1(&empty, &ins0), vec![0.0; 6]);
    case("sdpa plain softmax S=0", &empty, &ins0, Tol { atol: 0.0, rtol: 0.0 });
}

// ---------------------------------------------------------------------------------------------
// RotaryEmbedding

fn rotary(x: &[&str], cache: &[&str], pos: Option<&[&str]>, attrs: Vec<AttributeProto>) -> Vec<u8> {
    let mut ins: Vec<(&str, i32, &[&str])> = vec![("x", FLOAT, x), ("cos", FLOAT, cache), ("sin", FLOAT, cache)];
    if let Some(p) = pos {
        ins.push(("pos", INT64, p));
    }
    let names: Vec<&str> = ins.iter().map(|i| i.0).collect();
    model("RotaryEmbedding", &ins, &names, &["y"], attrs, 23, vec![])
}

#[test]
fn rotary_embedding_hand_values() {
    // x = [1, 2, 3, 4], cos = [0, 1], sin = [1, 0]. Halves: x1 = [1, 2], x2 = [3, 4]:
    // real = cos x1 - sin x2 = [-3, 2], imag = sin x1 + cos x2 = [1, 4].
    let x = t(&[1, 1, 1, 4], &[1., 2., 3., 4.]);
    let (c, s) = (t(&[1, 1, 2], &[0., 1.]), t(&[1, 1, 2], &[1., 0.]));
    let g = imp(&rotary(&["1", "1", "1", "4"], &["1", "1", "2"], None, vec![]));
    check(&g, &[x.clone(), c.clone(), s.clone()], 0, &[1, 1, 1, 4], &[-3., 2., 1., 4.]);
    // Interleaved pairs: x1 = [1, 3], x2 = [2, 4]: real = [-2, 3], imag = [1, 4], interleaved.
    let g = imp(&rotary(&["1", "1", "1", "4"], &["1", "1", "2"], None, vec![a_int("interleaved", 1)]));
    check(&g, &[x.clone(), c, s], 0, &[1, 1, 1, 4], &[-2., 1., 3., 4.]);
    // Rotating only the first 2 features: [1, 2] -> [-2, 1] with cos 0, sin 1; the rest stays.
    let (c1, s1) = (t(&[1, 1, 1], &[0.]), t(&[1, 1, 1], &[1.]));
    for inter in [0, 1] {
        let g = imp(&rotary(
            &["1", "1", "1", "4"],
            &["1", "1", "1"],
            None,
            vec![a_int("rotary_embedding_dim", 2), a_int("interleaved", inter)],
        ));
        check(&g, &[x.clone(), c1.clone(), s1.clone()], 0, &[1, 1, 1, 4], &[-2., 1., 3., 4.]);
    }
}

#[test]
fn rotary_embedding_positions_heads_and_3d() {
    // Caches of 3 positions; position ids pick rows per (batch, seq). Row 0 is the identity,
    // row 2 a quarter turn (cos 0, sin 1).
    let c = t(&[3, 1], &[1., 0.5, 0.]);
    let s = t(&[3, 1], &[0., 0.5, 1.]);
    // 4-D [B=1, H=2, S=2, D=2]: positions [2, 0].
    let g = imp(&rotary(&["1", "2", "2", "2"], &["3", "1"], Some(&["1", "2"]), vec![]));
    let x = t(&[1, 2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    check(&g, &[x, c.clone(), s.clone(), ti(&[1, 2], &[2, 0])], 0, &[1, 2, 2, 2], &[-2., 1., 3., 4., -6., 5., 7., 8.]);
    // 3-D [B=1, S=2, hidden=4] with 2 heads: positions [0, 2] rotate the second token's heads.
    let g = imp(&rotary(&["1", "2", "4"], &["3", "1"], Some(&["1", "2"]), vec![a_int("num_heads", 2)]));
    let x = t(&[1, 2, 4], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    check(&g, &[x, c, s, ti(&[1, 2], &[0, 2])], 0, &[1, 2, 4], &[1., 2., 3., 4., -6., 5., -8., 7.]);
}

#[test]
fn rotary_embedding_errors() {
    let invalid = |bytes: Vec<u8>, what: &str| match import_err(&bytes) {
        NodeError::Invalid(m) => assert!(m.contains(what), "{m}"),
        e => panic!("expected Invalid({what}), got {e}"),
    };
    invalid(rotary(&["1", "1", "1", "4"], &["1", "1", "1"], None, vec![a_int("rotary_embedding_dim", 3)]), "even");
    invalid(rotary(&["1", "1", "1", "4"], &["1", "1", "1"], None, vec![a_int("rotary_embedding_dim", 6)]), "at most");
    invalid(rotary(&["1", "1", "1", "4"], &["1", "1", "3"], None, vec![]), "rotary_embedding_dim / 2");
    invalid(rotary(&["1", "2", "4"], &["1", "2", "2"], None, vec![]), "num_heads");
    invalid(rotary(&["1", "2", "4"], &["1", "2", "2"], None, vec![a_int("num_heads", 3)]), "multiple");
    invalid(rotary(&["1", "1", "1", "4"], &["1", "1", "2"], Some(&["1", "1"]), vec![]), "2-D");
    invalid(rotary(&["1", "1", "1", "4"], &["3", "2"], None, vec![]), "3-D");
    invalid(rotary(&["4"], &["3", "2"], None, vec![]), "rank");
    // A position id past the cache is a run-time index error, not a panic.
    let g = imp(&rotary(&["1", "1", "1", "2"], &["2", "1"], Some(&["1", "1"]), vec![]));
    let ins = [t(&[1, 1, 1, 2], &[1., 2.]), t(&[2, 1], &[1., 1.]), t(&[2, 1], &[0., 0.]), ti(&[1, 1], &[5])];
    assert!(interp::run(&g, &ins, &Options::default()).is_err());
    let ins = [t(&[1, 1, 1, 2], &[1., 2.]), t(&[2, 1], &[1., 1.]), t(&[2, 1], &[0., 0.]), ti(&[1, 1], &[-1])];
    assert!(interp::run(&g, &ins, &Options::default()).is_err());
}

// ---------------------------------------------------------------------------------------------
// CausalConvWithState

fn causal_conv(l: &str, k: &str, bias: bool, past: bool, attrs: Vec<AttributeProto>) -> Vec<u8> {
    let mut ins: Vec<(&str, i32, &[&str])> = vec![("x", FLOAT, &["1", "1", "?"]), ("w", FLOAT, &["1", "1", "?"])];
    let (xd, wd, sd) = (["1", "1", l], ["1", "1", k], ["1", "1", "1"]);
    ins[0].2 = &xd;
    ins[1].2 = &wd;
    let mut names = vec!["x", "w"];
    if bias {
        ins.push(("b", FLOAT, &["1"]));
        names.push("b");
    } else {
        names.push("");
    }
    if past {
        ins.push(("p", FLOAT, &sd));
        names.push("p");
    }
    model("CausalConvWithState", &ins, &names, &["y", "state"], attrs, 27, vec![])
}

#[test]
fn causal_conv_hand_values() {
    // x = [1, 2, 3], kernel [10, 1]: zero-padded [0, 1, 2, 3] gives [1, 12, 23]; the state is
    // the last k - 1 = 1 value of the padded sequence.
    let (x, w) = (t(&[1, 1, 3], &[1., 2., 3.]), t(&[1, 1, 2], &[10., 1.]));
    let g = imp(&causal_conv("3", "2", false, false, vec![]));
    check(&g, &[x.clone(), w.clone()], 0, &[1, 1, 3], &[1., 12., 23.]);
    check(&g, &[x.clone(), w.clone()], 1, &[1, 1, 1], &[3.]);
    // A past state of 5 and a bias of 100.
    let g = imp(&causal_conv("3", "2", true, true, vec![]));
    let ins = [x.clone(), w.clone(), t(&[1], &[100.]), t(&[1, 1, 1], &[5.])];
    check(&g, &ins, 0, &[1, 1, 3], &[151., 112., 123.]);
    // SiLU (and its alias swish) on the result.
    for act in ["silu", "swish"] {
        let g = imp(&causal_conv("3", "2", false, false, vec![a_str("activation", act)]));
        let silu = |v: f64| v / (1.0 + (-v).exp());
        check(&g, &[x.clone(), w.clone()], 0, &[1, 1, 3], &[silu(1.), silu(12.), silu(23.)]);
    }
    // An empty input with a past: an empty output and the past as the new state.
    let g = imp(&causal_conv("0", "2", false, true, vec![]));
    let ins = [t(&[1, 1, 0], &[]), w.clone(), t(&[1, 1, 1], &[7.])];
    check(&g, &ins, 0, &[1, 1, 0], &[]);
    check(&g, &ins, 1, &[1, 1, 1], &[7.]);
    // Kernel size 1: a scaling, and an empty state.
    let g = imp(&causal_conv("3", "1", false, false, vec![]));
    let ins = [x, t(&[1, 1, 1], &[2.])];
    check(&g, &ins, 0, &[1, 1, 3], &[2., 4., 6.]);
    check(&g, &ins, 1, &[1, 1, 0], &[]);
}

#[test]
fn causal_conv_errors() {
    let invalid = |bytes: Vec<u8>, what: &str| match import_err(&bytes) {
        NodeError::Invalid(m) => assert!(m.contains(what), "{m}"),
        e => panic!("expected Invalid({what}), got {e}"),
    };
    invalid(causal_conv("3", "2", false, false, vec![a_str("activation", "relu")]), "activation");
    invalid(causal_conv("3", "0", false, false, vec![]), "k >= 1");
    // A past state that is not k - 1 long.
    invalid(causal_conv("3", "3", false, true, vec![]), "past_state");
    let bytes = model(
        "CausalConvWithState",
        &[("x", FLOAT, &["1", "2", "3"]), ("w", FLOAT, &["1", "1", "2"])],
        &["x", "w"],
        &["y"],
        vec![],
        27,
        vec![],
    );
    invalid(bytes, "weight");
}

// ---------------------------------------------------------------------------------------------
// LinearAttention

/// B = 1, T steps, one head of size 1 unless `qh` says otherwise (query hidden = qh).
fn linear_attn(rule: &str, t: &str, qh: i64, decay: bool, beta: bool, past: bool) -> Vec<u8> {
    let qd = qh.to_string();
    let (qs, ks, ss, hs) = (["1", t, qd.as_str()], ["1", t, "1"], ["1", "1", "1", "1"], ["1", t, "1"]);
    let mut ins: Vec<(&str, i32, &[&str])> = vec![("q", FLOAT, &qs), ("k", FLOAT, &ks), ("v", FLOAT, &ks)];
    let mut names = vec!["q", "k", "v"];
    for (on, name, dims) in [(past, "s", &ss[..]), (decay, "d", &hs[..]), (beta, "b", &hs[..])] {
        if on {
            ins.push((name, FLOAT, dims));
            names.push(name);
        } else {
            names.push("");
        }
    }
    let attrs = vec![a_str("update_rule", rule), a_int("q_num_heads", qh), a_int("kv_num_heads", 1)];
    model("LinearAttention", &ins, &names, &["y", "state"], attrs, 27, vec![])
}

#[test]
fn linear_attention_hand_values() {
    // k = [1, 2], v = [3, 4], q = [1, 10], scale 1/sqrt(1).
    let (q, k, v) = (t(&[1, 2, 1], &[1., 10.]), t(&[1, 2, 1], &[1., 2.]), t(&[1, 2, 1], &[3., 4.]));
    let half = t(&[1, 2, 1], &[0.5f32.ln(), 0.5f32.ln()]);
    let beta = t(&[1, 2, 1], &[1., 0.5]);
    // linear: S = 3, then 3 + 2*4 = 11.
    let g = imp(&linear_attn("linear", "2", 1, false, false, false));
    let ins = [q.clone(), k.clone(), v.clone()];
    check(&g, &ins, 0, &[1, 2, 1], &[3., 110.]);
    check(&g, &ins, 1, &[1, 1, 1, 1], &[11.]);
    // gated (decay ln 0.5): S = 3, then 1.5 + 8 = 9.5.
    let g = imp(&linear_attn("gated", "2", 1, true, false, false));
    check(&g, &[q.clone(), k.clone(), v.clone(), half.clone()], 0, &[1, 2, 1], &[3., 95.]);
    // delta (beta [1, 0.5]): v2' = 0.5 (4 - 2*3) = -1, S = 3 + 2*(-1) = 1.
    let g = imp(&linear_attn("delta", "2", 1, false, true, false));
    check(&g, &[q.clone(), k.clone(), v.clone(), beta.clone()], 0, &[1, 2, 1], &[3., 10.]);
    // gated_delta: S = 1.5 after decay, v2' = 0.5 (4 - 2*1.5) = 0.5, S = 2.5.
    let g = imp(&linear_attn("gated_delta", "2", 1, true, true, false));
    let ins = [q.clone(), k.clone(), v.clone(), half, beta];
    check(&g, &ins, 0, &[1, 2, 1], &[3., 25.]);
    check(&g, &ins, 1, &[1, 1, 1, 1], &[2.5]);
    // A past state of 10: S = 13 after one step.
    let g = imp(&linear_attn("linear", "1", 1, false, false, true));
    let ins = [t(&[1, 1, 1], &[1.]), t(&[1, 1, 1], &[1.]), t(&[1, 1, 1], &[3.]), t(&[1, 1, 1, 1], &[10.])];
    check(&g, &ins, 0, &[1, 1, 1], &[13.]);
    // Two query heads share the one key/value head: q = [1, 2] reads S = 3.
    let g = imp(&linear_attn("linear", "1", 2, false, false, false));
    let ins = [t(&[1, 1, 2], &[1., 2.]), t(&[1, 1, 1], &[1.]), t(&[1, 1, 1], &[3.])];
    check(&g, &ins, 0, &[1, 1, 2], &[3., 6.]);
    // T = 0: an empty output; the state is the (zero) initial state.
    let g = imp(&linear_attn("linear", "0", 1, false, false, false));
    let ins = [t(&[1, 0, 1], &[]), t(&[1, 0, 1], &[]), t(&[1, 0, 1], &[])];
    check(&g, &ins, 0, &[1, 0, 1], &[]);
    check(&g, &ins, 1, &[1, 1, 1, 1], &[0.]);
}

#[test]
fn linear_attention_errors() {
    let invalid = |bytes: Vec<u8>, what: &str| match import_err(&bytes) {
        NodeError::Invalid(m) => assert!(m.contains(what), "{m}"),
        e => panic!("expected Invalid({what}), got {e}"),
    };
    invalid(linear_attn("linear", "2", 1, true, false, false), "forbids the decay");
    invalid(linear_attn("gated", "2", 1, false, false, false), "needs the decay");
    invalid(linear_attn("delta", "2", 1, false, false, false), "needs the beta");
    invalid(linear_attn("softmax", "2", 1, false, false, false), "update_rule");
    // A symbolic or very long sequence: the recurrence is unrolled at import.
    for t in ["T", "513"] {
        match import_err(&linear_attn("linear", t, 1, false, false, false)) {
            NodeError::Unsupported(m) | NodeError::NeedsStatic(m) => assert!(m.contains("unrolled"), "{m}"),
            e => panic!("{e}"),
        }
    }
}
