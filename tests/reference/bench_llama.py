#!/usr/bin/env python3
"""PyTorch side of `driftless bench train` for Llama-shaped models (SmolLM2-135M / -360M):
training steps of the same architecture and batch in PyTorch eager and with torch.compile:
RMSNorm (F.rms_norm), rotary embeddings (HF's rotate-half convention, positions 0..T-1 of
one document per sequence), grouped-query SDPA (enable_gqa), SwiGLU MLP, no biases, tied
head; bf16 autocast with fp32 master weights, fused AdamW. Reports tokens/s (median step
after warm-up), MFU (6N + attention FLOPs per token) and peak memory. With --driftless FILE
(the output of `driftless bench train`; its last JSON line is read) it prints the
driftless / torch ratios. `--hf` runs transformers' LlamaForCausalLM (sdpa) instead of the
model written here, for a second opinion.

  python3 tests/reference/bench_llama.py --model smollm2_135m --batch 16 --seq 2048 \
      [--driftless out.txt]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpt2 import median_step_seconds, print_table  # noqa: E402

# layers, hidden, heads, kv heads, intermediate, vocab, rope theta
MODELS = {
    "smollm2_135m": (30, 576, 9, 3, 1536, 49152, 100000.0),
    "smollm2_360m": (32, 960, 15, 5, 2560, 49152, 100000.0),
}
PEAK_BF16 = 989.4e12  # H100 / H200 SXM dense bf16


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, c, h, hkv, f, eps):
        super().__init__()
        self.h, self.hkv, self.d, self.eps = h, hkv, c // h, eps
        self.input_norm = nn.Parameter(torch.ones(c))
        self.post_norm = nn.Parameter(torch.ones(c))
        self.qkv = nn.Linear(c, (h + 2 * hkv) * self.d, bias=False)
        self.o = nn.Linear(h * self.d, c, bias=False)
        self.gate_up = nn.Linear(c, 2 * f, bias=False)
        self.down = nn.Linear(f, c, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(F.rms_norm(x, (C,), self.input_norm, self.eps)).split(
            [self.h * self.d, self.hkv * self.d, self.hkv * self.d], dim=2)
        q = q.view(B, T, self.h, self.d).transpose(1, 2)
        k = k.view(B, T, self.hkv, self.d).transpose(1, 2)
        v = v.view(B, T, self.hkv, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.gate_up(F.rms_norm(x, (C,), self.post_norm, self.eps)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, layers, c, h, hkv, f, vocab, theta, eps=1e-5):
        super().__init__()
        self.c, self.eps = c, eps
        self.embed = nn.Embedding(vocab, c)
        self.blocks = nn.ModuleList(Block(c, h, hkv, f, eps) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(c))
        d = c // h
        self.register_buffer("inv_freq", 1.0 / (theta ** (torch.arange(0, d, 2).float() / d)),
                             persistent=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device, dtype=torch.float32)
        ang = torch.outer(pos, self.inv_freq)
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, cos, sin)
        logits = F.linear(F.rms_norm(x, (self.c,), self.norm, self.eps), self.embed.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def hf_model(layers, c, h, hkv, f, vocab, theta):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=c, intermediate_size=f,
                      num_hidden_layers=layers, num_attention_heads=h, num_key_value_heads=hkv,
                      rope_theta=theta, tie_word_embeddings=True, max_position_embeddings=8192,
                      attn_implementation="sdpa")
    m = LlamaForCausalLM(cfg)

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, idx, targets):
            logits = self.m(input_ids=idx).logits
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
    return Wrap()


def bench(name, batch, seq, compile_, steps, warmup, use_hf, profile_rows=0):
    L, C, H, HKV, FF, V, theta = MODELS[name]
    torch.manual_seed(0)
    model = (hf_model(*MODELS[name]) if use_hf else Llama(L, C, H, HKV, FF, V, theta)).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, V, (batch, seq), device="cuda")
    tgt = torch.randint(0, V, (batch, seq), device="cuda")
    energy = {}
    med = median_step_seconds(model, compile_, idx, tgt, steps, warmup, profile_rows, energy)
    jps = energy["joules_per_step"]
    tokens = batch * seq
    D = C // H
    matmul_params = L * (C * (H + 2 * HKV) * D + C * C + 3 * C * FF) + V * C
    attn = L * 4 * C * batch * seq * (seq + 1) / 2
    flops = 3 * (2 * matmul_params * tokens + attn)
    impl = ("hf " if use_hf else "") + ("torch.compile" if compile_ else "eager")
    return {"impl": impl, "model": name, "parameters": n_params, "tokens_per_s": tokens / med,
            "mfu": flops / med / PEAK_BF16, "peak_bytes": torch.cuda.max_memory_allocated(),
            "median_step_s": med, "joules_per_step": jps,
            "tokens_per_joule": tokens / jps if jps else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="smollm2_135m")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--hf", action="store_true", help="transformers' LlamaForCausalLM instead")
    ap.add_argument("--profile", type=int, default=0, metavar="ROWS",
                    help="print the ROWS costliest GPU kernels of one more step")
    ap.add_argument("--driftless", help="output of `driftless bench train` (last line JSON)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    if not a.no_eager:
        rows.append(bench(a.model, a.batch, a.seq, False, a.steps, a.warmup, a.hf, a.profile))
    if not a.no_compile:
        rows.append(bench(a.model, a.batch, a.seq, True, a.steps, a.warmup, a.hf, a.profile))
    dl = None
    if a.driftless:
        with open(a.driftless) as f:
            lines = [l for l in f if l.startswith("{")]
        dl = json.loads(lines[-1]) if lines else None
    print(f"{a.model}, {a.batch} x {a.seq} tokens, bf16, {torch.cuda.get_device_name()}")
    print_table(rows, dl, 20)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
