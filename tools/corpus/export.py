"""Regenerates the real-model corpus in tests/corpus/ (committed; CI does not run this script).

Each model is a small, randomly initialised configuration of a model family people export to
ONNX (transformers' BERT and GPT-2, a CRNN text recogniser, a YOLO-style detector, an LSTM
classifier, a voice-activity-style model that branches on its sample rate at run time),
exported with both of torch's exporters: the TorchScript-based one (`dynamo=False`, suffix
`_ts`) and the `torch.export`-based one (`dynamo=True`, suffix `_dynamo`), with dynamic batch
and sequence (or image) sizes. Nothing is downloaded. Every model folder has the layout of
ONNX's backend node tests: model.onnx and test_data_set_N/{input,output}_K.pb, one data set
per input size, with outputs computed by onnxruntime (an independent implementation).

    python3 -m venv /tmp/corpus-venv
    /tmp/corpus-venv/bin/pip install torch==2.9.1 onnx==1.22.0 onnxruntime==1.32.0 \
        onnxscript==0.7.2 transformers==4.44.2 numpy
    /tmp/corpus-venv/bin/python tools/corpus/export.py [--only NAME ...]
"""
import argparse
import os
import shutil
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "corpus")
warnings.filterwarnings("ignore")


# ---------------------------------------------------------------------------------------------
# Models


class SentenceEncoder(nn.Module):
    """A BERT encoder with sentence-transformers' mean pooling over the attention mask."""

    def __init__(self):
        super().__init__()
        from transformers import BertConfig, BertModel

        cfg = BertConfig(
            vocab_size=120,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=160,
            type_vocab_size=2,
        )
        self.bert = BertModel(cfg, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)


class Gpt2(nn.Module):
    """A GPT-2 language model head (no key/value cache): position ids and the causal mask are
    computed inside from the input's shape."""

    def __init__(self):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=120, n_positions=160, n_embd=32, n_layer=2, n_head=4, use_cache=False)
        self.lm = GPT2LMHeadModel(cfg)

    def forward(self, input_ids):
        return self.lm(input_ids=input_ids, use_cache=False).logits


class Crnn(nn.Module):
    """A CRNN text recogniser: a conv stack over a 32-pixel-high line of any width, the
    columns as a sequence through a bidirectional LSTM, per-column class scores."""

    def __init__(self, classes=37):
        super().__init__()

        def block(cin, cout, pool):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool))

        self.convs = nn.Sequential(block(1, 16, 2), block(16, 32, 2), block(32, 48, (2, 1)), block(48, 48, (2, 1)))
        self.rnn = nn.LSTM(48 * 2, 32, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(64, classes)

    def forward(self, image):
        f = self.convs(image)  # [b, 48, 2, w/4]
        b, c, h, w = f.shape
        seq = f.reshape(b, c * h, w).permute(0, 2, 1)
        out, _ = self.rnn(seq)
        return self.fc(out).log_softmax(-1)


class Yolo(nn.Module):
    """A YOLO-style detector: a strided conv backbone with SiLU, a neck that upsamples to the
    skip connection's size and concatenates, and a head that decodes boxes on a grid made from
    the feature map's shape."""

    def __init__(self, classes=3, anchors=2):
        super().__init__()

        def cbs(cin, cout, k=3, s=1):
            return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())

        self.stem = cbs(3, 8, 3, 2)
        self.c2 = cbs(8, 16, 3, 2)
        self.c3 = cbs(16, 32, 3, 2)
        self.c4 = cbs(32, 32, 3, 2)
        self.lat = cbs(32, 16, 1)
        self.fuse = cbs(48, 32, 3)
        self.no = classes + 5
        self.na = anchors
        self.heads = nn.ModuleList([nn.Conv2d(32, self.no * anchors, 1), nn.Conv2d(32, self.no * anchors, 1)])
        self.register_buffer("anchor_wh", torch.tensor([[10.0, 13.0], [16.0, 30.0], [33.0, 23.0], [30.0, 61.0]]))

    def forward(self, image):
        x3 = self.c3(self.c2(self.stem(image)))  # stride 8
        x4 = self.c4(x3)  # stride 16
        up = F.interpolate(self.lat(x4), size=x3.shape[-2:], mode="nearest")
        p3 = self.fuse(torch.cat([up, x3], 1))
        outs = []
        for i, (p, stride) in enumerate([(p3, 8), (x4, 16)]):
            y = self.heads[i](p)
            b, _, ny, nx = y.shape
            y = y.view(b, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).sigmoid()
            gy, gx = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            grid = torch.stack((gx, gy), 2).view(1, 1, ny, nx, 2).float()
            wh = self.anchor_wh[2 * i : 2 * i + 2].view(1, self.na, 1, 1, 2)
            xy = (y[..., 0:2] * 2 - 0.5 + grid) * stride
            box_wh = (y[..., 2:4] * 2) ** 2 * wh
            outs.append(torch.cat((xy, box_wh, y[..., 4:]), -1).view(b, -1, self.no))
        return torch.cat(outs, 1)


class LstmClassifier(nn.Module):
    """A two-layer LSTM over a feature sequence; class scores from the last step."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(16, 24, num_layers=2, batch_first=True)
        self.fc = nn.Linear(24, 5)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.fc(out[:, -1]), h


# torch.cond needs branches of one output shape: under the torch.export-based exporter the two
# filters are "same"-padded, stride 1.
def vad_branch_16k(x, w16, w8):
    return F.conv1d(x, w16, padding=4)


def vad_branch_8k(x, w16, w8):
    return F.conv1d(x, w8[:, :, :5], padding=2)


class Vad(nn.Module):
    """A voice-activity-style model: the front end depends on the sample rate, a run-time
    input. Scripted (TorchScript exporter), 16 kHz audio is filtered with stride 2 and anything
    else with stride 1, so the branches make different numbers of frames; under torch.cond
    (torch.export-based exporter) both keep the length. A speech probability per frame
    follows."""

    def __init__(self):
        super().__init__()
        self.w16 = nn.Parameter(torch.randn(8, 1, 9) * 0.3)
        self.w8 = nn.Parameter(torch.randn(8, 1, 5) * 0.3)
        self.proj = nn.Conv1d(8, 1, 1)

    def forward(self, audio, sr):
        x = F.pad(audio.unsqueeze(1), (3, 3), mode="reflect")
        if self.scripted:
            feats = torch.jit.script(_vad_front)(x, sr, self.w16, self.w8)
        else:
            feats = torch.cond(sr == 16000, vad_branch_16k, vad_branch_8k, (x, self.w16, self.w8))
        return torch.sigmoid(self.proj(torch.relu(feats))).squeeze(1)


@torch.jit.script
def _vad_front(x: torch.Tensor, sr: torch.Tensor, w16: torch.Tensor, w8: torch.Tensor) -> torch.Tensor:
    if bool(sr == 16000):
        return F.conv1d(x, w16[:, :, :8], stride=2)
    return F.conv1d(x, w8[:, :, :4], stride=1)


# ---------------------------------------------------------------------------------------------
# Inputs per case


def token_cases(rng, vocab, with_mask):
    cases = []
    for b, s in [(1, 1), (3, 3), (2, 64), (1, 128)]:
        ids = rng.integers(0, vocab, size=(b, s)).astype(np.int64)
        feeds = {"input_ids": ids}
        if with_mask:
            mask = np.ones((b, s), dtype=np.int64)
            for i in range(1, b):  # later rows padded at the end
                mask[i, s - (s * i) // (b + 1) :] = 0
            feeds["attention_mask"] = mask
        cases.append(feeds)
    return cases


def image_cases(rng, channels, sizes):
    return [{"image": rng.standard_normal((b, channels, h, w)).astype(np.float32)} for b, h, w in sizes]


MODELS = {
    "bert": dict(
        make=SentenceEncoder,
        inputs=["input_ids", "attention_mask"],
        outputs=["embedding"],
        dynamic={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
        cases=lambda rng: token_cases(rng, 120, True),
    ),
    "gpt2": dict(
        make=Gpt2,
        inputs=["input_ids"],
        outputs=["logits"],
        dynamic={"input_ids": {0: "batch", 1: "seq"}},
        cases=lambda rng: token_cases(rng, 120, False),
    ),
    "crnn": dict(
        make=Crnn,
        inputs=["image"],
        outputs=["log_probs"],
        dynamic={"image": {0: "batch", 3: "width"}},
        anonymous_dims=True,
        cases=lambda rng: image_cases(rng, 1, [(1, 32, 32), (3, 32, 100), (2, 32, 256)]),
    ),
    "yolo": dict(
        make=Yolo,
        inputs=["image"],
        outputs=["detections"],
        dynamic={"image": {0: "batch", 2: "height", 3: "width"}},
        example=1,
        cases=lambda rng: image_cases(rng, 3, [(1, 64, 64), (2, 96, 128), (1, 160, 224)]),
    ),
    "lstm": dict(
        make=LstmClassifier,
        inputs=["x"],
        outputs=["scores", "h"],
        # torch.export specialises nn.LSTM's sequence length (the CRNN's LSTM, fed by a
        # reshape, is dynamic under both exporters).
        exporters=["ts"],
        dynamic={"x": {0: "batch", 1: "seq"}},
        cases=lambda rng: [
            {"x": rng.standard_normal((b, s, 16)).astype(np.float32)} for b, s in [(1, 1), (3, 3), (2, 64), (1, 128)]
        ],
    ),
    "vad": dict(
        make=Vad,
        inputs=["audio", "sr"],
        outputs=["speech"],
        dynamic={"audio": {0: "batch", 1: "samples"}},
        example=3,
        cases=lambda rng: [
            {"audio": rng.standard_normal((b, n)).astype(np.float32), "sr": np.array(sr, dtype=np.int64)}
            for b, n, sr in [(1, 64, 16000), (2, 64, 8000), (1, 512, 16000), (3, 100, 8000)]
        ],
    ),
}


# ---------------------------------------------------------------------------------------------
# Export


def export(name, spec, exporter, rng):
    torch.manual_seed(0)
    model = spec["make"]().eval()
    if isinstance(model, Vad):
        model.scripted = exporter == "ts"
    cases = spec["cases"](rng)
    # The example must not have a size of 1 in a dynamic dim, nor two equal dynamic sizes:
    # torch.export specialises the first and unifies the second.
    example = tuple(torch.from_numpy(v) for v in cases[spec.get("example", 2)].values())
    folder = os.path.join(OUT, f"{name}_{exporter}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    path = os.path.join(folder, "model.onnx")
    with torch.no_grad():
        if exporter == "ts":
            torch.onnx.export(
                model,
                example,
                path,
                input_names=spec["inputs"],
                output_names=spec["outputs"],
                dynamic_axes=spec["dynamic"],
                opset_version=17,
                dynamo=False,
            )
        else:
            # Dim.DYNAMIC, as exporters' users write it: torch.export may add guards (such as
            # `batch != 1`) that ONNX cannot carry; every case is checked against torch below.
            shapes = {}
            for inp in spec["inputs"]:
                axes = spec["dynamic"].get(inp, {})
                shapes[inp] = {a: torch.export.Dim.DYNAMIC for a in axes} or None
            program = torch.onnx.export(
                model,
                example,
                input_names=spec["inputs"],
                output_names=spec["outputs"],
                dynamic_shapes=shapes,
                opset_version=18,
                dynamo=True,
                external_data=False,
            )
            program.save(path, external_data=False)
    onnx_model = onnx.load(path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for k, feeds in enumerate(cases):
        feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
        outs = sess.run(None, feeds)
        with torch.no_grad():
            ref = model(*(torch.from_numpy(v) for v in feeds.values()))
        ref = ref if isinstance(ref, tuple) else (ref,)
        for o, r in zip(outs, ref):
            err = np.abs(o - r.numpy()).max() if o.size else 0.0
            assert err < 1e-3, f"{name}_{exporter} case {k}: onnxruntime and torch differ by {err}"
        ds = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(ds)
        for i, (n, v) in enumerate(feeds.items()):
            with open(os.path.join(ds, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
        for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
            with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    if spec.get("anonymous_dims") and exporter == "ts":
        anonymous_dims(name, folder)
    ops = sorted({n.op_type for n in onnx_model.graph.node})
    size = os.path.getsize(path)
    print(f"{name}_{exporter}: {size / 1e3:.0f} kB, {len(onnx_model.graph.node)} nodes, {len(cases)} cases: {' '.join(ops)}")


def anonymous_dims(name, folder):
    """A copy of a model whose inputs declare their dynamic dims as Paddle's exporter does: -1
    for the batch, an empty dim (no value, no name) for the rest."""
    model = onnx.load(os.path.join(folder, "model.onnx"))
    for inp in model.graph.input:
        for k, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_param"):
                d.Clear()
                if k == 0:
                    d.dim_value = -1
    for out in model.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.Clear()
    target = folder.replace("_ts", "_anondims")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder, target)
    onnx.save(model, os.path.join(target, "model.onnx"))
    ort.InferenceSession(os.path.join(target, "model.onnx"), providers=["CPUExecutionProvider"])
    print(f"{name}_anondims: inputs declared with -1 and empty dims")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", help="model names (default: all)")
    ap.add_argument("--exporter", nargs="*", default=["ts", "dynamo"])
    args = ap.parse_args()
    for name, spec in MODELS.items():
        if args.only and name not in args.only:
            continue
        for exporter in args.exporter:
            if exporter not in spec.get("exporters", ["ts", "dynamo"]):
                continue
            export(name, spec, exporter, np.random.default_rng(0))


if __name__ == "__main__":
    main()
