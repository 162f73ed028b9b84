"""PyTorch eager peer for `ladder train --task transformer`: the time of one training step
(zero_grad, forward, backward, Adam update) of the same model and task, float32 on CPU, at
1 and 2 threads. Reports the median and minimum over --steps timed steps after --warmup
untimed ones, and the bytes autograd saves for backward in one step (each storage counted
once, parameters and the step's inputs excluded), measured in a separate untimed step.
Prints a markdown table.

Model: 2 pre-norm blocks, d = 128, 4 heads (head dim 32), seq 64, batch 8, MLP width 512,
no biases; x uniform in [-1, 1), t = x @ A for a fixed A uniform in +-1/sqrt(d), MSE loss,
Adam(lr 3e-3). A fresh batch is drawn before each step's timer starts.

    python3 -m venv /tmp/torch-venv && /tmp/torch-venv/bin/pip install torch numpy
    /tmp/torch-venv/bin/python tools/bench_train_torch.py [--steps 20] [--warmup 5] [--threads 1,2]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

LAYERS, D, HEADS, SEQ, BATCH = 2, 128, 4, 64, 8
HD, FF = D // HEADS, 4 * D


def uniform(gen, shape, bound):
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


def make_params(gen):
    layers = []
    for _ in range(LAYERS):
        p = {"g1": torch.ones(D), "c1": torch.zeros(D), "g2": torch.ones(D), "c2": torch.zeros(D)}
        for name in ("wq", "wk", "wv", "wo"):
            p[name] = uniform(gen, (D, D), 1 / math.sqrt(D))
        p["w1"] = uniform(gen, (FF, D), 1 / math.sqrt(D))
        p["w2"] = uniform(gen, (D, FF), 1 / math.sqrt(FF))
        layers.append({k: v.requires_grad_() for k, v in p.items()})
    return layers


def heads(a):
    return a.reshape(BATCH, SEQ, HEADS, HD).permute(0, 2, 1, 3)


def forward(layers, x, t):
    for p in layers:
        n = F.layer_norm(x, [D], p["g1"], p["c1"], eps=1e-5)
        q, k, v = heads(n @ p["wq"].T), heads(n @ p["wk"].T), heads(n @ p["wv"].T)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = o.permute(0, 2, 1, 3).reshape(BATCH, SEQ, D)
        r = x + o @ p["wo"].T
        m = F.layer_norm(r, [D], p["g2"], p["c2"], eps=1e-5)
        x = r + F.gelu(m @ p["w1"].T) @ p["w2"].T
    return F.mse_loss(x, t)


def batch(gen, mix):
    x = uniform(gen, (BATCH, SEQ, D), 1.0)
    return x, x @ mix


def saved_bytes(layers, x, t):
    """Bytes of the distinct storages autograd saves during one forward pass, and the
    names of the backward nodes of attention (which SDPA kernel ran)."""
    skip = {q.untyped_storage().data_ptr() for p in layers for q in p.values()}
    skip |= {x.untyped_storage().data_ptr(), t.untyped_storage().data_ptr()}
    seen = {}

    def pack(a):
        s = a.untyped_storage()
        if s.data_ptr() not in skip and s.nbytes() > 0:
            seen[s.data_ptr()] = s.nbytes()
        return a

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda a: a):
        loss = forward(layers, x, t)
    kinds, stack, visited = set(), [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in visited:
            continue
        visited.add(fn)
        if "Attention" in fn.name() or "Softmax" in fn.name():
            kinds.add(fn.name())
        stack.extend(f for f, _ in fn.next_functions)
    return sum(seen.values()), sorted(kinds)


def bench(threads, steps, warmup):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    mix = uniform(gen, (D, D), 1 / math.sqrt(D))
    layers = make_params(gen)
    params = [q for p in layers for q in p.values()]
    opt = torch.optim.Adam(params, lr=3e-3, betas=(0.9, 0.999), eps=1e-8)
    times = []
    for i in range(warmup + steps):
        x, t = batch(gen, mix)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = forward(layers, x, t)
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed * 1e3)
    saved, kinds = saved_bytes(layers, *batch(gen, mix))
    return statistics.median(times), min(times), saved, kinds, loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    default_threads = torch.get_num_threads()
    torch.set_num_interop_threads(1)
    print(f"torch {torch.__version__}, default intra-op threads {default_threads}, "
          f"interop threads {torch.get_num_interop_threads()}, "
          f"{args.steps} timed steps after {args.warmup} warm-up\n")
    rows, kinds_seen, losses = [], set(), []
    for n in (int(s) for s in args.threads.split(",")):
        med, lo, saved, kinds, loss = bench(n, args.steps, args.warmup)
        rows.append(f"| {n} | {med:.2f} | {lo:.2f} | {saved} |")
        kinds_seen.update(kinds)
        losses.append(f"{loss:.5f}")
    print("| threads | median ms/step | min ms | saved-for-backward bytes |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nattention backward: {', '.join(sorted(kinds_seen)) or 'unknown'}; "
          f"last loss per run: {', '.join(losses)}")


if __name__ == "__main__":
    main()
