#!/usr/bin/env python3
"""PyTorch side of `driftless bench attention`: the same shapes, timed the same way
(CUDA events, warm-up, median), with torch SDPA for dense causal (and GQA) and FlexAttention
for the document-masked and softcap shapes. With --driftless FILE (the output of
`driftless bench attention`; its last JSON line is read) it prints driftless / torch ratios.
With --score-mod MODE the FlexAttention shapes without softcap run with that score_mod
instead (named *_expr), to compare with `driftless bench attention --score-mod EXPR`:
  softcap  30 * tanh(score / 30)
  alibi    score - slope[h] * abs(q - k)           slope[h] = 2^(-8 (h + 1) / H)
  bias     score + bias[h, min(abs(q - k), 63)]    bias[h, d] = -slope[h] d (a (H, 64) table)
(the tables are driftless's cmd_bench.cpp bench_score_mod). --learnable makes the tables
trainable (the backward also computes their gradients), as `driftless bench attention
--learnable`. A FlexAttention kernel that does not fit the GPU's shared memory with its
default tiles (the learnable bias table at D = 64 does not: Triton asks 247808 bytes of
232448) is compiled again with 64 x 64 forward and 32 x 64 backward tiles, and the row says so.

  python3 tests/reference/bench_attention.py [--driftless bench.txt] [--reps 20]
  python3 tests/reference/bench_attention.py --score-mod bias --driftless bench_bias.txt
    (bench_bias.txt: driftless bench attention --score-mod 'score + bias[h, min(abs(q - k), 63)]')
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

DENSE = [4096] * 4
PACKED = [512, 1536, 768, 1280, 256, 1792, 1024, 1024]
# name, documents, heads, kv_heads, head_dim, softcap, torch implementation
SHAPES = [
    ("causal_t4096_d64", DENSE, 32, 32, 64, 0.0, "sdpa"),
    ("causal_t4096_d128", DENSE, 16, 16, 128, 0.0, "sdpa"),
    ("docs8_t8192_d64", PACKED, 32, 32, 64, 0.0, "flex"),
    ("docs8_t8192_d64_softcap30", PACKED, 32, 32, 64, 30.0, "flex"),
    ("causal_t4096_d128_gqa4", DENSE, 32, 8, 128, 0.0, "sdpa"),
]


def flops(docs, heads, d):
    pairs = sum(n * (n + 1) / 2 for n in docs)
    f = 4.0 * d * pairs * heads
    return f, 2.5 * f


def time_ms(fn, warmup, reps):
    ms = []
    for r in range(warmup + reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        if r >= warmup:
            ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def expression_score_mod(mode, H, dev, learnable=False):
    """The score_mod of --score-mod MODE (see the top of the file)."""
    slope = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=dev)
    bias = -slope[:, None] * torch.arange(64, device=dev, dtype=torch.float32)[None, :]
    slope.requires_grad_(learnable)
    bias.requires_grad_(learnable)
    if mode == "softcap":
        return lambda s, b, h, qi, ki: 30.0 * torch.tanh(s / 30.0)
    if mode == "alibi":
        return lambda s, b, h, qi, ki: s - slope[h] * (qi - ki).abs()
    if mode == "bias":
        return lambda s, b, h, qi, ki: s + bias[h, torch.clamp((qi - ki).abs(), max=63)]
    raise ValueError(mode)


# Smaller tiles for a FlexAttention kernel that does not fit shared memory with its defaults.
SMALL_TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64,
               "BLOCK_N2": 32}


def bench(shape, warmup, reps, expr=None, learnable=False):
    name, docs, H, Hkv, D, cap, impl = shape
    dev, dt = "cuda", torch.bfloat16
    if impl == "sdpa":  # equal-length documents: a batch of dense causal sequences
        B, T = len(docs), docs[0]
    else:  # one packed sequence with a document mask
        B, T = 1, sum(docs)
    q = torch.randn(B, H, T, D, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(B, Hkv, T, D, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(B, Hkv, T, D, device=dev, dtype=dt, requires_grad=True)
    dout = torch.randn(B, H, T, D, device=dev, dtype=dt)
    if impl == "sdpa":
        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
    else:
        doc_id = torch.repeat_interleave(
            torch.arange(len(docs), device=dev), torch.tensor(docs, device=dev))

        def mask_mod(b, h, qi, ki):
            return (doc_id[qi] == doc_id[ki]) & (qi >= ki)

        block_mask = create_block_mask(mask_mod, None, None, T, T, device=dev)
        score_mod = expression_score_mod(expr, H, dev, learnable) if expr else None
        if cap > 0:
            def score_mod(s, b, h, qi, ki):
                return cap * torch.tanh(s / cap)
        flex = torch.compile(flex_attention)
        options = {}

        def fwd():
            return flex(q, k, v, score_mod=score_mod, block_mask=block_mask,
                        enable_gqa=Hkv != H, kernel_options=options or None)

    def fwdbwd():
        fwd().backward(dout)

    try:
        f_ms = time_ms(fwd, warmup, reps)
        fb_ms = time_ms(fwdbwd, warmup, reps)
    except Exception as e:  # Triton's out-of-resources (shared memory) at compile time
        if impl != "flex" or "out of resource" not in str(e).lower():
            raise
        options.update(SMALL_TILES)
        torch._dynamo.reset()
        f_ms = time_ms(fwd, warmup, reps)
        fb_ms = time_ms(fwdbwd, warmup, reps)
        name += " (small tiles)"
    ff, bf = flops(docs, H, D)
    return {"shape": name, "impl": impl, "fwd_ms": f_ms, "fwdbwd_ms": fb_ms,
            "fwd_tflops": ff / (f_ms * 1e9), "bwd_tflops": bf / ((fb_ms - f_ms) * 1e9),
            "fwdbwd_tflops": (ff + bf) / (fb_ms * 1e9)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driftless", help="output of `driftless bench attention`")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--score-mod", choices=["softcap", "alibi", "bias"],
                    help="FlexAttention shapes with this score_mod (see the top of the file)")
    ap.add_argument("--learnable", action="store_true",
                    help="the score_mod's tables take gradients (with --score-mod)")
    a = ap.parse_args()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    shapes = SHAPES
    if a.score_mod:
        shapes = [(s[0] + "_expr",) + s[1:] for s in SHAPES if s[6] == "flex" and s[5] == 0]
    rows = [bench(s, a.warmup, a.reps, a.score_mod, a.learnable) for s in shapes]
    print("shape                        impl  fwd_TFLOPs  bwd_TFLOPs  fwdbwd_TFLOPs")
    for r in rows:
        print(f"{r['shape']:<28} {r['impl']:<5}{r['fwd_tflops']:>11.1f}{r['bwd_tflops']:>12.1f}"
              f"{r['fwdbwd_tflops']:>15.1f}")
    print(json.dumps(rows))
    if not a.driftless:
        return
    lines = [l for l in open(a.driftless) if l.startswith("[")]
    ours = json.loads(lines[-1])
    print("\nratio driftless / torch (TFLOP/s, same FLOP count); driftless backward deterministic,")
    print("or atomic_dq (dQ summed with atomic adds, as SDPA's backward does; FlexAttention's does not)")
    print("shape                        vs     fwd     bwd  fwd+bwd   driftless fwd/bwd/fwd+bwd  backward")
    for r in rows:
        for o in (o for o in ours if o["shape"] == r["shape"].split(" ")[0]):
            rf, rb, rfb = (o[x] / r[x] for x in ("fwd_tflops", "bwd_tflops", "fwdbwd_tflops"))
            print(f"{r['shape']:<28} {r['impl']:<5}{rf:>6.2f}x{rb:>7.2f}x{rfb:>8.2f}x   "
                  f"{o['fwd_tflops']:.0f}/{o['bwd_tflops']:.0f}/{o['fwdbwd_tflops']:.0f}"
                  f"{'':>10}{o.get('backward', 'deterministic')}")


if __name__ == "__main__":
    main()
