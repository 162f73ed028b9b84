//! The ONNX importer on small models built in code: each op family gives hand-computed
//! numbers on the interpreter; symbolic shapes, import-time folding, the unsupported-op
//! census, and the CLI (`run`, `dump`, `info`) on .onnx files.

use ladder::frontend::onnx::{import, ImportError, ImportOptions};
use ladder::interp::{self, Options};
use ladder::{Graph, Tensor};

use crate::onnx_build::*;

fn imp(bytes: &[u8]) -> Graph {
    import(bytes, &ImportOptions::default()).unwrap_or_else(|e| panic!("import failed: {e}"))
}

fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    interp::run(g, inputs, &Options::default()).unwrap_or_else(|e| panic!("run failed: {e}")).outputs
}

fn run_precise(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    interp::run(g, inputs, &Options { precise: true, ..Options::default() }).unwrap().outputs
}

/// One node over float inputs (plus initializers), at `opset`.
fn one(
    op: &str,
    ins: &[(&str, &[&str])],
    inits: Vec<ladder::frontend::onnx::proto::TensorProto>,
    extra: &[&str],
    attrs: Vec<ladder::frontend::onnx::proto::AttributeProto>,
    opset: i64,
) -> Graph {
    let inputs = ins.iter().map(|(n, d)| vi(n, FLOAT, d)).collect();
    imp(&single(op, inputs, extra, inits, &["y"], attrs, opset))
}

#[test]
fn elementwise_broadcast_and_activations() {
    let g = one("Add", &[("a", &["2", "2"]), ("b", &["2"])], vec![], &[], vec![], 17);
    close(&run(&g, &[t(&[2, 2], &[1., 2., 3., 4.]), t(&[2], &[10., 20.])])[0], &[2, 2], &[11., 22., 13., 24.]);
    let g = one("Pow", &[("a", &["3"]), ("b", &["1"])], vec![], &[], vec![], 17);
    close(&run(&g, &[t(&[3], &[1., 2., 3.]), t(&[1], &[2.])])[0], &[3], &[1., 4., 9.]);
    let g = one("LeakyRelu", &[("x", &["3"])], vec![], &[], vec![a_float("alpha", 0.5)], 17);
    close(&run(&g, &[t(&[3], &[-2., 0., 3.])])[0], &[3], &[-1., 0., 3.]);
    let g = one("HardSigmoid", &[("x", &["3"])], vec![], &[], vec![], 17);
    close(&run(&g, &[t(&[3], &[-5., 0., 1.])])[0], &[3], &[0., 0.5, 0.7]);
    let g = one("PRelu", &[("x", &["3"])], vec![tensor_f32("s", &[1], &[0.25])], &["s"], vec![], 17);
    close(&run(&g, &[t(&[3], &[-4., 0., 4.])])[0], &[3], &[-1., 0., 4.]);
    let g = one(
        "Clip",
        &[("x", &["4"])],
        vec![tensor_f32("lo", &[], &[-1.]), tensor_f32("hi", &[], &[2.])],
        &["lo", "hi"],
        vec![],
        13,
    );
    close(&run(&g, &[t(&[4], &[-3., 0.5, 2., 9.])])[0], &[4], &[-1., 0.5, 2., 2.]);
    // Clip with a run-time bound.
    let g = one("Clip", &[("x", &["2"]), ("lo", &[])], vec![], &[], vec![], 13);
    close(&run(&g, &[t(&[2], &[-3., 5.]), t(&[], &[1.])])[0], &[2], &[1., 5.]);
    let g = one("Softplus", &[("x", &["1"])], vec![], &[], vec![], 17);
    close(&run_precise(&g, &[t(&[1], &[0.])])[0], &[1], &[std::f64::consts::LN_2]);
    let g = one("Gelu", &[("x", &["2"])], vec![], &[], vec![], 20);
    close(&run(&g, &[t(&[2], &[0., 1.])])[0], &[2], &[0., 0.841_344_74]);
}

#[test]
fn comparisons_logic_where_mod_cast() {
    let n = vec![
        node("Less", &["a", "b"], &["lt"], vec![]),
        node("Not", &["lt"], &["ge"], vec![]),
        node("Where", &["lt", "a", "b"], &["min"], vec![]),
        node("Cast", &["ge"], &["gi"], vec![a_int("to", INT64 as i64)]),
    ];
    let g = imp(&encode(&model_proto(
        graph(
            n,
            vec![vi("a", FLOAT, &["3"]), vi("b", FLOAT, &["3"])],
            vec![vi("min", FLOAT, &[]), vi("gi", INT64, &[])],
            vec![],
        ),
        17,
    )));
    let out = run(&g, &[t(&[3], &[1., 5., 3.]), t(&[3], &[2., 4., 3.])]);
    close(&out[0], &[3], &[1., 4., 3.]);
    assert_eq!(out[1].to_f64_vec(), vec![0., 1., 1.]);
    // Mod: fmod=0 takes the divisor's sign (Python), fmod=1 the dividend's (C).
    let mk = |fmod| {
        let n = vec![node("Mod", &["a", "b"], &["y"], vec![a_int("fmod", fmod)])];
        imp(&encode(&model_proto(
            graph(n, vec![vi("a", INT64, &["4"]), vi("b", INT64, &["4"])], vec![vi("y", INT64, &[])], vec![]),
            17,
        )))
    };
    let a = ti(&[4], &[7, -7, 7, -7]);
    let b = ti(&[4], &[3, 3, -3, -3]);
    assert_eq!(run(&mk(0), &[a.clone(), b.clone()])[0].to_f64_vec(), vec![1., 2., -2., -1.]);
    assert_eq!(run(&mk(1), &[a, b])[0].to_f64_vec(), vec![1., -1., 1., -1.]);
}

#[test]
fn matmul_and_gemm() {
    // 1-D @ 2-D: [1, 2] @ [[1, 2, 3], [4, 5, 6]] = [9, 12, 15].
    let g = one("MatMul", &[("a", &["2"]), ("b", &["2", "3"])], vec![], &[], vec![], 17);
    close(&run(&g, &[t(&[2], &[1., 2.]), t(&[2, 3], &[1., 2., 3., 4., 5., 6.])])[0], &[3], &[9., 12., 15.]);
    // 2-D @ 1-D.
    let g = one("MatMul", &[("a", &["2", "3"]), ("b", &["3"])], vec![], &[], vec![], 17);
    close(&run(&g, &[t(&[2, 3], &[1., 2., 3., 4., 5., 6.]), t(&[3], &[1., 0., -1.])])[0], &[2], &[-2., -2.]);
    // Gemm: 2 * A @ B^T + 0.5 * C, A [1, 2], B [2, 2], C [2].
    let g = one(
        "Gemm",
        &[("a", &["1", "2"])],
        vec![tensor_f32("b", &[2, 2], &[1., 2., 3., 4.]), tensor_f32("c", &[2], &[2., 4.])],
        &["b", "c"],
        vec![a_int("transB", 1), a_float("alpha", 2.0), a_float("beta", 0.5)],
        13,
    );
    // A @ B^T = [1*1 + 1*2, 1*3 + 1*4] = [3, 7] -> [6, 14] + [1, 2].
    close(&run(&g, &[t(&[1, 2], &[1., 1.])])[0], &[1, 2], &[7., 16.]);
}

#[test]
fn conv_pools_and_norms() {
    // 3x3 input, 2x2 kernel of ones, pad 1 on top/left only (asymmetric), bias 10.
    let g = one(
        "Conv",
        &[("x", &["1", "1", "3", "3"])],
        vec![tensor_f32("w", &[1, 1, 2, 2], &[1., 1., 1., 1.]), tensor_f32("b", &[1], &[10.])],
        &["w", "b"],
        vec![a_ints("pads", &[0, 0, 0, 0]), a_ints("strides", &[1, 1])],
        17,
    );
    let x = t(&[1, 1, 3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 2, 2], &[22., 26., 34., 38.]);
    let g = one("MaxPool", &[("x", &["1", "1", "3", "3"])], vec![], &[], vec![a_ints("kernel_shape", &[2, 2])], 17);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 2, 2], &[5., 6., 8., 9.]);
    // Asymmetric pads: an explicit -inf pad before the pool.
    let g = one(
        "MaxPool",
        &[("x", &["1", "1", "3", "3"])],
        vec![],
        &[],
        vec![a_ints("kernel_shape", &[2, 2]), a_ints("pads", &[1, 1, 0, 0]), a_ints("strides", &[2, 2])],
        17,
    );
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 2, 2], &[1., 3., 7., 9.]);
    let g = one("AveragePool", &[("x", &["1", "1", "3", "3"])], vec![], &[], vec![a_ints("kernel_shape", &[3, 3])], 17);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1, 1, 1], &[5.]);
    let g = one("GlobalAveragePool", &[("x", &["1", "1", "3", "3"])], vec![], &[], vec![], 17);
    close(&run(&g, &[x])[0], &[1, 1, 1, 1], &[5.]);
    // MaxPool 1-D.
    let g = one(
        "MaxPool",
        &[("x", &["1", "1", "4"])],
        vec![],
        &[],
        vec![a_ints("kernel_shape", &[2]), a_ints("strides", &[2])],
        17,
    );
    close(&run(&g, &[t(&[1, 1, 4], &[1., 3., 2., 0.])])[0], &[1, 1, 2], &[3., 2.]);
    // BatchNormalization: (x - 1) / sqrt(4) * 3 + 1 per channel 0; channel 1 identity.
    let g = one(
        "BatchNormalization",
        &[("x", &["1", "2", "1"])],
        vec![
            tensor_f32("s", &[2], &[3., 1.]),
            tensor_f32("b", &[2], &[1., 0.]),
            tensor_f32("m", &[2], &[1., 0.]),
            tensor_f32("v", &[2], &[4., 1.]),
        ],
        &["s", "b", "m", "v"],
        vec![a_float("epsilon", 0.0)],
        15,
    );
    close(&run_precise(&g, &[t(&[1, 2, 1], &[5., 7.])])[0], &[1, 2, 1], &[7., 7.]);
    // LayerNormalization over the last dim: [1, 3] -> [-1, 1] (var 1, eps 0).
    let g = one(
        "LayerNormalization",
        &[("x", &["1", "2"])],
        vec![tensor_f32("s", &[2], &[1., 2.]), tensor_f32("b", &[2], &[0., 1.])],
        &["s", "b"],
        vec![a_float("epsilon", 0.0)],
        17,
    );
    close(&run_precise(&g, &[t(&[1, 2], &[1., 3.])])[0], &[1, 2], &[-1., 3.]);
    // Softmax at opset 13 (one axis) and at 11 (flattened from axis 1).
    let g = one("Softmax", &[("x", &["1", "2"])], vec![], &[], vec![], 13);
    let e = 1f64.exp();
    close(&run_precise(&g, &[t(&[1, 2], &[0., 1.])])[0], &[1, 2], &[1. / (1. + e), e / (1. + e)]);
    let g = one("Softmax", &[("x", &["1", "2", "1"])], vec![], &[], vec![], 11);
    close(&run_precise(&g, &[t(&[1, 2, 1], &[0., 1.])])[0], &[1, 2, 1], &[1. / (1. + e), e / (1. + e)]);
}

#[test]
fn reductions_attribute_and_input_axes() {
    let x = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    // Opset 11: axes attribute; opset 18: axes input.
    let g = one("ReduceSum", &[("x", &["2", "3"])], vec![], &[], vec![a_ints("axes", &[1]), a_int("keepdims", 0)], 11);
    close(&run(&g, std::slice::from_ref(&x))[0], &[2], &[6., 15.]);
    let g = one("ReduceMax", &[("x", &["2", "3"])], vec![tensor_i64("ax", &[1], &[0])], &["ax"], vec![], 18);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 3], &[4., 5., 6.]);
    let g = one("ReduceMean", &[("x", &["2", "3"])], vec![], &[], vec![], 18);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 1], &[3.5]);
    let g = one(
        "ReduceL2",
        &[("x", &["2", "3"])],
        vec![tensor_i64("ax", &[1], &[1])],
        &["ax"],
        vec![a_int("keepdims", 0)],
        18,
    );
    close(&run_precise(&g, std::slice::from_ref(&x))[0], &[2], &[14f64.sqrt(), 77f64.sqrt()]);
    // noop_with_empty_axes.
    let g = one("ReduceSum", &[("x", &["2", "3"])], vec![], &[], vec![a_int("noop_with_empty_axes", 1)], 13);
    close(&run(&g, std::slice::from_ref(&x))[0], &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let g = one("ArgMax", &[("x", &["2", "3"])], vec![], &[], vec![a_int("axis", 1), a_int("keepdims", 0)], 13);
    assert_eq!(run(&g, &[x])[0].to_f64_vec(), vec![2., 2.]);
}

#[test]
fn shape_ops() {
    let x = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    // Reshape with 0 (copy) and -1 (infer).
    let g = one("Reshape", &[("x", &["2", "3"])], vec![tensor_i64("s", &[3], &[0, -1, 1])], &["s"], vec![], 14);
    close(&run(&g, std::slice::from_ref(&x))[0], &[2, 3, 1], &[1., 2., 3., 4., 5., 6.]);
    let g = one("Transpose", &[("x", &["2", "3"])], vec![], &[], vec![], 13);
    close(&run(&g, std::slice::from_ref(&x))[0], &[3, 2], &[1., 4., 2., 5., 3., 6.]);
    let g = one("Flatten", &[("x", &["2", "3"])], vec![], &[], vec![a_int("axis", 0)], 13);
    close(&run(&g, std::slice::from_ref(&x))[0], &[1, 6], &[1., 2., 3., 4., 5., 6.]);
    // Unsqueeze: attribute form (11) and input form (13), several axes.
    let g = one("Unsqueeze", &[("x", &["2", "3"])], vec![], &[], vec![a_ints("axes", &[0, 3])], 11);
    assert_eq!(run(&g, std::slice::from_ref(&x))[0].shape(), &[1, 2, 3, 1]);
    let g = one("Unsqueeze", &[("x", &["2", "3"])], vec![tensor_i64("a", &[2], &[-1, 1])], &["a"], vec![], 13);
    assert_eq!(run(&g, std::slice::from_ref(&x))[0].shape(), &[2, 1, 3, 1]);
    let g = one("Squeeze", &[("x", &["1", "3", "1"])], vec![tensor_i64("a", &[1], &[-1])], &["a"], vec![], 13);
    assert_eq!(run(&g, &[t(&[1, 3, 1], &[1., 2., 3.])])[0].shape(), &[1, 3]);
    // Slice with a negative step: x[:, ::-2] = [[3, 1], [6, 4]].
    let g = one(
        "Slice",
        &[("x", &["2", "3"])],
        vec![
            tensor_i64("st", &[1], &[-1]),
            tensor_i64("en", &[1], &[i64::MIN]),
            tensor_i64("ax", &[1], &[1]),
            tensor_i64("sp", &[1], &[-2]),
        ],
        &["st", "en", "ax", "sp"],
        vec![],
        13,
    );
    close(&run(&g, std::slice::from_ref(&x))[0], &[2, 2], &[3., 1., 6., 4.]);
    // A negative step over an empty axis is empty (found by fuzzing: it used to panic).
    let g = one(
        "Slice",
        &[("x", &["0", "3"])],
        vec![
            tensor_i64("st", &[1], &[-1]),
            tensor_i64("en", &[1], &[-10]),
            tensor_i64("ax", &[1], &[0]),
            tensor_i64("sp", &[1], &[-1]),
        ],
        &["st", "en", "ax", "sp"],
        vec![],
        13,
    );
    assert_eq!(run(&g, &[t(&[0, 3], &[])])[0].shape(), &[0, 3]);
    // Gather (NumPy take) along axis 1 with 2-D indices, one negative.
    let g = one(
        "Gather",
        &[("x", &["2", "3"])],
        vec![tensor_i64("i", &[2, 2], &[2, 0, -1, 1])],
        &["i"],
        vec![a_int("axis", 1)],
        13,
    );
    close(&run(&g, std::slice::from_ref(&x))[0], &[2, 2, 2], &[3., 1., 3., 2., 6., 4., 6., 5.]);
    // Gather with run-time indices and a scalar constant index.
    let n = vec![node("Gather", &["x", "i"], &["y"], vec![])];
    let g = imp(&encode(&model_proto(
        graph(n, vec![vi("x", FLOAT, &["2", "3"]), vi("i", INT64, &["1"])], vec![vi("y", FLOAT, &[])], vec![]),
        13,
    )));
    close(&run(&g, &[x.clone(), ti(&[1], &[-1])])[0], &[1, 3], &[4., 5., 6.]);
    let g = one("Gather", &[("x", &["2", "3"])], vec![tensor_i64("i", &[], &[1])], &["i"], vec![], 13);
    close(&run(&g, std::slice::from_ref(&x))[0], &[3], &[4., 5., 6.]);
    // Concat and Split (input sizes, equal, num_outputs).
    let g = one("Concat", &[("a", &["1", "3"]), ("b", &["1", "3"])], vec![], &[], vec![a_int("axis", 0)], 13);
    close(&run(&g, &[t(&[1, 3], &[1., 2., 3.]), t(&[1, 3], &[4., 5., 6.])])[0], &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let split = |attrs, extra: &[&str], inits, opset| {
        let mut names = vec!["x"];
        names.extend_from_slice(extra);
        let n = vec![node("Split", &names, &["p", "q"], attrs)];
        imp(&encode(&model_proto(
            graph(n, vec![vi("x", FLOAT, &["2", "3"])], vec![vi("p", FLOAT, &[]), vi("q", FLOAT, &[])], inits),
            opset,
        )))
    };
    let g = split(vec![a_int("axis", 1)], &["s"], vec![tensor_i64("s", &[2], &[1, 2])], 13);
    let o = run(&g, std::slice::from_ref(&x));
    close(&o[0], &[2, 1], &[1., 4.]);
    close(&o[1], &[2, 2], &[2., 3., 5., 6.]);
    let g = split(vec![a_int("axis", 1), a_int("num_outputs", 2)], &[], vec![], 18);
    let o = run(&g, std::slice::from_ref(&x));
    close(&o[0], &[2, 2], &[1., 2., 4., 5.]);
    close(&o[1], &[2, 1], &[3., 6.]);
    let g = split(vec![a_ints("split", &[2, 1]), a_int("axis", 1)], &[], vec![], 11);
    assert_eq!(run(&g, std::slice::from_ref(&x))[1].shape(), &[2, 1]);
    // Tile, Expand, Pad (constant and reflect), Trilu.
    let g = one("Tile", &[("x", &["1", "2"])], vec![tensor_i64("r", &[2], &[2, 2])], &["r"], vec![], 13);
    close(&run(&g, &[t(&[1, 2], &[1., 2.])])[0], &[2, 4], &[1., 2., 1., 2., 1., 2., 1., 2.]);
    let g = one("Expand", &[("x", &["3", "1"])], vec![tensor_i64("s", &[2], &[1, 2])], &["s"], vec![], 13);
    close(&run(&g, &[t(&[3, 1], &[1., 2., 3.])])[0], &[3, 2], &[1., 1., 2., 2., 3., 3.]);
    let g = one(
        "Pad",
        &[("x", &["3"])],
        vec![tensor_i64("p", &[2], &[1, 2]), tensor_f32("v", &[], &[9.])],
        &["p", "v"],
        vec![],
        13,
    );
    close(&run(&g, &[t(&[3], &[1., 2., 3.])])[0], &[6], &[9., 1., 2., 3., 9., 9.]);
    let g =
        one("Pad", &[("x", &["3"])], vec![tensor_i64("p", &[2], &[2, 1])], &["p"], vec![a_str("mode", "reflect")], 13);
    close(&run(&g, &[t(&[3], &[1., 2., 3.])])[0], &[6], &[3., 2., 1., 2., 3., 2.]);
    let g = one("Pad", &[("x", &["3"])], vec![tensor_i64("p", &[2], &[1, 2])], &["p"], vec![a_str("mode", "edge")], 13);
    close(&run(&g, &[t(&[3], &[1., 2., 3.])])[0], &[6], &[1., 1., 2., 3., 3., 3.]);
    let g = one("Trilu", &[("x", &["2", "2"])], vec![], &[], vec![a_int("upper", 0)], 14);
    close(&run(&g, &[t(&[2, 2], &[1., 2., 3., 4.])])[0], &[2, 2], &[1., 0., 3., 4.]);
}

#[test]
fn generators_einsum_and_identity() {
    // Range folded at import (small int), Range of floats, ConstantOfShape.
    let n = vec![
        node("Range", &["s", "l", "d"], &["r"], vec![]),
        node("ConstantOfShape", &["cs"], &["c"], vec![a_tensor("value", tensor_f32("", &[1], &[7.]))]),
        node("Identity", &["r"], &["r2"], vec![]),
        node("Dropout", &["c"], &["c2"], vec![]),
    ];
    let g = imp(&encode(&model_proto(
        graph(
            n,
            vec![],
            vec![vi("r2", INT64, &[]), vi("c2", FLOAT, &[])],
            vec![
                tensor_i64("s", &[], &[1]),
                tensor_i64("l", &[], &[8]),
                tensor_i64("d", &[], &[3]),
                tensor_i64("cs", &[2], &[1, 2]),
            ],
        ),
        13,
    )));
    let o = run(&g, &[]);
    assert_eq!(o[0].to_f64_vec(), vec![1., 4., 7.]);
    close(&o[1], &[1, 2], &[7., 7.]);
    // Einsum: batched matmul "bij,bjk->bik" and a trace-free transpose "ij->ji".
    let g = one(
        "Einsum",
        &[("a", &["1", "2", "2"]), ("b", &["1", "2", "1"])],
        vec![],
        &[],
        vec![a_str("equation", "bij,bjk->bik")],
        12,
    );
    close(&run(&g, &[t(&[1, 2, 2], &[1., 2., 3., 4.]), t(&[1, 2, 1], &[1., 1.])])[0], &[1, 2, 1], &[3., 7.]);
    let g = one("Einsum", &[("a", &["2", "3"])], vec![], &[], vec![a_str("equation", "ij->ji")], 12);
    assert_eq!(run(&g, &[t(&[2, 3], &[1., 2., 3., 4., 5., 6.])])[0].shape(), &[3, 2]);
}

/// A transformer-style shape computation on a symbolic batch: Shape -> Gather -> Unsqueeze
/// -> Concat -> Reshape stays symbolic and runs for any batch size.
#[test]
fn symbolic_shape_chain() {
    let n = vec![
        node("Shape", &["x"], &["s"], vec![]),
        node("Gather", &["s", "zero"], &["b"], vec![a_int("axis", 0)]),
        node("Unsqueeze", &["b", "ax0"], &["b1"], vec![]),
        node("Concat", &["b1", "rest"], &["shape"], vec![a_int("axis", 0)]),
        node("Reshape", &["x", "shape"], &["y"], vec![]),
        node("Size", &["x"], &["n"], vec![]),
    ];
    let g = imp(&encode(&model_proto(
        graph(
            n,
            vec![vi("x", FLOAT, &["batch", "2", "3"])],
            vec![vi("y", FLOAT, &[])],
            vec![tensor_i64("zero", &[], &[0]), tensor_i64("ax0", &[1], &[0]), tensor_i64("rest", &[2], &[3, -1])],
        ),
        13,
    )));
    let y = g.outputs()[0].value;
    assert_eq!(g.ty(y).to_string(), "f32[batch, 3, 2]");
    let out = run(&g, &[t(&[2, 2, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.])]);
    assert_eq!(out[0].shape(), &[2, 3, 2]);
    // A symbolic size used as data is evaluated when the graph runs (`dim_values`).
    let n = vec![node("Shape", &["x"], &["s"], vec![]), node("Cast", &["s"], &["f"], vec![a_int("to", 1)])];
    let g = import(
        &encode(&model_proto(graph(n, vec![vi("x", FLOAT, &["batch"])], vec![vi("f", FLOAT, &[])], vec![]), 13)),
        &ImportOptions::default(),
    )
    .unwrap();
    assert!(ladder::text::print(&g).contains("dim_values() {dims=[batch], dtype=f32}"), "{}", ladder::text::print(&g));
    let out = run(&g, &[t(&[3], &[1., 2., 3.])]);
    assert_eq!(out[0].to_f64_vec(), vec![3.0]);
}

/// Distinct `dim_param`s get distinct symbols, even where they read alike once sanitized
/// (`a-b`, `a.b`) or where a model names a dim as the importer names its fresh symbols
/// (`unk1`): symbols that were one would refuse inputs whose sizes the model leaves free.
#[test]
fn distinct_dim_params_stay_distinct_symbols() {
    let inputs = vec![
        vi("p", FLOAT, &["?"]),
        vi("q", FLOAT, &["unk1"]),
        vi("r", FLOAT, &["a-b"]),
        vi("s", FLOAT, &["a.b"]),
        vi("u", FLOAT, &["a_b"]),
        vi("v", FLOAT, &["a-b"]),
    ];
    let names = ["p", "q", "r", "s", "u", "v"];
    let n = names.iter().map(|x| node("Identity", &[x], &[&format!("{x}_out")], vec![])).collect();
    let outs = names.iter().map(|x| vi(&format!("{x}_out"), FLOAT, &[])).collect();
    let bytes = encode(&model_proto(graph(n, inputs, outs, vec![]), 13));
    let g = imp(&bytes);
    let dims: Vec<String> = g.inputs().iter().map(|&v| g.ty(v).shape.dims()[0].to_string()).collect();
    // `a-b` twice is one name, so one symbol; every other pair differs.
    assert_eq!(dims[2], dims[5], "{dims:?}");
    let mut distinct = dims[..5].to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{dims:?}");
    // The same symbols whichever way the types are read.
    let model = ladder::frontend::onnx::decode(&bytes, &ImportOptions::default()).unwrap();
    let types = ladder::frontend::onnx::input_types(&model, &ImportOptions::default()).unwrap();
    let listed: Vec<String> = types.iter().map(|(_, t)| t.shape.dims()[0].to_string()).collect();
    assert_eq!(listed, dims);
    // Sizes the model leaves free run free.
    let ins: Vec<Tensor> = [1usize, 2, 3, 4, 5, 3].iter().map(|&k| t(&[k], &vec![1.0; k])).collect();
    let out = run(&g, &ins);
    assert_eq!(out.iter().map(|o| o.shape()[0]).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 3]);
}

/// On static shapes the shape arithmetic is folded away: only the reshape remains.
#[test]
fn static_shape_chain_folds() {
    let n = vec![
        node("Shape", &["x"], &["s"], vec![]),
        node("Gather", &["s", "zero"], &["b"], vec![a_int("axis", 0)]),
        node("Unsqueeze", &["b", "ax0"], &["b1"], vec![]),
        node("Concat", &["b1", "rest"], &["shape"], vec![a_int("axis", 0)]),
        node("Reshape", &["x", "shape"], &["y"], vec![]),
    ];
    let g = imp(&encode(&model_proto(
        graph(
            n,
            vec![vi("x", FLOAT, &["4", "6"])],
            vec![vi("y", FLOAT, &[])],
            vec![tensor_i64("zero", &[], &[0]), tensor_i64("ax0", &[1], &[0]), tensor_i64("rest", &[2], &[3, -1])],
        ),
        13,
    )));
    let ops: Vec<&str> = g.nodes().map(|(_, n)| n.op.name()).filter(|&o| o != "const" && o != "input").collect();
    assert_eq!(ops, vec!["reshape"]);
    assert_eq!(g.ty(g.outputs()[0].value).to_string(), "f32[4, 3, 2]");
}

#[test]
fn unsupported_ops_are_all_listed_with_counts() {
    let n = vec![
        node("Unique", &["x"], &["v"], vec![]),
        node("Relu", &["v"], &["r"], vec![]),
        node("FancyOp", &["r"], &["a"], vec![]),
        node("FancyOp", &["a"], &["b"], vec![]),
    ];
    let e = import(
        &encode(&model_proto(graph(n, vec![vi("x", FLOAT, &["4"])], vec![vi("b", FLOAT, &[])], vec![]), 17)),
        &ImportOptions::default(),
    )
    .unwrap_err();
    let ImportError::Unsupported(list) = &e else { panic!("{e}") };
    let got: Vec<(String, usize, i64)> = list.iter().map(|u| (u.op_type.clone(), u.count, u.opset)).collect();
    assert_eq!(got, vec![("FancyOp".into(), 2, 17), ("Unique".into(), 1, 17)]);
    let msg = e.to_string();
    assert!(msg.contains("FancyOp ×2 (opset 17)") && msg.contains("Unique ×1"), "{msg}");
}

#[test]
fn node_errors_name_the_node() {
    let n = vec![node("Relu", &["x"], &["a"], vec![]), node("Concat", &["a", "x"], &["y"], vec![])];
    let e = import(
        &encode(&model_proto(graph(n, vec![vi("x", FLOAT, &["2"])], vec![vi("y", FLOAT, &[])], vec![]), 13)),
        &ImportOptions::default(),
    )
    .unwrap_err();
    match &e {
        ImportError::Node { node, .. } => {
            assert_eq!((node.index, node.op_type.as_str(), node.name.as_str()), (1, "Concat", "Concat_y"))
        }
        e => panic!("{e}"),
    }
    assert!(e.to_string().starts_with("node 1 `Concat_y` (Concat)"), "{e}");
}

#[test]
fn if_with_a_constant_condition_inlines_its_branch() {
    let then_g = graph(vec![node("Neg", &["x"], &["t"], vec![])], vec![], vec![vi("t", FLOAT, &[])], vec![]);
    let else_g = graph(vec![node("Abs", &["x"], &["e"], vec![])], vec![], vec![vi("e", FLOAT, &[])], vec![]);
    let n = vec![node("If", &["c"], &["y"], vec![a_graph("then_branch", then_g), a_graph("else_branch", else_g)])];
    let g = imp(&encode(&model_proto(
        graph(n, vec![vi("x", FLOAT, &["2"])], vec![vi("y", FLOAT, &[])], vec![tensor_bool("c", &[], &[false])]),
        13,
    )));
    close(&run(&g, &[t(&[2], &[-1., 2.])])[0], &[2], &[1., 2.]);
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ladder")
}

#[test]
fn cli_runs_dumps_and_describes_onnx_files() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ladder-onnx-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let n = vec![node("MatMul", &["x", "w"], &["h"], vec![]), node("Relu", &["h"], &["y"], vec![])];
    let bytes = encode(&model_proto(
        graph(
            n,
            vec![vi("x", FLOAT, &["batch", "2"])],
            vec![vi("y", FLOAT, &["batch", "2"])],
            vec![tensor_raw_f32("w", &[2, 2], &[1., -1., 2., 0.])],
        ),
        17,
    ));
    let model = dir.join("m.onnx");
    std::fs::write(&model, &bytes).unwrap();
    let out = dir.join("out");
    let o = std::process::Command::new(bin())
        .args(["run", model.to_str().unwrap(), "--dim", "batch=3", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("y: "));
    assert!(out.join("y.npy").is_file());
    let o =
        std::process::Command::new(bin()).args(["dump", model.to_str().unwrap(), "--stage", "prims"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("matmul"));
    let o = std::process::Command::new(bin()).args(["info", model.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    for needle in ["x: f32[batch, 2]", "ai.onnx=17", "MatMul", "supported", "import: ok"] {
        assert!(text.contains(needle), "info lacks {needle:?}:\n{text}");
    }
    // A model with an unsupported op: info lists it; run fails with the list.
    let n = vec![node("Unique", &["x"], &["v"], vec![])];
    let bad = dir.join("bad.onnx");
    std::fs::write(
        &bad,
        encode(&model_proto(graph(n, vec![vi("x", FLOAT, &["4"])], vec![vi("v", FLOAT, &[])], vec![]), 17)),
    )
    .unwrap();
    let o = std::process::Command::new(bin()).args(["info", bad.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("NOT SUPPORTED"));
    let o = std::process::Command::new(bin()).args(["run", bad.to_str().unwrap()]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Unique ×1") && !err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Models built with onnx.helper, expected outputs from onnxruntime
/// (tests/onnx_fixtures/make_fixtures.py), through the conformance harness.
#[test]
fn fixtures_match_onnxruntime() {
    use ladder::frontend::onnx::conformance::{cases, run_case, Verdict};
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/onnx_fixtures");
    let all = cases(&dir).unwrap();
    assert_eq!(all.len(), 4);
    let interp = ladder::CompileOptions { backend: ladder::BackendKind::Interp, ..ladder::CompileOptions::reference() };
    for case in all {
        let r = run_case(&case, &ImportOptions::default(), &interp);
        assert_eq!(r.verdict, Verdict::Passed, "{}: {}", r.name, r.reason);
    }
}
