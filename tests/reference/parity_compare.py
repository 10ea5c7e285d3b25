#!/usr/bin/env python3
"""The verdict of the parity run (docs/parity.md): driftless's loss curve against PyTorch's
bf16 run, measured against PyTorch's own bf16-vs-fp32 noise band. Standard library only.

Reads three run directories' metrics.jsonl (driftless, torch bf16, torch fp32) and reports,
per step and per window of --window steps, d = |driftless - torch bf16| and the band
b = |torch bf16 - torch fp32| of the training loss. Pass criteria:
  - every window: mean d <= --factor x mean b (1.5);
  - the mean loss of the last --tail steps (200) within --tail-rel (0.5%) of torch bf16's;
  - the final validation loss within --val-abs nats (0.01) of torch bf16's.
The fp32 run may cover fewer steps than the others (it is the slowest; scripts/parity_run.sh
stops it at a deadline): windows it does not cover are shown against the band of the last
window it covers, marked "held", and the verdict then says the band was incomplete.
Writes --json (every number) and prints a Markdown table. Exit status: 0 pass with the band
measured in every window, 1 a criterion failed, 2 no criterion failed but some windows had no
measured band.
"""
import argparse
import json
import math
import os
import sys


def read_metrics(run_dir):
    """({step: loss}, {step: val_loss}) of run_dir/metrics.jsonl; a repeated step keeps its
    last value (driftless appends on resume)."""
    loss, val = {}, {}
    path = run_dir if run_dir.endswith(".jsonl") else os.path.join(run_dir, "metrics.jsonl")
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            v = r.get("loss")
            if v is not None and math.isfinite(v):
                loss[r["step"]] = v
            v = r.get("val_loss")
            if v is not None and math.isfinite(v):
                val[r["step"]] = v
    return loss, val


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def compare(dl, bf16, fp32, window=100, factor=1.5, tail=200, tail_rel=0.005, val_abs=0.01):
    (dl_loss, dl_val), (bf_loss, bf_val), (fp_loss, _) = dl, bf16, fp32
    steps = sorted(set(dl_loss) & set(bf_loss))
    if not steps:
        raise SystemExit("parity_compare: the driftless and torch bf16 runs share no step")
    per_step = []
    for s in steps:
        d = abs(dl_loss[s] - bf_loss[s])
        b = abs(bf_loss[s] - fp_loss[s]) if s in fp_loss else None
        per_step.append({"step": s, "driftless": dl_loss[s], "torch_bf16": bf_loss[s],
                         "torch_fp32": fp_loss.get(s), "distance": d, "band": b})
    windows, held = [], None
    for w0 in range(0, steps[-1] + 1, window):
        rows = [r for r in per_step if w0 <= r["step"] < w0 + window]
        if not rows:
            continue
        banded = [r["band"] for r in rows if r["band"] is not None]
        measured = len(banded) == len(rows)
        band = mean(banded) if measured else held
        if measured:
            held = band
        d = mean([r["distance"] for r in rows])
        if band is None:
            ratio = None
        elif band > 0:
            ratio = d / band
        else:
            ratio = 0.0 if d == 0 else float("inf")
        windows.append({"steps": [rows[0]["step"], rows[-1]["step"]], "distance": d,
                        "band": band, "band_measured": measured, "ratio": ratio,
                        "pass": ratio is not None and ratio <= factor})
    tail_steps = steps[-tail:]
    tail_dl = mean([dl_loss[s] for s in tail_steps])
    tail_bf = mean([bf_loss[s] for s in tail_steps])
    tail_diff = abs(tail_dl - tail_bf) / abs(tail_bf)
    val_steps = sorted(set(dl_val) & set(bf_val))
    val = None
    if val_steps:
        s = val_steps[-1]
        val = {"step": s, "driftless": dl_val[s], "torch_bf16": bf_val[s],
               "difference": abs(dl_val[s] - bf_val[s])}
    checks = {
        "windows": all(w["pass"] for w in windows if w["band_measured"]),
        "band_complete": all(w["band_measured"] for w in windows),
        "tail": tail_diff <= tail_rel,
        "val": val is not None and val["difference"] <= val_abs,
    }
    return {"window": window, "factor": factor, "tail": len(tail_steps), "tail_rel": tail_rel,
            "val_abs": val_abs, "steps": len(steps),
            "band_steps": sum(1 for r in per_step if r["band"] is not None),
            "windows": windows, "tail_mean": {"driftless": tail_dl, "torch_bf16": tail_bf,
                                              "relative_difference": tail_diff},
            "final_val": val, "checks": checks, "per_step": per_step}


def table(r):
    lines = ["| steps | mean abs(driftless - torch bf16) | mean abs(torch bf16 - torch fp32) "
             "| ratio | verdict |", "| --- | --- | --- | --- | --- |"]
    for w in r["windows"]:
        band = "none" if w["band"] is None else f"{w['band']:.5f}"
        if not w["band_measured"] and w["band"] is not None:
            band += " (held)"
        ratio = "-" if w["ratio"] is None else f"{w['ratio']:.2f}"
        if w["band_measured"]:
            verdict = "pass" if w["pass"] else "FAIL"
        elif w["band"] is None:
            verdict = "no band yet"
        else:
            verdict = "within held band" if w["pass"] else "beyond held band"
        lines.append(f"| {w['steps'][0]}-{w['steps'][1]} | {w['distance']:.5f} | {band} | "
                     f"{ratio} | {verdict} |")
    t = r["tail_mean"]
    lines.append("")
    lines.append(f"Mean loss of the last {r['tail']} steps: driftless {t['driftless']:.4f}, "
                 f"torch bf16 {t['torch_bf16']:.4f} ({100 * t['relative_difference']:.3f}%, "
                 f"limit {100 * r['tail_rel']:.1f}%).")
    v = r["final_val"]
    if v:
        lines.append(f"Final validation loss (step {v['step']}): driftless {v['driftless']:.4f}, "
                     f"torch bf16 {v['torch_bf16']:.4f} (difference {v['difference']:.4f}, "
                     f"limit {r['val_abs']}).")
    else:
        lines.append("Final validation loss: not in both runs.")
    c = r["checks"]
    lines.append(f"fp32 band measured over {r['band_steps']} of {r['steps']} steps.")
    ok = c["windows"] and c["tail"] and c["val"]
    lines.append("PARITY: " + ("PASS" if ok and c["band_complete"] else
                               "PASS on the measured windows (band incomplete)" if ok else "FAIL"))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("driftless", help="driftless run directory (or metrics.jsonl)")
    ap.add_argument("torch_bf16")
    ap.add_argument("torch_fp32")
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--factor", type=float, default=1.5)
    ap.add_argument("--tail", type=int, default=200)
    ap.add_argument("--tail-rel", type=float, default=0.005)
    ap.add_argument("--val-abs", type=float, default=0.01)
    ap.add_argument("--json", default="", help="write every number here")
    a = ap.parse_args()
    r = compare(read_metrics(a.driftless), read_metrics(a.torch_bf16), read_metrics(a.torch_fp32),
                a.window, a.factor, a.tail, a.tail_rel, a.val_abs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    print(table(r))
    c = r["checks"]
    if not (c["windows"] and c["tail"] and c["val"]):
        return 1
    return 0 if c["band_complete"] else 2


if __name__ == "__main__":
    sys.exit(main())
