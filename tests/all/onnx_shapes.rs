//! Shape arithmetic in ONNX models: what exporters compute on `Shape` results stays symbolic
//! (so one plan serves every size), sizes used as data are evaluated when the plan runs, and
//! hostile arithmetic (expressions that would grow without bound, division by zero, bounds
//! out of range) is a typed error at import or at run time, never a panic or a hang. The
//! hostile models are also seeds of the `onnx_import` fuzz target (fuzz/corpus/onnx_import,
//! rewritten with LADDER_REGEN_SEEDS=1).

use std::path::PathBuf;

use ladder::frontend::onnx::proto::{NodeProto, TensorProto, ValueInfoProto};
use ladder::frontend::onnx::{import, ImportError, ImportOptions};
use ladder::{CompileOptions, Model, Session, Tensor};

use crate::onnx_build::*;

fn session(bytes: &[u8]) -> Session {
    let model = ladder::frontend::onnx::decode(bytes, &ImportOptions::default()).unwrap();
    Session::new(Model::from_onnx(model, None, ImportOptions::default()), CompileOptions::native_cpu(1).unwrap())
        .unwrap()
}

fn m(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: &[&str], inits: Vec<TensorProto>) -> Vec<u8> {
    let outs = outputs.iter().map(|o| vi(o, FLOAT, &[])).collect();
    encode(&model_proto(graph(nodes, inputs, outs, inits), 18))
}

fn f32s(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|i| i as f32).collect()).unwrap()
}

/// `x[:, :seq]` of a static buffer, `Range(0, seq)` as position ids and `seq` cast to a float
/// used as data: one plan for every sequence length.
fn positions() -> Vec<u8> {
    m(
        vec![
            node("Shape", &["ids"], &["s"], vec![]),
            node("Gather", &["s", "one"], &["seq"], vec![a_int("axis", 0)]),
            node("Unsqueeze", &["seq", "zero1"], &["seq1"], vec![]),
            node("Slice", &["table", "zero1", "seq1", "one1"], &["rows"], vec![]),
            node("Range", &["zero", "seq", "one"], &["pos"], vec![]),
            node("Cast", &["seq"], &["len"], vec![a_int("to", 1)]),
            node("Div", &["rows", "len"], &["scaled"], vec![]),
        ],
        vec![vi("ids", INT64, &["batch", "seq"])],
        &["scaled", "pos"],
        vec![
            tensor_f32("table", &[1, 6], &[0., 1., 2., 3., 4., 5.]),
            tensor_i64("zero", &[], &[0]),
            tensor_i64("one", &[], &[1]),
            tensor_i64("zero1", &[1], &[0]),
            tensor_i64("one1", &[1], &[1]),
        ],
    )
}

#[test]
fn sizes_stay_symbolic_and_become_data_at_run_time() {
    let bytes = positions();
    let g = import(&bytes, &ImportOptions::default()).unwrap();
    let text = ladder::text::print(&g);
    assert!(text.contains("end=seq"), "{text}");
    assert!(text.contains("dim_values"), "{text}");
    let s = session(&bytes);
    for n in [1usize, 3, 5] {
        let ids = Tensor::from_i64(&[2, n], vec![0; 2 * n]).unwrap();
        let out = s.run(&[ids]).unwrap().outputs;
        let want: Vec<f64> = (0..n).map(|i| f64::from(i as f32 / n as f32)).collect();
        assert_eq!(out[0].to_f64_vec(), want);
        assert_eq!(out[1].to_f64_vec(), (0..n).map(|i| i as f64).collect::<Vec<_>>());
    }
    assert_eq!(s.compilations(), 1);
    // Past the static buffer: the slice's assumption fails with a typed error.
    let err = s.run(&[Tensor::from_i64(&[1, 7], vec![0; 7]).unwrap()]).unwrap_err();
    assert!(err.to_string().contains("out of") || err.to_string().contains("bound"), "{err}");
}

/// `seq` squared again and again: the expression outgrows the algebra's bounds.
fn squaring_chain() -> Vec<u8> {
    let mut nodes = vec![node("Shape", &["x"], &["s0"], vec![])];
    for i in 0..12 {
        nodes.push(node("Mul", &[&format!("s{i}"), &format!("s{i}")], &[&format!("s{}", i + 1)], vec![]));
    }
    nodes.push(node("ConstantOfShape", &["s12"], &["y"], vec![]));
    m(nodes, vec![vi("x", FLOAT, &["n"])], &["y"], vec![])
}

/// The product of 40 distinct symbols.
fn wide_product() -> Vec<u8> {
    let dims: Vec<String> = (0..40).map(|i| format!("d{i}")).collect();
    let dims: Vec<&str> = dims.iter().map(String::as_str).collect();
    m(
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("ReduceProd", &["s"], &["p"], vec![a_int("keepdims", 1)]),
            node("Reshape", &["x", "p"], &["y"], vec![]),
        ],
        vec![vi("x", FLOAT, &dims)],
        &["y"],
        vec![],
    )
}

/// `seq / 0` in shape arithmetic.
fn divide_by_zero() -> Vec<u8> {
    m(
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Div", &["s", "zero"], &["q"], vec![]),
            node("Reshape", &["x", "q"], &["y"], vec![]),
        ],
        vec![vi("x", FLOAT, &["n"])],
        &["y"],
        vec![tensor_i64("zero", &[1], &[0])],
    )
}

/// `Range(0, n, 0)`.
fn zero_delta() -> Vec<u8> {
    m(
        vec![
            node("Shape", &["x"], &["s"], vec![]),
            node("Squeeze", &["s"], &["n"], vec![]),
            node("Range", &["zero", "n", "zero"], &["y"], vec![]),
        ],
        vec![vi("x", FLOAT, &["n"])],
        &["y"],
        vec![tensor_i64("zero", &[], &[0])],
    )
}

fn hostile() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("shape_squaring_chain.onnx", squaring_chain()),
        ("shape_wide_product.onnx", wide_product()),
        ("shape_divide_by_zero.onnx", divide_by_zero()),
        ("shape_range_zero_delta.onnx", zero_delta()),
        ("shape_positions.onnx", positions()),
    ]
}

#[test]
fn hostile_shape_arithmetic_is_a_typed_error() {
    let start = std::time::Instant::now();
    for (name, bytes) in hostile().into_iter().take(4) {
        let e = import(&bytes, &ImportOptions::default()).unwrap_err();
        let text = e.to_string();
        assert!(!text.is_empty(), "{name}");
        match name {
            "shape_squaring_chain.onnx" | "shape_wide_product.onnx" => {
                assert!(text.contains("too complex"), "{name}: {text}")
            }
            "shape_divide_by_zero.onnx" => assert!(text.contains("zero"), "{name}: {text}"),
            _ => assert!(matches!(e, ImportError::Node { .. }), "{name}: {text}"),
        }
    }
    // Specializing does not hide it: concrete sizes overflow or still divide by zero.
    let s = Session::new(
        Model::from_onnx(
            ladder::frontend::onnx::decode(&squaring_chain(), &ImportOptions::default()).unwrap(),
            None,
            ImportOptions::default(),
        ),
        CompileOptions::native_cpu(1).unwrap(),
    )
    .unwrap();
    assert!(s.run(&[f32s(&[3])]).is_err());
    let s = session(&divide_by_zero());
    assert!(s.run(&[f32s(&[3])]).unwrap_err().to_string().contains("zero"));
    assert!(start.elapsed().as_secs() < 30, "hostile shape arithmetic took {:?}", start.elapsed());
}

#[test]
fn hostile_models_are_fuzz_seeds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/onnx_import");
    let regen = std::env::var_os("LADDER_REGEN_SEEDS").is_some();
    for (name, bytes) in hostile() {
        let path = dir.join(name);
        if regen {
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(committed == bytes, "{name} differs from its generator (LADDER_REGEN_SEEDS=1 rewrites it)");
        ladder::fuzzing::check_onnx(&bytes);
    }
}
