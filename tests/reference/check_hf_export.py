#!/usr/bin/python3
"""Checks an exported HuggingFace GPT-2 directory (`driftless export --hf`) the way
transformers reads it, without transformers: config.json keys of GPT2Config,
model.safetensors with "transformer.*" names and metadata format "pt", Conv1D weights
(in, out) applied as x @ W + b, q|k|v split of c_attn along its output, gelu_new, tied
lm_head. Runs the reference batch (per-document attention, position_ids restarting per
document, as a transformers user must pass them for packed input) in float64 and compares
the logits with the golden file.

Usage: /usr/bin/python3 check_hf_export.py HF_DIR INPUT GOLDEN [TOLERANCE]
Exit status 0 when rms(t - r) / rms(r) of the logits is within TOLERANCE (default 1e-5).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import document_layout, read_safetensors, rms_rel  # noqa: E402


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def hf_logits(hf_dir, tokens, positions, docs):
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"], cfg
    assert cfg["activation_function"] == "gelu_new", cfg["activation_function"]
    w, meta = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    assert meta.get("format") == "pt", f"transformers needs metadata format 'pt', got {meta}"
    p = {k: v.double() for k, v in w.items()}
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    D, eps = C // H, cfg["layer_norm_epsilon"]
    assert p["transformer.wte.weight"].shape == (cfg["vocab_size"], C)
    assert p["transformer.wpe.weight"].shape == (cfg["n_positions"], C)
    B, S = tokens.shape
    conv1d = lambda x, n: torch.addmm(p[n + ".bias"], x.reshape(-1, x.shape[-1]), p[n + ".weight"]).view(B, S, -1)
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (C,), p[n + ".weight"], p[n + ".bias"], eps)
    i = torch.arange(S)
    allowed = (docs[:, :, None] == docs[:, None, :]) & (i[None, None, :] <= i[None, :, None])
    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][positions]
    for l in range(L):
        n = f"transformer.h.{l}."
        assert p[n + "attn.c_attn.weight"].shape == (C, 3 * C), "Conv1D weights are (in, out)"
        q, k, v = conv1d(ln(x, n + "ln_1"), n + "attn.c_attn").split(C, dim=2)
        heads = lambda t: t.view(B, S, H, D).permute(0, 2, 1, 3)
        att = heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(D)
        att = att.masked_fill(~allowed[:, None], float("-inf")).softmax(-1)
        y = (att @ heads(v)).permute(0, 2, 1, 3).reshape(B, S, C)
        x = x + conv1d(y, n + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, n + "ln_2"), n + "mlp.c_fc")), n + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    head = p.get("lm_head.weight", p["transformer.wte.weight"])  # tied
    return (x @ head.T).reshape(B * S, -1)


def main():
    hf_dir, inp, golden = sys.argv[1:4]
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
    t, _ = read_safetensors(inp)
    g, _ = read_safetensors(golden)
    tokens = t["tokens"].long()
    B, S = tokens.shape
    lengths, counts = t["document_lengths"].tolist(), t["document_counts"].tolist()
    docs, positions, at = [], [], 0
    for b in range(B):
        d, pos = document_layout(lengths[at : at + counts[b]], S)
        docs.append(d)
        positions.append(pos)
        at += counts[b]
    logits = hf_logits(hf_dir, tokens, torch.stack(positions), torch.stack(docs))
    err = rms_rel(logits, g["logits"])
    print(f"HF-layout logits vs golden: rms_rel {err:.3e} (tolerance {tol:g})")
    return 0 if err <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
