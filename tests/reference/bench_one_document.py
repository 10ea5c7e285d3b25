#!/usr/bin/env python3
"""PyTorch reference of the one-GPU run of `bash scripts/bench_gpu.sh context`: GPT-2
training on one sequence that holds one document of S tokens (positions up to S), the run of
`driftless bench train --set batch.sequences=1 --set batch.sequence_length=S --set
model.n_positions=S ...`. The model is bench_gpt2.py's (flash SDPA with is_causal=True, tied
head), with S positions; bf16 autocast over fp32 master weights, fused AdamW. Reports the
median step after warm-up as tokens/s and the peak memory of the timed steps, one JSON line
per implementation (eager, and torch.compile with --compile); with --driftless FILE (the
output of `driftless bench train`; its last JSON line is read) also the driftless / torch
ratios.

The LM head's logits of S x 50257 take 6.6 GB in bf16 at S = 65536 and their fp32 copies for
the loss twice that: when the whole head does not fit, the run is repeated with the head and
loss computed in chunks of --loss-chunk rows (each recomputed in the backward), which the JSON
line records.

  python3 tests/reference/bench_one_document.py --seq 65536 [--compile] [--driftless out.txt]
  python3 tests/reference/bench_one_document.py --device cpu --seq 64 --layers 2 (a smoke run)
"""
import argparse
import contextlib
import gc
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from bench_gpt2 import GPT, MODELS, PEAK_BF16

VOCAB = 50257
RETRY_LOSS_CHUNK = 8192


def head_loss(h, w, tgt):
    """Summed cross-entropy of rows h (n, C) against the tied head w (V, C)."""
    return F.cross_entropy(F.linear(h, w).float(), tgt, reduction="sum")


def loss_of(model, blocks, idx, tgt, loss_chunk):
    """Mean next-token loss of idx (1, S): bench_gpt2.GPT.forward with the head optionally
    in chunks of loss_chunk rows, each recomputed in the backward."""
    T = idx.shape[1]
    x = model.wte(idx) + model.wpe(torch.arange(T, device=idx.device))
    for b in blocks:
        x = b(x)
    h = model.ln_f(x).view(T, -1)
    tgt = tgt.view(-1)
    w = model.wte.weight
    total = 0.0
    for i in range(0, T, loss_chunk):
        total = total + checkpoint(head_loss, h[i:i + loss_chunk], w, tgt[i:i + loss_chunk],
                                   use_reentrant=False)
    return total / T


def sdpa_backend(name):
    """A context choosing PyTorch's SDPA kernel; 'default' lets PyTorch choose."""
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION}[name])


def bench(a, compile_, loss_chunk):
    L, H, C = MODELS[a.model]
    L = a.layers or L
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    model = GPT(L, H, C, vocab=VOCAB, positions=a.seq).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if cuda else {}))
    idx = torch.randint(0, VOCAB, (1, a.seq), device=dev)
    tgt = torch.randint(0, VOCAB, (1, a.seq), device=dev)
    if loss_chunk > 0:  # the blocks compiled, the chunked head in eager
        blocks = [torch.compile(b) for b in model.h] if compile_ else list(model.h)
        forward = lambda: loss_of(model, blocks, idx, tgt, loss_chunk)
    else:  # bench_gpt2's whole model
        step_model = torch.compile(model) if compile_ else model
        forward = lambda: step_model(idx, tgt)

    def step():
        with sdpa_backend(a.sdpa), torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = forward()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    secs = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        secs.append(time.perf_counter() - t0)
    med = statistics.median(secs)
    tokens = a.seq
    # 6N of the matrix products plus causal attention, as bench_gpt2.py and train/flops.h
    matmul_params = L * 12 * C * C + VOCAB * C
    flops = 3 * (2 * matmul_params * tokens + L * 4 * C * tokens * (tokens + 1) / 2)
    return {"impl": "torch.compile" if compile_ else "torch eager", "model": a.model,
            "layers": L, "sequence_length": a.seq, "parameters": n_params,
            "tokens_per_s": tokens / med, "median_step_s": med,
            "mfu": flops / med / PEAK_BF16 if cuda else 0.0,
            "peak_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
            "loss_chunk": loss_chunk, "sdpa": a.sdpa, "loss": float(loss),
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "torch": torch.__version__}


def free(cuda):
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def run(a, compile_):
    """bench() with the whole head, then, if that runs out of memory, with a chunked head."""
    cuda = a.device == "cuda"
    chunk = a.loss_chunk
    while True:
        impl = "torch.compile" if compile_ else "torch eager"
        try:
            return bench(a, compile_, chunk)
        except torch.cuda.OutOfMemoryError:
            if chunk == 0:
                chunk = RETRY_LOSS_CHUNK
                continue
            return {"impl": impl, "sequence_length": a.seq, "loss_chunk": chunk,
                    "error": "out of memory"}
        except Exception as e:  # a failed compile must not hide the eager row
            return {"impl": impl, "sequence_length": a.seq, "loss_chunk": chunk,
                    "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        finally:  # the failed run's tensors, before the next one allocates
            free(cuda)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="124m")
    ap.add_argument("--seq", type=int, default=65536, help="tokens of the one document")
    ap.add_argument("--steps", type=int, default=4, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--compile", action="store_true", help="also run under torch.compile")
    ap.add_argument("--loss-chunk", type=int, default=0,
                    help="rows per chunk of the LM head and loss (0: whole, chunked only if "
                         f"that runs out of memory, then {RETRY_LOSS_CHUNK})")
    ap.add_argument("--sdpa", choices=["default", "flash", "cudnn", "efficient"],
                    default="default", help="PyTorch's SDPA kernel (default: PyTorch chooses)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu only for a smoke run of this script")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers (smoke runs; 0: the model's)")
    ap.add_argument("--driftless", help="output of `driftless bench train` (last line JSON)")
    a = ap.parse_args()
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    rows = [run(a, False)]
    if a.compile:
        rows.append(run(a, True))
    dl = None
    if a.driftless:
        with open(a.driftless) as f:
            lines = [line for line in f if line.startswith("{")]
        dl = json.loads(lines[-1]) if lines else None
    print(f"GPT-2 {a.model}, one document of {a.seq} tokens, bf16, {rows[0].get('device', a.device)}")
    print(f"{'impl':<16}{'tokens/s':>12}{'MFU':>8}{'peak GiB':>10}{'driftless/x':>13}")
    for r in rows:
        if "error" in r:
            print(f"{r['impl']:<16}  {r['error']}")
            continue
        ratio = f"{dl['tokens_per_s'] / r['tokens_per_s']:.3f}" if dl else "-"
        print(f"{r['impl']:<16}{r['tokens_per_s']:>12.0f}{100 * r['mfu']:>7.1f}%"
              f"{r['peak_bytes'] / 2**30:>10.2f}{ratio:>13}")
    if dl:
        print(f"{'driftless':<16}{dl['tokens_per_s']:>12.0f}{100 * dl['mfu']:>7.1f}%"
              f"{max(dl['peak_bytes_per_rank']) / 2**30:>10.2f}{'1.000':>13}")
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
