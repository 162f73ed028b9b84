//! The ONNX importer's integer element types and the ops built on them: tensor decoding of
//! the narrow and unsigned types, `Cast`, `QuantizeLinear`, `DequantizeLinear`,
//! `DynamicQuantizeLinear`, `MatMulInteger`, `ConvInteger`, `QLinearMatMul`, `QLinearConv`,
//! `BitShift` and the `Bitwise*` ops, with hand-computed values, their typed errors, and the
//! compiled plan agreeing with the interpreter on each model.

use ladder::frontend::onnx::proto::TensorProto;
use ladder::frontend::onnx::{import, ImportError, ImportOptions, NodeError};
use ladder::interp::{self, Options};
use ladder::tensor::TensorData;
use ladder::{compile, CompileOptions, DType, Graph, Tensor};

use crate::onnx_build::*;

const UINT8: i32 = 2;
const INT8: i32 = 3;
const UINT16: i32 = 4;
const INT16: i32 = 5;
const UINT32: i32 = 12;
const UINT64: i32 = 13;
const INT4: i32 = 22;

fn imp(bytes: &[u8]) -> Graph {
    import(bytes, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// Runs on the interpreter and on a compiled plan, checks they agree bit for bit, and
/// returns the outputs.
fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let want = interp::run(g, inputs, &Options::default()).unwrap_or_else(|e| panic!("run failed: {e}")).outputs;
    let plan = compile(g, &CompileOptions::reference()).unwrap_or_else(|e| panic!("compile failed: {e}"));
    let got = plan.run(inputs).unwrap_or_else(|e| panic!("plan failed: {e}")).outputs;
    for (a, b) in got.iter().zip(&want) {
        assert!(a.bit_eq(b) && a.dtype() == b.dtype(), "plan {a} vs interpreter {b}");
    }
    want
}

fn ints(d: DType, shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_ints(d, shape, v.to_vec()).unwrap()
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape, v.to_vec()).unwrap()
}

/// Elements as i128 (u64 read as unsigned).
fn vals(t: &Tensor) -> Vec<i128> {
    match t.data() {
        TensorData::U64(v) => v.iter().map(|&x| x as i128).collect(),
        d => d.ints().expect("integer data").into_iter().map(i128::from).collect(),
    }
}

fn node_error(bytes: &[u8]) -> NodeError {
    match import(bytes, &ImportOptions::default()) {
        Err(ImportError::Node { error, .. }) => error,
        other => panic!("expected a node error, got {other:?}"),
    }
}

fn model(
    nodes: Vec<ladder::frontend::onnx::proto::NodeProto>,
    ins: Vec<(&str, i32, &[&str])>,
    outs: &[&str],
    inits: Vec<TensorProto>,
    opset: i64,
) -> Vec<u8> {
    let inputs = ins.iter().map(|(n, e, d)| vi(n, *e, d)).collect();
    let outputs = outs.iter().map(|o| vi(o, FLOAT, &[])).collect();
    encode(&model_proto(graph(nodes, inputs, outputs, inits), opset))
}

fn typed(name: &str, dtype: i32, dims: &[i64]) -> TensorProto {
    TensorProto { name: name.into(), dims: dims.to_vec(), data_type: dtype, ..Default::default() }
}

#[test]
fn integer_tensors_decode_from_every_field() {
    // int8 and uint16 travel in int32_data, uint32 and uint64 in uint64_data, or all raw.
    let inits = vec![
        TensorProto { int32_data: vec![-128, 127, -1], ..typed("a", INT8, &[3]) },
        TensorProto { int32_data: vec![0, 65535, 7], ..typed("b", UINT16, &[3]) },
        TensorProto { uint64_data: vec![0, 4294967295, 9], ..typed("c", UINT32, &[3]) },
        TensorProto { uint64_data: vec![u64::MAX, 1 << 63, 1], ..typed("d", UINT64, &[3]) },
        TensorProto { raw_data: vec![1, 0, 0xff, 0xff, 0x00, 0x80], ..typed("e", INT16, &[3]) },
        TensorProto { raw_data: vec![0, 200, 255], ..typed("f", UINT8, &[3]) },
    ];
    let nodes = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|n| node("Identity", &[*n], &[&format!("{n}_out")], vec![]))
        .collect();
    let outs = ["a_out", "b_out", "c_out", "d_out", "e_out", "f_out"];
    let g = imp(&model(nodes, vec![], &outs, inits, 17));
    let out = run(&g, &[]);
    let dts: Vec<DType> = out.iter().map(Tensor::dtype).collect();
    assert_eq!(dts, vec![DType::I8, DType::U16, DType::U32, DType::U64, DType::I16, DType::U8]);
    assert_eq!(vals(&out[0]), vec![-128, 127, -1]);
    assert_eq!(vals(&out[1]), vec![0, 65535, 7]);
    assert_eq!(vals(&out[2]), vec![0, 4294967295, 9]);
    assert_eq!(vals(&out[3]), vec![u64::MAX as i128, 1 << 63, 1]);
    assert_eq!(vals(&out[4]), vec![1, -1, -32768]);
    assert_eq!(vals(&out[5]), vec![0, 200, 255]);

    // Data in the wrong field, or the wrong amount of it, is a typed error.
    for bad in [
        TensorProto { int64_data: vec![1, 2, 3], ..typed("x", UINT32, &[3]) },
        TensorProto { int32_data: vec![1, 2], ..typed("x", INT8, &[3]) },
        TensorProto { raw_data: vec![0; 5], ..typed("x", UINT16, &[3]) },
    ] {
        let bytes = model(vec![node("Identity", &["x"], &["y"], vec![])], vec![], &["y"], vec![bad], 17);
        let e = import(&bytes, &ImportOptions::default()).unwrap_err();
        assert!(matches!(e, ImportError::BadTensor { .. }), "{e}");
    }
    // 4-bit inputs stay unsupported, with the type named.
    let bytes = model(vec![node("Identity", &["x"], &["y"], vec![])], vec![("x", INT4, &["2"])], &["y"], vec![], 21);
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert!(matches!(&e, ImportError::DType { elem_type, .. } if elem_type == "INT4"), "{e}");
}

#[test]
fn cast_to_and_from_the_new_types() {
    let bytes = model(
        vec![
            node("Cast", &["x"], &["y"], vec![a_int("to", UINT8 as i64)]),
            node("Cast", &["y"], &["z"], vec![a_int("to", 1)]),
        ],
        vec![("x", FLOAT, &["4"])],
        &["y", "z"],
        vec![],
        19,
    );
    let out = run(&imp(&bytes), &[f32s(&[4], &[-3.0, 2.7, 300.0, f32::NAN])]);
    assert_eq!(vals(&out[0]), vec![0, 2, 255, 0]);
    assert_eq!(out[1].as_f32(), Some(&[0.0f32, 2.0, 255.0, 0.0][..]));
    let bytes = model(
        vec![node("Cast", &["x"], &["y"], vec![a_int("to", INT4 as i64)])],
        vec![("x", FLOAT, &["1"])],
        &["y"],
        vec![],
        21,
    );
    assert!(matches!(node_error(&bytes), NodeError::Unsupported(m) if m.contains("INT4")));
}

fn q_model(
    op: &str,
    ins: Vec<(&str, i32, &[&str])>,
    attrs: Vec<ladder::frontend::onnx::proto::AttributeProto>,
    outs: &[&str],
    opset: i64,
) -> Vec<u8> {
    let names: Vec<&str> = ins.iter().map(|(n, _, _)| *n).collect();
    model(vec![node(op, &names, outs, attrs)], ins, outs, vec![], opset)
}

#[test]
fn quantize_linear_per_tensor_rounds_half_to_even_and_saturates() {
    let bytes =
        q_model("QuantizeLinear", vec![("x", FLOAT, &["8"]), ("s", FLOAT, &[]), ("z", UINT8, &[])], vec![], &["y"], 25);
    let g = imp(&bytes);
    let x = f32s(&[8], &[0.0, 2.0, 3.0, 1000.0, -254.0, -1000.0, 1.0, 5.0]);
    let out = run(&g, &[x, f32s(&[], &[2.0]), ints(DType::U8, &[], &[128])]);
    assert_eq!(out[0].dtype(), DType::U8);
    // 3/2 = 1.5 → 2, 1/2 = 0.5 → 0, 5/2 = 2.5 → 2 (half to even); ±1000/2 saturate.
    assert_eq!(vals(&out[0]), vec![128, 129, 130, 255, 1, 0, 128, 130]);
    // Without a zero point: u8 by default, or `output_dtype`.
    let bytes = q_model("QuantizeLinear", vec![("x", FLOAT, &["3"]), ("s", FLOAT, &[])], vec![], &["y"], 25);
    let out = run(&imp(&bytes), &[f32s(&[3], &[-5.0, 7.0, 1e9]), f32s(&[], &[1.0])]);
    assert_eq!((out[0].dtype(), vals(&out[0])), (DType::U8, vec![0, 7, 255]));
    let bytes = q_model(
        "QuantizeLinear",
        vec![("x", FLOAT, &["3"]), ("s", FLOAT, &[])],
        vec![a_int("output_dtype", INT16 as i64)],
        &["y"],
        25,
    );
    let out = run(&imp(&bytes), &[f32s(&[3], &[-5.0, 7.0, 1e9]), f32s(&[], &[0.5])]);
    assert_eq!((out[0].dtype(), vals(&out[0])), (DType::I16, vec![-10, 14, 32767]));
}

#[test]
fn quantize_and_dequantize_per_axis_and_blocked() {
    // Per axis 1 of [2, 3]: scales [1, 2, 4], zero points [0, 10, -10] (i8).
    let bytes = q_model(
        "QuantizeLinear",
        vec![("x", FLOAT, &["2", "3"]), ("s", FLOAT, &["3"]), ("z", INT8, &["3"])],
        vec![],
        &["y"],
        25,
    );
    let out = run(
        &imp(&bytes),
        &[
            f32s(&[2, 3], &[1.0, 2.0, 4.0, -300.0, 6.0, 1000.0]),
            f32s(&[3], &[1.0, 2.0, 4.0]),
            ints(DType::I8, &[3], &[0, 10, -10]),
        ],
    );
    assert_eq!(vals(&out[0]), vec![1, 11, -9, -128, 13, 127]);
    // Blocked along axis 1 of [2, 5] in blocks of 2 (3 blocks, the last one short).
    let bytes = q_model(
        "QuantizeLinear",
        vec![("x", FLOAT, &["2", "5"]), ("s", FLOAT, &["2", "3"])],
        vec![a_int("axis", 1), a_int("block_size", 2), a_int("output_dtype", INT8 as i64)],
        &["y"],
        25,
    );
    let x = f32s(&[2, 5], &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0]);
    let s = f32s(&[2, 3], &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    let out = run(&imp(&bytes), &[x, s]);
    assert_eq!(vals(&out[0]), vec![1, 2, 2, 2, 1, 1, 2, 2, 2, 1]);
    // Dequantize, blocked the same way, with u8 zero points.
    let bytes = q_model(
        "DequantizeLinear",
        vec![("x", UINT8, &["1", "5"]), ("s", FLOAT, &["1", "3"]), ("z", UINT8, &["1", "3"])],
        vec![a_int("axis", 1), a_int("block_size", 2)],
        &["y"],
        25,
    );
    let out = run(
        &imp(&bytes),
        &[
            ints(DType::U8, &[1, 5], &[0, 255, 10, 12, 3]),
            f32s(&[1, 3], &[0.5, 2.0, 4.0]),
            ints(DType::U8, &[1, 3], &[0, 10, 1]),
        ],
    );
    assert_eq!(out[0].as_f32(), Some(&[0.0f32, 127.5, 0.0, 4.0, 8.0][..]));
    // A block count that does not match x is invalid.
    let bytes = q_model(
        "DequantizeLinear",
        vec![("x", UINT8, &["1", "5"]), ("s", FLOAT, &["1", "2"])],
        vec![a_int("axis", 1), a_int("block_size", 2)],
        &["y"],
        25,
    );
    assert!(matches!(node_error(&bytes), NodeError::Invalid(m) if m.contains("blocks")));
}

#[test]
fn dequantize_linear_integer_types() {
    for (elem, d, x, z, want) in [
        (UINT8, DType::U8, vec![0, 3, 128, 255], 128, vec![-256.0f32, -250.0, 0.0, 254.0]),
        (INT8, DType::I8, vec![-128, -1, 0, 127], -1, vec![-254.0, 0.0, 2.0, 256.0]),
        (UINT16, DType::U16, vec![0, 65535, 1, 2], 1, vec![-2.0, 131068.0, 0.0, 2.0]),
        (INT16, DType::I16, vec![-32768, 32767, 0, 5], 0, vec![-65536.0, 65534.0, 0.0, 10.0]),
    ] {
        let bytes = q_model(
            "DequantizeLinear",
            vec![("x", elem, &["4"]), ("s", FLOAT, &[]), ("z", elem, &[])],
            vec![],
            &["y"],
            25,
        );
        let out = run(&imp(&bytes), &[ints(d, &[4], &x), f32s(&[], &[2.0]), ints(d, &[], &[z])]);
        assert_eq!(out[0].as_f32(), Some(&want[..]), "{d}");
    }
    // i32 without a zero point.
    let bytes = q_model("DequantizeLinear", vec![("x", 6, &["2"]), ("s", FLOAT, &[])], vec![], &["y"], 25);
    let out = run(&imp(&bytes), &[ints(DType::I32, &[2], &[i32::MAX as i64, -3]), f32s(&[], &[0.5])]);
    assert_eq!(out[0].as_f32(), Some(&[1073741823.5f32, -1.5][..]));
    // A zero point of another type than x is invalid; a float x is unsupported.
    let bytes = q_model(
        "DequantizeLinear",
        vec![("x", UINT8, &["2"]), ("s", FLOAT, &[]), ("z", INT8, &[])],
        vec![],
        &["y"],
        25,
    );
    assert!(matches!(node_error(&bytes), NodeError::Invalid(_)));
    let bytes = q_model("DequantizeLinear", vec![("x", FLOAT, &["2"]), ("s", FLOAT, &[])], vec![], &["y"], 25);
    assert!(matches!(node_error(&bytes), NodeError::Unsupported(_)));
    // Quantizing to a 4-bit type is unsupported, by name.
    let bytes = q_model(
        "QuantizeLinear",
        vec![("x", FLOAT, &["2"]), ("s", FLOAT, &[])],
        vec![a_int("output_dtype", INT4 as i64)],
        &["y"],
        25,
    );
    assert!(matches!(node_error(&bytes), NodeError::Unsupported(m) if m.contains("INT4")));
    // output_dtype disagreeing with the zero point is invalid.
    let bytes = q_model(
        "QuantizeLinear",
        vec![("x", FLOAT, &["2"]), ("s", FLOAT, &[]), ("z", UINT8, &[])],
        vec![a_int("output_dtype", INT8 as i64)],
        &["y"],
        25,
    );
    assert!(matches!(node_error(&bytes), NodeError::Invalid(_)));
}

#[test]
fn dynamic_quantize_linear_matches_the_spec_example() {
    let bytes = q_model("DynamicQuantizeLinear", vec![("x", FLOAT, &["n"])], vec![], &["y", "s", "z"], 11);
    let g = imp(&bytes);
    let out = run(&g, &[f32s(&[6], &[0.0, 2.0, -3.0, -2.5, 1.34, 0.5])]);
    assert_eq!(vals(&out[0]), vec![153, 255, 0, 26, 221, 179]);
    assert_eq!(out[1].as_f32(), Some(&[5.0f32 / 255.0][..]));
    assert_eq!((out[2].dtype(), vals(&out[2])), (DType::U8, vec![153]));
    // All-positive input: the range starts at 0, so the zero point is 0 (2 / f32(4/255) is
    // 127.49999 in f32, as in NumPy); an empty input has scale 1/255 and zero point 0.
    let out = run(&g, &[f32s(&[3], &[1.0, 2.0, 4.0])]);
    assert_eq!((vals(&out[0]), vals(&out[2])), (vec![64, 127, 255], vec![0]));
    let out = run(&g, &[f32s(&[0], &[])]);
    assert_eq!((out[1].as_f32(), vals(&out[2])), (Some(&[1.0f32 / 255.0][..]), vec![0]));
}

#[test]
fn integer_products_widen_and_subtract_zero_points() {
    // The MatMulInteger example of the ONNX docs.
    let bytes = q_model(
        "MatMulInteger",
        vec![("A", UINT8, &["4", "3"]), ("B", UINT8, &["3", "2"]), ("az", UINT8, &[]), ("bz", UINT8, &[])],
        vec![],
        &["Y"],
        10,
    );
    let a = ints(DType::U8, &[4, 3], &[11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0]);
    let b = ints(DType::U8, &[3, 2], &[1, 4, 2, 5, 3, 6]);
    let out = run(&imp(&bytes), &[a, b, ints(DType::U8, &[], &[12]), ints(DType::U8, &[], &[0])]);
    assert_eq!(out[0].dtype(), DType::I32);
    assert_eq!(vals(&out[0]), vec![-38, -83, -44, -98, -50, -113, -56, -128]);
    // Per-row zero points of A (i8), a 1-D B.
    let bytes = q_model(
        "MatMulInteger",
        vec![("A", INT8, &["2", "2"]), ("B", INT8, &["2"]), ("az", INT8, &["2"])],
        vec![],
        &["Y"],
        10,
    );
    let out = run(
        &imp(&bytes),
        &[
            ints(DType::I8, &[2, 2], &[-128, 127, 1, 2]),
            ints(DType::I8, &[2], &[1, -1]),
            ints(DType::I8, &[2], &[0, 1]),
        ],
    );
    assert_eq!(vals(&out[0]), vec![-255, 0 - 1]);
    // ConvInteger: (x - 1) summed over 2x2 windows, with per-channel weight zero points.
    let bytes = q_model(
        "ConvInteger",
        vec![
            ("x", UINT8, &["1", "1", "3", "3"]),
            ("w", UINT8, &["2", "1", "2", "2"]),
            ("xz", UINT8, &[]),
            ("wz", UINT8, &["2"]),
        ],
        vec![],
        &["y"],
        10,
    );
    let x = ints(DType::U8, &[1, 1, 3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let w = ints(DType::U8, &[2, 1, 2, 2], &[2, 2, 2, 2, 255, 255, 255, 255]);
    let out = run(&imp(&bytes), &[x, w, ints(DType::U8, &[], &[1]), ints(DType::U8, &[2], &[1, 0])]);
    assert_eq!(out[0].shape(), &[1, 2, 2, 2]);
    assert_eq!(vals(&out[0]), vec![8, 12, 20, 24, 8 * 255, 12 * 255, 20 * 255, 24 * 255]);
    // Float operands are unsupported here.
    let bytes =
        q_model("MatMulInteger", vec![("A", FLOAT, &["1", "1"]), ("B", FLOAT, &["1", "1"])], vec![], &["Y"], 10);
    assert!(matches!(node_error(&bytes), NodeError::Unsupported(_)));
}

#[test]
fn qlinear_products_requantize() {
    // a·b = [[1*2 + 2*3]] = 8 (after zero points), × 0.5·1/0.25 = 16, + 100 → 116.
    let bytes = q_model(
        "QLinearMatMul",
        vec![
            ("a", UINT8, &["1", "2"]),
            ("as", FLOAT, &[]),
            ("az", UINT8, &[]),
            ("b", UINT8, &["2", "1"]),
            ("bs", FLOAT, &[]),
            ("bz", UINT8, &[]),
            ("ys", FLOAT, &[]),
            ("yz", UINT8, &[]),
        ],
        vec![],
        &["y"],
        21,
    );
    let g = imp(&bytes);
    let args = |yz: i64| {
        vec![
            ints(DType::U8, &[1, 2], &[11, 12]),
            f32s(&[], &[0.5]),
            ints(DType::U8, &[], &[10]),
            ints(DType::U8, &[2, 1], &[2, 3]),
            f32s(&[], &[1.0]),
            ints(DType::U8, &[], &[0]),
            f32s(&[], &[0.25]),
            ints(DType::U8, &[], &[yz]),
        ]
    };
    assert_eq!(vals(&run(&g, &args(100))[0]), vec![116]);
    assert_eq!(vals(&run(&g, &args(250))[0]), vec![255]);
    // QLinearConv: 1x1 kernel, per-channel weight scales, an i32 bias; 2.5 rounds to 2.
    let bytes = q_model(
        "QLinearConv",
        vec![
            ("x", INT8, &["1", "1", "1", "2"]),
            ("xs", FLOAT, &[]),
            ("xz", INT8, &[]),
            ("w", INT8, &["2", "1", "1", "1"]),
            ("ws", FLOAT, &["2"]),
            ("wz", INT8, &[]),
            ("ys", FLOAT, &[]),
            ("yz", INT8, &[]),
            ("B", 6, &["2"]),
        ],
        vec![],
        &["y"],
        10,
    );
    let out = run(
        &imp(&bytes),
        &[
            ints(DType::I8, &[1, 1, 1, 2], &[3, -100]),
            f32s(&[], &[0.5]),
            ints(DType::I8, &[], &[-2]),
            ints(DType::I8, &[2, 1, 1, 1], &[1, 2]),
            f32s(&[2], &[1.0, 2.0]),
            ints(DType::I8, &[], &[0]),
            f32s(&[], &[1.0]),
            ints(DType::I8, &[], &[0]),
            ints(DType::I32, &[2], &[0, 1]),
        ],
    );
    // Channel 0: (x + 2) * 1 * 0.5 = [2.5, -49]; channel 1: ((x + 2) * 2 + 1) * 1.0 = [11, -195].
    assert_eq!(vals(&out[0]), vec![2, -49, 11, -128]);
}

#[test]
fn bit_shift_and_bitwise_ops() {
    for (elem, d) in [(UINT8, DType::U8), (UINT16, DType::U16), (UINT32, DType::U32), (UINT64, DType::U64)] {
        let bits = d.int_bits().unwrap() as i64;
        let shift = |dir: &str| {
            q_model(
                "BitShift",
                vec![("x", elem, &["4"]), ("y", elem, &["4"])],
                vec![a_str("direction", dir)],
                &["z"],
                11,
            )
        };
        let x = ints(d, &[4], &[16, 4, 1, -1]);
        let y = ints(d, &[4], &[1, 2, bits, bits - 1]);
        let left = run(&imp(&shift("LEFT")), &[x.clone(), y.clone()]);
        let top = 1i128 << (bits - 1);
        assert_eq!(vals(&left[0]), vec![32, 16, 0, top], "{d}");
        let right = run(&imp(&shift("RIGHT")), &[x, y]);
        assert_eq!(vals(&right[0]), vec![8, 1, 0, 1], "{d}");
    }
    let bytes = q_model(
        "BitShift",
        vec![("x", INT8, &["1"]), ("y", INT8, &["1"])],
        vec![a_str("direction", "LEFT")],
        &["z"],
        11,
    );
    assert!(matches!(node_error(&bytes), NodeError::Invalid(_)));
    let bytes = q_model(
        "BitShift",
        vec![("x", UINT8, &["1"]), ("y", UINT8, &["1"])],
        vec![a_str("direction", "UP")],
        &["z"],
        11,
    );
    assert!(matches!(node_error(&bytes), NodeError::Invalid(_)));

    let bin = |op: &str, elem: i32| q_model(op, vec![("x", elem, &["3"]), ("y", elem, &["1"])], vec![], &["z"], 18);
    let x = Tensor::new(vec![3], TensorData::U64(vec![u64::MAX, 0b1100, 1 << 63])).unwrap();
    let y = Tensor::new(vec![1], TensorData::U64(vec![0b1010 | (1 << 63)])).unwrap();
    let m = (1u64 << 63) as i128;
    assert_eq!(vals(&run(&imp(&bin("BitwiseAnd", UINT64)), &[x.clone(), y.clone()])[0]), vec![m + 0b1010, 0b1000, m]);
    assert_eq!(
        vals(&run(&imp(&bin("BitwiseOr", UINT64)), &[x.clone(), y.clone()])[0]),
        vec![u64::MAX as i128, m + 0b1110, m + 0b1010]
    );
    assert_eq!(
        vals(&run(&imp(&bin("BitwiseXor", UINT64)), &[x, y])[0]),
        vec![u64::MAX as i128 - m - 0b1010, m + 0b0110, 0b1010]
    );
    let out =
        run(&imp(&bin("BitwiseXor", INT8)), &[ints(DType::I8, &[3], &[-1, 5, -128]), ints(DType::I8, &[1], &[3])]);
    assert_eq!(vals(&out[0]), vec![-4, 6, -125]);
    let not = |elem: i32| q_model("BitwiseNot", vec![("x", elem, &["3"])], vec![], &["z"], 18);
    assert_eq!(vals(&run(&imp(&not(INT8)), &[ints(DType::I8, &[3], &[0, -1, 5])])[0]), vec![-1, 0, -6]);
    assert_eq!(vals(&run(&imp(&not(UINT16)), &[ints(DType::U16, &[3], &[0, 65535, 5])])[0]), vec![65535, 0, 65530]);
    let bytes = q_model("BitwiseAnd", vec![("x", FLOAT, &["1"]), ("y", FLOAT, &["1"])], vec![], &["z"], 18);
    assert!(matches!(node_error(&bytes), NodeError::Invalid(_)));
}

#[test]
fn integer_max_pool_runs_and_64_bit_is_unsupported() {
    let bytes = q_model(
        "MaxPool",
        vec![("x", UINT8, &["1", "1", "2", "2"])],
        vec![a_ints("kernel_shape", &[2, 2])],
        &["y"],
        12,
    );
    let out = run(&imp(&bytes), &[ints(DType::U8, &[1, 1, 2, 2], &[3, 255, 0, 7])]);
    assert_eq!((out[0].dtype(), vals(&out[0])), (DType::U8, vec![255]));
    let bytes = q_model(
        "MaxPool",
        vec![("x", UINT64, &["1", "1", "2", "2"])],
        vec![a_ints("kernel_shape", &[2, 2])],
        &["y"],
        12,
    );
    assert!(matches!(node_error(&bytes), NodeError::Unsupported(_)));
}
