#!/usr/bin/python3
"""Plain-PyTorch reference of the trainer for tests/train/trainer_reference_test.cpp
(CONTRIBUTING.md tier 3, "against something real").

Reads the weights, the global batch of every step and the optimizer settings written by our
C++ side (TrainerReferenceInput.DISABLED_Write), and runs the steps in float64 with the GPT-2
of gpt2_reference.py: loss over the global batch's loss tokens, backward,
torch.nn.utils.clip_grad_norm_ (max_norm / (norm + 1e-6) when the norm is above max_norm),
the warm-up + cosine learning rate (nanoGPT's rule, written out below and in the case) and
torch.optim.AdamW (decoupled decay only where the case says so). Writes the golden file:
`losses`, `grad_norms` (before clipping) and `lrs` of each step, and every parameter after
each step's update as `step<k>.param.<name>`.

Run with an interpreter that has torch: /usr/bin/python3 trainer_reference.py IN OUT
"""
import argparse
import json
import math
import sys

import torch

import gpt2_reference as ref


def learning_rate(s, step):
    if step < s["warmup_steps"]:
        return s["max_lr"] * (step + 1) / s["warmup_steps"]
    assert s["decay"] == "cosine", s["decay"]
    r = (step - s["warmup_steps"]) / (s["total_steps"] - s["warmup_steps"])
    return s["min_lr"] + (s["max_lr"] - s["min_lr"]) * 0.5 * (1.0 + math.cos(math.pi * r))


def batch_of(tensors, step):
    p = f"step{step}."
    tokens, labels = tensors[p + "tokens"].long(), tensors[p + "labels"].long()
    B, S = tokens.shape
    lengths = tensors[p + "document_lengths"].tolist()
    counts = tensors[p + "document_counts"].tolist()
    docs, positions, at = [], [], 0
    for b in range(B):
        d, q = ref.document_layout(lengths[at : at + counts[b]], S)
        docs.append(d)
        positions.append(q)
        at += counts[b]
    return tokens, torch.stack(positions), torch.stack(docs), labels


def run(inp, dtype):
    tensors, meta = ref.read_safetensors(inp)
    case = json.loads(meta["case"])
    cfg, opt, sched = case["model"], case["adamw"], case["schedule"]
    assert cfg["activation"] == "gelu_tanh"
    params = {
        k[len("param.") :]: v.to(dtype).requires_grad_(True)
        for k, v in tensors.items()
        if k.startswith("param.")
    }
    model = ref.Gpt2(cfg, params)
    decay = case["weight_decay_on"]
    groups = [
        {"params": [t for n, t in params.items() if decay[n]], "weight_decay": opt["weight_decay"]},
        {"params": [t for n, t in params.items() if not decay[n]], "weight_decay": 0.0},
    ]
    adamw = torch.optim.AdamW(
        groups, lr=sched["max_lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
        foreach=False
    )
    out, losses, norms, lrs = {}, [], [], []
    for step in range(case["steps"]):
        adamw.zero_grad(set_to_none=True)
        loss, _ = model.loss(*batch_of(tensors, step))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), case["grad_clip"])
        lr = learning_rate(sched, step)
        for g in adamw.param_groups:
            g["lr"] = lr
        adamw.step()
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(lr)
        for name, t in params.items():
            out[f"step{step}.param.{name}"] = t.detach().to(torch.float32).clone()
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    out["grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    out["lrs"] = torch.tensor(lrs, dtype=torch.float64)
    return out, case


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", help="input safetensors written by TrainerReferenceInput.DISABLED_Write")
    ap.add_argument("output", help="golden safetensors to write")
    args = ap.parse_args()
    out, case = run(args.input, torch.float64)
    # The float32 noise floor: how far PyTorch's own fp32 run is from float64.
    f32, _ = run(args.input, torch.float32)
    worst = max((ref.rms_rel(f32[k], out[k]), k) for k in out if ".param." in k)
    loss_floor = max(abs(a - b) / abs(b) for a, b in zip(f32["losses"].tolist(), out["losses"].tolist()))
    print(f"torch fp32 vs fp64: losses {loss_floor:.2e}, worst parameter {worst[0]:.2e} ({worst[1]})")
    clipped = all(n > case["grad_clip"] for n in out["grad_norms"].tolist())
    print(f"gradient norms {[round(n, 4) for n in out['grad_norms'].tolist()]} "
          f"(clip {case['grad_clip']}: every step clips: {clipped}), "
          f"lrs {[round(x, 6) for x in out['lrs'].tolist()]}")
    meta = {
        "generator": "tests/reference/trainer_reference.py",
        "torch": torch.__version__,
        "precision": "float64 (parameters stored as float32)",
        "case": json.dumps(case, sort_keys=True),
    }
    ref.write_safetensors(args.output, out, meta)
    print(f"wrote {args.output}: losses {out['losses'][0].item():.6f} -> "
          f"{out['losses'][-1].item():.6f}")
    return 0 if clipped else 1


if __name__ == "__main__":
    sys.exit(main())
