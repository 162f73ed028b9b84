//! Recovery of log_softmax, rms_norm (ladder's decompositions and the exporters' elementwise
//! forms) and the exporters' tanh GELU, and the row kernels behind them (softmax's included):
//! what is recovered with which arguments and attributes, what is refused and why, the
//! kernels against the interpreter running the op (the oracle) under the tolerance table on
//! random and adversarial rows, and whole models recovered against unrecovered on the native
//! and the reference backends.

use ladder::frontend::onnx::proto::{NodeProto, TensorProto, ValueInfoProto};
use ladder::gen::Source;
use ladder::ir::AttrValue;
use ladder::kernel::Step;
use ladder::numerics::{compare, random_data, CompareCtx};
use ladder::recover::recover;
use ladder::{compile, CompileOptions, DType, Graph, OpKind, Plan, Tensor};

use crate::onnx_build;

fn parse(text: &str) -> Graph {
    ladder::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn recovered(g: &Graph) -> ladder::recover::Recovered {
    recover(&ladder::passes::lower(g).unwrap().simplified).unwrap()
}

/// Each match as (rule, op, number of arguments, attributes as text).
fn found(r: &ladder::recover::Recovered) -> Vec<(&'static str, OpKind, usize, String)> {
    r.matches
        .iter()
        .map(|m| {
            let attrs: Vec<String> = m.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            (m.rule, m.op, m.args.len(), attrs.join(" "))
        })
        .collect()
}

fn library_ops(p: &Plan) -> Vec<OpKind> {
    p.program()
        .unwrap()
        .steps
        .iter()
        .flat_map(|s| match s {
            Step::Library(l) => vec![l.op],
            // A recovered activation that runs inside a GEMM is a library call too.
            Step::Matmul(m) => m.activation.iter().map(|l| l.op).collect(),
            _ => vec![],
        })
        .collect()
}

#[test]
fn ladder_ops_come_back_with_their_arguments_and_eps() {
    let g = parse(
        "graph ops(%x: f32[n, 16], %w: f32[16], %u: f32[n, 16], %v: f32[n, 16], %t: f32[n, 16], %s: f32[2, 3, 5]) {
  %a = log_softmax(%x) {axis=-1}
  %b = rms_norm(%u, %w) {axis=-1, eps=1e-5}
  %c = rms_norm(%v) {axis=-1, eps=0.125}
  %d = rms_norm(%t, %w) {axis=-1, eps=0.0}
  %e = log_softmax(%s) {axis=2}
  %f = rms_norm(%s) {axis=2, eps=0.0}
  return %a, %b, %c, %d, %e, %f
}",
    );
    let r = recovered(&g);
    let got = found(&r);
    let want = [
        ("log_softmax", OpKind::LogSoftmax, 1, "axis=-1"),
        ("rms_norm", OpKind::RmsNorm, 2, "axis=-1 eps=1e-5"),
        ("rms_norm", OpKind::RmsNorm, 1, "axis=-1 eps=0.125"),
        ("rms_norm", OpKind::RmsNorm, 2, "axis=-1 eps=0.0"),
        ("rms_norm", OpKind::RmsNorm, 1, "axis=-1 eps=0.0"),
    ];
    for (rule, op, n, attrs) in want {
        assert!(
            got.iter().any(|(r, o, k, a)| *r == rule && *o == op && *k == n && a == attrs),
            "{op} with {n} args {{{attrs}}} not recovered by `{rule}`; found {got:?}\n{}",
            r.explain(&g)
        );
    }
    // Both log_softmaxes and all four rms_norms, nothing else.
    assert_eq!(got.len(), 6, "{}", r.explain(&g));
    let text = ladder::text::print(&r.graph);
    for prim in ["exp(", "log(", "rsqrt(", "abs(", "reduce_max("] {
        assert!(!text.contains(prim), "{prim} left behind:\n{text}");
    }
    // The arguments are the model's own values, in the op's order.
    let m = r.matches.iter().find(|m| m.op == OpKind::RmsNorm && m.args.len() == 2).unwrap();
    let names: Vec<Option<&str>> = m.args.iter().map(|&a| r.graph.name_of(a)).collect();
    assert!(names[1] == Some("w"), "{names:?}");
}

#[test]
fn near_misses_say_why() {
    // log_softmax over the first axis (the kernel takes rows); an f64 rms_norm; a
    // log_softmax whose exp is also a graph output; an rms_norm whose rsqrt is used twice.
    let g = parse(
        "graph near(%x: f32[4, 8], %y: f64[4, 8], %z: f32[4, 8]) {
  %a = log_softmax(%x) {axis=0}
  %b = rms_norm(%y) {axis=-1}
  %c = log_softmax(%z) {axis=-1}
  %d = reduce_max(%z) {axes=[1]} : f32[4]
  %e = reshape(%d) {shape=[4, 1]} : f32[4, 1]
  %f = broadcast_in_dim(%e) {shape=[4, 8], broadcast_dims=[0, 1]} : f32[4, 8]
  %h = sub(%z, %f) : f32[4, 8]
  %i = exp(%h) : f32[4, 8]
  return %a, %b, %c, %i
}",
    );
    let r = recovered(&g);
    let text = r.explain(&g);
    assert!(r.matches.is_empty(), "{text}");
    let reasons: Vec<(&str, &str)> = r.near_misses.iter().map(|n| (n.rule, n.reason.as_str())).collect();
    assert!(
        reasons.iter().any(|(rule, m)| *rule == "log_softmax" && m.contains("f32[1, 8]") && m.contains("f32[4, 1]")),
        "{text}"
    );
    assert!(reasons.iter().any(|(rule, m)| *rule == "rms_norm" && m.contains("f64 elements")), "{text}");
    assert!(
        reasons
            .iter()
            .any(|(rule, m)| *rule == "log_softmax" && (m.contains("also used by") || m.contains("graph output"))),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Exporter forms, imported from ONNX
// ---------------------------------------------------------------------------------------------

const D: usize = 24;

fn x_input() -> ValueInfoProto {
    onnx_build::vi("x", onnx_build::FLOAT, &["n", "24"])
}

fn import(nodes: Vec<NodeProto>, inits: Vec<TensorProto>) -> Graph {
    use onnx_build::*;
    let y = vi("y", FLOAT, &[]);
    let bytes = encode(&model_proto(graph(nodes, vec![x_input()], vec![y], inits), 17));
    ladder::frontend::onnx::import(&bytes, &Default::default()).unwrap()
}

fn weight() -> TensorProto {
    onnx_build::tensor_f32("w", &[D as i64], &(0..D).map(|i| 0.5 + i as f32 * 0.1).collect::<Vec<_>>())
}

/// How the rms norm of [`exported_rms`] divides by the root mean square.
#[derive(Clone, Copy, Debug)]
enum Inv {
    Reciprocal,
    DivOne,
    Div,
}

/// `x * 1/sqrt(mean(x^2) + eps) [* w]` as HF's LlamaRMSNorm exports through ONNX (`Pow`,
/// `ReduceMean`, `Add`, `Sqrt`, then `Reciprocal` and `Mul`, `Div(1, _)` and `Mul`, or
/// `Div(x, _)`; the weight first in its product, as `self.weight * hidden`), with the
/// exponent `two` (2.0 unless a near-miss is wanted).
fn exported_rms(inv: Inv, weight_first: Option<bool>, eps: f32, two: f32) -> Graph {
    use onnx_build::*;
    let mut nodes = vec![
        node("Pow", &["x", "two"], &["p"], vec![]),
        node("ReduceMean", &["p"], &["v"], vec![a_ints("axes", &[-1]), a_int("keepdims", 1)]),
        node("Add", &["v", "eps"], &["ve"], vec![]),
        node("Sqrt", &["ve"], &["s"], vec![]),
    ];
    let out = if weight_first.is_some() { "h" } else { "y" };
    match inv {
        Inv::Reciprocal => {
            nodes.push(node("Reciprocal", &["s"], &["r"], vec![]));
            nodes.push(node("Mul", &["x", "r"], &[out], vec![]));
        }
        Inv::DivOne => {
            nodes.push(node("Div", &["one", "s"], &["r"], vec![]));
            nodes.push(node("Mul", &["x", "r"], &[out], vec![]));
        }
        Inv::Div => nodes.push(node("Div", &["x", "s"], &[out], vec![])),
    }
    match weight_first {
        Some(true) => nodes.push(node("Mul", &["w", "h"], &["y"], vec![])),
        Some(false) => nodes.push(node("Mul", &["h", "w"], &["y"], vec![])),
        None => {}
    }
    let inits =
        vec![tensor_f32("two", &[], &[two]), tensor_f32("eps", &[], &[eps]), tensor_f32("one", &[], &[1.0]), weight()];
    import(nodes, inits)
}

/// The tanh GELU as exporters write it: `torchlib` (`Pow(x, 3)`, constants first, `Sqrt(Div(2,
/// pi))` folded, `Mul(x, _)` then `Mul(0.5, _)`), `torchscript` (`x * (x * x)`, constants
/// first, sqrt(2/pi) rounded from double), `hf` (HF's `gelu_new` written out: `0.5 * x *
/// (1.0 + tanh(...))`, constants second) and `torchlib_new` (`x * (0.5 * (1 + t))`), with
/// the cubic coefficient `kappa` (0.044715 unless a near-miss is wanted).
fn exported_gelu_tanh(style: &str, kappa: f32) -> Graph {
    use onnx_build::*;
    let beta_double = (2.0 / std::f64::consts::PI).sqrt() as f32;
    let mut inits = vec![
        tensor_f32("three", &[], &[3.0]),
        tensor_f32("kappa", &[], &[kappa]),
        tensor_f32("one", &[], &[1.0]),
        tensor_f32("half", &[], &[0.5]),
        tensor_f32("two", &[], &[2.0]),
        tensor_f32("pi", &[], &[std::f32::consts::PI]),
        tensor_f32("beta", &[], &[beta_double]),
    ];
    let nodes = match style {
        "torchlib" | "torchlib_new" | "torchlib_i64" => {
            inits.push(tensor_i64("three_i", &[], &[3]));
            let three = if style == "torchlib_i64" { "three_i" } else { "three" };
            let mut n = vec![
                node("Pow", &["x", three], &["c"], vec![]),
                node("Mul", &["kappa", "c"], &["kc"], vec![]),
                node("Add", &["x", "kc"], &["a"], vec![]),
                node("Div", &["two", "pi"], &["q"], vec![]),
                node("Sqrt", &["q"], &["b"], vec![]),
                node("Mul", &["b", "a"], &["u"], vec![]),
                node("Tanh", &["u"], &["t"], vec![]),
                node("Add", &["t", "one"], &["tp"], vec![]),
            ];
            if style != "torchlib_new" {
                n.push(node("Mul", &["x", "tp"], &["m"], vec![]));
                n.push(node("Mul", &["half", "m"], &["y"], vec![]));
            } else {
                n.push(node("Mul", &["half", "tp"], &["m"], vec![]));
                n.push(node("Mul", &["x", "m"], &["y"], vec![]));
            }
            n
        }
        "torchscript" => vec![
            node("Mul", &["x", "x"], &["x2"], vec![]),
            node("Mul", &["x", "x2"], &["c"], vec![]),
            node("Mul", &["kappa", "c"], &["kc"], vec![]),
            node("Add", &["x", "kc"], &["a"], vec![]),
            node("Mul", &["beta", "a"], &["u"], vec![]),
            node("Tanh", &["u"], &["t"], vec![]),
            node("Add", &["one", "t"], &["tp"], vec![]),
            node("Mul", &["x", "tp"], &["m"], vec![]),
            node("Mul", &["half", "m"], &["y"], vec![]),
        ],
        _ => {
            vec![
                node("Pow", &["x", "three"], &["c"], vec![]),
                node("Mul", &["c", "kappa"], &["kc"], vec![]),
                node("Add", &["x", "kc"], &["a"], vec![]),
                node("Mul", &["a", "beta"], &["u"], vec![]),
                node("Tanh", &["u"], &["t"], vec![]),
                node("Add", &["t", "one"], &["tp"], vec![]),
                node("Mul", &["x", "half"], &["m"], vec![]),
                node("Mul", &["m", "tp"], &["y"], vec![]),
            ]
        }
    };
    import(nodes, inits)
}

/// The erf GELU in torchlib's two orders: `Mul(0.5, Mul(x, _))` and `Mul(x, Mul(0.5, _))`.
fn exported_gelu_erf(newer: bool) -> Graph {
    use onnx_build::*;
    let mut nodes = vec![
        node("Div", &["x", "sqrt2"], &["d"], vec![]),
        node("Erf", &["d"], &["e"], vec![]),
        node("Add", &["e", "one"], &["tp"], vec![]),
    ];
    if newer {
        nodes.push(node("Mul", &["half", "tp"], &["m"], vec![]));
        nodes.push(node("Mul", &["x", "m"], &["y"], vec![]));
    } else {
        nodes.push(node("Mul", &["x", "tp"], &["m"], vec![]));
        nodes.push(node("Mul", &["half", "m"], &["y"], vec![]));
    }
    let inits = vec![
        tensor_f32("sqrt2", &[], &[std::f32::consts::SQRT_2]),
        tensor_f32("one", &[], &[1.0]),
        tensor_f32("half", &[], &[0.5]),
    ];
    import(nodes, inits)
}

fn exported_log_softmax(opset: i64) -> Graph {
    use onnx_build::*;
    let y = vi("y", FLOAT, &[]);
    let attrs = if opset < 13 { vec![a_int("axis", 1)] } else { vec![] };
    let n = node("LogSoftmax", &["x"], &["y"], attrs);
    let bytes = encode(&model_proto(graph(vec![n], vec![x_input()], vec![y], vec![]), opset));
    ladder::frontend::onnx::import(&bytes, &Default::default()).unwrap()
}

/// Recovered and unrecovered plans of `g` agree (native, and reference with recovery against
/// the interpreter on the imported graph), and the recovered native plan has a library call.
fn plans_agree(g: &Graph, what: &str, scale_input: f32) {
    let on = CompileOptions::native_cpu(1).unwrap();
    let off = CompileOptions { recover: false, ..on.clone() };
    let reference = CompileOptions { recover: true, ..CompileOptions::reference() };
    let (with, without) = (compile(g, &on).unwrap(), compile(g, &off).unwrap());
    let refp = compile(g, &reference).unwrap();
    assert!(!library_ops(&with).is_empty(), "{what}: nothing recovered\n{}", with.explanation());
    assert!(!library_ops(&refp).is_empty(), "{what}: the reference plan recovers too");
    assert!(library_ops(&without).is_empty());
    for rows in [1, 5, 33] {
        let x =
            ladder::models::random_tensor(&mut ladder::models::Rng::new(rows as u64), DType::F32, &[rows, D]).unwrap();
        let x = Tensor::from_f32(&[rows, D], x.as_f32().unwrap().iter().map(|v| v * scale_input).collect()).unwrap();
        let inputs = std::slice::from_ref(&x);
        let want = ladder::interp::run(g, inputs, &Default::default()).unwrap().outputs[0].to_f64_vec();
        for (name, plan) in [("recovered", &with), ("unrecovered", &without), ("reference recovered", &refp)] {
            let got = plan.run(inputs).unwrap().outputs[0].to_f64_vec();
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
            for (p, q) in got.iter().zip(&want) {
                assert!((p - q).abs() <= 1e-5 * scale, "{what} {name} [{rows}, {D}]: {p} vs the interpreter's {q}");
            }
        }
    }
}

fn only_match(g: &Graph) -> ladder::recover::Match {
    let r = recovered(g);
    assert_eq!(r.matches.len(), 1, "{}", r.explain(g));
    r.matches[0].clone()
}

#[test]
fn exporter_rms_norms_are_recovered_with_eps_read_off_the_model() {
    for inv in [Inv::Reciprocal, Inv::DivOne, Inv::Div] {
        for weight_first in [Some(true), Some(false), None] {
            for eps in [1e-6f32, 1e-5, 0.0] {
                let what = format!("rms {inv:?} weight {weight_first:?} eps {eps}");
                let g = exported_rms(inv, weight_first, eps, 2.0);
                let m = only_match(&g);
                assert_eq!((m.rule, m.op), ("rms_norm_onnx", OpKind::RmsNorm), "{what}");
                assert_eq!(m.args.len(), if weight_first.is_some() { 2 } else { 1 }, "{what}");
                let got = m.attrs.iter().find(|(k, _)| k == "eps").map(|(_, v)| v.clone());
                assert_eq!(got, Some(AttrValue::Float(eps as f64)), "{what}: eps read off the model");
                if eps == 1e-6 {
                    plans_agree(&g, &what, 3.0);
                }
            }
        }
    }
}

/// An exporter's GELU is recovered with `nan_at_neg_inf`: its unfused product is NaN at -inf.
fn gelu_attrs(approximate: &str) -> Vec<(String, AttrValue)> {
    vec![
        ("approximate".to_string(), AttrValue::Str(approximate.into())),
        ("nan_at_neg_inf".to_string(), AttrValue::Bool(true)),
    ]
}

/// The recovered plan gives the interpreter's non-finite values (and zero signs) on a row of
/// infinities, NaN, huge and zero elements. One exception, by design: where the form's
/// `x * 2` overflows (`x > f32::MAX / 2`, `x * (1 + t)` before the `* 0.5`), the interpreter
/// running the form rounds an intermediate to inf and the kernel returns gelu's value, `x`.
fn non_finite_agree(g: &Graph, what: &str) {
    let plan = compile(g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
    assert!(!library_ops(&plan).is_empty(), "{what}: nothing recovered");
    let row = [f32::NEG_INFINITY, f32::INFINITY, f32::NAN, -1e30, 1e30, -0.0, 0.0, -200.0, f32::MAX, f32::MIN];
    let x = Tensor::from_f32(&[1, D], (0..D).map(|i| row[i % row.len()]).collect()).unwrap();
    let want = ladder::interp::run(g, std::slice::from_ref(&x), &Default::default()).unwrap().outputs[0].to_f64_vec();
    let got = plan.run(std::slice::from_ref(&x)).unwrap().outputs[0].to_f64_vec();
    for (i, (p, q)) in got.iter().zip(&want).enumerate() {
        let same = (p.is_nan() && q.is_nan()) || (p == q && p.is_sign_negative() == q.is_sign_negative());
        let close = p.is_finite() && q.is_finite() && *p != 0.0 && (p - q).abs() <= 1e-5 * q.abs();
        let overflowed = *q == f64::INFINITY && *p == x.as_f32().unwrap()[i] as f64 && *p > f32::MAX as f64 / 2.0;
        assert!(
            same || close || overflowed,
            "{what} at x = {}: recovered {p} vs the interpreter's {q}",
            x.as_f32().unwrap()[i]
        );
    }
}

#[test]
fn exporter_tanh_gelus_are_recovered_as_gelu_tanh() {
    for style in ["torchlib", "torchlib_i64", "torchlib_new", "torchscript", "hf"] {
        let g = exported_gelu_tanh(style, 0.044715);
        let m = only_match(&g);
        assert_eq!((m.rule, m.op, m.args.len()), ("gelu_tanh_onnx", OpKind::Gelu, 1), "{style}");
        assert_eq!(m.attrs, gelu_attrs("tanh"), "{style}");
        plans_agree(&g, style, 4.0);
        non_finite_agree(&g, style);
    }
    for newer in [false, true] {
        let g = exported_gelu_erf(newer);
        let m = only_match(&g);
        assert_eq!((m.rule, m.op), ("gelu_onnx", OpKind::Gelu), "erf, newer {newer}");
        assert_eq!(m.attrs, gelu_attrs("none"));
        plans_agree(&g, "gelu erf", 4.0);
        non_finite_agree(&g, "gelu erf");
    }
}

#[test]
fn onnx_log_softmax_is_recovered() {
    for opset in [11, 17] {
        let g = exported_log_softmax(opset);
        let m = only_match(&g);
        assert_eq!((m.rule, m.op, m.args.len()), ("log_softmax", OpKind::LogSoftmax, 1), "opset {opset}");
        plans_agree(&g, "log_softmax", 30.0);
    }
}

#[test]
fn exporter_near_misses_say_why() {
    // A cube of 2.9 is not GELU's; x^3 over a mean of squares is not an rms norm (the form's
    // square is `x * x` once simplified, so the cube shows as a `pow` in its place).
    let g = exported_gelu_tanh("torchlib", 0.0447);
    let r = recovered(&g);
    assert!(r.matches.is_empty(), "{}", r.explain(&g));
    assert!(
        r.near_misses.iter().any(|n| n.rule == "gelu_tanh_onnx" && n.reason.contains("a different constant")),
        "{}",
        r.explain(&g)
    );
    let g = exported_rms(Inv::Reciprocal, Some(true), 1e-6, 3.0);
    let r = recovered(&g);
    assert!(r.matches.is_empty(), "{}", r.explain(&g));
    assert!(
        r.near_misses.iter().any(|n| n.rule == "rms_norm_onnx" && n.reason.contains("pow where the form has mul")),
        "{}",
        r.explain(&g)
    );
}

// ---------------------------------------------------------------------------------------------
// Kernels against the interpreter
// ---------------------------------------------------------------------------------------------

/// A one-op graph over `[rows, n]` f32 input (and a weight `[n]`).
fn one_op(op: &str, attrs: &str, n: usize, rows: usize, weight: bool) -> Graph {
    let (sig, args) = if weight {
        (format!("%x: f32[{rows}, {n}], %w: f32[{n}]"), "%x, %w")
    } else {
        (format!("%x: f32[{rows}, {n}]"), "%x")
    };
    parse(&format!("graph one({sig}) {{\n  %y = {op}({args}) {{{attrs}}}\n  return %y\n}}"))
}

/// The cases the kernels are checked on: (op text, attributes, weight, op).
const CASES: [(&str, &str, bool, OpKind); 6] = [
    ("softmax", "axis=-1", false, OpKind::Softmax),
    ("log_softmax", "axis=-1", false, OpKind::LogSoftmax),
    ("rms_norm", "axis=-1, eps=1e-5", true, OpKind::RmsNorm),
    ("rms_norm", "axis=-1, eps=1e-6", false, OpKind::RmsNorm),
    ("rms_norm", "axis=-1, eps=0.0", true, OpKind::RmsNorm),
    ("rms_norm", "axis=-1, eps=0.0", false, OpKind::RmsNorm),
];

/// Runs `g`'s recovered native plan and the precise interpreter on `inputs` and compares
/// under the op's tolerance.
fn check(g: &Graph, plan: &Plan, kind: OpKind, inputs: &[Tensor], what: &str) {
    let precise = ladder::interp::Options { precise: true, ..Default::default() };
    let want = ladder::interp::run(g, inputs, &precise).unwrap().outputs;
    let got = plan.run(inputs).unwrap().outputs;
    let ctx = CompareCtx { graph: g, node: g.outputs()[0].value, inputs, output: "y" };
    if let Err(m) = compare(kind, &want[0], &got[0], &ctx) {
        panic!("{what}: {m}\ninput: {:?}", inputs[0]);
    }
}

fn native_plan(g: &Graph, kind: OpKind, threads: usize) -> Plan {
    let plan = compile(g, &CompileOptions::native_cpu(threads).unwrap()).unwrap();
    assert!(library_ops(&plan).contains(&kind), "not recovered:\n{}", plan.explanation());
    plan
}

#[test]
fn kernels_meet_the_tolerance_table_on_random_rows() {
    // Sizes around the 16-lane vectors and the 64-element unrolled loops, rows past the
    // prefetch limit (2048), a split over threads (65 x 1100 > 2^16 elements), empty dims.
    let shapes = [(1, 1), (3, 1), (1, 7), (4, 17), (2, 64), (3, 80), (2, 1024), (2, 2049), (65, 1100), (0, 5), (5, 0)];
    let mut compared = 0;
    for (ci, &(op, attrs, weight, kind)) in CASES.iter().enumerate() {
        for (si, &(rows, n)) in shapes.iter().enumerate() {
            let g = one_op(op, attrs, n, rows, weight);
            let plan = native_plan(&g, kind, 2);
            let seeds = if rows * n > 10_000 { 6 } else { 30 };
            for seed in 0..seeds {
                let bytes = ladder::gen::seeded_bytes((ci * 100 + si) as u64 * 1000 + seed, 64);
                let mut src = Source::new(&bytes);
                let mut inputs = vec![random_data(&mut src, DType::F32, &[rows, n])];
                if weight {
                    inputs.push(random_data(&mut src, DType::F32, &[n]));
                }
                check(&g, &plan, kind, &inputs, &format!("{op} {{{attrs}}} [{rows}, {n}] seed {seed}"));
                compared += 1;
            }
        }
    }
    eprintln!("{compared} random cases compared");
}

/// Rows that stress each kernel's special cases, `n` elements each.
pub(crate) fn adversarial_rows(n: usize) -> Vec<Vec<f32>> {
    let inf = f32::INFINITY;
    let fill = |f: &dyn Fn(usize) -> f32| (0..n).map(f).collect::<Vec<f32>>();
    vec![
        fill(&|i| if i == 0 { inf } else { i as f32 }),
        fill(&|_| -inf),
        fill(&|i| if i == n / 2 { f32::NAN } else { i as f32 * 0.5 }),
        // One infinity past the first element (layer_norm's statistics shift by the first).
        fill(&|i| if i == n / 2 { -inf } else { i as f32 * 0.5 }),
        fill(&|i| if i == n - 1 { inf } else { 1.0 - i as f32 }),
        fill(&|i| if i % 2 == 0 { -inf } else { i as f32 }),
        fill(&|i| if i % 3 == 0 { 3e38 } else { -3e38 }),
        fill(&|i| [1e-45, -1e-45, 1e-40, 0.0, -0.0][i % 5]),
        fill(&|i| [-1e4, 1e4, 9999.5, 1.25e4, -3e4][i % 5]),
        // Just past and before the exp flush (-87.34: 2^-126; -88: the floor).
        fill(&|i| if i == 0 { 0.0 } else { [-87.0, -87.3, -87.4, -87.7, -88.5, -104.0, -1e30][i % 7] }),
        fill(&|_| 0.0),
        fill(&|_| 3.4e38),
        fill(&|i| (i as f32 * 0.37).sin() * 20.0),
        fill(&|i| f32::from_bits(0x0080_0000 + i as u32 * 7919)),
        fill(&|i| if i == n - 1 { inf } else { -inf }),
        fill(&|i| if i + 1 == n { -inf } else { -(i as f32) }),
    ]
}

#[test]
fn kernels_meet_the_tolerance_table_on_adversarial_rows() {
    let mut compared = 0;
    for &(op, attrs, weight, kind) in &CASES {
        for n in [1, 2, 5, 16, 17, 63, 64, 65, 300, 2049] {
            let rows = adversarial_rows(n);
            let g = one_op(op, attrs, n, rows.len(), weight);
            let plan = native_plan(&g, kind, 1);
            let x = Tensor::from_f32(&[rows.len(), n], rows.concat()).unwrap();
            let mut inputs = vec![x];
            if weight {
                let w: Vec<f32> = (0..n).map(|i| [1.0, -2.5, 0.0, 1e-3, 3e4][i % 5]).collect();
                inputs.push(Tensor::from_f32(&[n], w).unwrap());
            }
            check(&g, &plan, kind, &inputs, &format!("{op} {{{attrs}}} adversarial rows of {n}"));
            compared += 1;
        }
    }
    eprintln!("{compared} adversarial cases compared");
}

/// The four row kernels (layer_norm with weight and bias among them) on rows whose lengths lie
/// around each path's vectors (8 lanes on AVX2, 16 on AVX-512 and in the portable chunks, 32
/// f64 lanes in the norms' statistics) and past the 2048-element scratch rows, adversarial and
/// random, many rows at a time (so that the pipelined kernels carry each row's results into the
/// next), on one thread and split over two. Run under each `LADDER_MAX_ISA` cap, this checks
/// every path's kernels against the interpreter; `rows.rs`'s unit tests check that the AVX2
/// and AVX-512 kernels give the portable code's bits.
#[test]
fn row_kernels_meet_the_tolerance_table_around_vector_lengths() {
    let ops: [(&str, &str, usize, OpKind); 5] = [
        ("softmax", "axis=-1", 0, OpKind::Softmax),
        ("log_softmax", "axis=-1", 0, OpKind::LogSoftmax),
        ("layer_norm", "axis=-1, eps=1e-5", 2, OpKind::LayerNorm),
        ("layer_norm", "axis=-1, eps=0.0", 0, OpKind::LayerNorm),
        ("rms_norm", "axis=-1, eps=1e-6", 1, OpKind::RmsNorm),
    ];
    let graph = |op: &str, attrs: &str, params: usize, rows: usize, n: usize| {
        let (sig, args) = match params {
            0 => (format!("%x: f32[{rows}, {n}]"), "%x"),
            1 => (format!("%x: f32[{rows}, {n}], %w: f32[{n}]"), "%x, %w"),
            _ => (format!("%x: f32[{rows}, {n}], %w: f32[{n}], %b: f32[{n}]"), "%x, %w, %b"),
        };
        parse(&format!("graph one({sig}) {{\n  %y = {op}({args}) {{{attrs}}}\n  return %y\n}}"))
    };
    let mut compared = 0;
    for (oi, &(op, attrs, count, kind)) in ops.iter().enumerate() {
        for n in [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 1023, 1024, 2049] {
            let rows = adversarial_rows(n);
            let g = graph(op, attrs, count, rows.len(), n);
            let plan = native_plan(&g, kind, 1);
            let mut inputs = vec![Tensor::from_f32(&[rows.len(), n], rows.concat()).unwrap()];
            inputs.extend(params(n, count));
            check(&g, &plan, kind, &inputs, &format!("{op} {{{attrs}}} adversarial rows of {n}"));
            // Enough rows to be split over two threads (at least 2^16 elements).
            let many = (1usize << 16).div_ceil(n).max(2) + 3;
            let g = graph(op, attrs, count, many, n);
            let plan = native_plan(&g, kind, 2);
            let bytes = ladder::gen::seeded_bytes((oi * 10_000 + n) as u64, 64);
            let mut inputs = vec![random_data(&mut Source::new(&bytes), DType::F32, &[many, n])];
            inputs.extend(params(n, count));
            check(&g, &plan, kind, &inputs, &format!("{op} {{{attrs}}} [{many}, {n}] over two threads"));
            compared += 2;
        }
    }
    eprintln!("{compared} cases compared");
}

/// The first `count` of a weight and a bias for rows of `n`: ones, signs, zeros, small and
/// large values.
pub(crate) fn params(n: usize, count: usize) -> Vec<Tensor> {
    let w = Tensor::from_f32(&[n], (0..n).map(|i| [1.0, -2.5, 0.0, 1e-3, 3e4, 0.75][i % 6]).collect()).unwrap();
    let b = Tensor::from_f32(&[n], (0..n).map(|i| (i % 5) as f32 - 2.0).collect()).unwrap();
    [w, b].into_iter().take(count).collect()
}

#[test]
fn exp_neg_stays_within_one_ulp_over_the_softmax_range() {
    use ladder::backend::cpu::rows::exp_neg;
    assert_eq!(exp_neg(0.0), 1.0);
    assert_eq!(exp_neg(-0.0), 1.0);
    assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
    assert!(exp_neg(f32::NAN).is_nan());
    assert_eq!(exp_neg(-88.0), 0.0);
    assert_eq!(exp_neg(-1e30), 0.0);
    // Every 997th f32 from -0 down to -88 (about 1.1 million), against f64: 1 ulp where the
    // result is normal, 2^-126 absolute below.
    let tiny = f32::MIN_POSITIVE as f64;
    let mut worst = 0f64;
    let mut bits = 0x8000_0000u32;
    while f32::from_bits(bits) >= -88.0 {
        let d = f32::from_bits(bits);
        let (got, want) = (exp_neg(d) as f64, (d as f64).exp());
        if want >= tiny {
            let ulp = ladder::numerics::ulp_at(DType::F32, want);
            let u = (got - want).abs() / ulp;
            assert!(u <= 1.0, "exp_neg({d:e}) = {got:e}, exp = {want:e}: {u} ulp");
            worst = worst.max(u);
        } else {
            assert!((got - want).abs() <= tiny, "exp_neg({d:e}) = {got:e}, exp = {want:e}");
        }
        bits += 997;
    }
    eprintln!("exp_neg: worst {worst:.3} ulp");
}

#[test]
fn kernel_errors_are_typed() {
    use ladder::backend::cpu::rows::run_f32;
    let attrs =
        |op: OpKind, given: Vec<(String, AttrValue)>| ladder::ir::Attrs::resolve(op.spec().attrs, given).unwrap();
    let x = [1.0f32; 6];
    let mut out = [0f32; 6];
    let rms = attrs(OpKind::RmsNorm, vec![]);
    // A weight of the wrong length, an output of the wrong length, an axis other than the last.
    assert!(run_f32(OpKind::RmsNorm, &rms, &[&x, &[1.0; 2]], &[&[2, 3], &[2]], &mut out, 1).is_err());
    assert!(
        run_f32(OpKind::LogSoftmax, &attrs(OpKind::LogSoftmax, vec![]), &[&x], &[&[2, 3]], &mut out[..5], 1).is_err()
    );
    let axis0 = attrs(OpKind::LogSoftmax, vec![("axis".into(), AttrValue::Int(0))]);
    assert!(run_f32(OpKind::LogSoftmax, &axis0, &[&x], &[&[2, 3]], &mut out, 1).is_err());
    assert!(run_f32(OpKind::RmsNorm, &rms, &[&x], &[&[2, 3]], &mut out, 1).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Whole models
// ---------------------------------------------------------------------------------------------

/// A small transformer block in ladder's ops: rms_norm, a tanh-GELU MLP with a residual,
/// rms_norm again, log_softmax.
fn block() -> Graph {
    parse(
        "graph block(%x: f32[n, 32], %g: f32[32], %w1: f32[32, 64], %w2: f32[64, 32], %g2: f32[32]) {
  %h = rms_norm(%x, %g) {axis=-1, eps=1e-6}
  %a = matmul(%h, %w1)
  %b = gelu(%a) {approximate=\"tanh\"}
  %c = matmul(%b, %w2)
  %r = add(%c, %x)
  %h2 = rms_norm(%r, %g2) {axis=-1, eps=1e-5}
  %y = log_softmax(%h2) {axis=-1}
  return %y
}",
    )
}

/// The same block as an exporter writes it, imported from ONNX.
fn exported_block() -> Graph {
    use onnx_build::*;
    let mut rng = ladder::models::Rng::new(7);
    let mut param = |name: &str, dims: &[usize], scale: f32| {
        let t = ladder::models::random_tensor(&mut rng, DType::F32, dims).unwrap();
        let v: Vec<f32> = t.as_f32().unwrap().iter().map(|v| v * scale).collect();
        tensor_f32(name, &dims.iter().map(|&d| d as i64).collect::<Vec<_>>(), &v)
    };
    let inits = vec![
        param("g", &[32], 1.0),
        param("w1", &[32, 64], 0.3),
        param("w2", &[64, 32], 0.3),
        tensor_f32("two", &[], &[2.0]),
        tensor_f32("eps", &[], &[1e-6]),
        tensor_f32("three", &[], &[3.0]),
        tensor_f32("kappa", &[], &[0.044715]),
        tensor_f32("beta", &[], &[(2.0 / std::f64::consts::PI).sqrt() as f32]),
        tensor_f32("one", &[], &[1.0]),
        tensor_f32("half", &[], &[0.5]),
    ];
    let nodes = vec![
        node("Pow", &["x", "two"], &["p"], vec![]),
        node("ReduceMean", &["p"], &["v"], vec![a_ints("axes", &[-1]), a_int("keepdims", 1)]),
        node("Add", &["v", "eps"], &["ve"], vec![]),
        node("Sqrt", &["ve"], &["s"], vec![]),
        node("Reciprocal", &["s"], &["r"], vec![]),
        node("Mul", &["x", "r"], &["hn"], vec![]),
        node("Mul", &["g", "hn"], &["h"], vec![]),
        node("MatMul", &["h", "w1"], &["a"], vec![]),
        node("Pow", &["a", "three"], &["c"], vec![]),
        node("Mul", &["kappa", "c"], &["kc"], vec![]),
        node("Add", &["a", "kc"], &["ak"], vec![]),
        node("Mul", &["beta", "ak"], &["u"], vec![]),
        node("Tanh", &["u"], &["t"], vec![]),
        node("Add", &["t", "one"], &["tp"], vec![]),
        node("Mul", &["a", "tp"], &["m"], vec![]),
        node("Mul", &["half", "m"], &["b"], vec![]),
        node("MatMul", &["b", "w2"], &["o"], vec![]),
        node("Add", &["o", "x"], &["res"], vec![]),
        node("LogSoftmax", &["res"], &["y"], vec![a_int("axis", -1)]),
    ];
    let x = vi("x", FLOAT, &["n", "32"]);
    let bytes = encode(&model_proto(graph(nodes, vec![x], vec![vi("y", FLOAT, &[])], inits), 17));
    ladder::frontend::onnx::import(&bytes, &Default::default()).unwrap()
}

#[test]
fn whole_models_recovered_and_unrecovered_agree_on_native_and_reference_backends() {
    let native = CompileOptions::native_cpu(2).unwrap();
    let options = [
        ("native", native.clone(), true),
        ("native --no-recover", CompileOptions { recover: false, ..native }, false),
        ("reference recovered", CompileOptions { recover: true, ..CompileOptions::reference() }, true),
        ("reference", CompileOptions::reference(), false),
    ];
    for (model, g, want_ops) in [
        ("block", block(), vec![OpKind::RmsNorm, OpKind::Gelu, OpKind::RmsNorm, OpKind::LogSoftmax]),
        ("exported block", exported_block(), vec![OpKind::RmsNorm, OpKind::Gelu, OpKind::LogSoftmax]),
    ] {
        let plans: Vec<(&str, Plan, bool)> =
            options.iter().map(|(name, o, rec)| (*name, compile(&g, o).unwrap(), *rec)).collect();
        for (name, plan, rec) in &plans {
            let mut ops = library_ops(plan);
            ops.sort_by_key(|o| o.name());
            let mut want = if *rec { want_ops.clone() } else { vec![] };
            want.sort_by_key(|o| o.name());
            assert_eq!(ops, want, "{model} {name}:\n{}", plan.explanation());
        }
        let mut params = Vec::new();
        let mut rng = ladder::models::Rng::new(11);
        for input in g.inputs().iter().skip(1) {
            let dims: Vec<usize> = g.ty(*input).shape.dims().iter().map(|d| d.as_const().unwrap() as usize).collect();
            params.push(ladder::models::random_tensor(&mut rng, DType::F32, &dims).unwrap());
        }
        for rows in [1, 7, 300] {
            let x = ladder::models::random_tensor(&mut rng, DType::F32, &[rows, 32]).unwrap();
            let mut inputs = vec![x];
            inputs.extend(params.iter().cloned());
            let want = ladder::interp::run(&g, &inputs, &Default::default()).unwrap().outputs[0].to_f64_vec();
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
            for (name, plan, _) in &plans {
                let got = plan.run(&inputs).unwrap().outputs[0].to_f64_vec();
                assert_eq!(got.len(), want.len());
                let worst = got.iter().zip(&want).map(|(p, q)| (p - q).abs() / scale).fold(0f64, f64::max);
                assert!(
                    worst <= 1e-5,
                    "{model} {name} [{rows}, 32]: {worst:e} from the interpreter (relative to the max)"
                );
            }
        }
    }
}
