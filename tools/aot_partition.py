"""Measure what PyTorch AOTAutograd saves between forward and backward.

For three small models (an MLP, a pre-norm transformer block and a tiny CNN)
and the transformer of ``ladder bench --train --workload T2``
this traces the joint forward+backward graph with ``functorch.compile.
aot_function`` and splits it with two partitioners:

* ``default_partition`` -- the baseline: every forward value the backward
  needs is saved, nothing is recomputed;
* ``min_cut_rematerialization_partition`` -- torch.compile's partitioner,
  which solves a min-cut to choose which values to save and which cheap ops
  to recompute in the backward.

No extra decompositions are applied and no backend compiles anything: the
forward/backward compilers only record the graphs. Everything is float32 on
CPU. The saved values are the forward graph's outputs beyond the real
outputs. They are split into *activations* (values computed by the forward)
and *saved inputs* (the model's own inputs/parameters, or views of them,
which the caller holds anyway and so cost no extra memory).

Prints a markdown table (model | partitioner | saved values | saved bytes |
saved inputs). "saved values" and "saved bytes" count activations only, and
count saved tensors that share one storage (``relu`` and ``detach(relu)``,
several views of one layer-norm output) once; "saved inputs" counts every
saved input or view of one. Then one line per case lists every saved value
as ``name:op:dtype[shape]``, with ``(view of X)`` for aliases.

Run (needs only torch; not used by any test):

    python3 -m venv /tmp/torch-venv
    /tmp/torch-venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    /tmp/torch-venv/bin/python tools/aot_partition.py

(If the CPU wheel index is unreachable, ``pip install torch`` from PyPI works
too; the CUDA build runs on CPU.)
"""

import math
import os
import sys

import torch
import torch.nn.functional as F
from functorch.compile import (
    aot_function,
    default_partition,
    make_boxed_func,
    min_cut_rematerialization_partition,
)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_train_torch  # noqa: E402  (the T2 model, shared with the step-time peer)


def mlp(x, w1, b1, w2, t):
    h = x @ w1.T + b1
    a = F.gelu(h)
    y = a @ w2.T
    return F.mse_loss(y, t)


def block(x, g1, c1, wq, wk, wv, wo, g2, c2, w1, w2):
    b, s, dm = x.shape
    heads, dh = 2, 8
    n = F.layer_norm(x, [dm], g1, c1, eps=1e-5)

    def split(u):
        return u.reshape(b, s, heads, dh).permute(0, 2, 1, 3)

    q, k, v = split(n @ wq.T), split(n @ wk.T), split(n @ wv.T)
    mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
    att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh) + mask, dim=-1)
    o = (att @ v).permute(0, 2, 1, 3).reshape(b, s, dm)
    r = x + o @ wo.T
    m = F.layer_norm(r, [dm], g2, c2, eps=1e-5)
    d = F.gelu(m @ w1.T) @ w2.T
    return (r + d).mean()


def cnn(x, w, k):
    c = F.conv2d(x, w, padding=1)
    p = F.max_pool2d(F.relu(c), 2)
    s = torch.flatten(p, 1)[:, 0:5]
    return F.cross_entropy(s, k)


def t2(x, t, *flat):
    """One step's loss of `ladder bench --train --workload T2` (the model of
    tools/bench_train_torch.py: 2 pre-norm blocks, d 128, seq 64, batch 8)."""
    names = ("g1", "c1", "g2", "c2", "wq", "wk", "wv", "wo", "w1", "w2")
    n = len(names)
    layers = [dict(zip(names, flat[i * n:(i + 1) * n])) for i in range(len(flat) // n)]
    return bench_train_torch.forward(layers, x, t)


def t2_inputs():
    gen = torch.Generator().manual_seed(0)
    mix = bench_train_torch.uniform(gen, (bench_train_torch.D,) * 2, 1 / math.sqrt(bench_train_torch.D))
    layers = bench_train_torch.make_params(gen)
    x, t = bench_train_torch.batch(gen, mix)
    names = ("g1", "c1", "g2", "c2", "wq", "wk", "wv", "wo", "w1", "w2")
    return [x, t] + [p[k] for p in layers for k in names]


def rand(*shape):
    return torch.randn(*shape, requires_grad=True)


def make_inputs():
    torch.manual_seed(0)
    return {
        "mlp": (mlp, [rand(8, 32), rand(64, 32), rand(64), rand(10, 64), rand(8, 10)]),
        "block": (
            block,
            [rand(2, 8, 16), rand(16), rand(16)]
            + [rand(16, 16) for _ in range(4)]
            + [rand(16), rand(16), rand(32, 16), rand(16, 32)],
        ),
        "cnn": (cnn, [rand(2, 3, 6, 6), rand(4, 3, 3, 3), torch.randint(0, 5, (2,))]),
        "t2": (t2, t2_inputs()),
    }


def storage_root(node):
    """Follow a chain of view ops (view, permute, t, detach, ...) to its base."""
    while node.op == "call_function":
        schema = getattr(node.target, "_schema", None)
        if schema is None or not any(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
        ):
            break
        node = node.args[0]
    return node


def nbytes(node):
    val = node.meta["val"]
    return val.numel() * val.element_size()


def describe(node):
    val = node.meta["val"]
    dtype = str(val.dtype).replace("torch.float", "f").replace("torch.int", "i")
    op = node.target.__name__ if node.op == "call_function" else node.op
    shape = ",".join(str(d) for d in val.shape)
    root = storage_root(node)
    alias = f"(view of {root.name})" if root is not node else ""
    return f"{node.name}:{op}:{dtype}[{shape}]{alias}"


def measure(fn, args, partition_fn):
    """Trace fn, partition it, return the list of values the forward saves."""
    captured = {}

    def partition(joint, joint_inputs, **kw):
        fw, bw = partition_fn(joint, joint_inputs, **kw)
        captured.update(fw=fw, bw=bw, num_fwd_outputs=kw["num_fwd_outputs"])
        return fw, bw

    def keep(gm, _example_inputs):
        return make_boxed_func(gm)

    compiled = aot_function(fn, fw_compiler=keep, bw_compiler=keep, partition_fn=partition)
    compiled(*args).backward()  # check that the recorded backward actually runs

    out = next(n for n in captured["fw"].graph.nodes if n.op == "output")
    saved = [n for n in out.args[0][captured["num_fwd_outputs"]:] if n is not None]
    bw_saved = [
        n for n in captured["bw"].graph.nodes
        if n.op == "placeholder" and not n.name.startswith("tangents")
    ]
    assert len(saved) == len(bw_saved), (saved, bw_saved)
    return saved


def summarize(saved):
    """Split saved values into activations and inputs; activations that alias
    one another (e.g. `relu` and `detach(relu)`) are counted once, with the
    bytes of the storage they share."""
    inputs = [n for n in saved if storage_root(n).op == "placeholder"]
    acts = [n for n in saved if storage_root(n).op != "placeholder"]
    roots = {storage_root(n) for n in acts}
    return acts, inputs, len(roots), sum(nbytes(r) for r in roots)


def main():
    print(f"torch {torch.__version__}\n")
    partitioners = [
        ("default", default_partition),
        ("min_cut", min_cut_rematerialization_partition),
    ]
    rows, details = [], []
    for model, (fn, args) in make_inputs().items():
        for pname, pfn in partitioners:
            acts, inputs, count, size = summarize(measure(fn, args, pfn))
            rows.append(f"| {model} | {pname} | {count} | {size} | {len(inputs)} |")
            details.append(
                f"{model}/{pname}: activations: "
                + (", ".join(map(describe, acts)) or "-")
                + "; inputs: "
                + (", ".join(map(describe, inputs)) or "-")
            )
    print("| model | partitioner | saved values | saved bytes | saved inputs |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("\n".join(details))


if __name__ == "__main__":
    main()
