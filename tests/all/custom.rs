//! Custom kernels (`ladder::ops::custom`): a registered Rust function as an operator, in the
//! text form and in an ONNX model of a custom domain, on the interpreter, the reference plan
//! and the native CPU plan; and the typed errors around it. Every test registers names of
//! its own, so the tests run in parallel in one process.

use std::sync::Arc;

use super::onnx_build::{a_float, a_str, encode, graph, model_proto, node, vi, FLOAT};
use ladder::frontend::onnx::{import, ImportError, ImportOptions};
use ladder::kernel::Step;
use ladder::ops::custom::{register, unregister, CustomAttrs, CustomOp};
use ladder::ops::OpKind;
use ladder::text::{parse, print};
use ladder::{compile, BackendKind, CompileOptions, Graph, Tensor, TensorType};

/// `min(max(x, 0), cap)` on f32 with `cap` from the attribute `cap` (6 by default).
fn relu6(x: f32, cap: f32) -> f32 {
    x.max(0.0).min(cap)
}

/// Registers a relu6 named `name` in `domain`: same type as its one f32 operand.
fn register_relu6(name: &str, domain: &str) {
    register(CustomOp {
        name: name.into(),
        domain: domain.into(),
        shape: Arc::new(|args: &[TensorType], _: &CustomAttrs| match args {
            [x] if x.dtype == ladder::DType::F32 => Ok(x.clone()),
            _ => Err(format!("takes one f32 operand, got {} operands", args.len())),
        }),
        compute: Arc::new(|args: &[Tensor], attrs: &CustomAttrs| {
            let cap = attrs.float("cap").unwrap_or(6.0) as f32;
            let x = args[0].as_f32().ok_or("not f32")?;
            Tensor::from_f32(args[0].shape(), x.iter().map(|&v| relu6(v, cap)).collect()).map_err(|e| e.to_string())
        }),
    })
    .unwrap();
}

fn interp() -> CompileOptions {
    CompileOptions { backend: BackendKind::Interp, ..CompileOptions::reference() }
}

fn native() -> CompileOptions {
    CompileOptions::native_cpu(1).unwrap()
}

/// `g` run on the interpreter, the reference plan and the native CPU plan: the three results,
/// which must agree bit for bit.
fn run_everywhere(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut results = Vec::new();
    for (what, options) in [("interp", interp()), ("reference", CompileOptions::reference()), ("native", native())] {
        let plan = compile(g, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = plan.run(inputs).unwrap_or_else(|e| panic!("{what}: {e}")).outputs;
        results.push(out);
    }
    for r in &results[1..] {
        assert!(r.iter().zip(&results[0]).all(|(a, b)| a.bit_eq(b)), "executors disagree: {results:?}");
    }
    results.swap_remove(0)
}

fn values() -> Tensor {
    Tensor::from_f32(&[2, 4], vec![-3.0, 0.5, 5.9, 6.1, 100.0, -0.0, 2.0, f32::INFINITY]).unwrap()
}

#[test]
fn a_text_graph_runs_the_registered_function_everywhere() {
    register_relu6("test_relu6_text", "");
    let src = "graph g(%x: f32[2, 4]) {\n  %y = custom(%x) {name=\"test_relu6_text\"}\n  return %y\n}\n";
    let g = parse(src).unwrap();
    assert_eq!(parse(&print(&g)).unwrap(), g, "the text form round-trips:\n{}", print(&g));
    let x = values();
    let out = run_everywhere(&g, std::slice::from_ref(&x));
    let want: Vec<f32> = x.as_f32().unwrap().iter().map(|&v| relu6(v, 6.0)).collect();
    assert_eq!(out[0].as_f32().unwrap(), want.as_slice());
}

#[test]
fn attributes_reach_the_function_and_round_trip() {
    register_relu6("test_relu6_attrs", "");
    let src = "graph g(%x: f32[2, 4]) {\n  %y = custom(%x) {name=\"test_relu6_attrs\", attrs=\"cap:f=2.5\"}\n  return %y\n}\n";
    let g = parse(src).unwrap();
    assert_eq!(parse(&print(&g)).unwrap(), g);
    let x = values();
    let out = run_everywhere(&g, std::slice::from_ref(&x));
    let want: Vec<f32> = x.as_f32().unwrap().iter().map(|&v| relu6(v, 2.5)).collect();
    assert_eq!(out[0].as_f32().unwrap(), want.as_slice());
}

#[test]
fn its_neighbours_are_still_compiled_and_it_is_never_folded() {
    register_relu6("test_relu6_fused", "");
    let src = "graph g(%x: f32[2, 4], %b: f32[4]) {
  %two = full() {shape=[], value=2.0}
  %one = full() {shape=[], value=1.0}
  %s = mul(%x, %two)
  %t = add(%s, %b)
  %c = custom(%t) {name=\"test_relu6_fused\"}
  %e = exp(%c)
  %y = sub(%e, %one)
  %k = full() {shape=[4], value=9.0}
  %z = custom(%k) {name=\"test_relu6_fused\"}
  %w = add(%y, %z)
  return %w
}
";
    let g = parse(src).unwrap();
    let x = values();
    let b = Tensor::from_f32(&[4], vec![0.5, -1.0, 0.25, 3.0]).unwrap();
    let out = run_everywhere(&g, &[x.clone(), b.clone()]);
    let (xv, bv) = (x.as_f32().unwrap(), b.as_f32().unwrap());
    let want: Vec<f32> = (0..8).map(|i| (relu6(xv[i] * 2.0 + bv[i % 4], 6.0).exp() - 1.0) + relu6(9.0, 6.0)).collect();
    let got = out[0].as_f32().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!(g == w || (g - w).abs() <= 1e-5 * w.abs().max(1.0), "{got:?} vs {want:?}");
    }
    let plan = compile(&g, &native()).unwrap();
    let program = plan.program().expect("a native plan has a program");
    let custom_steps = program.steps.iter().filter(|s| matches!(s, Step::Library(l) if l.op == OpKind::Custom)).count();
    // Both custom nodes run as library steps: the one on a constant was not folded.
    assert_eq!(custom_steps, 2, "{program}");
    // The arithmetic before and after runs in generated kernels.
    assert!(plan.native_kernels() >= 2, "{program}");
    assert!(program.steps.iter().all(|s| !matches!(s, Step::Interp(_))), "{program}");
}

/// A one-node ONNX model: `y = domain::op_type(x)` on `x: f32[2, 4]`.
fn onnx_model(domain: &str, op_type: &str, attrs: Vec<ladder::frontend::onnx::proto::AttributeProto>) -> Vec<u8> {
    let mut n = node(op_type, &["x"], &["r"], attrs);
    n.domain = domain.into();
    let n2 = node("Neg", &["r"], &["y"], vec![]);
    let g = graph(vec![n, n2], vec![vi("x", FLOAT, &["2", "4"])], vec![vi("y", FLOAT, &[])], vec![]);
    let mut m = model_proto(g, 17);
    m.opset_import.push(ladder::frontend::onnx::proto::OperatorSetIdProto { domain: domain.into(), version: 1 });
    encode(&m)
}

#[test]
fn an_onnx_node_of_a_registered_domain_op_imports_and_runs() {
    let bytes = onnx_model("com.example", "TestRelu6Onnx", vec![a_float("cap", 4.0), a_str("mode", "a;b")]);
    // Unregistered: the import's census reports it, as before.
    match import(&bytes, &ImportOptions::default()) {
        Err(ImportError::Unsupported(ops)) => {
            assert_eq!(ops.len(), 1);
            assert_eq!((ops[0].domain.as_str(), ops[0].op_type.as_str()), ("com.example", "TestRelu6Onnx"));
        }
        other => panic!("expected the unsupported-op census, got {other:?}"),
    }
    register_relu6("TestRelu6Onnx", "com.example");
    let g = import(&bytes, &ImportOptions::default()).unwrap();
    let text = print(&g);
    assert!(text.contains("custom(%x) {name=\"TestRelu6Onnx\", attrs=\"cap:f=4.0;mode:s=a%3Bb\"}"), "{text}");
    let x = values();
    let out = run_everywhere(&g, std::slice::from_ref(&x));
    let want: Vec<f32> = x.as_f32().unwrap().iter().map(|&v| -relu6(v, 4.0)).collect();
    assert_eq!(out[0].as_f32().unwrap(), want.as_slice());
    // The census counts it as supported now.
    let model = ladder::frontend::onnx::decode(&bytes, &ImportOptions::default()).unwrap();
    let info = ladder::frontend::onnx::summarize(&model, &ImportOptions::default(), None);
    assert!(info.import.is_ok(), "{:?}", info.import);
    let row = info.ops.iter().find(|o| o.op_type == "TestRelu6Onnx").unwrap();
    assert!(row.supported, "{row:?}");
    // Another domain's op of the same name is not it.
    assert!(matches!(
        import(&onnx_model("org.other", "TestRelu6Onnx", vec![]), &ImportOptions::default()),
        Err(ImportError::Unsupported(_))
    ));
}

#[test]
fn an_unregistered_name_is_a_typed_error_when_parsed() {
    let src = "graph g(%x: f32[2]) {\n  %y = custom(%x) {name=\"test_never_registered\"}\n  return %y\n}\n";
    let err = parse(src).unwrap_err().to_string();
    assert!(err.contains("no custom op named `test_never_registered` is registered") && err.contains("2:"), "{err}");
    // Registered, then unregistered: the same.
    register_relu6("test_relu6_gone", "");
    assert!(unregister("test_relu6_gone"));
    assert!(!unregister("test_relu6_gone"));
    let err = parse(&src.replace("test_never_registered", "test_relu6_gone")).unwrap_err().to_string();
    assert!(err.contains("test_relu6_gone"), "{err}");
}

#[test]
fn registering_a_name_twice_or_a_bad_name_is_refused() {
    register_relu6("test_relu6_twice", "");
    let again = CustomOp {
        name: "test_relu6_twice".into(),
        domain: String::new(),
        shape: Arc::new(|a: &[TensorType], _: &CustomAttrs| Ok(a[0].clone())),
        compute: Arc::new(|a: &[Tensor], _: &CustomAttrs| Ok(a[0].clone())),
    };
    let err = register(again.clone()).unwrap_err().to_string();
    assert!(err.contains("registered already"), "{err}");
    let err = register(CustomOp { name: "has space".into(), ..again.clone() }).unwrap_err().to_string();
    assert!(err.contains("`has space`"), "{err}");
    let err = register(CustomOp { name: "test_default_domain".into(), domain: "ai.onnx".into(), ..again })
        .unwrap_err()
        .to_string();
    assert!(err.contains("domain"), "{err}");
}

#[test]
fn a_shape_rule_error_or_panic_is_a_typed_error_naming_the_op() {
    register_relu6("test_relu6_rule", "");
    let src = "graph g(%x: i64[2]) {\n  %y = custom(%x) {name=\"test_relu6_rule\"}\n  return %y\n}\n";
    let err = parse(src).unwrap_err().to_string();
    assert!(err.contains("custom op `test_relu6_rule`: takes one f32 operand"), "{err}");
    register(CustomOp {
        name: "test_rule_panics".into(),
        domain: String::new(),
        shape: Arc::new(|_: &[TensorType], _: &CustomAttrs| panic!("rule broke")),
        compute: Arc::new(|a: &[Tensor], _: &CustomAttrs| Ok(a[0].clone())),
    })
    .unwrap();
    let err = parse(&src.replace("test_relu6_rule", "test_rule_panics")).unwrap_err().to_string();
    assert!(err.contains("custom op `test_rule_panics`: shape rule panicked: rule broke"), "{err}");
}

/// Registers `name`, whose shape rule says "like the operand" and whose compute does `f`.
fn register_compute(name: &str, f: fn(&Tensor) -> Result<Tensor, String>) {
    register(CustomOp {
        name: name.into(),
        domain: String::new(),
        shape: Arc::new(|a: &[TensorType], _: &CustomAttrs| Ok(a[0].clone())),
        compute: Arc::new(move |a: &[Tensor], _: &CustomAttrs| f(&a[0])),
    })
    .unwrap();
}

/// The error of running `custom {name}` on an f32[2, 4] on each executor.
fn run_errors(name: &str) -> Vec<String> {
    let src =
        format!("graph g(%x: f32[2, 4]) {{\n  %y = custom(%x) {{name=\"{name}\"}}\n  %z = exp(%y)\n  return %z\n}}\n");
    let g = parse(&src).unwrap();
    [interp(), CompileOptions::reference(), native()]
        .iter()
        .map(|o| compile(&g, o).unwrap().run(&[values()]).unwrap_err().to_string())
        .collect()
}

#[test]
fn a_compute_error_a_wrong_result_or_a_panic_is_a_typed_error_at_run_time() {
    register_compute("test_compute_fails", |_| Err("no luck".into()));
    register_compute("test_compute_wrong_shape", |_| Ok(Tensor::from_f32(&[3], vec![0.0; 3]).unwrap()));
    register_compute("test_compute_wrong_dtype", |_| Ok(Tensor::from_i64(&[2, 4], vec![0; 8]).unwrap()));
    register_compute("test_compute_panics", |_| panic!("kernel broke"));
    let cases = [
        ("test_compute_fails", "no luck"),
        ("test_compute_wrong_shape", "returned f32[3], the shape rule says f32[2, 4]"),
        ("test_compute_wrong_dtype", "returned i64[2, 4], the shape rule says f32[2, 4]"),
        ("test_compute_panics", "compute function panicked: kernel broke"),
    ];
    for (name, want) in cases {
        for err in run_errors(name) {
            assert!(err.contains(&format!("custom op `{name}`")) && err.contains(want), "{name}: {err}");
        }
    }
}

#[test]
fn differentiating_through_it_is_a_typed_error() {
    register_relu6("test_relu6_grad", "");
    let src = "graph g(%x: f32[4]) {\n  %y = custom(%x) {name=\"test_relu6_grad\"}\n  %l = reduce_sum(%y) {axes=[0]}\n  return %l\n}\n";
    let g = parse(src).unwrap();
    let err = ladder::autodiff::grad(&g, "l", &["x"]).unwrap_err().to_string();
    assert!(err.contains("custom"), "{err}");
}
