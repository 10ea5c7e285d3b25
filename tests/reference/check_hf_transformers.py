#!/usr/bin/env python3
"""driftless against HuggingFace transformers itself, both ways (the real client of the
directories `driftless export --hf` writes and `driftless import --hf` reads).

Export: a tiny GPT-2 trained 5 steps by `driftless train` is exported and loaded with
transformers.GPT2LMHeadModel.from_pretrained (float32, CPU; no missing, unexpected or
misshapen weights, head tied). A packed batch of 2 sequences x 32 tokens holding documents
{5, 1, 17, 9} and {12, 20} (position_ids restarting per document, per-document causal
attention) gives transformers' logits; driftless's come from `driftless sample --ids
--logits`, which packs the prompts into one sequence exactly as training packs documents.
They must agree within rms_rel 1e-5 (rms(t - r) / rms(r), r = transformers). The packed
transformers run passes a 4D block-diagonal mask; the script tries the mask conventions
transformers versions use (bool True = attend; additive float 0 / min; 0/1 float) and
accepts the first whose logits equal running each document on its own, and says which. Where
none does (GPT-2 of older versions reshapes the mask to 2D) it compares the per-document
runs, concatenated, and says so. As a sensitivity check, plain causal attention over the
packed sequence must miss by far. Greedy continuation of 32 tokens by transformers (a manual
argmax loop, and generate(do_sample=False)) must equal `driftless sample --ids --top-k 1`
token for token.

Import: a random-init GPT2LMHeadModel(GPT2Config(small sizes)), every parameter perturbed so
biases and layer-norm gains are not trivial, is written by save_pretrained (safetensors; once
whole and once sharded with max_shard_size) and read by `driftless import --hf`; the imported
model's packed logits equal transformers' (1e-5) and its greedy continuation is identical;
then `driftless train` runs 3 steps from it (training.init_from) and `driftless sample`
samples from the run.

Usage: python3 check_hf_transformers.py --driftless BUILD/driftless [--work DIR]
Exit status: 0 pass, 1 fail, 77 skipped (no torch or no transformers; the reason is printed).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

TOLERANCE = 1e-5
VOCAB, N_POSITIONS = 257, 64  # byte tokenizer: `driftless sample` needs no vocabulary files
DOCUMENTS = [[5, 1, 17, 9], [12, 20]]  # two packed sequences of 32 tokens
GREEDY_TOKENS = 32

try:
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:
    print(f"SKIP: this check needs torch and transformers in {sys.executable}: {e}")
    sys.exit(77)

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def rms_rel(t, r):
    t, r = t.double(), r.double()
    return (t - r).pow(2).mean().sqrt().item() / math.sqrt(r.pow(2).mean().item() + 1e-30)


def driftless(args, *cmd):
    cmd = [args.driftless, *map(str, cmd)]
    p = subprocess.run(cmd, capture_output=True)
    out, err = (b.decode("utf-8", errors="replace") for b in (p.stdout, p.stderr))  # byte tokens
    if p.returncode != 0:
        print("$ " + " ".join(cmd) + "\n" + out + err)
        raise SystemExit(f"FAIL: driftless exited with status {p.returncode}")
    return out


def run_config(path, model, extra=""):
    m = ", ".join(f"{k}: {v}" for k, v in model.items())
    with open(path, "w") as f:
        f.write(
            f"model: {{vocab_size: {VOCAB}, n_positions: {N_POSITIONS}, {m}}}\n"
            "data: {format: random, tokenizer: bytes, random_documents: 200,"
            " random_mean_length: 20, random_max_length: 60}\n"
            "batch: {sequence_length: 32, sequences: 4}\n"
            "optimizer: {lr: 1.0e-2, warmup_steps: 1}\n"
            f"training: {{steps: 5, eval_interval: 0, seed: 7{extra}}}\n"
        )


def packed_batch():
    g = torch.Generator().manual_seed(1234)
    docs = [[torch.randint(0, VOCAB, (n,), generator=g) for n in lens] for lens in DOCUMENTS]
    ids = torch.stack([torch.cat(d) for d in docs])
    positions = torch.stack([torch.cat([torch.arange(len(x)) for x in d]) for d in docs])
    doc_index = torch.stack([torch.cat([torch.full((len(x),), j) for j, x in enumerate(d)]) for d in docs])
    return docs, ids, positions, doc_index


def driftless_logits(args, ckpt, docs, name):
    """(B, S, V) from `driftless sample --ids --logits`, one packed sequence per call."""
    rows = []
    for b, seq in enumerate(docs):
        out = os.path.join(args.work, f"{name}_logits_{b}.safetensors")
        prompts = [a for d in seq for a in ("--prompt", ",".join(map(str, d.tolist())))]
        driftless(args, "sample", "-c", ckpt, "--ids", "--logits", out, *prompts)
        f = load_file(out)
        assert f["tokens"].tolist() == torch.cat(seq).tolist(), "tokens differ"
        assert f["document_lengths"].tolist() == [len(d) for d in seq], "document lengths differ"
        rows.append(f["logits"].float())
    return torch.stack(rows)


def block_diagonal(doc_index):
    """(B, 1, S, S) bool: query i sees key j of its own document with j <= i."""
    S = doc_index.shape[1]
    i = torch.arange(S)
    same = doc_index[:, :, None] == doc_index[:, None, :]
    return (same & (i[None, None, :] <= i[None, :, None]))[:, None]


@torch.no_grad()
def transformers_logits(model, docs, ids, positions, doc_index):
    """The packed batch through transformers; returns (logits, which path ran)."""
    per_doc = torch.stack(
        [torch.cat([model(input_ids=d[None], position_ids=torch.arange(len(d))[None]).logits[0] for d in seq])
         for seq in docs]
    )
    allowed = block_diagonal(doc_index)
    neg = torch.finfo(torch.float32).min
    conventions = [
        ("4D bool mask (True = attend)", allowed),
        ("4D additive float mask (0 / finfo.min)", torch.zeros(allowed.shape).masked_fill(~allowed, neg)),
        ("4D 0/1 float mask", allowed.float()),
    ]
    tried = []
    for label, mask in conventions:
        try:
            packed = model(input_ids=ids, position_ids=positions, attention_mask=mask).logits
        except Exception as e:  # noqa: BLE001: older GPT-2 code reshapes the mask to 2D
            tried.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        err = rms_rel(packed, per_doc)
        if err <= TOLERANCE:
            return packed, f"packed batch with a {label} (equals the per-document runs: {err:.1e})"
        tried.append(f"{label}: differs from the per-document runs by {err:.1e}")
    for t in tried:
        print("  4D mask not usable: " + t)
    return per_doc, "each document run on its own and concatenated (no 4D mask convention worked)"


@torch.no_grad()
def greedy_transformers(model, prompt):
    ids = prompt.clone()
    for _ in range(GREEDY_TOKENS):
        ids = torch.cat([ids, model(input_ids=ids[None]).logits[0, -1].argmax().view(1)])
    manual = ids[len(prompt):].tolist()
    try:
        out = model.generate(prompt[None], attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=GREEDY_TOKENS, pad_token_id=0)
        generated = out[0, len(prompt):].tolist()
    except Exception as e:  # noqa: BLE001
        print(f"  generate() failed ({type(e).__name__}: {e}); the manual argmax loop stands alone")
        generated = None
    return manual, generated


def compare_greedy(args, model, ckpt, prompt, label):
    manual, generated = greedy_transformers(model, prompt)
    line = driftless(args, "sample", "-c", ckpt, "--ids", "-p", ",".join(map(str, prompt.tolist())),
                     "-n", GREEDY_TOKENS, "--top-k", "1")
    ours = [int(t) for t in line.split()][len(prompt):]
    check(ours == manual, f"{label}: greedy {GREEDY_TOKENS} tokens, driftless == transformers argmax loop")
    if ours != manual:
        k = next((i for i, (a, b) in enumerate(zip(ours, manual)) if a != b), min(len(ours), len(manual)))
        print(f"  first difference at new token {k}: driftless {ours[k:k+4]}, transformers {manual[k:k+4]}")
    if generated is not None:
        # generate() stops after eos_token_id (the exported end-of-text); the loop does not.
        eos = model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
        stopped = len(generated) < len(manual) and bool(generated) and generated[-1] in eos
        check(generated == (manual[: len(generated)] if stopped else manual),
              f"{label}: generate(do_sample=False) == argmax loop"
              + (f" (stopped at eos {eos} after {len(generated)})" if stopped else ""))


def load_transformers(path):
    model, info = GPT2LMHeadModel.from_pretrained(path, output_loading_info=True)
    model = model.float().eval()
    buffers = (".attn.bias", ".attn.masked_bias")
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        left = [k for k in info.get(key, []) if not str(k).endswith(buffers)]
        check(not left, f"from_pretrained: no {key} ({left})")
    check(model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
          "from_pretrained: lm_head tied to wte")
    return model


def export_check(args, batch):
    docs, ids, positions, doc_index = batch
    print("== export: driftless train -> export --hf -> GPT2LMHeadModel.from_pretrained")
    cfg = os.path.join(args.work, "export.yaml")
    run_config(cfg, {"n_layer": 3, "n_head": 4, "n_embd": 48})
    run = os.path.join(args.work, "export_run")
    driftless(args, "train", "-c", cfg, "-q", "--set", f"run.output_dir={run}")
    ckpt = os.path.join(run, "checkpoints", "step_000004.safetensors")
    hf_dir = os.path.join(args.work, "export_hf")
    driftless(args, "export", "--checkpoint", ckpt, "--hf", hf_dir)
    model = load_transformers(hf_dir)
    print(f"  attention implementation: {getattr(model.config, '_attn_implementation', '?')}")
    ref, path = transformers_logits(model, docs, ids, positions, doc_index)
    print(f"  transformers ran: {path}")
    ours = driftless_logits(args, ckpt, docs, "export")
    err = rms_rel(ours, ref)
    check(err <= TOLERANCE, f"export: packed logits rms_rel {err:.2e} <= {TOLERANCE:g}")
    with torch.no_grad():
        causal = model(input_ids=ids).logits  # no document mask, positions 0..31
    miss = rms_rel(ours, causal)
    check(miss > 1e-3, f"sensitivity: plain causal attention misses by rms_rel {miss:.2e}")
    compare_greedy(args, model, ckpt, docs[0][0], "export")


def save_pretrained(model, path, **kw):
    try:
        model.save_pretrained(path, safe_serialization=True, **kw)
    except TypeError:  # transformers 5 always writes safetensors
        model.save_pretrained(path, **kw)
    files = sorted(os.listdir(path))
    print(f"  save_pretrained wrote {files}")
    return files


def import_check(args, batch):
    docs, ids, positions, doc_index = batch
    print("== import: GPT2LMHeadModel(GPT2Config(...)).save_pretrained -> driftless import --hf")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=N_POSITIONS, n_embd=32,
                                       n_layer=2, n_head=4, bos_token_id=VOCAB - 1,
                                       eos_token_id=VOCAB - 1))
    with torch.no_grad():
        for p in model.parameters():  # non-trivial biases and gains; the tied wte once
            p.add_(0.05 * torch.randn_like(p))
    model = model.float().eval()
    ref, path = transformers_logits(model, docs, ids, positions, doc_index)
    print(f"  transformers ran: {path}")
    for name, kw in (("whole", {}), ("sharded", {"max_shard_size": "40KB"})):
        hf_dir = os.path.join(args.work, f"import_hf_{name}")
        files = save_pretrained(model, hf_dir, **kw)
        if name == "sharded":
            check("model.safetensors.index.json" in files, "save_pretrained wrote shards")
        ckpt = os.path.join(args.work, f"imported_{name}.safetensors")
        driftless(args, "import", "--hf", hf_dir, "--out", ckpt, "--set", "data.tokenizer=bytes")
        err = rms_rel(driftless_logits(args, ckpt, docs, f"import_{name}"), ref)
        check(err <= TOLERANCE, f"import ({name}): packed logits rms_rel {err:.2e} <= {TOLERANCE:g}")
    compare_greedy(args, model, ckpt, docs[1][0], "import")
    cfg = os.path.join(args.work, "import.yaml")
    run_config(cfg, {"n_layer": 2, "n_head": 4, "n_embd": 32}, f", init_from: {ckpt}")
    run = os.path.join(args.work, "import_run")
    driftless(args, "train", "-c", cfg, "-q", "--set", f"run.output_dir={run}", "--set", "training.steps=3")
    with open(os.path.join(run, "metrics.jsonl")) as f:
        losses = [r["loss"] for r in map(json.loads, f) if "loss" in r]
    check(len(losses) == 3 and all(math.isfinite(x) for x in losses), f"train from the import: losses {losses}")
    text = driftless(args, "sample", "-c", run, "-p", "Hello", "-n", 16)
    check(text.startswith("Hello"), f"sample from the trained import: {text.strip()!r}")


def main():
    ap = argparse.ArgumentParser(description="driftless against HuggingFace transformers")
    ap.add_argument("--driftless", required=True, help="the driftless binary (BUILD/driftless)")
    ap.add_argument("--work", default="hf_transformers_check", help="scratch directory (emptied)")
    args = ap.parse_args()
    args.driftless = os.path.abspath(args.driftless)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    args.work = os.path.abspath(args.work)
    torch.manual_seed(0)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {sys.executable}")
    batch = packed_batch()
    export_check(args, batch)
    import_check(args, batch)
    print(f"{len(failures)} failures" + "".join("\n  " + f for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
