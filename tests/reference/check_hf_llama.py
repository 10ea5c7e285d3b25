#!/usr/bin/env python3
"""driftless's Llama against HuggingFace transformers' LlamaForCausalLM, both ways; the
Llama counterpart of check_hf_transformers.py, whose packed-batch, logits and greedy helpers
it uses (read that file's docstring for the mask conventions tried and the tolerances).

Export: a tiny Llama (GQA, untied; and MHA tied) trained 5 steps by `driftless train` is
exported and loaded with LlamaForCausalLM.from_pretrained (float32, CPU; no missing,
unexpected or misshapen weights; the tied head shares embed_tokens). Packed-batch logits
(position_ids restarting per document, block-diagonal mask) equal `driftless sample --ids
--logits` within rms_rel 1e-5; plain causal attention misses by far; greedy 32 tokens equal.

Import: LlamaForCausalLM(LlamaConfig(small, GQA, rope_theta 5e5; untied and tied)), every
parameter perturbed (norm gains away from 1), written by save_pretrained whole and sharded,
read by `driftless import --hf`: logits within 1e-5 and greedy identical; then 3 training
steps from it (training.init_from) and `driftless sample` from the run.

Usage: python3 check_hf_llama.py --driftless BUILD/driftless [--work DIR]
Exit status: 0 pass, 1 fail, 77 skipped (no torch or no transformers; the reason is printed).
"""
import argparse
import inspect
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_transformers as common  # exits 77 itself without torch / transformers

import torch
import transformers

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"SKIP: this transformers has no Llama: {e}")
    sys.exit(77)

check, driftless, rms_rel, TOLERANCE = common.check, common.driftless, common.rms_rel, common.TOLERANCE
LLAMA = {"architecture": "llama", "n_layer": 2, "n_head": 4, "n_embd": 32, "intermediate_size": 48,
         "rms_norm_eps": 1.0e-5}


def load_transformers(path, tied):
    model, info = LlamaForCausalLM.from_pretrained(path, output_loading_info=True)
    model = model.float().eval()
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        left = [k for k in info.get(key, []) if not str(k).endswith("rotary_emb.inv_freq")]
        check(not left, f"from_pretrained: no {key} ({left})")
    shared = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    check(shared == tied, f"from_pretrained: lm_head {'tied to' if tied else 'separate from'} embed_tokens")
    return model


def export_check(args, batch, tied, kv):
    docs, ids, positions, doc_index = batch
    label = f"export ({'tied' if tied else 'untied'}, {kv} kv heads)"
    print(f"== {label}: driftless train -> export --hf -> LlamaForCausalLM.from_pretrained")
    cfg = os.path.join(args.work, f"export_{tied}.yaml")
    common.run_config(cfg, dict(LLAMA, n_kv_head=kv, tie_word_embeddings=str(tied).lower(),
                                rope_theta=10000.0))
    run = os.path.join(args.work, f"export_run_{tied}")
    driftless(args, "train", "-c", cfg, "-q", "--set", f"run.output_dir={run}")
    ckpt = os.path.join(run, "checkpoints", "step_000004.safetensors")
    hf_dir = os.path.join(args.work, f"export_hf_{tied}")
    driftless(args, "export", "--checkpoint", ckpt, "--hf", hf_dir)
    model = load_transformers(hf_dir, tied)
    print(f"  attention implementation: {getattr(model.config, '_attn_implementation', '?')}")
    ref, path = common.transformers_logits(model, docs, ids, positions, doc_index)
    print(f"  transformers ran: {path}")
    ours = common.driftless_logits(args, ckpt, docs, f"export_{tied}")
    err = rms_rel(ours, ref)
    check(err <= TOLERANCE, f"{label}: packed logits rms_rel {err:.2e} <= {TOLERANCE:g}")
    with torch.no_grad():
        causal = model(input_ids=ids).logits  # no document mask, positions 0..31
    miss = rms_rel(ours, causal)
    check(miss > 1e-3, f"sensitivity: plain causal attention misses by rms_rel {miss:.2e}")
    common.compare_greedy(args, model, ckpt, docs[0][0], label)


def llama_config(tied):
    kw = dict(vocab_size=common.VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=common.N_POSITIONS,
              rms_norm_eps=1e-5, tie_word_embeddings=tied, bos_token_id=common.VOCAB - 1,
              eos_token_id=common.VOCAB - 1)
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:  # transformers 5
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    else:
        kw["rope_theta"] = 500000.0
    return LlamaConfig(**kw)


def import_check(args, batch, tied):
    docs, ids, positions, doc_index = batch
    label = f"import ({'tied' if tied else 'untied'})"
    print(f"== {label}: LlamaForCausalLM(LlamaConfig(...)).save_pretrained -> driftless import --hf")
    torch.manual_seed(1 if tied else 0)
    model = LlamaForCausalLM(llama_config(tied))
    with torch.no_grad():
        for p in model.parameters():  # norm gains away from 1; the tied embedding once
            p.add_(0.1 * torch.randn_like(p))
    model = model.float().eval()
    ref, path = common.transformers_logits(model, docs, ids, positions, doc_index)
    print(f"  transformers ran: {path}")
    for name, kw in (("whole", {}), ("sharded", {"max_shard_size": "40KB"})):
        hf_dir = os.path.join(args.work, f"import_hf_{tied}_{name}")
        files = common.save_pretrained(model, hf_dir, **kw)
        if name == "sharded":
            check("model.safetensors.index.json" in files, "save_pretrained wrote shards")
        ckpt = os.path.join(args.work, f"imported_{tied}_{name}.safetensors")
        driftless(args, "import", "--hf", hf_dir, "--out", ckpt, "--set", "data.tokenizer=bytes")
        err = rms_rel(common.driftless_logits(args, ckpt, docs, f"import_{tied}_{name}"), ref)
        check(err <= TOLERANCE, f"{label} ({name}): packed logits rms_rel {err:.2e} <= {TOLERANCE:g}")
    common.compare_greedy(args, model, ckpt, docs[1][0], label)
    cfg = os.path.join(args.work, f"import_{tied}.yaml")
    common.run_config(cfg, dict(LLAMA, n_kv_head=2, tie_word_embeddings=str(tied).lower(),
                                rope_theta=500000.0), f", init_from: {ckpt}")
    run = os.path.join(args.work, f"import_run_{tied}")
    driftless(args, "train", "-c", cfg, "-q", "--set", f"run.output_dir={run}", "--set", "training.steps=3")
    with open(os.path.join(run, "metrics.jsonl")) as f:
        losses = [r["loss"] for r in map(json.loads, f) if "loss" in r]
    check(len(losses) == 3 and all(math.isfinite(x) for x in losses), f"train from the {label}: losses {losses}")
    text = driftless(args, "sample", "-c", run, "-p", "Hello", "-n", 16)
    check(text.startswith("Hello"), f"sample from the trained {label}: {text.strip()!r}")


def main():
    ap = argparse.ArgumentParser(description="driftless's Llama against HuggingFace transformers")
    ap.add_argument("--driftless", required=True, help="the driftless binary (BUILD/driftless)")
    ap.add_argument("--work", default="hf_llama_check", help="scratch directory (emptied)")
    args = ap.parse_args()
    args.driftless = os.path.abspath(args.driftless)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    args.work = os.path.abspath(args.work)
    torch.manual_seed(0)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {sys.executable}")
    batch = common.packed_batch()
    export_check(args, batch, tied=False, kv=2)
    export_check(args, batch, tied=True, kv=4)
    import_check(args, batch, tied=False)
    import_check(args, batch, tied=True)
    failures = common.failures
    print(f"{len(failures)} failures" + "".join("\n  " + f for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
