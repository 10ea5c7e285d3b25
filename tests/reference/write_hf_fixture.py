#!/usr/bin/env python3
"""A tiny GPT-2 directory exactly as transformers' save_pretrained writes it for
GPT2LMHeadModel, made with the standard library only (json + struct: no torch, no
transformers), so CI checks `driftless import --hf` on what a real client writes.

  write_hf_fixture.py write DIR --variant V   writes the directory
  write_hf_fixture.py check DIR --variant V   checks that DIR/model.safetensors (e.g. from
                                              `driftless export --hf` of the import) holds the
                                              fixture's weights, value for value
  write_hf_fixture.py greedy --variant V --prompt 1,2,3 -n 4
                                              prints the prompt's ids and the fixture model's
                                              greedy continuation of n tokens, computed here in
                                              float64 (as `driftless sample --ids --top-k 1`
                                              prints them)

Variants (all: vocab 257, n_positions 64, n_embd 32, n_layer 2, n_head 4, seeded weights;
every bias and layer-norm gain is non-trivial so a dropped or transposed tensor shows):
  v4       config.json of transformers 4.x (torch_dtype, summary_*, n_inner null, ...),
           model.safetensors F32 with metadata {"format": "pt"}, transformer.* names, the tied
           lm_head.weight omitted, generation_config.json
  v5       the same with the keys transformers 5.17 writes (dtype instead of torch_dtype,
           tie_word_embeddings, add_cross_attention, pad_token_id null)
  legacy   transformers 4.27-4.30 with safe_serialization: the causal-mask buffers
           transformer.h.N.attn.bias (BOOL, 1x1x64x64) and attn.masked_bias (F32 scalar)
  sharded  model.safetensors.index.json + model-00001-of-00002.safetensors + ...-00002-...
  fp16     a float16 model: F16 tensors, torch_dtype float16
  bin      only pytorch_model.bin (an older save_pretrained default): import must refuse
           it and say how to convert
"""
import argparse
import json
import math
import os
import random
import struct
import sys

import safetensors_io

CONFIG = dict(vocab_size=257, n_positions=64, n_embd=32, n_layer=2, n_head=4)
VARIANTS = ("v4", "v5", "legacy", "sharded", "fp16", "bin")


def hf_config(variant):
    """config.json as GPT2Config.save_pretrained writes it (to_diff_dict: every GPT2Config
    key, plus base keys that differ from PretrainedConfig's defaults)."""
    c = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": 50256,
        "embd_pdrop": 0.1,
        "eos_token_id": 50256,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_embd": CONFIG["n_embd"],
        "n_head": CONFIG["n_head"],
        "n_inner": None,
        "n_layer": CONFIG["n_layer"],
        "n_positions": CONFIG["n_positions"],
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "use_cache": True,
        "vocab_size": CONFIG["vocab_size"],
    }
    if variant == "v5":  # as transformers 5.17 wrote it (seen on a machine that has it)
        c.update(dtype="float32", transformers_version="5.17.0", tie_word_embeddings=True,
                 add_cross_attention=False, pad_token_id=None)
    elif variant == "legacy":
        c.update(torch_dtype="float32", transformers_version="4.29.2")
    else:
        c.update(torch_dtype="float16" if variant == "fp16" else "float32",
                 transformers_version="4.46.3")
    return dict(sorted(c.items()))  # save_pretrained writes sorted keys


def weights(variant):
    """{name: (dtype, shape, flat values)} in HF layout (Conv1D weights (in, out))."""
    rng = random.Random(20240611)
    C, V, P = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"]
    out = {}

    def add(name, shape, scale, offset=0.0):
        n = 1
        for s in shape:
            n *= s
        out["transformer." + name] = ("F32", shape, [offset + rng.gauss(0, scale) for _ in range(n)])

    add("wte.weight", [V, C], 0.1)
    add("wpe.weight", [P, C], 0.05)
    for l in range(CONFIG["n_layer"]):
        h = f"h.{l}."
        add(h + "ln_1.weight", [C], 0.1, 1.0)
        add(h + "ln_1.bias", [C], 0.05)
        add(h + "attn.c_attn.weight", [C, 3 * C], 0.08)
        add(h + "attn.c_attn.bias", [3 * C], 0.05)
        add(h + "attn.c_proj.weight", [C, C], 0.08)
        add(h + "attn.c_proj.bias", [C], 0.05)
        add(h + "ln_2.weight", [C], 0.1, 1.0)
        add(h + "ln_2.bias", [C], 0.05)
        add(h + "mlp.c_fc.weight", [C, 4 * C], 0.08)
        add(h + "mlp.c_fc.bias", [4 * C], 0.05)
        add(h + "mlp.c_proj.weight", [4 * C, C], 0.08)
        add(h + "mlp.c_proj.bias", [C], 0.05)
    add("ln_f.weight", [C], 0.1, 1.0)
    add("ln_f.bias", [C], 0.05)
    if variant == "fp16":
        out = {k: ("F16", s, v) for k, (_, s, v) in out.items()}
    if variant == "legacy":
        for l in range(CONFIG["n_layer"]):
            tril = [1 if j <= i else 0 for i in range(P) for j in range(P)]
            out[f"transformer.h.{l}.attn.bias"] = ("BOOL", [1, 1, P, P], tril)
            out[f"transformer.h.{l}.attn.masked_bias"] = ("F32", [], [-1e4])
    return out


PACK = {"F32": "<f", "F16": "<e", "BOOL": "<B"}
SIZE = {"F32": 4, "F16": 2, "BOOL": 1}


def encode(dtype, values):
    fmt = PACK[dtype]
    return b"".join(struct.pack(fmt, v) for v in values)


def write_safetensors(path, tensors):
    """As the safetensors library writes: "__metadata__" first, data ordered by dtype
    alignment (larger first) then name, header padded with spaces to 8 bytes."""
    names = sorted(tensors, key=lambda n: (-SIZE[tensors[n][0]], n))
    return safetensors_io.write_raw(
        path, [(n, tensors[n][0], tensors[n][1], encode(tensors[n][0], tensors[n][2])) for n in names],
        {"format": "pt"})


def read_safetensors(path):
    raw, meta = safetensors_io.read_raw(path)
    out = {}
    for name, (dtype, shape, b) in raw.items():
        count = len(b) // SIZE[dtype]
        out[name] = (dtype, shape, list(struct.unpack("<" + PACK[dtype][1] * count, b)))
    return out, meta


def write(out_dir, variant):
    os.makedirs(out_dir, exist_ok=True)
    version = "5.17.0" if variant == "v5" else "4.29.2" if variant == "legacy" else "4.46.3"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(hf_config(variant), indent=2, sort_keys=True) + "\n")
    gen = {"_from_model_config": True, "bos_token_id": 50256, "eos_token_id": 50256,
           "transformers_version": version}
    if variant == "v5":
        gen.update(output_attentions=False, output_hidden_states=False, use_cache=True)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        f.write(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    tensors = weights(variant)
    if variant == "bin":
        # A zip-format torch pickle starts "PK"; the importer must not even try to read it.
        with open(os.path.join(out_dir, "pytorch_model.bin"), "wb") as f:
            f.write(b"PK\x03\x04 not read by driftless")
    elif variant == "sharded":
        names = sorted(tensors)
        first = {n: tensors[n] for n in names if ".h.1." not in n}  # as max_shard_size splits
        second = {n: tensors[n] for n in names if ".h.1." in n}
        files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        total = 0
        for name, part in zip(files, (first, second)):
            total += write_safetensors(os.path.join(out_dir, name), part)
        index = {"metadata": {"total_parameters": sum(len(v) for _, _, v in tensors.values()),
                              "total_size": total},  # total_parameters: transformers 5
                 "weight_map": {n: files[0] if n in first else files[1] for n in names}}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    else:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    print(f"wrote a save_pretrained-style GPT-2 ({variant}) to {out_dir}")
    return 0


def check(export_dir, variant):
    """The export's tensors equal the fixture's (F16 compared after widening, as the
    importer widens it); the buffers of old files are not parameters and are not exported."""
    got, meta = read_safetensors(os.path.join(export_dir, "model.safetensors"))
    want = {k: v for k, v in weights(variant).items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    problems = []
    if meta.get("format") != "pt":
        problems.append(f"metadata format {meta.get('format')!r}, expected 'pt'")
    if sorted(got) != sorted(want):
        problems.append(f"names differ: extra {sorted(set(got) - set(want))}, "
                        f"missing {sorted(set(want) - set(got))}")
    for name in sorted(set(got) & set(want)):
        gdt, gshape, gvals = got[name]
        wdt, wshape, wvals = want[name]
        wvals = struct.unpack("<%d%s" % (len(wvals), PACK[wdt][1]), encode(wdt, wvals))
        if gshape != wshape:
            problems.append(f"{name}: shape {gshape}, expected {wshape}")
        elif list(gvals) != list(wvals):
            bad = next(i for i, (a, b) in enumerate(zip(gvals, wvals)) if a != b)
            problems.append(f"{name}: element {bad} is {gvals[bad]}, expected {wvals[bad]}")
    for p in problems:
        print("MISMATCH " + p)
    print(f"{export_dir}: {len(want)} tensors checked against the {variant} fixture, "
          f"{len(problems)} problems")
    return 1 if problems else 0


def stored_weights(variant):
    """{name without "transformer.": (shape, values)} as the file stores them (F16 rounded),
    parameters only."""
    out = {}
    for name, (dtype, shape, vals) in weights(variant).items():
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        vals = struct.unpack("<%d%s" % (len(vals), PACK[dtype][1]), encode(dtype, vals))
        out[name[len("transformer."):]] = (shape, list(vals))
    return out


def last_logits(w, tokens):
    """GPT2LMHeadModel's logits at the last position of `tokens` (one document, positions
    from 0), in float64: Conv1D x @ W + b with W (in, out), gelu_new, tied head."""
    C, H = CONFIG["n_embd"], CONFIG["n_head"]
    D = C // H

    def linear(x, name, n_out):
        (n_in, _), W = w[name + ".weight"]
        b = w[name + ".bias"][1]
        return [b[j] + sum(x[i] * W[i * n_out + j] for i in range(n_in)) for j in range(n_out)]

    def layer_norm(x, name):
        mean = sum(x) / len(x)
        var = sum((v - mean) ** 2 for v in x) / len(x)
        g, b = w[name + ".weight"][1], w[name + ".bias"][1]
        return [(v - mean) / math.sqrt(var + 1e-5) * g[i] + b[i] for i, v in enumerate(x)]

    def gelu_new(v):
        return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))

    wte, wpe = w["wte.weight"][1], w["wpe.weight"][1]
    x = [[wte[t * C + c] + wpe[p * C + c] for c in range(C)] for p, t in enumerate(tokens)]
    for l in range(CONFIG["n_layer"]):
        h = f"h.{l}."
        qkv = [linear(layer_norm(r, h + "ln_1"), h + "attn.c_attn", 3 * C) for r in x]
        y = [[0.0] * C for _ in x]
        for head in range(H):
            q0, k0, v0 = head * D, C + head * D, 2 * C + head * D
            for i in range(len(x)):  # causal: row i sees keys 0..i
                s = [sum(qkv[i][q0 + d] * qkv[j][k0 + d] for d in range(D)) / math.sqrt(D)
                     for j in range(i + 1)]
                m = max(s)
                e = [math.exp(v - m) for v in s]
                z = sum(e)
                for d in range(D):
                    y[i][q0 + d] = sum(e[j] * qkv[j][v0 + d] for j in range(i + 1)) / z
        x = [[a + b for a, b in zip(r, linear(yr, h + "attn.c_proj", C))] for r, yr in zip(x, y)]
        for i, r in enumerate(x):
            f = [gelu_new(v) for v in linear(layer_norm(r, h + "ln_2"), h + "mlp.c_fc", 4 * C)]
            x[i] = [a + b for a, b in zip(r, linear(f, h + "mlp.c_proj", C))]
    last = layer_norm(x[-1], "ln_f")
    return [sum(last[c] * wte[v * C + c] for c in range(C)) for v in range(CONFIG["vocab_size"])]


def greedy(variant, prompt, n):
    """The prompt and n greedy tokens, one line of ids; fails when a step's best and second
    best logits are within 1e-4 (then float32 rounding could pick either)."""
    w = stored_weights(variant)
    tokens = list(prompt)
    closest = float("inf")
    for _ in range(n):
        logits = last_logits(w, tokens)
        order = sorted(range(len(logits)), key=lambda v: -logits[v])
        closest = min(closest, logits[order[0]] - logits[order[1]])
        tokens.append(order[0])
    print(" ".join(str(t) for t in tokens))
    print(f"closest top-2 logit gap {closest:.3g}", file=sys.stderr)
    return 0 if closest > 1e-4 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=("write", "check", "greedy"))
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--variant", choices=VARIANTS, default="v4")
    ap.add_argument("--prompt", default="1,2,3", help="greedy: comma-separated token ids")
    ap.add_argument("-n", type=int, default=4, help="greedy: tokens to generate")
    a = ap.parse_args()
    if a.action == "greedy":
        return greedy(a.variant, [int(t) for t in a.prompt.split(",")], a.n)
    if not a.dir:
        ap.error(f"{a.action} needs DIR")
    return write(a.dir, a.variant) if a.action == "write" else check(a.dir, a.variant)


if __name__ == "__main__":
    sys.exit(main())
