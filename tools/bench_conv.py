"""onnxruntime on ladder's convolution workloads (`ladder bench --workload W7`), which the peer
scripts do not run: the same graphs built with onnx.helper, timed at 1 and 2 threads, and
ladder's figures from `ladder bench --backend cpu --workload W7 --json` measured in the same
run, alternating. Prints a markdown table of medians.

    cargo build --release
    /tmp/corpus-venv/bin/python tools/bench_conv.py [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LADDER = os.path.join(ROOT, "target", "release", "ladder")
rng = np.random.default_rng(0)


def init(name, shape, scale):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def model(name):
    if name == "W7_conv_resnet_56x56x64":
        x = (1, 64, 56, 56)
        nodes = [
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["h"]),
            helper.make_node("Conv", ["h", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["c2", "x"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ]
        inits = [init("w1", (64, 64, 3, 3), 1 / 24), init("b1", (64,), 0.1), init("w2", (64, 64, 3, 3), 1 / 24), init("b2", (64,), 0.1)]
        y = (1, 64, 56, 56)
    elif name == "W7_conv_depthwise_56x56x128":
        x = (1, 128, 56, 56)
        nodes = [
            helper.make_node("Conv", ["x", "dw", "db"], ["c1"], pads=[1, 1, 1, 1], group=128),
            helper.make_node("Relu", ["c1"], ["h"]),
            helper.make_node("Conv", ["h", "pw", "pb"], ["c2"]),
            helper.make_node("Relu", ["c2"], ["y"]),
        ]
        inits = [init("dw", (128, 1, 3, 3), 1 / 3), init("db", (128,), 0.1), init("pw", (128, 128, 1, 1), 1 / 11), init("pb", (128,), 0.1)]
        y = (1, 128, 56, 56)
    else:
        x = (1, 3, 224, 224)
        nodes = [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[3, 3, 3, 3], strides=[2, 2]),
            helper.make_node("Relu", ["c"], ["y"]),
        ]
        inits = [init("w", (64, 3, 7, 7), 1 / 12), init("b", (64,), 0.1)]
        y = (1, 64, 112, 112)
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString(), rng.standard_normal(x).astype(np.float32)


def time_ort(bytes_, x, threads, seconds=1.0):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(bytes_, so, providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, {"x": x})
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 10:
        t0 = time.perf_counter()
        sess.run(None, {"x": x})
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    names = ["W7_conv_resnet_56x56x64", "W7_conv_depthwise_56x56x128", "W7_conv_stem_224"]
    lad = {(n, t): [] for n in names for t in (1, 2)}
    onx = {(n, t): [] for n in names for t in (1, 2)}
    ratio = {}
    for _ in range(args.rounds):
        out = subprocess.run(
            [LADDER, "bench", "--backend", "cpu", "--workload", "W7", "--threads", "1,2", "--json"],
            capture_output=True, text=True, check=True,
        ).stdout
        for r in json.loads(out):
            lad[(r["workload"], r["threads"])].append(r["median_us"])
            ratio[(r["workload"], r["threads"])] = r["floor_ratio"]
        for n in names:
            b, x = model(n)
            for t in (1, 2):
                onx[(n, t)].append(time_ort(b, x, t))
    print(f"onnxruntime {ort.__version__}; medians of {args.rounds} alternating rounds")
    print("| workload | ladder 1 thr | ort 1 thr | ladder 2 thr | ort 2 thr | ladder floor_ratio 1/2 |")
    print("|---|---|---|---|---|---|")
    for n in names:
        m = lambda d, t: statistics.median(d[(n, t)]) / 1000
        print(f"| {n} | {m(lad, 1):.3f} | {m(onx, 1):.3f} | {m(lad, 2):.3f} | {m(onx, 2):.3f} | {ratio[(n, 1)]:.2f} / {ratio[(n, 2)]:.2f} |")


if __name__ == "__main__":
    main()
