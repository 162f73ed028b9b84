"""Times every model of the real-model corpus on ladder (`ladder bench --backend cpu`) and on
onnxruntime side by side, at 1 and 2 threads, on each model's largest data set; prints a
markdown table with the medians and their ratio (ladder ÷ onnxruntime: below 1 is faster).

    cargo build --release
    /tmp/corpus-venv/bin/python tools/corpus/bench.py [--only NAME ...] [--rounds 3]

Rounds alternate ladder and onnxruntime so drift on a shared machine hits both; each figure
is the median over rounds of each round's median.

With --startup, the time from a loaded model to its first result instead, at --threads
threads (default 2): onnxruntime's `InferenceSession(...)` from the file's bytes plus its
first `run`, against `ladder bench MODEL --startup` (compiling everything first, and tiered:
the first result from ladder's reference interpreter while the native plan compiles in the
background, and when the native plan took over). Each round starts one onnxruntime session
untimed first (the library's one-time set-up), then times --rounds sessions; ladder's figures
are its own medians of --rounds start-ups each way (after one untimed), in one process.

    /tmp/corpus-venv/bin/python tools/corpus/bench.py --startup [--threads 2] [--rounds 5]
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


def startup_ort(model_bytes, feeds, threads, rounds):
    """Median ms of InferenceSession creation plus the first run, over `rounds` sessions."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
        del sess
    return statistics.median(times) * 1e3


def startup_ladder(path, feeds, threads, rounds, tmp):
    args = [LADDER, "bench", path, "--startup", "--threads", str(threads), "--runs", str(rounds), "--json"]
    for name, v in feeds.items():
        f = os.path.join(tmp, f"{name}.npy")
        np.save(f, v)
        args += ["--input", f"{name}={f}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


def main_startup(args):
    print(f"machine: {platform.processor() or platform.machine()}, onnxruntime {ort.__version__}, "
          f"{args.threads} thread(s), medians of {args.rounds}")
    print("| model | inputs | ladder compile first | ladder tiered first result | native took over at "
          "| onnxruntime session + first run | run: reference | run: native |")
    print("|---|---|---|---|---|---|---|---|")
    ms = lambda x: "-" if x is None else (f"{x:.1f} ms" if x >= 1 else f"{x * 1000:.0f} µs")
    for case in sorted(glob.glob(os.path.join(CORPUS, "*", ""))):
        case = case.rstrip("/")
        name = os.path.basename(case)
        path = os.path.join(case, "model.onnx")
        if not os.path.isfile(path) or (args.only and name not in args.only):
            continue
        feeds = largest_set(case)
        with open(path, "rb") as f:
            model_bytes = f.read()
        with tempfile.TemporaryDirectory() as tmp:
            lad = startup_ladder(path, feeds, args.threads, args.rounds, tmp)
        onx = startup_ort(model_bytes, feeds, args.threads, args.rounds)
        shapes = ", ".join("x".join(map(str, v.shape)) or "scalar" for v in feeds.values())
        tiered = ms(lad["tiered_first_ms"]) + ("" if lad["first_tier"] == "reference" else " (not tiered)")
        row = [name, shapes, ms(lad["compile_first_ms"]), tiered, ms(lad["native_ready_ms"]), ms(onx),
               ms(lad["reference_run_ms"]), ms(lad["native_run_ms"])]
        print("| " + " | ".join(row) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--startup", action="store_true",
                    help="time session creation plus the first run instead of warm runs")
    ap.add_argument("--threads", type=int, default=2, help="with --startup: threads for both")
    args = ap.parse_args()
    if args.startup:
        return main_startup(args)
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
