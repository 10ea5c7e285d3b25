#!/usr/bin/env python3
"""A tiny Llama directory as transformers' save_pretrained writes it for LlamaForCausalLM,
made with the standard library only (no torch, no transformers), so CI checks
`driftless import --hf` / `export --hf` of Llama on what a real client writes.

  write_hf_llama_fixture.py write DIR --variant V   writes the directory
  write_hf_llama_fixture.py check DIR --variant V   DIR (model.safetensors or shards) holds the
                                                    fixture's weights, value for value
  write_hf_llama_fixture.py greedy --variant V --prompt 1,2,3 -n 4
                                                    the prompt and the fixture model's greedy
                                                    continuation, computed here in float64

Variants (vocab 257, max_position_embeddings 64, hidden 32, intermediate 48, 2 layers, 4 heads;
norm gains away from 1 so a dropped one shows):
  tied     transformers 5 config (rope_parameters, dtype), MHA (4 kv heads), tied head omitted
  untied   GQA (2 kv heads), lm_head.weight
  sharded  untied GQA in model-0000i-of-00002.safetensors + model.safetensors.index.json
  bf16     transformers 4 config (rope_theta 20000, rope_scaling null, torch_dtype bfloat16),
           BF16 tensors, tied, GQA, with the rotary_emb.inv_freq buffers old versions saved
"""
import argparse
import json
import math
import os
import random
import struct
import sys

import safetensors_io

VARIANTS = ("tied", "untied", "sharded", "bf16")
V, P, C, F, L, H = 257, 64, 32, 48, 2, 4


def shape_of(variant):
    kv = 4 if variant == "tied" else 2
    tied = variant in ("tied", "bf16")
    theta = 20000.0 if variant == "bf16" else 10000.0
    return kv, tied, theta


def hf_config(variant):
    kv, tied, theta = shape_of(variant)
    c = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 256,
        "eos_token_id": 256,
        "head_dim": C // H,
        "hidden_act": "silu",
        "hidden_size": C,
        "initializer_range": 0.02,
        "intermediate_size": F,
        "max_position_embeddings": P,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": H,
        "num_hidden_layers": L,
        "num_key_value_heads": kv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "vocab_size": V,
    }
    if variant == "bf16":
        c.update(rope_theta=theta, rope_scaling=None, torch_dtype="bfloat16",
                 transformers_version="4.46.3")
    else:
        c.update(rope_parameters={"rope_theta": theta, "rope_type": "default"}, dtype="float32",
                 pad_token_id=None, transformers_version="5.17.0")
    return c


def to_bf16(v):
    """Round a float to the nearest bfloat16 (ties to even), returned as a float."""
    (bits,) = struct.unpack("<I", struct.pack("<f", v))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def weights(variant):
    """{HF name: (dtype, shape, flat values)}; bf16 values are already rounded."""
    kv, tied, _ = shape_of(variant)
    D = C // H
    rng = random.Random(20251126)
    out = {}

    def add(name, shape, scale, offset=0.0):
        n = 1
        for s in shape:
            n *= s
        out[name] = ("F32", shape, [offset + rng.gauss(0, scale) for _ in range(n)])

    add("model.embed_tokens.weight", [V, C], 0.3)
    for l in range(L):
        m = f"model.layers.{l}."
        add(m + "self_attn.q_proj.weight", [H * D, C], 0.2)
        add(m + "self_attn.k_proj.weight", [kv * D, C], 0.2)
        add(m + "self_attn.v_proj.weight", [kv * D, C], 0.2)
        add(m + "self_attn.o_proj.weight", [C, H * D], 0.15)
        add(m + "mlp.gate_proj.weight", [F, C], 0.15)
        add(m + "mlp.up_proj.weight", [F, C], 0.15)
        add(m + "mlp.down_proj.weight", [C, F], 0.15)
        add(m + "input_layernorm.weight", [C], 0.2, 1.0)
        add(m + "post_attention_layernorm.weight", [C], 0.2, 1.0)
    add("model.norm.weight", [C], 0.2, 1.0)
    if not tied:
        add("lm_head.weight", [V, C], 0.3)
    if variant == "bf16":
        out = {k: ("BF16", s, [to_bf16(x) for x in v]) for k, (_, s, v) in out.items()}
        for l in range(L):
            inv = [1.0 / 20000.0 ** (2 * i / D) for i in range(D // 2)]
            out[f"model.layers.{l}.self_attn.rotary_emb.inv_freq"] = ("F32", [D // 2], inv)
    return out


def encode(dtype, values):
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return b"".join(struct.pack("<f", v) for v in values)


def write_safetensors(path, tensors):
    size = {"F32": 4, "BF16": 2}
    names = sorted(tensors, key=lambda n: (-size[tensors[n][0]], n))
    return safetensors_io.write_raw(
        path, [(n, tensors[n][0], tensors[n][1], encode(tensors[n][0], tensors[n][2])) for n in names],
        {"format": "pt"})


def read_dir(path):
    """{name: (dtype, shape, values as f32)} from model.safetensors or an index's shards."""
    files = ["model.safetensors"]
    index = os.path.join(path, "model.safetensors.index.json")
    if not os.path.exists(os.path.join(path, "model.safetensors")) and os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        raw, meta = safetensors_io.read_raw(os.path.join(path, name))
        if meta.get("format") != "pt":
            raise SystemExit(f"{name}: metadata format {meta.get('format')!r}, expected 'pt'")
        for n, (dtype, shape, b) in raw.items():
            if dtype == "BF16":
                vals = [struct.unpack("<f", b"\0\0" + b[i:i + 2])[0] for i in range(0, len(b), 2)]
            else:
                vals = list(struct.unpack("<%df" % (len(b) // 4), b))
            out[n] = (dtype, shape, vals)
    return out, len(files)


def write(out_dir, variant):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(hf_config(variant), indent=2, sort_keys=True) + "\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        f.write(json.dumps({"_from_model_config": True, "bos_token_id": 256, "eos_token_id": 256},
                           indent=2) + "\n")
    tensors = weights(variant)
    if variant == "sharded":
        names = sorted(tensors)
        first = {n: tensors[n] for n in names if ".layers.1." not in n and n != "lm_head.weight"}
        second = {n: tensors[n] for n in names if n not in first}
        files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        total = sum(write_safetensors(os.path.join(out_dir, name), part)
                    for name, part in zip(files, (first, second)))
        index = {"metadata": {"total_parameters": sum(len(v) for _, _, v in tensors.values()),
                              "total_size": total},
                 "weight_map": {n: files[0] if n in first else files[1] for n in names}}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    else:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    print(f"wrote a save_pretrained-style Llama ({variant}) to {out_dir}")
    return 0


def stored(variant):
    """{name: (shape, values as stored, widened to f32)}, parameters only."""
    out = {}
    for n, (dtype, shape, vals) in weights(variant).items():
        if n.endswith("rotary_emb.inv_freq"):
            continue
        b = encode(dtype, vals)
        vals = (list(struct.unpack("<%df" % len(vals), b)) if dtype == "F32" else
                [struct.unpack("<f", b"\0\0" + b[i:i + 2])[0] for i in range(0, len(b), 2)])
        out[n] = (shape, vals)
    return out


def check(export_dir, variant, shards):
    got, n_files = read_dir(export_dir)
    want = stored(variant)
    problems = []
    if shards and n_files != shards:
        problems.append(f"{n_files} weight files, expected {shards} shards")
    if sorted(got) != sorted(want):
        problems.append(f"names differ: extra {sorted(set(got) - set(want))}, "
                        f"missing {sorted(set(want) - set(got))}")
    for n in sorted(set(got) & set(want)):
        _, gshape, gvals = got[n]
        wshape, wvals = want[n]
        # Our export writes f32; values must be the stored ones exactly.
        gvals = list(struct.unpack("<%df" % len(gvals), struct.pack("<%df" % len(gvals), *gvals)))
        if gshape != wshape:
            problems.append(f"{n}: shape {gshape}, expected {wshape}")
        elif gvals != wvals:
            bad = next(i for i, (a, b) in enumerate(zip(gvals, wvals)) if a != b)
            problems.append(f"{n}: element {bad} is {gvals[bad]}, expected {wvals[bad]}")
    with open(os.path.join(export_dir, "config.json")) as f:
        cfg = json.load(f)
    kv, tied, theta = shape_of(variant)
    for key, value in (("model_type", "llama"), ("num_key_value_heads", kv),
                       ("tie_word_embeddings", tied), ("intermediate_size", F),
                       ("hidden_act", "silu"), ("head_dim", C // H)):
        if cfg.get(key) != value:
            problems.append(f"config.json {key} {cfg.get(key)!r}, expected {value!r}")
    if cfg.get("rope_parameters", {}).get("rope_theta") != theta:
        problems.append(f"config.json rope_parameters {cfg.get('rope_parameters')}, theta {theta}")
    for p in problems:
        print("MISMATCH " + p)
    print(f"{export_dir}: {len(want)} tensors checked against the {variant} fixture, "
          f"{len(problems)} problems")
    return 1 if problems else 0


def last_logits(w, variant, tokens):
    """LlamaForCausalLM's logits at the last position (one document, positions from 0), in
    float64: RMSNorm, RoPE with rotate_half, GQA, SwiGLU, tied or separate head."""
    kv, tied, theta = shape_of(variant)
    D, eps = C // H, 1e-5

    def linear(x, name):
        (n_out, n_in), W = w[name]
        return [sum(x[i] * W[o * n_in + i] for i in range(n_in)) for o in range(n_out)]

    def rms(x, name):
        g = w[name][1]
        r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
        return [v * r * g[i] for i, v in enumerate(x)]

    def rope(vec, pos):
        out = list(vec)
        for h0 in range(0, len(vec), D):
            for i in range(D // 2):
                a = pos / theta ** (2 * i / D)
                x1, x2 = vec[h0 + i], vec[h0 + i + D // 2]
                out[h0 + i] = x1 * math.cos(a) - x2 * math.sin(a)
                out[h0 + i + D // 2] = x2 * math.cos(a) + x1 * math.sin(a)
        return out

    emb = w["model.embed_tokens.weight"][1]
    x = [[emb[t * C + c] for c in range(C)] for t in tokens]
    for l in range(L):
        m = f"model.layers.{l}."
        hs = [rms(r, m + "input_layernorm.weight") for r in x]
        q = [rope(linear(h, m + "self_attn.q_proj.weight"), p) for p, h in enumerate(hs)]
        k = [rope(linear(h, m + "self_attn.k_proj.weight"), p) for p, h in enumerate(hs)]
        v = [linear(h, m + "self_attn.v_proj.weight") for h in hs]
        y = [[0.0] * (H * D) for _ in x]
        for head in range(H):
            g = head // (H // kv)
            for i in range(len(x)):
                s = [sum(q[i][head * D + d] * k[j][g * D + d] for d in range(D)) / math.sqrt(D)
                     for j in range(i + 1)]
                mx = max(s)
                e = [math.exp(t - mx) for t in s]
                z = sum(e)
                for d in range(D):
                    y[i][head * D + d] = sum(e[j] * v[j][g * D + d] for j in range(i + 1)) / z
        x = [[a + b for a, b in zip(r, linear(yr, m + "self_attn.o_proj.weight"))]
             for r, yr in zip(x, y)]
        for i, r in enumerate(x):
            h = rms(r, m + "post_attention_layernorm.weight")
            gate, up = linear(h, m + "mlp.gate_proj.weight"), linear(h, m + "mlp.up_proj.weight")
            act = [a / (1.0 + math.exp(-a)) * b for a, b in zip(gate, up)]
            x[i] = [a + b for a, b in zip(r, linear(act, m + "mlp.down_proj.weight"))]
    last = rms(x[-1], "model.norm.weight")
    head = w["model.embed_tokens.weight" if tied else "lm_head.weight"][1]
    return [sum(last[c] * head[t * C + c] for c in range(C)) for t in range(V)]


def greedy(variant, prompt, n):
    """The prompt and n greedy tokens on one line; fails when a step's top two logits are
    within 1e-4 (float32 rounding could then pick either)."""
    w = stored(variant)
    tokens, closest = list(prompt), float("inf")
    for _ in range(n):
        logits = last_logits(w, variant, tokens)
        order = sorted(range(V), key=lambda t: -logits[t])
        closest = min(closest, logits[order[0]] - logits[order[1]])
        tokens.append(order[0])
    print(" ".join(str(t) for t in tokens))
    print(f"closest top-2 logit gap {closest:.3g}", file=sys.stderr)
    return 0 if closest > 1e-4 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=("write", "check", "greedy"))
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--variant", choices=VARIANTS, default="tied")
    ap.add_argument("--shards", type=int, default=0, help="check: expected weight files")
    ap.add_argument("--prompt", default="1,2,3")
    ap.add_argument("-n", type=int, default=4)
    a = ap.parse_args()
    if a.action == "greedy":
        return greedy(a.variant, [int(t) for t in a.prompt.split(",")], a.n)
    if not a.dir:
        ap.error(f"{a.action} needs DIR")
    return write(a.dir, a.variant) if a.action == "write" else check(a.dir, a.variant, a.shards)


if __name__ == "__main__":
    sys.exit(main())
