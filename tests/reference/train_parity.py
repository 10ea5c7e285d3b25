#!/usr/bin/env python3
"""The PyTorch side of the parity run (docs/parity.md, scripts/parity_run.sh): trains a
nanoGPT-shaped GPT-2 from driftless's step-0 weights on the very batches driftless's sampler
draws, in bf16 autocast, fp32 (TF32 off) or float64, and writes a run directory that
driftless's own tools read: metrics.jsonl (`driftless plot`) and tensor logs at chosen steps
(`driftless report`, ARCHITECTURE.md "Tensor logs").

Inputs, all written by driftless:
  --config   the resolved run config (`driftless config -c ... > run.yaml`): model shape,
             optimizer, schedule, clipping, steps, evaluation
  --init     a checkpoint whose model.* tensors are the step-0 weights
  --batches  `driftless batch --export`: every step's tokens, labels and document pieces,
             and the validation batches; with --data, every piece is checked against the
             dataset's .bin/.idx files it came from

The model follows driftless's GPT-2 (layers/gpt.cpp): learned positions restarting at every
document, per-document causal attention, pre-LN blocks, tanh GELU, head tied to wte. AdamW
(fused on CUDA) with decay on matrices and embeddings only, nanoGPT's warm-up + cosine,
torch.nn.utils.clip_grad_norm_.

Attention (--attention): on CUDA FlexAttention (torch.nn.attention.flex_attention, compiled)
with a document-causal BlockMask made by create_block_mask from each token's document id; on
the CPU, or with --attention dense, F.scaled_dot_product_attention with the dense (B, 1, S, S)
block-diagonal causal mask. Both are softmax(q k^T / sqrt(D)) v over the earlier tokens of the
token's own document piece. --compile-model also compiles the model's forward (not when tensor
logs are written: their hooks stay eager).

Tensor logs (--log-steps) use driftless's names: forward outputs and the gradients flowing into
embed, h.L.{ln_1, attn.qkv, attn.core, attn, ln_2, mlp, out}, ln_f; param_grad/NAME (after
clipping) and param/NAME (after the update), each name followed by @KIND, in driftless's
execution order.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from run_config import read_config  # noqa: E402

NP_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_tensors(path):
    """{name: numpy array} (BF16 widened to float32) and the metadata of a safetensors file."""
    raw, meta = safetensors_io.read_raw(path)
    out = {}
    for name, (dtype, shape, b) in raw.items():
        if dtype == "BF16":
            a = (np.frombuffer(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(b, dtype=NP_DTYPES[dtype])
        out[name] = a.reshape(shape)
    return out, meta


def learning_rate(o, step, total_steps):
    """engine/optim/schedule.cpp: linear warm-up, then cosine / linear / constant to min_lr."""
    lr, min_lr, warmup = o["lr"], o["min_lr"], o["warmup_steps"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if o["decay"] == "constant":
        return lr
    if step >= total_steps:
        return min_lr
    r = (step - warmup) / (total_steps - warmup)
    if o["decay"] == "linear":
        return lr - (lr - min_lr) * r
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * r))


class Taps:
    """Tensor-log taps: forward values and, through hooks, the gradients flowing into them,
    named and ordered as driftless's TensorLogger writes them (train/tensor_log.h)."""

    def __init__(self):
        self.active = False
        self.tensors = []  # (name, kind, float32 cpu tensor)

    def add(self, name, kind, value):
        self.tensors.append((f"{name}@{kind}", kind,
                             value.detach().to(torch.float32).cpu().clone()))

    def __call__(self, x, name):
        if not self.active:
            return x
        self.add(name, "forward", x)
        if x.requires_grad:
            x.register_hook(lambda g: self.add(name, "backward", g))
        return x


class Attention(nn.Module):
    def __init__(self, C, H, Hkv):
        super().__init__()
        self.H, self.Hkv, self.D = H, Hkv, C // H
        self.c_attn = nn.Linear(C, (H + 2 * Hkv) * self.D)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x, mask, taps, prefix):
        """mask: the dense boolean mask (B, 1, S, S), or a FlexAttention BlockMask."""
        B, S, C = x.shape
        H, Hkv, D = self.H, self.Hkv, self.D
        qkv = taps(self.c_attn(x), prefix + ".qkv")  # (B, S, (H + 2 Hkv) D)
        q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        q = q.view(B, S, H, D).transpose(1, 2)  # (B, H, S, D)
        k = k.view(B, S, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        v = v.view(B, S, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        if not isinstance(mask, torch.Tensor):  # a BlockMask (DocumentMasks, flex)
            y = FLEX[0](q, k, v, block_mask=mask)
        elif hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # torch < 2.0 (Debian's 1.13, the CPU golden files): the same math written out
            att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        y = taps(y.transpose(1, 2).reshape(B, S, H * D), prefix + ".core")
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H, Hkv):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, H, Hkv)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = Mlp(C)

    def forward(self, x, mask, taps, l):
        n = f"h.{l}."
        x = x + taps(self.attn(taps(self.ln_1(x), n + "ln_1"), mask, taps, n + "attn"), n + "attn")
        x = x + taps(self.mlp(taps(self.ln_2(x), n + "ln_2")), n + "mlp")
        return taps(x, n + "out")


class Gpt2(nn.Module):
    """nanoGPT's GPT-2 with driftless's parameter names (state_dict keys = driftless's)."""

    def __init__(self, m):
        super().__init__()
        C, H = m["n_embd"], m["n_head"]
        Hkv = m.get("n_kv_head", 0) or H
        self.wte = nn.Embedding(m["vocab_size"], C)
        self.wpe = nn.Embedding(m["n_positions"], C)
        self.h = nn.ModuleList([Block(C, H, Hkv) for _ in range(m["n_layer"])])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.taps = Taps()

    def forward(self, tokens, positions, mask, labels):
        return self.loss_sum(tokens, positions, mask, labels)

    def loss_sum(self, tokens, positions, mask, labels):
        """Summed cross-entropy over the tokens that have a label (labels -1 carry none)."""
        taps = self.taps
        x = taps(self.wte(tokens) + self.wpe(positions), "embed")
        for l, block in enumerate(self.h):
            x = block(x, mask, taps, l)
        x = taps(self.ln_f(x), "ln_f")
        logits = x @ self.wte.weight.t()  # (B, S, V), tied head
        # In f32 at least (bf16 logits under autocast; float64 stays float64).
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                               labels.reshape(-1), ignore_index=-1, reduction="sum")


def unpack_documents(counts, lengths, S):
    """Per sequence: each token's position inside its document piece and the piece's index."""
    B = counts.shape[0]
    positions = torch.empty(B, S, dtype=torch.long)
    docs = torch.empty(B, S, dtype=torch.long)
    at = 0
    for b in range(B):
        n = torch.from_numpy(lengths[at : at + counts[b]].astype(np.int64))
        at += int(counts[b])
        assert int(n.sum()) == S, f"document pieces of a sequence sum to {int(n.sum())}, not {S}"
        ids = torch.repeat_interleave(torch.arange(len(n)), n)
        starts = torch.cumsum(n, 0) - n
        docs[b] = ids
        positions[b] = torch.arange(S) - starts[ids]
    return positions, docs


def document_mask(docs):
    """The block-diagonal causal mask (B, 1, S, S): a token sees the earlier tokens of its own
    document piece only; made on the device of `docs`."""
    i = torch.arange(docs.shape[1], device=docs.device)
    return ((docs[:, :, None] == docs[:, None, :]) & (i[None, None, :] <= i[:, None]))[:, None]


# The flex_attention that Attention calls, compiled (set in main). Inside a compiled model
# dynamo inlines it; a graph break there would still leave it compiled (flex_attention run
# eager materialises every score).
FLEX = [None]


class DocumentMasks:
    """Each step's per-token document ids (B, S) as the attention takes them: "dense", the mask
    of document_mask; "flex", a FlexAttention BlockMask of the same mask (a token sees the
    earlier tokens of its own document piece: docs[b, q] == docs[b, kv] and kv <= q).

    The BlockMask's mask_mod reads the ids from one buffer per shape that each call overwrites,
    so that mask_mod stays the same function from step to step (a compiled model then sees the
    same closure and does not recompile); a BlockMask is used before the next call (forward and
    backward of its step)."""

    def __init__(self, kind):
        self.kind = kind
        self.mods = {}  # shape -> (ids buffer, mask_mod)
        if kind == "flex":
            from torch.nn.attention.flex_attention import create_block_mask

            self.create_block_mask = create_block_mask

    def __call__(self, docs):
        if self.kind == "dense":
            return document_mask(docs)
        B, S = docs.shape
        key = (B, S, str(docs.device))
        if key not in self.mods:
            ids = torch.empty_like(docs)

            def document_causal(b, h, q_idx, kv_idx):
                return (ids[b, q_idx] == ids[b, kv_idx]) & (kv_idx <= q_idx)

            self.mods[key] = (ids, document_causal)
        ids, mask_mod = self.mods[key]
        ids.copy_(docs)
        return self.create_block_mask(mask_mod, B, None, S, S, device=docs.device)


class Batches:
    """The exported batches of one split, step by step, as device tensors."""

    def __init__(self, t, split, device, masks):
        self.tokens, self.labels = t[split + ".tokens"], t[split + ".labels"]
        self.counts, self.lengths = t[split + ".document_counts"], t[split + ".document_lengths"]
        self.loss_tokens = t[split + ".loss_tokens"]
        self.docs, self.offsets = t[split + ".source_documents"], t[split + ".source_offsets"]
        self.starts = np.concatenate([[0], np.cumsum(self.counts.reshape(-1))])
        self.device = device
        self.masks = masks

    def __len__(self):
        return self.tokens.shape[0]

    def get(self, k):
        B, S = self.tokens.shape[1:]
        c = self.counts[k]
        lengths = self.lengths[self.starts[k * B] : self.starts[(k + 1) * B]]
        positions, docs = unpack_documents(c, lengths, S)
        d = self.device
        return (torch.from_numpy(self.tokens[k].astype(np.int64)).to(d), positions.to(d),
                self.masks(docs.to(d)),
                torch.from_numpy(self.labels[k].astype(np.int64)).to(d), int(self.loss_tokens[k]))

    def check_against(self, prefix):
        """Every piece's tokens and labels against the memmap dataset they came from
        (data/memmap_dataset.h: PREFIX.idx holds sizes and byte offsets, PREFIX.bin tokens)."""
        idx = open(prefix + ".idx", "rb").read()
        assert idx[:9] == b"MMIDIDX\x00\x00", f"{prefix}.idx is not a memmap index"
        dtype = {4: np.int32, 8: np.uint16}.get(idx[17], None)
        n = int(np.frombuffer(idx[18:26], np.int64)[0])
        sizes = np.frombuffer(idx[34 : 34 + 4 * n], np.int32)
        pointers = np.frombuffer(idx[34 + 4 * n : 34 + 12 * n], np.int64)
        tokens_bin = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
        width = np.dtype(dtype).itemsize
        K, B, S = self.tokens.shape
        piece = 0
        for k in range(K):
            for b in range(B):
                at = 0
                for _ in range(int(self.counts[k, b])):
                    doc, off = int(self.docs[piece]), int(self.offsets[piece])
                    length = int(self.lengths[piece])
                    begin = pointers[doc] // width + off
                    src = tokens_bin[begin : begin + min(length + 1, sizes[doc] - off)]
                    got = self.tokens[k, b, at : at + length]
                    want_labels = np.full(length, -1)
                    want_labels[: len(src) - 1] = src[1:]
                    if not (np.array_equal(got, src[:length]) and
                            np.array_equal(self.labels[k, b, at : at + length], want_labels)):
                        raise SystemExit(f"train_parity: batch {k} sequence {b}: piece of document "
                                         f"{doc} at {off} differs from {prefix}.bin")
                    at += length
                    piece += 1
        return piece


def write_tensor_log(run_dir, step, tensors):
    """step_<N>.safetensors + step_<N>.json as train/tensor_log.cpp writes them."""
    os.makedirs(run_dir, exist_ok=True)
    base = os.path.join(run_dir, f"step_{step:06d}")
    entries, index = [], []
    for order, (name, kind, t) in enumerate(tensors):
        a = np.ascontiguousarray(t.numpy().astype(np.float32))
        entries.append((name, "F32", a.shape, a.tobytes()))
        v = a.astype(np.float64)
        index.append({"name": name, "kind": kind, "order": order, "shape": list(a.shape),
                      "mean": float(v.mean()), "std": float(v.std()),
                      "rms": float(np.sqrt((v * v).mean())), "min": float(v.min()),
                      "max": float(v.max())})
    safetensors_io.write_raw(base + ".safetensors", entries, {"step": str(step)})
    with open(base + ".json", "w") as f:
        json.dump({"step": step, "tensors": index}, f, indent=1)


def ordered_log(taps, model, step_tensors):
    """Forward taps in forward order, backward taps in the order the hooks fired, then the
    parameter gradients and parameters: driftless's execution order."""
    fwd = [t for t in taps.tensors if t[1] == "forward"]
    bwd = [t for t in taps.tensors if t[1] == "backward"]
    return fwd + bwd + step_tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="resolved run config (driftless config)")
    ap.add_argument("--init", required=True, help="checkpoint holding the step-0 weights")
    ap.add_argument("--batches", required=True, help="driftless batch --export file")
    ap.add_argument("--out", required=True, help="run directory to write")
    ap.add_argument("--precision", choices=["bf16", "fp32", "fp64"], default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many (0: the config's)")
    ap.add_argument("--log-steps", default="", help="comma list of steps to write tensor logs at")
    ap.add_argument("--log-kinds", default="forward,backward,param_grad,param")
    ap.add_argument("--deadline", type=float, default=0,
                    help="unix time: stop after the step that passes it (0: none)")
    ap.add_argument("--data", default="", help="memmap PREFIX: check every batch against it")
    ap.add_argument("--no-fused", action="store_true", help="torch.optim.AdamW unfused")
    ap.add_argument("--state", default="",
                    help="where to keep the model and optimizer when stopping early, so that "
                         "--resume continues the run in a later invocation")
    ap.add_argument("--resume", action="store_true", help="continue from --state")
    ap.add_argument("--attention", choices=["auto", "flex", "dense"], default="auto",
                    help="flex: FlexAttention (compiled) with a document BlockMask; dense: "
                         "scaled_dot_product_attention with the (B, 1, S, S) mask; auto: flex on "
                         "CUDA when torch has it, dense otherwise")
    ap.add_argument("--compile-model", choices=["auto", "on", "off"], default="auto",
                    help="torch.compile the model's forward (auto: on with flex attention and no "
                         "tensor logs)")
    args = ap.parse_args()

    cfg = read_config(args.config)
    m, o, tr = cfg["model"], cfg["optimizer"], cfg["training"]
    assert m.get("architecture", "gpt2") == "gpt2", "train_parity.py runs GPT-2 only"
    assert not m.get("dropout", 0), "the parity run has no dropout"
    total_steps = tr["steps"]
    steps = min(args.steps or total_steps, total_steps)
    device = torch.device(args.device)
    dtype = torch.float64 if args.precision == "fp64" else torch.float32
    if device.type == "cuda":
        # fp32 means fp32: no TF32 in matrix products or convolutions.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")

    attention = args.attention
    if attention == "auto":
        try:  # (a plain `import torch.nn...` here would make `torch` local to main)
            from torch.nn.attention.flex_attention import create_block_mask  # noqa: F401
            attention = "flex" if device.type == "cuda" else "dense"
        except ImportError:
            attention = "dense"
    masks = DocumentMasks(attention)
    log_steps = {int(s) for s in args.log_steps.split(",") if s.strip()}
    compile_model = (args.compile_model == "on" or
                     (args.compile_model == "auto" and attention == "flex" and not log_steps))
    assert not (compile_model and log_steps), "tensor logs need the eager model (--compile-model off)"
    if attention == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        FLEX[0] = torch.compile(flex_attention, dynamic=False)

    weights, _ = read_tensors(args.init)
    model = Gpt2(m).to(dtype)
    state = {k: torch.from_numpy(weights["model." + k].copy()) for k in model.state_dict()}
    model.load_state_dict(state)
    model.to(device)

    t, meta = read_tensors(args.batches)
    train, val = Batches(t, "train", device, masks), None
    if "validation.tokens" in t:
        val = Batches(t, "validation", device, masks)
    assert len(train) >= steps, f"{args.batches} holds {len(train)} steps, {steps} needed"
    B, S = train.tokens.shape[1:]
    assert (B, S) == (cfg["batch"]["sequences"], cfg["batch"]["sequence_length"]), \
        f"batches are {B} x {S}, the config says otherwise"
    if args.data:
        n = train.check_against(args.data)
        print(f"train_parity: {n} document pieces checked against {args.data}.bin", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    fused = device.type == "cuda" and not args.no_fused
    extra = {"fused": True} if fused else {"foreach": False}
    adamw = torch.optim.AdamW(
        [{"params": decay, "weight_decay": o["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], **extra)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.precision == "bf16"
                else torch.autocast(device.type, enabled=False))
    kinds = set(args.log_kinds.split(","))
    eval_interval, eval_batches = tr.get("eval_interval", 0), tr.get("eval_batches", 1)
    params = list(model.parameters())
    named = list(model.named_parameters())
    # The compiled forward shares the parameters with `model` (state_dict, AdamW, clipping).
    loss_sum = torch.compile(model) if compile_model else model

    first = 0
    if args.resume:
        saved = torch.load(args.state, map_location=device, weights_only=False)
        model.load_state_dict(saved["model"])
        adamw.load_state_dict(saved["optimizer"])
        first = saved["step"]
        print(f"train_parity: resumed at step {first} from {args.state}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    metrics = open(os.path.join(args.out, "metrics.jsonl"), "a" if args.resume else "w")
    pending = []  # (step, lr, loss, norm) with device scalars, flushed in groups
    start, done = time.time(), first
    # (time, steps done) at the first flush: the rate after it leaves out compilation and warm-up.
    steady = []
    tokens_per_step = B * S

    def flush():
        if device.type == "cuda":
            torch.cuda.synchronize()
        now = time.time()
        rate = (done - first) * tokens_per_step / max(now - start, 1e-9)
        if not steady:
            steady.append((now, done))
        for step, lr, loss, norm in pending:
            metrics.write(json.dumps({"step": step, "loss": loss.item(), "lr": lr,
                                      "grad_norm": norm.item(), "tokens": tokens_per_step,
                                      "tokens_per_second": rate}) + "\n")
        pending.clear()
        metrics.flush()

    def evaluate():
        total, count = 0.0, 0
        with torch.no_grad(), autocast:
            for k in range(min(eval_batches, len(val))):
                tokens, positions, mask, labels, n = val.get(k)
                total += loss_sum(tokens, positions, mask, labels).item()
                count += n
        return total / max(count, 1)

    print(f"train_parity: {args.precision} on {device}, {steps} steps of {B} x {S} tokens, "
          f"attention {attention}, model {'compiled' if compile_model else 'eager'}", flush=True)
    start = time.time()
    for step in range(first, steps):
        logging = step in log_steps
        model.taps.active = logging and bool(kinds & {"forward", "backward"})
        model.taps.tensors = []
        lr = learning_rate(o, step, total_steps)
        for g in adamw.param_groups:
            g["lr"] = lr
        adamw.zero_grad(set_to_none=True)
        tokens, positions, mask, labels, n = train.get(step)
        with autocast:
            loss = loss_sum(tokens, positions, mask, labels) / n
        loss.backward()
        if o["grad_clip"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, o["grad_clip"])
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        step_tensors = []
        if logging and "param_grad" in kinds:
            step_tensors += [(f"param_grad/{k}@param_grad", "param_grad",
                              p.grad.detach().float().cpu().clone()) for k, p in named]
        adamw.step()
        if logging:
            if "param" in kinds:
                step_tensors += [(f"param/{k}@param", "param", p.detach().float().cpu().clone())
                                 for k, p in named]
            taps = model.taps
            taps.tensors = [x for x in taps.tensors if x[1] in kinds]
            write_tensor_log(os.path.join(args.out, "tensor_logs"), step,
                             ordered_log(taps, model, step_tensors))
            model.taps.active = False
        done = step + 1
        pending.append((step, lr, loss.detach(), norm.detach()))
        last = step + 1 == total_steps
        if val is not None and eval_interval > 0 and ((step + 1) % eval_interval == 0 or last):
            flush()
            metrics.write(json.dumps({"step": step, "val_loss": evaluate()}) + "\n")
        if len(pending) >= 50:
            flush()
        if args.deadline and time.time() > args.deadline and step + 1 < steps:
            print(f"train_parity: deadline reached after {done} steps", flush=True)
            break
    flush()
    metrics.close()
    elapsed = time.time() - start
    if args.state and done < total_steps:
        torch.save({"model": model.state_dict(), "optimizer": adamw.state_dict(), "step": done},
                   args.state)
        print(f"train_parity: stopped at step {done} of {total_steps}; state in {args.state} "
              f"(--resume continues)", flush=True)
    steady_rate = None
    if steady and done > steady[0][1]:
        steady_rate = (done - steady[0][1]) * tokens_per_step / max(start + elapsed - steady[0][0],
                                                                     1e-9)
    summary = {"precision": args.precision, "device": str(device), "steps": done,
               "first_step": first, "of": steps,
               "tokens_per_second": (done - first) * tokens_per_step / max(elapsed, 1e-9),
               "steady_tokens_per_second": steady_rate,
               "seconds": elapsed, "torch": torch.__version__, "fused_adamw": fused,
               "sdpa": hasattr(F, "scaled_dot_product_attention"), "attention": attention,
               "compiled_model": compile_model}
    with open(os.path.join(args.out, "parity_run.json"), "w") as f:
        json.dump(summary, f, indent=1)
    steady_text = "" if steady_rate is None else f", {steady_rate:.0f} after the first {steady[0][1] - first} steps"
    print(f"train_parity: steps {first} .. {done - 1} in {elapsed:.1f} s "
          f"({summary['tokens_per_second']:.0f} tokens/s{steady_text}), {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
