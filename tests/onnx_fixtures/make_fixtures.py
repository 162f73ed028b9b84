"""Generates the ONNX fixtures in this folder (committed; CI does not run this script).

Each fixture is a folder in the layout of ONNX's backend node tests: model.onnx plus
test_data_set_0/{input,output}_N.pb, with expected outputs computed by onnxruntime (an
independent implementation). Run with onnx==1.22.0, onnxruntime and numpy installed:

    python tests/onnx_fixtures/make_fixtures.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def save(name, graph, feeds, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_fixtures.py")
    model.ir_version = 8
    onnx.checker.check_model(model) if name != "misc" else None
    d = os.path.join(HERE, name)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    for i, (k, v) in enumerate(feeds.items()):
        with open(os.path.join(ds, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())


def init(name, a):
    return numpy_helper.from_array(a, name)


# 1. MLP: Gemm -> Relu -> Gemm -> Softmax.
save(
    "mlp",
    helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Gemm", ["r", "w2", "b2"], ["z"], transB=1, alpha=0.5),
            helper.make_node("Softmax", ["z"], ["y"], axis=-1),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [init("w1", f32(16, 8)), init("b1", f32(16)), init("w2", f32(4, 16)), init("b2", f32(4))],
    ),
    {"x": f32(3, 8)},
)

# 2. CNN: Conv (pads) -> BatchNorm -> Relu -> MaxPool -> Conv (stride, group) -> GlobalAveragePool -> Flatten -> Gemm.
save(
    "cnn",
    helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
            helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"], epsilon=1e-3),
            helper.make_node("Relu", ["n1"], ["r1"]),
            helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Conv", ["p1", "w2"], ["c2"], strides=[2, 2], group=2, auto_pad="SAME_UPPER"),
            helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
            helper.make_node("Flatten", ["g"], ["f"]),
            helper.make_node("Gemm", ["f", "w3"], ["y"]),
        ],
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        [
            init("w1", f32(4, 3, 3, 3)),
            init("b1", f32(4)),
            init("s", f32(4)),
            init("bb", f32(4)),
            init("m", f32(4)),
            init("v", np.abs(f32(4)) + 0.5),
            init("w2", f32(6, 2, 3, 3)),
            init("w3", f32(6, 5)),
        ],
    ),
    {"x": f32(2, 3, 8, 8)},
)

# 3. Attention block with exporter-style shape arithmetic on symbolic batch and sequence.
D, H = 8, 2
save(
    "attention",
    helper.make_graph(
        [
            helper.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["xn"], axis=-1, epsilon=1e-5),
            helper.make_node("MatMul", ["xn", "wq"], ["q"]),
            helper.make_node("MatMul", ["xn", "wk"], ["k"]),
            helper.make_node("MatMul", ["xn", "wv"], ["v"]),
            helper.make_node("Shape", ["x"], ["shp"]),
            helper.make_node("Gather", ["shp", "i0"], ["b"], axis=0),
            helper.make_node("Gather", ["shp", "i1"], ["s"], axis=0),
            helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
            helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
            helper.make_node("Concat", ["b1", "s1", "heads"], ["qshape"], axis=0),
            helper.make_node("Reshape", ["q", "qshape"], ["q4"]),
            helper.make_node("Reshape", ["k", "qshape"], ["k4"]),
            helper.make_node("Reshape", ["v", "qshape"], ["v4"]),
            helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", ["qt", "kt"], ["sc"]),
            helper.make_node("Div", ["sc", "scale"], ["scs"]),
            helper.make_node("Softmax", ["scs"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "vt"], ["o"]),
            helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
            helper.make_node("Concat", ["b1", "s1", "dmodel"], ["oshape"], axis=0),
            helper.make_node("Reshape", ["ot", "oshape"], ["o3"]),
            helper.make_node("Add", ["o3", "x"], ["res"]),
            # GELU written out, as older exporters do: 0.5 * x * (1 + erf(x / sqrt 2)).
            helper.make_node("Div", ["res", "sqrt2"], ["gd"]),
            helper.make_node("Erf", ["gd"], ["ge"]),
            helper.make_node("Add", ["ge", "one"], ["g1"]),
            helper.make_node("Mul", ["res", "g1"], ["g2"]),
            helper.make_node("Mul", ["g2", "half"], ["y"]),
        ],
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", D])],
        [
            init("ln_s", f32(D)),
            init("ln_b", f32(D)),
            init("wq", f32(D, D)),
            init("wk", f32(D, D)),
            init("wv", f32(D, D)),
            init("i0", np.array(0, np.int64)),
            init("i1", np.array(1, np.int64)),
            init("ax0", np.array([0], np.int64)),
            init("heads", np.array([H, D // H], np.int64)),
            init("dmodel", np.array([D], np.int64)),
            init("scale", np.array(np.sqrt(D // H), np.float32)),
            init("sqrt2", np.array(np.sqrt(2.0), np.float32)),
            init("one", np.array(1.0, np.float32)),
            init("half", np.array(0.5, np.float32)),
        ],
    ),
    {"x": f32(2, 5, D)},
)

# 4. Assorted data movement: Slice (negative step), Gather, Split, Pad (reflect), Tile, Expand,
#    Where/Equal, Resize (nearest x2), ConvTranspose, Einsum, ReduceMean/ReduceMax, Cast.
save(
    "misc",
    helper.make_graph(
        [
            helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["sl"]),
            helper.make_node("Gather", ["x", "gi"], ["ga"], axis=1),
            helper.make_node("Split", ["x", "spl"], ["p0", "p1"], axis=3),
            helper.make_node("Pad", ["p1", "pads"], ["pd"], mode="reflect"),
            helper.make_node("Tile", ["p0", "reps"], ["ti"]),
            helper.make_node("Resize", ["x", "", "scales"], ["rs"], mode="nearest"),
            helper.make_node("ConvTranspose", ["x", "wt"], ["ct"], strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 1]),
            helper.make_node("Einsum", ["x", "ew"], ["es"], equation="bchw,cd->bdhw"),
            helper.make_node("ReduceMean", ["es", "rax"], ["rm"], keepdims=0),
            helper.make_node("ReduceMax", ["x", "rmaxax"], ["rmax"], keepdims=1),
            helper.make_node("Greater", ["x", "rmax"], ["gt"]),
            helper.make_node("Equal", ["x", "rmax"], ["eq"]),
            helper.make_node("Where", ["eq", "x", "zero"], ["wh"]),
            helper.make_node("Cast", ["gt"], ["gtf"], to=TensorProto.FLOAT),
            helper.make_node("Expand", ["bias", "eshape"], ["ex"]),
        ],
        "misc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ["sl", "ga", "pd", "ti", "rs", "ct", "rm", "wh", "gtf", "ex"]
        ],
        [
            init("st", np.array([-1, 3], np.int64)),
            init("en", np.array([-100, 0], np.int64)),
            init("ax", np.array([2, 3], np.int64)),
            init("sp", np.array([-2, -1], np.int64)),
            init("gi", np.array([[1, 0], [-1, 1]], np.int64)),
            init("spl", np.array([1, 3], np.int64)),
            init("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)),
            init("reps", np.array([1, 2, 1, 3], np.int64)),
            init("scales", np.array([1, 1, 2, 2], np.float32)),
            init("wt", f32(2, 3, 3, 3)),
            init("ew", f32(2, 3)),
            init("rax", np.array([1], np.int64)),
            init("rmaxax", np.array([2, 3], np.int64)),
            init("zero", np.array(0.0, np.float32)),
            init("bias", f32(3, 1)),
            init("eshape", np.array([2, 1, 4], np.int64)),
        ],
    ),
    {"x": f32(1, 2, 4, 4)},
    opset=18,
)
print("ok")
