//! Recovery (`ladder::recover`): which clusters it puts back, which it refuses and why, and
//! the library kernels it hands them to, checked against the interpreter running the op
//! (the oracle) under the tolerance table on random and adversarial rows, and recovered
//! against unrecovered plans on a whole model.

use ladder::gen::Source;
use ladder::kernel::Step;
use ladder::numerics::{compare, random_data, CompareCtx};
use ladder::recover::recover;
use ladder::{compile, CompileOptions, DType, Graph, OpKind, Tensor};

fn parse(text: &str) -> Graph {
    ladder::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn recovered(g: &Graph) -> ladder::recover::Recovered {
    recover(&ladder::passes::lower(g).unwrap().simplified).unwrap()
}

#[test]
fn ladder_ops_come_back_from_their_prims() {
    let g = parse(
        "graph ops(%x: f32[n, 16], %w: f32[16], %b: f32[16], %u: f32[n, 16], %v: f32[n, 16], %t: f32[n, 16]) {
  %s = softmax(%x) {axis=-1}
  %l = layer_norm(%u, %w, %b) {axis=-1, eps=0.001}
  %m = layer_norm(%v, %w) {axis=-1, eps=1e-5}
  %k = layer_norm(%t) {axis=-1, eps=1e-6}
  %g = gelu(%x)
  %h = gelu(%u) {approximate=\"tanh\"}
  %i = silu(%v)
  %j = sigmoid(%t)
  return %s, %l, %m, %k, %g, %h, %i, %j
}",
    );
    let r = recovered(&g);
    let found: Vec<(OpKind, usize, String)> = r
        .matches
        .iter()
        .map(|m| {
            let attrs: Vec<String> = m.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            (m.op, m.args.len(), attrs.join(" "))
        })
        .collect();
    let want = [
        (OpKind::Softmax, 1, "axis=-1"),
        (OpKind::LayerNorm, 3, "axis=-1 eps=0.001"),
        (OpKind::LayerNorm, 2, "axis=-1 eps=1e-5"),
        (OpKind::LayerNorm, 1, "axis=-1 eps=1e-6"),
        (OpKind::Gelu, 1, "approximate=\"none\""),
        (OpKind::Gelu, 1, "approximate=\"tanh\""),
        (OpKind::Silu, 1, ""),
        (OpKind::Sigmoid, 1, ""),
    ];
    for (op, n, attrs) in want {
        assert!(
            found.iter().any(|(o, k, a)| *o == op && *k == n && a == attrs),
            "{op} with {n} args {{{attrs}}} not recovered; found {found:?}\n{}",
            r.explain(&g)
        );
    }
    // Only the recovered ops and their arguments are left: no prims of theirs.
    let text = ladder::text::print(&r.graph);
    for prim in ["exp(", "erf(", "rsqrt(", "reduce_max(", "where("] {
        assert!(!text.contains(prim), "{prim} left behind:\n{text}");
    }
}

#[test]
fn near_misses_say_why() {
    // Softmax over the first axis (the kernel takes rows); an f64 layer_norm; a softmax
    // whose exp is also used elsewhere.
    let g = parse(
        "graph near(%x: f32[4, 8], %y: f64[4, 8], %z: f32[4, 8]) {
  %a = softmax(%x) {axis=0}
  %b = layer_norm(%y) {axis=-1}
  %c = softmax(%z) {axis=-1}
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
    let reasons: Vec<&str> = r.near_misses.iter().map(|n| n.reason.as_str()).collect();
    // The axis-0 softmax differs from the last-axis form where its row maximum is shaped.
    assert!(reasons.iter().any(|m| m.contains("f32[1, 8]") && m.contains("f32[4, 1]")), "{text}");
    assert!(reasons.iter().any(|m| m.contains("f64 elements")), "{text}");
    assert!(reasons.iter().any(|m| m.contains("also used by") || m.contains("graph output")), "{text}");
}

#[test]
fn exporter_silu_is_one_kernel() {
    // SiLU as exporters write it: Sigmoid then Mul, the product in either order, the sigmoid
    // used once. A sigmoid also used elsewhere keeps its own kernel and the Mul stays.
    let g = parse(
        "graph yolo(%x: f32[n, 16], %z: f32[n, 16]) {
  %s = sigmoid(%x)
  %y = mul(%s, %x)
  %t = sigmoid(%z)
  %u = mul(%z, %t)
  %v = add(%u, %t)
  return %y, %v
}",
    );
    let r = recovered(&g);
    let ops: Vec<OpKind> = r.matches.iter().map(|m| m.op).collect();
    assert_eq!(ops.iter().filter(|&&o| o == OpKind::Silu).count(), 1, "{}", r.explain(&g));
    assert_eq!(ops.iter().filter(|&&o| o == OpKind::Sigmoid).count(), 1, "{}", r.explain(&g));
    let plan = compile(&g, &CompileOptions::native_cpu(1).unwrap()).unwrap();
    let bytes = ladder::gen::seeded_bytes(7, 256);
    let mut src = Source::new(&bytes);
    let inputs = vec![random_data(&mut src, DType::F32, &[5, 16]), random_data(&mut src, DType::F32, &[5, 16])];
    let precise = ladder::interp::Options { precise: true, ..Default::default() };
    let want = ladder::interp::run(&g, &inputs, &precise).unwrap().outputs;
    let got = plan.run(&inputs).unwrap().outputs;
    for (i, (w, o)) in want.iter().zip(&got).enumerate() {
        let node = g.outputs()[i].value;
        let ctx = CompareCtx { graph: &g, node, inputs: &inputs, output: "y" };
        compare(OpKind::Silu, w, o, &ctx).unwrap_or_else(|m| panic!("output {i}: {m}"));
    }
}

#[test]
fn gate_activations_on_slices_stay_prims() {
    // An LSTM's gates: sigmoid of slices of one GEMM output. The prims fuse into the loop
    // that reads the slice; a library call would need it copied out first.
    let g = parse(
        "graph gates(%x: f32[2, 64]) {
  %i = slice(%x) {axis=1, start=0, end=32}
  %f = slice(%x) {axis=1, start=32, end=64}
  %a = sigmoid(%i)
  %b = silu(%f)
  return %a, %b
}",
    );
    let r = recovered(&g);
    assert!(r.matches.is_empty(), "{}", r.explain(&g));
    let why: Vec<&str> = r.near_misses.iter().map(|n| n.reason.as_str()).collect();
    assert_eq!(why.iter().filter(|w| w.contains("is a slice")).count(), 2, "{}", r.explain(&g));
}

/// A one-op graph over `[rows, n]` f32 input(s).
fn one_op(op: &str, attrs: &str, n: usize, rows: usize, params: usize) -> Graph {
    let mut sig = format!("%x: f32[{rows}, {n}]");
    let mut args = "%x".to_string();
    for p in ["w", "b"].iter().take(params) {
        sig.push_str(&format!(", %{p}: f32[{n}]"));
        args.push_str(&format!(", %{p}"));
    }
    parse(&format!("graph one({sig}) {{\n  %y = {op}({args}) {{{attrs}}}\n  return %y\n}}"))
}

#[test]
fn library_kernels_meet_the_tolerance_table_on_adversarial_rows() {
    let cases: [(&str, &str, usize, OpKind); 8] = [
        ("softmax", "axis=-1", 0, OpKind::Softmax),
        ("layer_norm", "axis=-1, eps=1e-5", 2, OpKind::LayerNorm),
        ("layer_norm", "axis=-1, eps=0.01", 1, OpKind::LayerNorm),
        ("layer_norm", "axis=-1, eps=0.0", 0, OpKind::LayerNorm),
        ("gelu", "approximate=\"none\"", 0, OpKind::Gelu),
        ("gelu", "approximate=\"tanh\"", 0, OpKind::Gelu),
        ("silu", "", 0, OpKind::Silu),
        ("sigmoid", "", 0, OpKind::Sigmoid),
    ];
    let shapes = [(1, 1), (3, 1), (1, 7), (4, 17), (2, 1024), (65, 33), (0, 5), (5, 0)];
    let native = CompileOptions::native_cpu(2).unwrap();
    let mut compared = 0;
    for (ci, &(op, attrs, params, kind)) in cases.iter().enumerate() {
        for (si, &(rows, n)) in shapes.iter().enumerate() {
            let g = one_op(op, attrs, n, rows, params);
            let plan = compile(&g, &native).unwrap();
            let program = plan.program().unwrap();
            assert!(
                program.steps.iter().any(|s| matches!(s, Step::Library(l) if l.op == kind)),
                "{op} [{rows}, {n}] was not recovered:\n{program}\n{}",
                plan.explanation()
            );
            for seed in 0..40u64 {
                let bytes = ladder::gen::seeded_bytes((ci * 100 + si) as u64 * 1000 + seed, 64);
                let mut src = Source::new(&bytes);
                let mut inputs = vec![random_data(&mut src, DType::F32, &[rows, n])];
                for _ in 0..params {
                    inputs.push(random_data(&mut src, DType::F32, &[n]));
                }
                let precise = ladder::interp::Options { precise: true, ..Default::default() };
                let want = ladder::interp::run(&g, &inputs, &precise).unwrap().outputs;
                let got = plan.run(&inputs).unwrap().outputs;
                let node = g.outputs()[0].value;
                let ctx = CompareCtx { graph: &g, node, inputs: &inputs, output: "y" };
                if let Err(m) = compare(kind, &want[0], &got[0], &ctx) {
                    panic!("{op} {{{attrs}}} [{rows}, {n}] seed {seed}: {m}\ninputs: {:?}", inputs[0]);
                }
                compared += 1;
            }
        }
    }
    eprintln!("{compared} library-kernel cases compared");
}

#[test]
fn recovered_and_unrecovered_plans_agree_on_the_encoder() {
    let g = ladder::models::example_encoder().unwrap();
    let on = CompileOptions::native_cpu(1).unwrap();
    let off = CompileOptions { recover: false, ..on.clone() };
    let (with, without) = (compile(&g, &on).unwrap(), compile(&g, &off).unwrap());
    let libs = |p: &ladder::Plan| p.program().unwrap().steps.iter().filter(|s| matches!(s, Step::Library(_))).count();
    assert!(libs(&with) >= 3, "the encoder's softmax, layer norms and gelu recover:\n{}", with.explanation());
    assert_eq!(libs(&without), 0);
    for seq in [1, 6, 19] {
        let x = ladder::models::random_tensor(&mut ladder::models::Rng::new(seq), DType::F32, &[1, seq as usize, 32])
            .unwrap();
        let a = with.run(std::slice::from_ref(&x)).unwrap().outputs;
        let b = without.run(std::slice::from_ref(&x)).unwrap().outputs;
        for (p, q) in a.iter().zip(&b) {
            let (p, q): (Vec<f64>, Vec<f64>) = (p.to_f64_vec(), q.to_f64_vec());
            let scale = q.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
            let worst = p.iter().zip(&q).map(|(x, y)| (x - y).abs() / scale).fold(0f64, f64::max);
            assert!(worst <= 1e-5, "seq {seq}: recovered and unrecovered differ by {worst:e} (relative to the max)");
        }
    }
}

#[test]
fn the_reference_mode_never_recovers() {
    let g = one_op("softmax", "axis=-1", 8, 2, 0);
    let plan = compile(&g, &CompileOptions::reference()).unwrap();
    assert!(!plan.program().unwrap().steps.iter().any(|s| matches!(s, Step::Library(_))));
    let x = Tensor::from_f32(&[2, 8], (0..16).map(|i| i as f32 * 0.25).collect()).unwrap();
    let want = ladder::interp::run(
        &ladder::passes::lower(&g).unwrap().simplified,
        std::slice::from_ref(&x),
        &Default::default(),
    )
    .unwrap();
    assert!(plan.run(std::slice::from_ref(&x)).unwrap().outputs[0].bit_eq(&want.outputs[0]));
}

use crate::onnx_build;

/// ONNX models as exporters write GELU (`Div`/`Erf`/`Add`/`Mul`/`Mul`) and layer norm
/// (`ReduceMean`/`Sub`/`Pow`/`ReduceMean`/`Add`/`Sqrt`/`Div`/`Mul`/`Add`), imported.
fn exported(which: &str, eps: f32) -> Graph {
    use onnx_build::*;
    let x = vi("x", FLOAT, &["n", "24"]);
    let y = vi("y", FLOAT, &[]);
    let (nodes, inits) = match which {
        "gelu" => (
            vec![
                node("Div", &["x", "sqrt2"], &["d"], vec![]),
                node("Erf", &["d"], &["e"], vec![]),
                node("Add", &["e", "one"], &["a"], vec![]),
                node("Mul", &["x", "a"], &["m"], vec![]),
                node("Mul", &["m", "half"], &["y"], vec![]),
            ],
            vec![
                tensor_f32("sqrt2", &[], &[std::f32::consts::SQRT_2]),
                tensor_f32("one", &[], &[1.0]),
                tensor_f32("half", &[], &[0.5]),
            ],
        ),
        _ => (
            vec![
                node("ReduceMean", &["x"], &["mu"], vec![a_ints("axes", &[-1]), a_int("keepdims", 1)]),
                node("Sub", &["x", "mu"], &["d"], vec![]),
                node("Pow", &["d", "two"], &["p"], vec![]),
                node("ReduceMean", &["p"], &["v"], vec![a_ints("axes", &[-1]), a_int("keepdims", 1)]),
                node("Add", &["v", "eps"], &["ve"], vec![]),
                node("Sqrt", &["ve"], &["s"], vec![]),
                node("Div", &["d", "s"], &["nrm"], vec![]),
                node("Mul", &["nrm", "w"], &["nw"], vec![]),
                node("Add", &["nw", "b"], &["y"], vec![]),
            ],
            vec![
                tensor_f32("two", &[], &[2.0]),
                tensor_f32("eps", &[], &[eps]),
                tensor_f32("w", &[24], &(0..24).map(|i| 0.5 + i as f32 * 0.1).collect::<Vec<_>>()),
                tensor_f32("b", &[24], &(0..24).map(|i| i as f32 * -0.05).collect::<Vec<_>>()),
            ],
        ),
    };
    let bytes = encode(&model_proto(graph(nodes, vec![x], vec![y], inits), 17));
    ladder::frontend::onnx::import(&bytes, &Default::default()).unwrap()
}

#[test]
fn exporter_forms_of_gelu_and_layer_norm_are_recovered() {
    for (which, rule, eps) in
        [("gelu", "gelu_onnx", 0.0), ("ln", "layer_norm_onnx", 1e-5), ("ln", "layer_norm_onnx", 0.03)]
    {
        let g = exported(which, eps);
        let r = recovered(&g);
        assert_eq!(r.matches.len(), 1, "{which}: {}", r.explain(&g));
        assert_eq!(r.matches[0].rule, rule);
        if which == "ln" {
            let got = r.matches[0].attrs.iter().find(|(k, _)| k == "eps").map(|(_, v)| v.clone());
            assert_eq!(got, Some(ladder::ir::AttrValue::Float(eps as f64)), "eps read off the model");
        }
        // Recovered and unrecovered plans agree, and both stay close to the exact function.
        let on = CompileOptions::native_cpu(1).unwrap();
        let off = CompileOptions { recover: false, ..on.clone() };
        let (with, without) = (compile(&g, &on).unwrap(), compile(&g, &off).unwrap());
        assert!(with.program().unwrap().steps.iter().any(|s| matches!(s, Step::Library(_))));
        let x = ladder::models::random_tensor(&mut ladder::models::Rng::new(4), DType::F32, &[5, 24]).unwrap();
        let x = Tensor::from_f32(&[5, 24], x.as_f32().unwrap().iter().map(|v| v * 4.0).collect()).unwrap();
        let a = with.run(std::slice::from_ref(&x)).unwrap().outputs[0].to_f64_vec();
        let b = without.run(std::slice::from_ref(&x)).unwrap().outputs[0].to_f64_vec();
        let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() <= 1e-5 * scale, "{which}: recovered {p} vs unrecovered {q}");
        }
    }
}

#[test]
fn attention_is_recovered_and_its_kernel_meets_the_tolerance_table() {
    // (heads, L, S, D, Dv), causal, scale ("nan" is the default 1/sqrt(D)).
    let cases = [
        (2, 8, 8, 4, 4, false, "nan"),
        (2, 8, 8, 4, 4, true, "0.5"),
        (1, 70, 130, 16, 8, true, "0.25"),
        (3, 130, 70, 8, 16, false, "nan"),
        (1, 1, 1, 3, 2, true, "1.0"),
        (1, 5, 9, 1, 1, false, "2.0"),
        (2, 65, 65, 32, 32, true, "nan"),
    ];
    let native = CompileOptions::native_cpu(2).unwrap();
    let mut compared = 0;
    for (ci, &(h, l, s, d, dv, causal, scale)) in cases.iter().enumerate() {
        let g = parse(&format!(
            "graph att(%q: f32[{h}, {l}, {d}], %k: f32[{h}, {s}, {d}], %v: f32[{h}, {s}, {dv}]) {{
  %y = scaled_dot_product_attention(%q, %k, %v) {{causal={causal}, scale={scale}}}
  return %y
}}"
        ));
        let plan = compile(&g, &native).unwrap();
        let program = plan.program().unwrap();
        assert!(
            program
                .steps
                .iter()
                .any(|st| matches!(st, Step::Library(lib) if lib.op == OpKind::ScaledDotProductAttention)),
            "case {ci} not recovered:\n{}",
            plan.explanation()
        );
        for seed in 0..30u64 {
            // Adversarial data (the generator's profiles: huge, tiny, NaN, ±inf), and plain
            // values in [-1, 1), where the table's bound is tight enough to catch a wrong mask.
            let inputs = if seed < 20 {
                let bytes = ladder::gen::seeded_bytes(ci as u64 * 1000 + seed, 64);
                let mut src = Source::new(&bytes);
                vec![
                    random_data(&mut src, DType::F32, &[h, l, d]),
                    random_data(&mut src, DType::F32, &[h, s, d]),
                    random_data(&mut src, DType::F32, &[h, s, dv]),
                ]
            } else {
                let mut rng = ladder::models::Rng::new(ci as u64 * 1000 + seed);
                [[h, l, d], [h, s, d], [h, s, dv]]
                    .iter()
                    .map(|sh| ladder::models::random_tensor(&mut rng, DType::F32, sh).unwrap())
                    .collect()
            };
            let precise = ladder::interp::Options { precise: true, ..Default::default() };
            let want = ladder::interp::run(&g, &inputs, &precise).unwrap().outputs;
            let got = plan.run(&inputs).unwrap().outputs;
            let ctx = CompareCtx { graph: &g, node: g.outputs()[0].value, inputs: &inputs, output: "y" };
            if let Err(m) = compare(OpKind::ScaledDotProductAttention, &want[0], &got[0], &ctx) {
                panic!("attention case {ci} seed {seed}: {m}");
            }
            compared += 1;
        }
    }
    eprintln!("{compared} attention cases compared");
}
