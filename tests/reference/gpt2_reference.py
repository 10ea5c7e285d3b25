#!/usr/bin/python3
"""Plain-PyTorch GPT-2 reference for tests/layers/gpt_reference_test.cpp (CONTRIBUTING.md
tier 3, "against something real").

Reads the weights and packed batch written by our C++ side (GptReferenceInput.DISABLED_Write),
runs the same tiny GPT-2 in float64 with per-document causal attention (an explicit mask
built from document ids; positions restart at every document start), and writes the golden
file: logits, loss, every parameter gradient, and the losses of `steps` AdamW updates
(torch.optim.AdamW: decoupled decay only where the case says so, bias correction,
constant lr, no clipping).

Run with Debian's interpreter (python3-torch): /usr/bin/python3 gpt2_reference.py IN OUT
Only torch and numpy are needed (safetensors is read and written by safetensors_io.py).
"""
import argparse
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

import safetensors_io

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    raw, meta = safetensors_io.read_raw(path)
    tensors = {}
    for name, (dtype, shape, b) in raw.items():
        a = np.frombuffer(b, dtype=DTYPES[dtype]).reshape(shape)
        tensors[name] = torch.from_numpy(a.copy())
    return tensors, meta


def write_safetensors(path, tensors, meta):
    names = {np.float32: "F32", np.float64: "F64", np.int32: "I32", np.int64: "I64"}
    arrays = {n: np.ascontiguousarray(t.detach().cpu().numpy()) for n, t in tensors.items()}
    safetensors_io.write_raw(
        path, [(n, names[a.dtype.type], a.shape, a.tobytes()) for n, a in arrays.items()], meta)


def document_layout(lengths, S):
    """Per token: document id and position inside the document (restarting at 0)."""
    doc, pos = [], []
    for j, n in enumerate(lengths):
        doc += [j] * n
        pos += list(range(n))
    assert len(doc) == S, f"document lengths sum to {len(doc)}, sequence has {S}"
    return torch.tensor(doc), torch.tensor(pos)


class Gpt2:
    """GPT-2 with our parameter names and layouts (weights (out, in), fused q|k|v)."""

    def __init__(self, cfg, params):
        self.cfg, self.p = cfg, params

    def forward(self, tokens, positions, docs):
        c, p = self.cfg, self.p
        B, S = tokens.shape
        C, H, Hkv = c["n_embd"], c["n_head"], c["n_kv_head"]
        D = C // H
        eps = c["layer_norm_epsilon"]
        # Per-document causal mask (bottom-right within a document = plain causal here,
        # since every document's queries and keys are the same rows).
        i = torch.arange(S)
        allowed = (docs[:, :, None] == docs[:, None, :]) & (i[None, None, :] <= i[None, :, None])
        x = p["wte.weight"][tokens] + p["wpe.weight"][positions]  # (B, S, C)
        for l in range(c["n_layer"]):
            g = lambda n: p[f"h.{l}.{n}"]
            h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), eps)
            qkv = F.linear(h, g("attn.c_attn.weight"), g("attn.c_attn.bias"))
            q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
            q = q.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
            k = k.view(B, S, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
            v = v.view(B, S, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            att = att.masked_fill(~allowed[:, None], float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(B, S, C)
            x = x + F.linear(y, g("attn.c_proj.weight"), g("attn.c_proj.bias"))
            h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), eps)
            h = F.gelu(F.linear(h, g("mlp.c_fc.weight"), g("mlp.c_fc.bias")), approximate="tanh")
            x = x + F.linear(h, g("mlp.c_proj.weight"), g("mlp.c_proj.bias"))
        x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps)
        return x @ p["wte.weight"].T  # (B, S, V), tied head

    def loss(self, tokens, positions, docs, labels):
        logits = self.forward(tokens, positions, docs)
        mask = labels >= 0
        total = F.cross_entropy(logits[mask], labels[mask].long(), reduction="sum")
        return total / mask.sum(), logits


def run(inp, dtype):
    tensors, meta = read_safetensors(inp)
    case = json.loads(meta["case"])
    cfg, opt = case["model"], case["adamw"]
    assert cfg["activation"] == "gelu_tanh"
    params = {
        k[len("param.") :]: v.to(dtype).requires_grad_(True)
        for k, v in tensors.items()
        if k.startswith("param.")
    }
    tokens, labels = tensors["tokens"].long(), tensors["labels"].long()
    B, S = tokens.shape
    lengths = tensors["document_lengths"].tolist()
    counts = tensors["document_counts"].tolist()
    docs, positions, at = [], [], 0
    for b in range(B):
        d, p = document_layout(lengths[at : at + counts[b]], S)
        docs.append(d)
        positions.append(p)
        at += counts[b]
    docs, positions = torch.stack(docs), torch.stack(positions)
    model = Gpt2(cfg, params)

    out = {}
    loss, logits = model.loss(tokens, positions, docs, labels)
    loss.backward()
    out["loss"] = loss.detach().to(torch.float64).reshape(1)
    out["logits"] = logits.detach().reshape(B * S, -1).to(torch.float32)
    for name, t in params.items():
        out["grad." + name] = t.grad.to(torch.float32)

    decay = case["weight_decay_on"]
    groups = [
        {"params": [t for n, t in params.items() if decay[n]], "weight_decay": opt["weight_decay"]},
        {"params": [t for n, t in params.items() if not decay[n]], "weight_decay": 0.0},
    ]
    adamw = torch.optim.AdamW(
        groups, lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"], foreach=False
    )
    losses = []
    for step in range(opt["steps"] + 1):
        adamw.zero_grad(set_to_none=True)
        loss, _ = model.loss(tokens, positions, docs, labels)
        losses.append(loss.item())
        if step < opt["steps"]:
            loss.backward()
            adamw.step()
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    return out, case


def rms_rel(t, r):
    t, r = t.double(), r.double()
    return ((t - r).pow(2).mean().sqrt() / r.pow(2).mean().sqrt().clamp_min(1e-300)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", help="input safetensors written by GptReferenceInput.DISABLED_Write")
    ap.add_argument("output", help="golden safetensors to write")
    args = ap.parse_args()
    torch.manual_seed(0)
    out, case = run(args.input, torch.float64)
    # The float32 noise floor: how far PyTorch's own fp32 run is from float64. Our fp32
    # model is held to tolerances well above it.
    f32, _ = run(args.input, torch.float32)
    floor = {k: rms_rel(f32[k], out[k]) for k in out}
    worst_grad = max((v, k) for k, v in floor.items() if k.startswith("grad."))
    print(f"torch fp32 vs fp64: loss {floor['loss']:.2e}, logits {floor['logits']:.2e}, "
          f"worst gradient {worst_grad[0]:.2e} ({worst_grad[1]}), "
          f"losses {max(abs(a - b) / abs(b) for a, b in zip(f32['losses'].tolist(), out['losses'].tolist())):.2e}")
    meta = {
        "generator": "tests/reference/gpt2_reference.py",
        "torch": torch.__version__,
        "precision": "float64 (gradients and logits stored as float32)",
        "case": json.dumps(case, sort_keys=True),
    }
    write_safetensors(args.output, out, meta)
    print(f"wrote {args.output}: loss {out['loss'].item():.10f}, "
          f"losses {out['losses'][0].item():.6f} -> {out['losses'][-1].item():.6f}")


if __name__ == "__main__":
    sys.exit(main())
