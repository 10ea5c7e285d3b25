#!/usr/bin/env python3
"""PyTorch side of `driftless bench train`: GPT-2 training steps of the same model
and batch in PyTorch eager and with torch.compile, bf16 autocast with fp32 master weights,
fused AdamW, flash SDPA, tied head; tokens/s (median step after warm-up), MFU (6N + attention
FLOPs per token, the convention of train/flops.h) and peak memory. With --driftless
FILE (the output of `driftless bench train`; its last JSON line is read) it prints the
driftless / torch ratios.

  python3 tests/reference/bench_gpt2.py --model 124m --batch 16 [--driftless out.txt]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvml_energy import energy_joules  # noqa: E402

MODELS = {"124m": (12, 12, 768), "350m": (24, 16, 1024)}
PEAK_BF16 = 989.4e12  # H100 / H200 SXM dense bf16


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, c, vocab=50257, positions=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(positions, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def median_step_seconds(model, compile_, idx, tgt, steps, warmup, profile_rows=0, energy=None):
    """Median seconds of a training step of model(idx, tgt) -> loss (bf16 autocast, fused
    AdamW, optionally under torch.compile) after `warmup` untimed steps; the peak-memory
    counter is reset after the warm-up. profile_rows > 0: one more step runs under
    torch.profiler and its `profile_rows` costliest GPU kernels are printed. energy: a dict
    that receives the GPU's joules a step over the timed steps ("joules_per_step", None
    without NVML's counter), as `driftless bench train` measures them."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step_model = torch.compile(model) if compile_ else model

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    secs = []
    j0 = energy_joules()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        secs.append(time.perf_counter() - t0)
    j1 = energy_joules()
    if energy is not None:
        energy["joules_per_step"] = (j1 - j0) / steps if j0 is not None and j1 is not None else None
    if profile_rows > 0:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=profile_rows,
                                        max_name_column_width=90))
    return statistics.median(secs)


def print_table(rows, dl, width):
    """torch's rows and driftless's (dl: `bench train`'s JSON, or None) with the ratios: tokens/s,
    MFU, peak memory and tokens/J (the GPU's energy over the timed steps, from NVML: it sets the
    speed of a power-capped run; "-" without the counter)."""
    print(f"{'impl':<{width}}{'tokens/s':>12}{'MFU':>8}{'peak GiB':>10}{'driftless/x':>13}"
          f"{'tokens/J':>10}{'J ratio':>9}")

    def per_joule(r):
        return f"{r['tokens_per_joule']:.0f}" if r.get("tokens_per_joule") else "-"
    for r in rows:
        ratio = f"{dl['tokens_per_s'] / r['tokens_per_s']:.3f}" if dl else "-"
        jr = (f"{dl['tokens_per_joule'] / r['tokens_per_joule']:.3f}"
              if dl and dl.get("tokens_per_joule") and r.get("tokens_per_joule") else "-")
        print(f"{r['impl']:<{width}}{r['tokens_per_s']:>12.0f}{100 * r['mfu']:>7.1f}%"
              f"{r['peak_bytes'] / 2**30:>10.2f}{ratio:>13}{per_joule(r):>10}{jr:>9}")
    if dl:
        print(f"{'driftless':<{width}}{dl['tokens_per_s']:>12.0f}{100 * dl['mfu']:>7.1f}%"
              f"{max(dl['peak_bytes_per_rank']) / 2**30:>10.2f}{'1.000':>13}"
              f"{per_joule(dl):>10}{'1.000':>9}")


def bench(name, batch, seq, compile_, steps, warmup):
    L, H, C = MODELS[name]
    torch.manual_seed(0)
    model = GPT(L, H, C).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, 50257, (batch, seq), device="cuda")
    tgt = torch.randint(0, 50257, (batch, seq), device="cuda")
    energy = {}
    med = median_step_seconds(model, compile_, idx, tgt, steps, warmup, energy=energy)
    jps = energy["joules_per_step"]
    tokens = batch * seq
    matmul_params = L * 12 * C * C + 50257 * C
    flops = 3 * (2 * matmul_params * tokens + L * 4 * C * batch * seq * (seq + 1) / 2)
    return {"impl": "torch.compile" if compile_ else "eager", "model": name,
            "parameters": n_params, "tokens_per_s": tokens / med, "mfu": flops / med / PEAK_BF16,
            "peak_bytes": torch.cuda.max_memory_allocated(), "median_step_s": med,
            "joules_per_step": jps, "tokens_per_joule": tokens / jps if jps else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=MODELS, default="124m")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--driftless", help="output of `driftless bench train` (last line JSON)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = [bench(a.model, a.batch, a.seq, False, a.steps, a.warmup)]
    if not a.no_compile:
        rows.append(bench(a.model, a.batch, a.seq, True, a.steps, a.warmup))
    dl = None
    if a.driftless:
        with open(a.driftless) as f:
            lines = [l for l in f if l.startswith("{")]
        dl = json.loads(lines[-1])
    print(f"GPT-2 {a.model}, {a.batch} x {a.seq} tokens, bf16, {torch.cuda.get_device_name()}")
    print_table(rows, dl, 16)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
