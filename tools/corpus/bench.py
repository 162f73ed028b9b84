"""Times every model of the real-model corpus on ladder (`ladder bench --backend cpu`) and on
onnxruntime side by side, at 1 and 2 threads, on each model's largest data set; prints a
markdown table with the medians and their ratio (ladder ÷ onnxruntime: below 1 is faster).

    cargo build --release
    /tmp/corpus-venv/bin/python tools/corpus/bench.py [--only NAME ...] [--rounds 3]

Rounds alternate ladder and onnxruntime so drift on a shared machine hits both; each figure
is the median over rounds of each round's median.
"""
import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CORPUS = os.path.join(ROOT, "tests", "corpus")
LADDER = os.path.join(ROOT, "target", "release", "ladder")


def largest_set(case):
    sets = sorted(glob.glob(os.path.join(case, "test_data_set_*")))
    best = None
    for s in sets:
        feeds = {}
        for f in sorted(glob.glob(os.path.join(s, "input_*.pb"))):
            t = onnx.TensorProto()
            t.ParseFromString(open(f, "rb").read())
            feeds[t.name] = numpy_helper.to_array(t)
        size = sum(v.size for v in feeds.values())
        if best is None or size > best[0]:
            best = (size, feeds)
    return best[1]


def time_ort(path, feeds, threads, seconds=1.0):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, feeds)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 10:
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def time_ladder(path, feeds, tmp):
    args = [LADDER, "bench", path, "--backend", "cpu", "--threads", "1,2", "--json"]
    for name, v in feeds.items():
        f = os.path.join(tmp, f"{name}.npy")
        np.save(f, v)
        args += ["--input", f"{name}={f}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    return {r["threads"]: r["median_us"] for r in rows}, rows[0]["compile_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, onnxruntime {ort.__version__}")
    print("| model | inputs | ops | ladder 1 thr | ort 1 thr | ratio | ladder 2 thr | ort 2 thr | ratio | ladder compile |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in sorted(glob.glob(os.path.join(CORPUS, "*", ""))):
        case = case.rstrip("/")
        name = os.path.basename(case)
        if not os.path.isfile(os.path.join(case, "model.onnx")):
            continue
        if args.only and name not in args.only:
            continue
        path = os.path.join(case, "model.onnx")
        feeds = largest_set(case)
        n_ops = len(onnx.load(path).graph.node)
        lad = {1: [], 2: []}
        onx = {1: [], 2: []}
        compile_ms = []
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                l, c = time_ladder(path, feeds, tmp)
                compile_ms.append(c)
                for t in (1, 2):
                    lad[t].append(l[t])
                    onx[t].append(time_ort(path, feeds, t))
        shapes = ", ".join("x".join(map(str, v.shape)) or "scalar" for v in feeds.values())
        cell = lambda us: f"{us / 1000:.3f} ms" if us >= 1000 else f"{us:.1f} µs"
        row = [name, shapes, str(n_ops)]
        for t in (1, 2):
            a, b = statistics.median(lad[t]), statistics.median(onx[t])
            row += [cell(a), cell(b), f"{a / b:.2f}"]
        row.append(f"{statistics.median(compile_ms):.0f} ms")
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
