#!/usr/bin/env bash
# Builds the C API (libladder.so), compiles capi/examples/run_model.c against capi/include/ladder.h
# with a C compiler (`cc`, strict C99), runs it on a model, and checks every value it prints
# against `ladder run` on the same inputs (the CLI, through ladder's Rust API). Fails loudly on
# any difference, a missing output, or a failed step.
#
#     capi/run_example.sh [MODEL]   (default: tests/onnx_fixtures/mlp/model.onnx)
#
# Needs cc, python3 (standard library only) and cargo. Debug builds: the model is small, and
# the debug profile optimises ladder's dependencies (Cranelift, gemm).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-tests/onnx_fixtures/mlp/model.onnx}
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$(mktemp -d "${TMPDIR:-/tmp}/ladder-capi.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "-- building libladder (cargo build -p ladder-capi) and the ladder CLI"
cargo build --quiet -p ladder-capi
cargo build --quiet --bin ladder
lib="$target/debug"

echo "-- compiling capi/examples/run_model.c"
cc -std=c99 -Wall -Wextra -pedantic -Werror -I capi/include capi/examples/run_model.c \
  -L "$lib" -lladder -Wl,-rpath,"$lib" -o "$work/run_model"

echo "-- running it on $model"
"$work/run_model" "$model" | tee "$work/c.txt"

echo "-- checking against ladder run"
# The same inputs as .npy files (the formula in run_model.c), `ladder run` on them, and every
# printed output value compared with the CLI's.
python3 - "$work" "$model" "$lib/ladder" <<'PY'
import ast, struct, subprocess, sys
work, model, ladder = sys.argv[1:4]
lines = open(f"{work}/c.txt").read().splitlines()
codes = {"f32": ("<f4", "f"), "f64": ("<f8", "d"), "i32": ("<i4", "i"), "i64": ("<i8", "q"), "bool": ("|b1", "?")}

def npy(path, descr, shape, values, fmt):
    header = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))

def read_npy(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", path
    n = struct.unpack("<H", data[8:10])[0] if data[6] == 1 else struct.unpack("<I", data[8:12])[0]
    start = 10 + n if data[6] == 1 else 12 + n
    h = ast.literal_eval(data[start - n:start].decode())
    fmt = {v[0]: v[1] for v in codes.values()}[h["descr"]]
    count = 1
    for d in h["shape"]:
        count *= d
    return list(h["shape"]), struct.unpack("<%d%s" % (count, fmt), data[start:start + count * struct.calcsize(fmt)])

args = [ladder, "run", model, "--quiet", "--out", f"{work}/cli"]
for line in lines:
    if line.startswith("input "):
        _, name, dtype, dims = line.split(" ", 3)
        shape = ast.literal_eval(dims)
        count = 1
        for d in shape:
            count *= d
        if dtype == "bool":
            values = [bool(i % 2) for i in range(count)]
        elif dtype in ("i32", "i64"):
            values = [(i * 7) % 13 for i in range(count)]
        else:
            values = [((i * 7) % 13 - 6) / 4 for i in range(count)]
        npy(f"{work}/{name}.npy", codes[dtype][0], shape, values, codes[dtype][1])
        args += ["--input", f"{name}={work}/{name}.npy"]
subprocess.run(args, check=True, stdout=subprocess.DEVNULL)

outputs = [l for l in lines if l.startswith("output ")]
if not outputs:
    sys.exit("run_model printed no outputs")
bad = 0
for line in outputs:
    head, values = line.split(":", 1)
    _, name, dtype, dims = head.split(" ", 3)
    shape, expected = read_npy(f"{work}/cli/{name}.npy")
    if ast.literal_eval(dims) != shape:
        print(f"MISMATCH {name}: shape {dims} from C, {shape} from ladder run")
        bad += 1
    got = [float(v) for v in values.split()]
    differ = 0 if got else 1
    if not got:
        print(f"MISMATCH {name}: no values printed")
    for i, (g, e) in enumerate(zip(got, expected)):
        if abs(g - float(e)) > 1e-6 * max(1.0, abs(float(e))):
            print(f"MISMATCH {name}[{i}]: {g!r} from C, {float(e)!r} from ladder run")
            differ += 1
    print(f"{name}: the {len(got)} values printed agree" if not differ else f"{name}: {differ} differences")
    bad += differ
if bad:
    sys.exit(f"the C example disagrees with ladder run ({bad} differences)")
PY
echo "-- the C example agrees with ladder run"
