//! Normalisation, attention and loss ops on the interpreter: hand-computed expectations, the
//! ±inf/NaN/large-logit semantics of softmax, empty and size-1 axes, negative axes, symbolic
//! shapes, masks and causality in attention, PyTorch's cross-entropy rules, precise mode, and
//! every bad-input class as a typed error at the node's line.

use ladder::interp::{self, EvalError, InterpError, Options};
use ladder::ir::{AttrValue, Attrs, GraphError};
use ladder::ops::{OpError, OpKind};
use ladder::Tensor;

use crate::common::*;

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

/// A one-node graph: `sig` declares the inputs, `node` is the op call (with any attributes).
fn graph(sig: &str, node: &str) -> String {
    format!("graph g({sig}) {{\n  %r = {node}\n  return %r\n}}")
}

fn run_opts(src: &str, inputs: &[Tensor], precise: bool) -> Vec<f64> {
    let opts = Options { precise, ..Default::default() };
    let out = interp::run(&parse(src), inputs, &opts).unwrap_or_else(|e| panic!("run failed: {e}\n{src}"));
    out.outputs[0].to_f64_vec()
}

/// Runs in f32 mode and in precise mode; asserts the f32 result is the precise result rounded
/// to f32 (these ops compute in f64 and round once), and returns the precise values.
fn run_both(src: &str, inputs: &[Tensor]) -> Vec<f64> {
    let fast = run_opts(src, inputs, false);
    let precise = run_opts(src, inputs, true);
    let rounded: Vec<f64> = precise.iter().map(|&x| x as f32 as f64).collect();
    assert_close(&fast, &rounded, 0.0);
    precise
}

fn out_shape(src: &str, inputs: &[Tensor]) -> Vec<usize> {
    run(src, inputs).unwrap_or_else(|e| panic!("run failed: {e}")).outputs[0].shape().to_vec()
}

/// The printed type of the graph's result.
fn result_type(sig: &str, node: &str) -> String {
    let g = parse(&graph(sig, node));
    g.ty(g.outputs()[0].value).to_string()
}

fn eval_err(src: &str, inputs: &[Tensor]) -> EvalError {
    match run(src, inputs) {
        Err(InterpError::Eval { error, .. }) => error,
        other => panic!("expected an eval error, got {other:?}"),
    }
}

/// A bad node: its text fails to parse at line 2 with `needle` in the message, and building the
/// same node through `Graph::add_node` gives a typed `OpError` that `is_expected` accepts.
fn bad(
    sig: &str,
    op: &str,
    args: &[&str],
    attrs: &[(&str, AttrValue)],
    needle: &str,
    is_expected: fn(&OpError) -> bool,
) {
    let attr_text = if attrs.is_empty() {
        String::new()
    } else {
        let items: Vec<String> = attrs.iter().map(|(n, v)| format!("{n}={v}")).collect();
        format!(" {{{}}}", items.join(", "))
    };
    let src = graph(sig, &format!("{op}({}){attr_text}", args.join(", ")));
    let err = ladder::text::parse(&src).expect_err(&src);
    assert_eq!(err.line, 2, "{err}\n{src}");
    assert!(err.to_string().contains(needle), "`{needle}` not in: {err}");

    let first = sig.split(':').next().unwrap_or_default().trim();
    let mut g = parse(&format!("graph g({sig}) {{\n  return {first}\n}}"));
    let kind = OpKind::from_name(op).unwrap();
    let values: Vec<_> = args.iter().map(|a| g.value_by_name(a.trim_start_matches('%')).unwrap()).collect();
    let given = attrs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
    let error = match Attrs::resolve(kind.spec().attrs, given) {
        Err(e) => OpError::Attr(e),
        Ok(a) => match g.add_node(kind, &values, a) {
            Err(GraphError::Op { error, .. }) => error,
            other => panic!("expected an op error, got {other:?}"),
        },
    };
    assert!(is_expected(&error), "unexpected error variant: {error:?}");
}

fn s(v: &str) -> AttrValue {
    AttrValue::Str(v.into())
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax

#[test]
fn softmax_and_log_softmax_hand_values() {
    let x = f32t(&[3], &[1., 2., 3.]);
    let sm = run_both(&graph("%x: f32[3]", "softmax(%x)"), std::slice::from_ref(&x));
    assert_close(&sm, &[0.09003057317038046, 0.24472847105479764, 0.6652409557748218], 1e-15);
    let lsm = run_both(&graph("%x: f32[3]", "log_softmax(%x)"), &[x]);
    assert_close(&lsm, &[-2.4076059644443806, -1.4076059644443804, -0.4076059644443804], 1e-15);
}

#[test]
fn softmax_negative_and_leading_axes() {
    // Over axis -2 (columns) of [[1, 2], [3, 4]]: each column is softmax([a, a + 2]).
    let x = f32t(&[2, 2], &[1., 2., 3., 4.]);
    let (lo, hi) = (0.11920292202211755, 0.8807970779778823);
    let got = run_both(&graph("%x: f32[2, 2]", "softmax(%x) {axis=-2}"), std::slice::from_ref(&x));
    assert_close(&got, &[lo, lo, hi, hi], 1e-15);
    let got0 = run_both(&graph("%x: f32[2, 2]", "softmax(%x) {axis=0}"), &[x]);
    assert_eq!(got, got0);
}

#[test]
fn softmax_inf_and_nan_follow_pytorch() {
    // Rows: [inf, 1] (inf - inf poisons the sum: all NaN), [-inf, -inf] (all NaN), [NaN, 1]
    // (all NaN), [-inf, 0] (the -inf entry is 0).
    let x = f32t(&[4, 2], &[INF, 1., -INF, -INF, NAN, 1., -INF, 0.]);
    let sm = run_both(&graph("%x: f32[4, 2]", "softmax(%x)"), std::slice::from_ref(&x));
    let n = f64::NAN;
    assert_close(&sm, &[n, n, n, n, n, n, 0., 1.], 0.0);
    let lsm = run_both(&graph("%x: f32[4, 2]", "log_softmax(%x)"), &[x]);
    assert_close(&lsm, &[n, n, n, n, n, n, f64::NEG_INFINITY, 0.], 0.0);
}

#[test]
fn softmax_large_logits_are_exact() {
    let x = f32t(&[2, 3], &[1e4, 1e4 + 1., -1e30, -1e4, 0., 1e4]);
    let sm = run_both(&graph("%x: f32[2, 3]", "softmax(%x)"), std::slice::from_ref(&x));
    assert_close(&sm, &[0.2689414213699951, 0.7310585786300049, 0., 0., 0., 1.], 1e-15);
    let lsm = run_both(&graph("%x: f32[2, 3]", "log_softmax(%x)"), &[x]);
    // -1e30 - 10001.31... is -1e30 itself at that magnitude (the f32 value of -1e30).
    let want = [-1.3132616875182228, -0.31326168751822286, -1e30f32 as f64, -2e4, -1e4, 0.];
    assert_close(&lsm, &want, 1e-12);
}

#[test]
fn softmax_empty_and_size_one_axes() {
    let src = graph("%x: f32[2, 0]", "softmax(%x)");
    assert_eq!(out_shape(&src, &[f32t(&[2, 0], &[])]), vec![2, 0]);
    let src = graph("%x: f32[0, 3]", "log_softmax(%x) {axis=0}");
    assert_eq!(out_shape(&src, &[f32t(&[0, 3], &[])]), vec![0, 3]);
    let x = f32t(&[3, 1], &[-5., 0., 7.]);
    assert_eq!(run1(&graph("%x: f32[3, 1]", "softmax(%x)"), std::slice::from_ref(&x)), vec![1., 1., 1.]);
    assert_eq!(run1(&graph("%x: f32[3, 1]", "log_softmax(%x)"), &[x]), vec![0., 0., 0.]);
}

#[test]
fn softmax_keeps_symbolic_types() {
    assert_eq!(result_type("%x: f32[batch, seq]", "softmax(%x)"), "f32[batch, seq]");
    assert_eq!(result_type("%x: f16[batch, seq]", "log_softmax(%x) {axis=0}"), "f16[batch, seq]");
}

// ---------------------------------------------------------------------------------------------
// layer_norm, rms_norm

#[test]
fn layer_norm_hand_values() {
    let x = f32t(&[4], &[1., 2., 3., 4.]);
    // mean 2.5, biased var 1.25.
    let got = run_both(&graph("%x: f32[4]", "layer_norm(%x) {eps=0.0}"), std::slice::from_ref(&x));
    assert_close(&got, &[-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738], 1e-15);
    let got = run_both(&graph("%x: f32[4]", "layer_norm(%x)"), std::slice::from_ref(&x));
    assert_close(&got, &[-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269], 1e-15);
    let w = f32t(&[4], &[1., 2., 3., 4.]);
    let b = f32t(&[4], &[0.5, 0., -0.5, 1.]);
    let got = run_both(&graph("%x: f32[4], %w: f32[4], %b: f32[4]", "layer_norm(%x, %w, %b)"), &[x, w, b]);
    assert_close(&got, &[-0.8416354199689269, -0.894423613312618, 0.8416354199689269, 6.3665416798757075], 1e-15);
}

#[test]
fn layer_norm_over_trailing_dims_with_negative_axis() {
    // axis=-2 of [1, 2, 2] normalises all four elements together (dims 1..3).
    let x = f32t(&[1, 2, 2], &[1., 2., 3., 4.]);
    let w = f32t(&[2, 2], &[1., 1., 1., 1.]);
    let got = run_both(&graph("%x: f32[1, 2, 2], %w: f32[2, 2]", "layer_norm(%x, %w) {axis=-2, eps=0.0}"), &[x, w]);
    assert_close(&got, &[-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738], 1e-15);
    // Rows normalise independently over the last axis.
    let x = f32t(&[2, 2], &[1., 3., 10., 10.]);
    let got = run_both(&graph("%x: f32[2, 2]", "layer_norm(%x) {eps=0.0}"), &[x]);
    assert_close(&got, &[-1., 1., f64::NAN, f64::NAN], 0.0); // 0/0 for a constant row without eps
}

#[test]
fn layer_norm_size_one_gives_bias_and_empty_works() {
    let x = f32t(&[3, 1], &[-5., 0., 7.]);
    let w = f32t(&[1], &[5.]);
    let b = f32t(&[1], &[0.5]);
    let got = run1(&graph("%x: f32[3, 1], %w: f32[1], %b: f32[1]", "layer_norm(%x, %w, %b)"), &[x.clone(), w, b]);
    assert_eq!(got, vec![0.5, 0.5, 0.5]);
    assert_eq!(run1(&graph("%x: f32[3, 1]", "layer_norm(%x)"), &[x]), vec![0., 0., 0.]);
    let src = graph("%x: f32[2, 0]", "layer_norm(%x)");
    assert_eq!(out_shape(&src, &[f32t(&[2, 0], &[])]), vec![2, 0]);
    let src = graph("%x: f32[0, 3]", "rms_norm(%x)");
    assert_eq!(out_shape(&src, &[f32t(&[0, 3], &[])]), vec![0, 3]);
}

#[test]
fn layer_norm_symbolic_types() {
    assert_eq!(result_type("%x: f32[batch, seq, 8], %w: f32[8]", "layer_norm(%x, %w)"), "f32[batch, seq, 8]");
    assert_eq!(
        result_type("%x: f32[batch, seq, d], %w: f32[seq, d]", "layer_norm(%x, %w) {axis=1}"),
        "f32[batch, seq, d]"
    );
    assert_eq!(result_type("%x: bf16[n, d], %w: bf16[d]", "rms_norm(%x, %w)"), "bf16[n, d]");
}

#[test]
fn rms_norm_hand_values() {
    // mean(x^2) = 7.5.
    let x = f32t(&[4], &[1., 2., 3., 4.]);
    let w = f32t(&[4], &[1., 1., 2., 2.]);
    let got = run_both(&graph("%x: f32[4], %w: f32[4]", "rms_norm(%x, %w)"), &[x.clone(), w]);
    assert_close(&got, &[0.3651483473268884, 0.7302966946537768, 2.1908900839613303, 2.921186778615107], 1e-15);
    let got = run_both(&graph("%x: f32[2, 2]", "rms_norm(%x) {axis=-2, eps=0.0}"), &[f32t(&[2, 2], &[1., 2., 3., 4.])]);
    let r = 7.5f64.sqrt();
    assert_close(&got, &[1. / r, 2. / r, 3. / r, 4. / r], 1e-15);
}

// ---------------------------------------------------------------------------------------------
// batch_norm, group_norm

#[test]
fn batch_norm_hand_values() {
    // x [1, 2, 2]: channel 0 = [1, 2], channel 1 = [3, 4].
    let x = f32t(&[1, 2, 2], &[1., 2., 3., 4.]);
    let mean = f32t(&[2], &[1., 2.]);
    let var = f32t(&[2], &[4., 0.25]);
    let w = f32t(&[2], &[2., 3.]);
    let b = f32t(&[2], &[1., -1.]);
    let sig = "%x: f32[1, 2, 2], %m: f32[2], %v: f32[2], %w: f32[2], %b: f32[2]";
    let got = run_both(
        &graph(sig, "batch_norm(%x, %m, %v, %w, %b) {eps=0.0}"),
        &[x.clone(), mean.clone(), var.clone(), w.clone(), b],
    );
    assert_eq!(got, vec![1., 2., 5., 11.]);
    let sig4 = "%x: f32[1, 2, 2], %m: f32[2], %v: f32[2], %w: f32[2]";
    let got =
        run_both(&graph(sig4, "batch_norm(%x, %m, %v, %w) {eps=0.0}"), &[x.clone(), mean.clone(), var.clone(), w]);
    assert_eq!(got, vec![0., 1., 6., 12.]);
    let sig3 = "%x: f32[1, 2, 2], %m: f32[2], %v: f32[2]";
    let got = run_both(&graph(sig3, "batch_norm(%x, %m, %v)"), &[x, mean, var]);
    assert_close(&got, &[0.0, 0.49999937500117186, 1.9999600011999599, 3.9999200023999197], 1e-15);
}

#[test]
fn batch_norm_rank_two_empty_and_symbolic() {
    let x = f32t(&[2, 2], &[1., 3., 5., 6.]);
    let m = f32t(&[2], &[1., 2.]);
    let v = f32t(&[2], &[1., 4.]);
    let got = run1(&graph("%x: f32[2, 2], %m: f32[2], %v: f32[2]", "batch_norm(%x, %m, %v) {eps=0.0}"), &[x, m, v]);
    assert_eq!(got, vec![0., 0.5, 4., 2.]);
    let src = graph("%x: f32[0, 2, 3], %m: f32[2], %v: f32[2]", "batch_norm(%x, %m, %v)");
    assert_eq!(out_shape(&src, &[f32t(&[0, 2, 3], &[]), f32t(&[2], &[0., 0.]), f32t(&[2], &[1., 1.])]), vec![0, 2, 3]);
    assert_eq!(result_type("%x: f32[n, c, h, w], %m: f32[c], %v: f32[c]", "batch_norm(%x, %m, %v)"), "f32[n, c, h, w]");
}

#[test]
fn group_norm_hand_values() {
    // x [1, 4, 1], 2 groups: [1, 2] and [3, 4], each normalising to [-1, 1] without eps.
    let x = f32t(&[1, 4, 1], &[1., 2., 3., 4.]);
    let w = f32t(&[4], &[1., 2., 3., 4.]);
    let b = f32t(&[4], &[0., 0., 0., 1.]);
    let sig = "%x: f32[1, 4, 1], %w: f32[4], %b: f32[4]";
    let got = run_both(&graph(sig, "group_norm(%x, %w, %b) {groups=2, eps=0.0}"), &[x.clone(), w, b]);
    assert_eq!(got, vec![-1., 2., -3., 5.]);
    let got = run_both(&graph("%x: f32[1, 4, 1]", "group_norm(%x) {groups=1}"), std::slice::from_ref(&x));
    assert_close(&got, &[-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269], 1e-15);
    // groups == C: instance norm over spatial positions. x [2, 2, 2].
    let x = f32t(&[2, 2, 2], &[0., 2., 5., 5., 1., 3., -1., 1.]);
    let got = run_both(&graph("%x: f32[2, 2, 2]", "group_norm(%x) {groups=2, eps=0.0}"), &[x]);
    assert_close(&got, &[-1., 1., f64::NAN, f64::NAN, -1., 1., -1., 1.], 0.0);
}

#[test]
fn group_norm_empty_and_symbolic() {
    let src = graph("%x: f32[0, 4, 3]", "group_norm(%x) {groups=2}");
    assert_eq!(out_shape(&src, &[f32t(&[0, 4, 3], &[])]), vec![0, 4, 3]);
    let src = graph("%x: f32[2, 4, 0]", "group_norm(%x) {groups=4}");
    assert_eq!(out_shape(&src, &[f32t(&[2, 4, 0], &[])]), vec![2, 4, 0]);
    assert_eq!(result_type("%x: f32[n, 6, h], %w: f32[6]", "group_norm(%x, %w) {groups=3}"), "f32[n, 6, h]");
}

// ---------------------------------------------------------------------------------------------
// scaled_dot_product_attention

#[test]
fn attention_hand_values() {
    // One query [1, 0] against keys [1, 0] and [0, 1]: scores [1/sqrt(2), 0] by default.
    let q = f32t(&[1, 1, 2], &[1., 0.]);
    let k = f32t(&[1, 2, 2], &[1., 0., 0., 1.]);
    let v = f32t(&[1, 2, 1], &[10., 20.]);
    let sig = "%q: f32[1, 1, 2], %k: f32[1, 2, 2], %v: f32[1, 2, 1]";
    let got = run_both(&graph(sig, "scaled_dot_product_attention(%q, %k, %v)"), &[q.clone(), k.clone(), v.clone()]);
    assert_close(&got, &[13.302384506733432], 1e-12);
    let got = run_both(&graph(sig, "scaled_dot_product_attention(%q, %k, %v) {scale=1.0}"), &[q, k, v]);
    assert_close(&got, &[12.689414213699951], 1e-12);
}

#[test]
fn attention_causal_with_l_not_equal_s() {
    // Zero queries: every allowed score is 0, so each row averages the values it may see.
    // L = 2, S = 3: row 0 sees key 0, row 1 sees keys 0 and 1 (top-left aligned).
    let q = f32t(&[2, 1], &[0., 0.]);
    let k = f32t(&[3, 1], &[1., 2., 3.]);
    let v = f32t(&[3, 1], &[1., 2., 4.]);
    let sig = "%q: f32[2, 1], %k: f32[3, 1], %v: f32[3, 1]";
    let got = run_both(&graph(sig, "scaled_dot_product_attention(%q, %k, %v) {causal=true}"), &[q, k, v]);
    assert_eq!(got, vec![1., 1.5]);
    // L = 3, S = 2: rows 1 and 2 see both keys.
    let q = f32t(&[3, 1], &[0., 0., 0.]);
    let k = f32t(&[2, 1], &[1., 2.]);
    let v = f32t(&[2, 1], &[1., 3.]);
    let sig = "%q: f32[3, 1], %k: f32[2, 1], %v: f32[2, 1]";
    let got = run_both(&graph(sig, "scaled_dot_product_attention(%q, %k, %v) {causal=true}"), &[q, k, v]);
    assert_eq!(got, vec![1., 2., 2.]);
}

#[test]
fn attention_bool_mask_equals_float_mask() {
    let q = f32t(&[2, 2, 2], &[0.3, -1.2, 0.7, 0.1, -0.4, 0.9, 1.5, -0.6]);
    let k = f32t(&[2, 3, 2], &[0.2, 0.5, -0.8, 1.1, 0.6, -0.3, 1.0, 0.0, -0.5, 0.25, 0.75, 0.4]);
    let v = f32t(&[2, 3, 2], &[1., 2., 3., 4., 5., 6., -1., -2., -3., -4., 0.5, 0.25]);
    let keep = [true, false, true, false, true, true];
    let bm = boolt(&[2, 3], &keep);
    let fm = f32t(&[2, 3], &keep.map(|b| if b { 0. } else { -INF }));
    let sig = |m: &str| format!("%q: f32[2, 2, 2], %k: f32[2, 3, 2], %v: f32[2, 3, 2], %m: {m}[2, 3]");
    let node = "scaled_dot_product_attention(%q, %k, %v, %m)";
    let a = run_both(&graph(&sig("bool"), node), &[q.clone(), k.clone(), v.clone(), bm.clone()]);
    let b = run_both(&graph(&sig("f32"), node), &[q.clone(), k.clone(), v.clone(), fm]);
    assert_eq!(a, b);
    // The mask changes the result, and combining it with causal applies both.
    let plain = run1(
        &graph(&sig("bool"), "scaled_dot_product_attention(%q, %k, %v)"),
        &[q.clone(), k.clone(), v.clone(), bm.clone()],
    );
    assert_ne!(plain, run1(&graph(&sig("bool"), node), &[q.clone(), k.clone(), v.clone(), bm.clone()]));
    let both = run_both(&graph(&sig("bool"), &format!("{node} {{causal=true}}")), &[q, k, v.clone(), bm]);
    // Row 0 may only see key 0 (causal), which the mask keeps: its output is v[0].
    let vv = v.to_f64_vec();
    assert_eq!(&both[0..2], &vv[0..2]);
    assert_eq!(&both[4..6], &vv[6..8]);
}

#[test]
fn attention_fully_masked_rows_are_zero_and_nan_poisons() {
    let q = f32t(&[2, 1], &[1., 2.]);
    let k = f32t(&[2, 1], &[1., 1.]);
    let v = f32t(&[2, 1], &[3., 5.]);
    // Row 0 masks everything; row 1 keeps both keys.
    let m = boolt(&[2, 2], &[false, false, true, true]);
    let sig = "%q: f32[2, 1], %k: f32[2, 1], %v: f32[2, 1], %m: bool[2, 2]";
    let got =
        run_both(&graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m)"), &[q.clone(), k.clone(), v.clone(), m]);
    assert_eq!(got, vec![0., 4.]);
    // A float mask of +inf on one key: inf - inf in the softmax, the row is NaN.
    let fm = f32t(&[2, 2], &[INF, 0., 0., 0.]);
    let sig = "%q: f32[2, 1], %k: f32[2, 1], %v: f32[2, 1], %m: f32[2, 2]";
    let got = run_both(&graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m)"), &[q, k, v, fm]);
    assert!(got[0].is_nan());
    assert_eq!(got[1], 4.);
}

#[test]
fn attention_broadcasts_leading_dims_and_mask() {
    // q has batch 2, k and v have none; the [L, S] mask is shared by both batches.
    let q = f32t(&[2, 1, 1], &[0., 0.]);
    let k = f32t(&[2, 1], &[1., 2.]);
    let v = f32t(&[2, 2], &[1., 10., 3., 30.]);
    let m = boolt(&[1, 2], &[true, true]);
    let sig = "%q: f32[2, 1, 1], %k: f32[2, 1], %v: f32[2, 2], %m: bool[1, 2]";
    let got = run_both(&graph(sig, "scaled_dot_product_attention(%q, %k, %v, %m)"), &[q, k, v, m]);
    assert_eq!(got, vec![2., 20., 2., 20.]);
    assert_eq!(
        result_type(
            "%q: f32[b, h, 4, 8], %k: f32[1, h, 6, 8], %v: f32[6, 3]",
            "scaled_dot_product_attention(%q, %k, %v)"
        ),
        "f32[b, h, 4, 3]"
    );
}

#[test]
fn attention_empty_and_symbolic() {
    // S = 0: nothing to attend, output rows are zero.
    let src = graph("%q: f32[2, 3], %k: f32[0, 3], %v: f32[0, 4]", "scaled_dot_product_attention(%q, %k, %v)");
    let got = run1(&src, &[f32t(&[2, 3], &[1.; 6]), f32t(&[0, 3], &[]), f32t(&[0, 4], &[])]);
    assert_eq!(got, vec![0.; 8]);
    // D = 0: every score is 0, uniform weights.
    let src = graph("%q: f32[1, 0], %k: f32[2, 0], %v: f32[2, 1]", "scaled_dot_product_attention(%q, %k, %v)");
    assert_eq!(run1(&src, &[f32t(&[1, 0], &[]), f32t(&[2, 0], &[]), f32t(&[2, 1], &[2., 4.])]), vec![3.]);
    assert_eq!(
        result_type(
            "%q: f32[batch, seq, 8], %k: f32[batch, seq, 8], %v: f32[batch, seq, 16]",
            "scaled_dot_product_attention(%q, %k, %v) {causal=true}"
        ),
        "f32[batch, seq, 16]"
    );
    assert_eq!(
        result_type(
            "%q: f32[batch, seq, 8], %k: f32[batch, ctx, 8], %v: f32[batch, ctx, 2], %m: bool[seq, ctx]",
            "scaled_dot_product_attention(%q, %k, %v, %m)"
        ),
        "f32[batch, seq, 2]"
    );
}

#[test]
fn attention_charges_quadratic_fuel() {
    // Inputs 96 + output 32 elements = 128 fuel for the node; the attention itself is
    // L*S*(D+Dv) = 4*4*16 = 256.
    let src = graph("%q: f32[1, 4, 8], %k: f32[1, 4, 8], %v: f32[1, 4, 8]", "scaled_dot_product_attention(%q, %k, %v)");
    let inputs = [f32t(&[1, 4, 8], &[0.1; 32]), f32t(&[1, 4, 8], &[0.2; 32]), f32t(&[1, 4, 8], &[0.3; 32])];
    let g = parse(&src);
    let short = interp::run(&g, &inputs, &Options { fuel: 300, ..Default::default() });
    assert!(matches!(short, Err(InterpError::Eval { error: EvalError::OutOfFuel, .. })), "{short:?}");
    assert!(interp::run(&g, &inputs, &Options { fuel: 400, ..Default::default() }).is_ok());
}

// ---------------------------------------------------------------------------------------------
// cross_entropy

const CE_SIG: &str = "%x: f32[2, 3], %t: i64[2]";

fn ce_inputs(t: [i64; 2]) -> [Tensor; 2] {
    [f32t(&[2, 3], &[1., 2., 3., 0., 0., 0.]), i64t(&[2], &t)]
}

#[test]
fn cross_entropy_hand_values() {
    // Row 0: -log_softmax([1,2,3])[2]; row 1: ln 3.
    let (a, b) = (0.4076059644443804, 1.0986122886681098);
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t)"), &ce_inputs([2, 0]));
    assert_close(&got, &[(a + b) / 2.], 1e-15);
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t) {reduction=\"sum\"}"), &ce_inputs([2, 0]));
    assert_close(&got, &[a + b], 1e-15);
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t) {reduction=\"none\"}"), &ce_inputs([2, 0]));
    assert_close(&got, &[a, b], 1e-15);
    // 1-D logits with a scalar target.
    let src = graph("%x: f32[3], %t: i64[]", "cross_entropy(%x, %t)");
    let got = run_both(&src, &[f32t(&[3], &[1., 2., 3.]), i64t(&[], &[0])]);
    assert_close(&got, &[2.4076059644443806], 1e-15);
    // i32 targets work too.
    let src = graph("%x: f32[2, 3], %t: i32[2]", "cross_entropy(%x, %t)");
    let t = Tensor::new(vec![2], ladder::TensorData::I32(vec![2, 0])).unwrap();
    assert_close(&run1(&src, &[ce_inputs([0, 0])[0].clone(), t]), &[(a + b) / 2.], 1e-7);
}

#[test]
fn cross_entropy_ignore_index() {
    let a = 0.4076059644443804;
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t)"), &ce_inputs([2, -100]));
    assert_close(&got, &[a], 1e-15); // the mean counts only non-ignored targets
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t) {reduction=\"none\"}"), &ce_inputs([2, -100]));
    assert_close(&got, &[a, 0.], 1e-15);
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t) {ignore_index=0, reduction=\"sum\"}"), &ce_inputs([2, 0]));
    assert_close(&got, &[a], 1e-15);
    // All ignored: mean is NaN, sum is 0.
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t)"), &ce_inputs([-100, -100]));
    assert!(got[0].is_nan());
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t) {reduction=\"sum\"}"), &ce_inputs([-100, -100]));
    assert_eq!(got, vec![0.]);
}

#[test]
fn cross_entropy_label_smoothing() {
    // eps = 0.1, C = 3. Row 0: 0.9 * 0.40760596 + 0.1/3 * (2.40760596 + 1.40760596 + 0.40760596)
    // = 0.50760596. Row 1 (uniform logits): 0.9 ln 3 + 0.1/3 * 3 ln 3 = ln 3.
    let (a, b) = (0.5076059644443804, 1.0986122886681098);
    let node = "cross_entropy(%x, %t) {label_smoothing=0.1, reduction=\"none\"}";
    let got = run_both(&graph(CE_SIG, node), &ce_inputs([2, 0]));
    assert_close(&got, &[a, b], 1e-15);
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t) {label_smoothing=0.1}"), &ce_inputs([2, 0]));
    assert_close(&got, &[(a + b) / 2.], 1e-15);
    // Ignored targets get no smoothing term either, and are not counted.
    let got = run_both(&graph(CE_SIG, "cross_entropy(%x, %t) {label_smoothing=0.1}"), &ce_inputs([2, -100]));
    assert_close(&got, &[a], 1e-15);
}

#[test]
fn cross_entropy_spatial_dims_and_symbolic() {
    // logits [N=1, C=2, d=2]: position 0 has logits (0, 1), target 1; position 1 (1, 1), target 0.
    let x = f32t(&[1, 2, 2], &[0., 1., 1., 1.]);
    let t = i64t(&[1, 2], &[1, 0]);
    let src = graph("%x: f32[1, 2, 2], %t: i64[1, 2]", "cross_entropy(%x, %t) {reduction=\"none\"}");
    assert_eq!(out_shape(&src, &[x.clone(), t.clone()]), vec![1, 2]);
    assert_close(&run_both(&src, &[x, t]), &[0.31326168751822286, std::f64::consts::LN_2], 1e-15);
    assert_eq!(result_type("%x: f32[batch, 10], %t: i64[batch]", "cross_entropy(%x, %t)"), "f32[]");
    assert_eq!(
        result_type("%x: f16[batch, 10, seq], %t: i64[batch, seq]", "cross_entropy(%x, %t) {reduction=\"none\"}"),
        "f16[batch, seq]"
    );
    // Empty batch: mean NaN, none empty.
    let src = graph("%x: f32[0, 3], %t: i64[0]", "cross_entropy(%x, %t)");
    assert!(run1(&src, &[f32t(&[0, 3], &[]), i64t(&[0], &[])])[0].is_nan());
}

#[test]
fn cross_entropy_inf_and_nan_logits() {
    // A -inf logit on a non-target class is fine; on the target class the loss is inf.
    let x = f32t(&[2, 2], &[-INF, 0., -INF, 0.]);
    let t = i64t(&[2], &[1, 0]);
    let src = graph("%x: f32[2, 2], %t: i64[2]", "cross_entropy(%x, %t) {reduction=\"none\"}");
    assert_eq!(run1(&src, &[x, t]), vec![0., f64::INFINITY]);
    // A NaN logit poisons its row only; an ignored NaN row contributes 0.
    let x = f32t(&[2, 2], &[NAN, 0., NAN, 0.]);
    let t = i64t(&[2], &[0, -100]);
    let got = run1(&src, &[x, t]);
    assert!(got[0].is_nan());
    assert_eq!(got[1], 0.);
}

#[test]
fn cross_entropy_target_out_of_range_is_an_index_error() {
    for bad_t in [3, -1] {
        let err = eval_err(&graph(CE_SIG, "cross_entropy(%x, %t)"), &ce_inputs([0, bad_t]));
        assert_eq!(err, EvalError::IndexOutOfRange { index: bad_t, size: 3 });
    }
}

// ---------------------------------------------------------------------------------------------
// mse_loss

#[test]
fn mse_loss_hand_values_and_broadcasting() {
    let a = f32t(&[3], &[1., 2., 3.]);
    let b = f32t(&[3], &[1., 0., 0.]);
    let sig = "%a: f32[3], %b: f32[3]";
    assert_close(&run_both(&graph(sig, "mse_loss(%a, %b)"), &[a.clone(), b.clone()]), &[13. / 3.], 1e-15);
    assert_eq!(run_both(&graph(sig, "mse_loss(%a, %b) {reduction=\"sum\"}"), &[a.clone(), b.clone()]), vec![13.]);
    assert_eq!(run_both(&graph(sig, "mse_loss(%a, %b) {reduction=\"none\"}"), &[a, b]), vec![0., 4., 9.]);
    // [2, 2] against [2]: rows (1, 2) and (3, 4) minus (1, 1).
    let src = graph("%a: f32[2, 2], %b: f32[2]", "mse_loss(%a, %b) {reduction=\"none\"}");
    assert_eq!(run1(&src, &[f32t(&[2, 2], &[1., 2., 3., 4.]), f32t(&[2], &[1., 1.])]), vec![0., 1., 4., 9.]);
    let src = graph("%a: f32[0], %b: f32[0]", "mse_loss(%a, %b)");
    assert!(run1(&src, &[f32t(&[0], &[]), f32t(&[0], &[])])[0].is_nan());
    let src = graph("%a: f32[0], %b: f32[0]", "mse_loss(%a, %b) {reduction=\"sum\"}");
    assert_eq!(run1(&src, &[f32t(&[0], &[]), f32t(&[0], &[])]), vec![0.]);
    assert_eq!(result_type("%a: f32[n, 3], %b: f64[3]", "mse_loss(%a, %b) {reduction=\"none\"}"), "f64[n, 3]");
    assert_eq!(result_type("%a: f32[n, 3], %b: f32[n, 3]", "mse_loss(%a, %b)"), "f32[]");
}

// ---------------------------------------------------------------------------------------------
// Bad inputs

#[test]
fn bad_normalisation_inputs_are_typed_errors() {
    let shape = |e: &OpError| matches!(e, OpError::Shape(_));
    let dtype = |e: &OpError| matches!(e, OpError::DType { .. });
    let axis = |e: &OpError| matches!(e, OpError::Axis { .. });
    let arity = |e: &OpError| matches!(e, OpError::Arity { .. });
    let rank = |e: &OpError| matches!(e, OpError::Rank { .. });
    let groups = |e: &OpError| matches!(e, OpError::AttrValue { name: "groups", .. });
    let missing = |e: &OpError| matches!(e, OpError::Attr(_));
    let int = AttrValue::Int;

    bad("%x: i64[3]", "softmax", &["%x"], &[], "float", dtype);
    bad("%x: f32[2, 3]", "softmax", &["%x"], &[("axis", int(2))], "out of range", axis);
    bad("%x: f32[2, 3]", "log_softmax", &["%x"], &[("axis", int(-3))], "out of range", axis);
    bad("%x: f32[]", "softmax", &["%x"], &[], "out of range", axis);
    bad("%x: f32[2]", "softmax", &["%x", "%x"], &[], "takes 1 arguments", arity);
    bad("%x: f32[2, 3], %w: f32[2]", "layer_norm", &["%x", "%w"], &[], "shape mismatch", shape);
    bad("%x: f32[2, 3], %w: f32[3]", "layer_norm", &["%x", "%w"], &[("axis", int(0))], "expected [2, 3]", shape);
    bad("%x: f32[2, 3], %w: f32[3], %b: f32[1]", "layer_norm", &["%x", "%w", "%b"], &[], "bias", shape);
    bad("%x: f32[2, 3], %w: f64[3]", "layer_norm", &["%x", "%w"], &[], "dtype", dtype);
    bad("%x: i32[2, 3]", "layer_norm", &["%x"], &[], "float", dtype);
    bad("%x: f32[2, 3], %w: f32[3]", "rms_norm", &["%x", "%w", "%w"], &[], "takes 1 to 2", arity);
    bad("%x: f32[n, d], %w: f32[e]", "rms_norm", &["%x", "%w"], &[], "shape mismatch", shape);
    bad("%x: f32[4], %m: f32[4]", "batch_norm", &["%x", "%m", "%m"], &[], "rank", rank);
    bad("%x: f32[2, 4], %m: f32[3]", "batch_norm", &["%x", "%m", "%m"], &[], "running_mean", shape);
    bad("%x: f32[2, 4], %m: f32[4]", "batch_norm", &["%x", "%m"], &[], "takes 3 to 5", arity);
    // A negative, infinite or NaN eps (the decomposition fuzzer found `eps = -1.75` cancelling
    // a near-equal f64 variance, where no tolerance can hold).
    let eps = |e: &OpError| matches!(e, OpError::AttrValue { name: "eps", .. });
    let f = AttrValue::Float;
    bad("%x: f64[2, 3]", "layer_norm", &["%x"], &[("eps", f(-1.75))], "must be finite and at least 0, got -1.75", eps);
    bad("%x: f32[2, 3]", "rms_norm", &["%x"], &[("eps", f(f64::NAN))], "must be finite and at least 0", eps);
    bad("%x: f32[2, 4], %m: f32[4]", "batch_norm", &["%x", "%m", "%m"], &[("eps", f(-1e-5))], "at least 0", eps);
    bad("%x: f32[2, 4, 3]", "group_norm", &["%x"], &[("groups", int(2)), ("eps", f(f64::INFINITY))], "finite", eps);
    bad("%x: f32[2, 4], %m: f32[4], %w: f32[2]", "batch_norm", &["%x", "%m", "%m", "%w"], &[], "weight", shape);
    bad("%x: f32[2, 6]", "group_norm", &["%x"], &[("groups", int(4))], "do not divide", groups);
    bad("%x: f32[2, 6]", "group_norm", &["%x"], &[("groups", int(0))], "positive", groups);
    bad("%x: f32[2, 6]", "group_norm", &["%x"], &[], "required", missing);
    bad("%x: f32[2, c]", "group_norm", &["%x"], &[("groups", int(2))], "static channel", shape);
    bad("%x: f32[2, 6], %w: f32[3]", "group_norm", &["%x", "%w"], &[("groups", int(3))], "weight", shape);
    bad("%x: f32[6]", "group_norm", &["%x"], &[("groups", int(3))], "rank", rank);
}

#[test]
fn bad_attention_inputs_are_typed_errors() {
    let shape = |e: &OpError| matches!(e, OpError::Shape(_));
    let dtype = |e: &OpError| matches!(e, OpError::DType { .. });
    let rank = |e: &OpError| matches!(e, OpError::Rank { .. });
    let bcast = |e: &OpError| matches!(e, OpError::Broadcast { .. });
    let op = "scaled_dot_product_attention";
    let qkv = ["%q", "%k", "%v"];
    bad("%q: f32[4, 8], %k: f32[5, 7], %v: f32[5, 2]", op, &qkv, &[], "head dim", shape);
    bad("%q: f32[4, d], %k: f32[5, e], %v: f32[5, 2]", op, &qkv, &[], "head dim", shape);
    bad("%q: f32[4, 8], %k: f32[5, 8], %v: f32[6, 2]", op, &qkv, &[], "value length", shape);
    bad("%q: i32[4, 8], %k: i32[5, 8], %v: i32[5, 2]", op, &qkv, &[], "float", dtype);
    bad("%q: f32[4, 8], %k: f16[5, 8], %v: f32[5, 2]", op, &qkv, &[], "dtype", dtype);
    bad("%q: f32[8], %k: f32[5, 8], %v: f32[5, 2]", op, &qkv, &[], "rank", rank);
    bad("%q: f32[2, 4, 8], %k: f32[3, 5, 8], %v: f32[5, 2]", op, &qkv, &[], "broadcast", bcast);
    let sig = |m: &str| format!("%q: f32[4, 8], %k: f32[5, 8], %v: f32[5, 2], %m: {m}");
    let qkvm = ["%q", "%k", "%v", "%m"];
    bad(&sig("i64[4, 5]"), op, &qkvm, &[], "bool or f32", dtype);
    bad(&sig("f16[4, 5]"), op, &qkvm, &[], "bool or f32", dtype);
    bad(&sig("bool[4, 4]"), op, &qkvm, &[], "does not broadcast", shape);
    bad(&sig("bool[2, 4, 5]"), op, &qkvm, &[], "does not broadcast", shape);
}

#[test]
fn bad_loss_inputs_are_typed_errors() {
    let shape = |e: &OpError| matches!(e, OpError::Shape(_));
    let dtype = |e: &OpError| matches!(e, OpError::DType { .. });
    let red = |e: &OpError| matches!(e, OpError::AttrValue { name: "reduction", .. });
    let smooth = |e: &OpError| matches!(e, OpError::AttrValue { name: "label_smoothing", .. });
    let kind = |e: &OpError| matches!(e, OpError::Attr(_));
    let bcast = |e: &OpError| matches!(e, OpError::Broadcast { .. });
    let ce = "cross_entropy";
    let xt = ["%x", "%t"];
    bad(CE_SIG, ce, &xt, &[("reduction", s("avg"))], "reduction", red);
    bad(CE_SIG, ce, &xt, &[("reduction", AttrValue::Int(1))], "must be a string", kind);
    bad(CE_SIG, ce, &xt, &[("label_smoothing", AttrValue::Float(1.5))], "[0, 1]", smooth);
    bad(CE_SIG, ce, &xt, &[("label_smoothing", AttrValue::Float(f64::NAN))], "[0, 1]", smooth);
    bad("%x: i64[2, 3], %t: i64[2]", ce, &xt, &[], "float", dtype);
    bad("%x: f32[2, 3], %t: f32[2]", ce, &xt, &[], "integer", dtype);
    bad("%x: f32[2, 3], %t: i64[3]", ce, &xt, &[], "target has shape", shape);
    bad("%x: f32[2, 3, 4], %t: i64[2]", ce, &xt, &[], "target has shape", shape);
    bad("%x: f32[3], %t: i64[1]", ce, &xt, &[], "target has shape", shape);
    let ab = ["%a", "%b"];
    bad("%a: f32[3], %b: f32[3]", "mse_loss", &ab, &[("reduction", s("mean "))], "reduction", red);
    bad("%a: f32[3], %b: i64[3]", "mse_loss", &ab, &[], "float", dtype);
    bad("%a: f32[3], %b: f32[2]", "mse_loss", &ab, &[], "broadcast", bcast);
}
