#!/usr/bin/env python3
"""PyTorch's context parallelism on N GPUs, the reference of the `context` part of
scripts/bench_gpu.sh: GPT-2 (bench_gpt2.py's model, S learned positions) trained on one
document of S tokens, its sequence sharded over the N ranks by
torch.distributed.tensor.experimental.context_parallel (ring attention over SDPA, with the
load-balanced causal split), bf16 autocast over fp32 master weights, fused AdamW, the
gradients summed over the ranks. Prints one JSON line on rank 0: median tokens/s of the
timed steps and the peak memory of the most loaded GPU.

  torchrun --nproc_per_node 4 tests/reference/bench_context_parallel.py --seq 65536
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpt2 import GPT, MODELS  # noqa: E402
from bench_one_document import VOCAB, head_loss  # noqa: E402


def context_parallel_api():
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        sys.exit(f"bench_context_parallel: this PyTorch ({torch.__version__}) has no "
                 f"torch.distributed.tensor.experimental.context_parallel: {e}")
    return init_device_mesh, context_parallel, sdpa_kernel, SDPBackend


def local_loss_sum(model, idx, tgt, pos, loss_chunk):
    """Summed next-token loss of this rank's shard: bench_gpt2.GPT.forward with the shard's
    positions (its rows are not contiguous under the load-balanced split) and the head in
    chunks of loss_chunk rows, each recomputed in the backward."""
    x = model.wte(idx) + model.wpe(pos)
    for b in model.h:
        x = b(x)
    T = idx.shape[1]
    h, t, w = model.ln_f(x).view(T, -1), tgt.view(-1), model.wte.weight
    total = 0.0
    for i in range(0, T, loss_chunk):
        total = total + checkpoint(head_loss, h[i:i + loss_chunk], w, t[i:i + loss_chunk],
                                   use_reentrant=False)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="124m")
    ap.add_argument("--seq", type=int, default=65536, help="tokens of the one document")
    ap.add_argument("--steps", type=int, default=4, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--loss-chunk", type=int, default=8192, help="rows of the head per chunk")
    ap.add_argument("--rotate", choices=["allgather", "alltoall"], default="alltoall",
                    help="how the ring moves K/V (set_rotate_method)")
    a = ap.parse_args()
    init_device_mesh, context_parallel, sdpa_kernel, SDPBackend = context_parallel_api()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    if a.seq % (2 * world):
        sys.exit(f"bench_context_parallel: --seq {a.seq} must divide into 2 x {world} chunks")
    try:
        from torch.distributed.tensor.experimental._attention import set_rotate_method
        set_rotate_method(a.rotate)
    except ImportError:
        pass
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
    L, H, C = MODELS[a.model]
    torch.manual_seed(0)  # the same weights and batch on every rank
    model = GPT(L, H, C, vocab=VOCAB, positions=a.seq).cuda()
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    idx = torch.randint(0, VOCAB, (1, a.seq), device="cuda")
    tgt = torch.randint(0, VOCAB, (1, a.seq), device="cuda")
    pos = torch.arange(a.seq, device="cuda").unsqueeze(0)

    def step():
        # The buffers are sharded in place (load-balanced) on entry and restored on exit: a
        # buffer left sharded would be sharded again by the next step, which then trains on a
        # quarter of the sequence (measured so: tokens/s rising with S, 441k at 262144).
        with context_parallel(mesh, buffers=[idx, tgt, pos], buffer_seq_dims=[1, 1, 1]), \
                sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                             SDPBackend.CUDNN_ATTENTION]), \
                torch.autocast("cuda", dtype=torch.bfloat16):
            loss = local_loss_sum(model, idx, tgt, pos, a.loss_chunk) / a.seq
            loss.backward()
        # Every rank holds all parameters: their gradients are the sum over the shards.
        flat = torch.cat([p.grad.view(-1) for p in params])
        dist.all_reduce(flat)
        at = 0
        for p in params:
            p.grad.view(-1).copy_(flat[at:at + p.numel()])
            at += p.numel()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    secs = []
    for _ in range(a.steps):
        dist.barrier()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        secs.append(time.perf_counter() - t0)
    # The slowest rank's time is the step's.
    t = torch.tensor(secs, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    peak = torch.tensor([torch.cuda.max_memory_allocated()], device="cuda")
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    dist.all_reduce(loss)
    med = statistics.median(t.tolist())
    if rank == 0:
        print(json.dumps({"impl": "torch context_parallel", "ranks": world, "model": a.model,
                          "sequence_length": a.seq, "tokens_per_s": a.seq / med,
                          "median_step_s": med, "peak_bytes_per_gpu": int(peak.item()),
                          "loss": float(loss), "rotate": a.rotate, "torch": torch.__version__,
                          "device": torch.cuda.get_device_name()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
