#!/usr/bin/env python3
"""The recorded noise band of the parity run (docs/parity.md): torch fp32's loss curve, kept in a
small JSON file with the fingerprint of what it was measured from. Standard library only.

The fp32 run (TF32 off) depends on nothing of driftless's code but its inputs: the config's
model, optimizer, batch and training length, the step-0 weights and the batches. The
fingerprint is a SHA-256 over those: the config's keys that the PyTorch side reads (read as
values, so PyYAML or not gives the same), the `model.*` tensors of the step-0 checkpoint
(names, dtypes, shapes, bytes; not its metadata or optimizer state) and every tensor of the
batches file (tokens, labels, document pieces, validation batches). A band is used only for
the inputs it was measured from.

  parity_band.py fingerprint --config RUN.yaml --init CKPT --batches B --out FP.json
  parity_band.py record --fingerprint FP.json --run DIR --out BAND.json
      DIR: train_parity.py --precision fp32's run directory (metrics.jsonl, parity_run.json);
      the band is complete when DIR reached the config's last step
  parity_band.py check --fingerprint FP.json [--extract DIR] BAND_OR_FOLDER...
      the first complete band among the files (a folder: its *.json) whose fingerprint is
      FP's; --extract writes it as a run directory (DIR/metrics.jsonl) for parity_compare.py
      and `driftless plot`

Exit status of check: 0 a band fits; 3 none does (the message says why: none recorded, recorded
for other inputs and which, or incomplete).
"""
import argparse
import hashlib
import json
import mmap
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_config import read_config  # noqa: E402

FORMAT = "driftless parity band 1"
REFUSED = 3
# The config's keys that train_parity.py reads: the whole model, optimizer and batch sections
# and the training length and evaluation.
TRAINING_KEYS = ("steps", "eval_interval", "eval_batches")


def relevant_config(path):
    cfg = read_config(path)
    return {"model": cfg["model"], "optimizer": cfg["optimizer"], "batch": cfg["batch"],
            "training": {k: cfg["training"].get(k) for k in TRAINING_KEYS}}


def tensors_digest(path, prefix=""):
    """SHA-256 over the tensors whose name starts with prefix, in name order: name, dtype,
    shape and bytes (the file's metadata and layout do not count)."""
    h = hashlib.sha256()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        (n,) = struct.unpack("<Q", m[:8])
        header = json.loads(m[8 : 8 + n])
        header.pop("__metadata__", None)
        base = 8 + n
        names = sorted(k for k in header if k.startswith(prefix))
        if not names:
            raise SystemExit(f"parity_band: {path} holds no tensor named {prefix}*")
        for name in names:
            e = header[name]
            begin, end = e["data_offsets"]
            h.update(json.dumps([name, e["dtype"], e["shape"], end - begin]).encode())
            for at in range(base + begin, base + end, 1 << 26):
                h.update(m[at : min(at + (1 << 26), base + end)])
    return h.hexdigest()


def fingerprint(config, init, batches):
    c = relevant_config(config)
    parts = {"config": hashlib.sha256(json.dumps(c, sort_keys=True).encode()).hexdigest(),
             "init": tensors_digest(init, "model."), "batches": tensors_digest(batches)}
    fp = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return {"fingerprint": fp, "parts": parts, "config": c}


def read_metrics(run_dir):
    loss, val, rates = {}, {}, []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("loss") is not None:
                loss[r["step"]] = r["loss"]
                if r.get("tokens_per_second"):
                    rates.append(r["tokens_per_second"])
            if r.get("val_loss") is not None:
                val[r["step"]] = r["val_loss"]
    return loss, val, rates


def record(fp, run_dir, out):
    loss, val, _ = read_metrics(run_dir)
    steps = fp["config"]["training"]["steps"]
    summary = {}
    path = os.path.join(run_dir, "parity_run.json")
    if os.path.exists(path):
        with open(path) as f:
            summary = json.load(f)
    complete = all(s in loss for s in range(steps))
    band = {"format": FORMAT,
            "what": "torch fp32 (TF32 off) training and validation losses of the parity run, "
                    "the noise band's reference (docs/parity.md, tests/reference/parity_band.py)",
            "fingerprint": fp["fingerprint"], "parts": fp["parts"], "config": fp["config"],
            "steps": steps, "recorded_steps": len(loss), "complete": complete,
            "torch": summary.get("torch"), "device": summary.get("device"),
            "attention": summary.get("attention"),
            "compiled_model": summary.get("compiled_model"),
            "tokens_per_second": summary.get("steady_tokens_per_second")
            or summary.get("tokens_per_second"),
            "loss": [[s, loss[s]] for s in sorted(loss)],
            "val_loss": [[s, val[s]] for s in sorted(val)]}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(band, f, indent=0)
        f.write("\n")
    os.replace(tmp, out)
    return band


def candidates(paths):
    for p in paths:
        if os.path.isdir(p):
            for n in sorted(os.listdir(p)):
                if n.endswith(".json"):
                    yield os.path.join(p, n)
        else:
            yield p


def check(fp, paths):
    """(path, band) of the first fitting band, or (None, the reasons)."""
    reasons = []
    for path in candidates(paths):
        if not os.path.exists(path):
            reasons.append(f"{path}: no band recorded")
            continue
        try:
            with open(path) as f:
                band = json.load(f)
        except (OSError, ValueError) as e:
            reasons.append(f"{path}: not a band ({e})")
            continue
        if not isinstance(band, dict) or band.get("format") != FORMAT:
            reasons.append(f"{path}: not a band ({FORMAT!r} expected)")
            continue
        if band["fingerprint"] != fp["fingerprint"]:
            differ = [k for k in fp["parts"] if band["parts"].get(k) != fp["parts"][k]]
            names = {"config": "the config (model, optimizer, batch, training length)",
                     "init": "the step-0 weights", "batches": "the batches"}
            reasons.append(f"{path}: recorded for other inputs: "
                           + ", ".join(names[k] for k in differ) + " differ")
            continue
        if not band["complete"]:
            reasons.append(f"{path}: incomplete, {band['recorded_steps']} of {band['steps']} "
                           "steps recorded (PARTS=fp32 continues it)")
            continue
        return path, band
    return None, reasons


def extract(band, run_dir):
    os.makedirs(run_dir, exist_ok=True)
    val = dict((s, v) for s, v in band["val_loss"])
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for s, v in band["loss"]:
            r = {"step": s, "loss": v}
            if band.get("tokens_per_second"):
                r["tokens_per_second"] = band["tokens_per_second"]
            f.write(json.dumps(r) + "\n")
            if s in val:
                f.write(json.dumps({"step": s, "val_loss": val[s]}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fingerprint")
    f.add_argument("--config", required=True)
    f.add_argument("--init", required=True)
    f.add_argument("--batches", required=True)
    f.add_argument("--out", required=True)
    r = sub.add_parser("record")
    r.add_argument("--fingerprint", required=True)
    r.add_argument("--run", required=True)
    r.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("--fingerprint", required=True)
    c.add_argument("--extract", default="")
    c.add_argument("bands", nargs="+")
    a = ap.parse_args()
    if a.command == "fingerprint":
        fp = fingerprint(a.config, a.init, a.batches)
        with open(a.out, "w") as out:
            json.dump(fp, out, indent=1)
        print(fp["fingerprint"])
        return 0
    with open(a.fingerprint) as fpf:
        fp = json.load(fpf)
    if a.command == "record":
        band = record(fp, a.run, a.out)
        print(f"parity_band: {band['recorded_steps']} of {band['steps']} steps of torch fp32 "
              f"recorded in {a.out} ({'complete' if band['complete'] else 'incomplete'}, "
              f"fingerprint {fp['fingerprint'][:16]})")
        return 0
    path, found = check(fp, a.bands)
    if path is None:
        print("parity_band: no recorded fp32 band fits this run (fingerprint "
              f"{fp['fingerprint'][:16]}):\n  " + "\n  ".join(found) +
              "\nRecord one with `PARTS=fp32 scripts/parity_run.sh` (docs/parity.md).",
              file=sys.stderr)
        return REFUSED
    if a.extract:
        extract(found, a.extract)
    print(f"parity_band: torch fp32 band from {path} ({found['steps']} steps, torch "
          f"{found.get('torch')}, {found.get('device')}, fingerprint {fp['fingerprint'][:16]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
