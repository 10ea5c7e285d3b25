#!/usr/bin/env python3
"""The verdict of the parity run (docs/parity.md): driftless's loss curve against PyTorch's
bf16 run, measured against PyTorch's own bf16-vs-fp32 noise band. Standard library only.

Reads three run directories' metrics.jsonl (driftless, torch bf16, torch fp32) and reports,
per step and per window of --window steps, d = |driftless - torch bf16| and the band
b = |torch bf16 - torch fp32| of the training loss. With --against R, d is measured from run R
instead of torch bf16 (a layout of several ranks against the one-GPU driftless run), and so are
the tail and validation criteria; the band stays torch bf16 against torch fp32. With --rerun
S, a second run of the reference that differs from it only in rounding (driftless on one rank
with the atomic-dQ backward), each window's band is the larger of torch bf16's distance from
torch fp32 and S's distance from the reference: how far apart two runs of one program drift
from rounding alone. Pass criteria:
  - every window: mean d <= --factor x mean b (1.5);
  - the mean loss of the last --tail steps (200) within the tail limit of the reference's (torch
    bf16, or R): --factor x torch bf16's own relative distance from torch fp32 on the same
    statistic, and never below --tail-rel (0.5%);
  - the final validation loss within the validation limit of the reference's: --factor x
    |torch bf16 - torch fp32| of the final validation loss, never below --val-abs nats (0.01).
The tail and validation limits are measured like the windows' band: a bf16 run that trains as
torch bf16 does lies as far from it as torch bf16 lies from fp32, which on the default data is
more than the fixed floors (torch bf16's final validation loss 0.022 nats from fp32's on an
H200). Where the fp32 run does not cover the tail or the final validation step, the floors
alone are the limits.
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


def limit(floor, factor, *bands):
    """A tail or validation limit: factor x the largest measured band (None: not measured),
    never below floor."""
    measured = [b for b in bands if b is not None]
    return max([floor] + [factor * b for b in measured])


def compare(dl, bf16, fp32, window=100, factor=1.5, tail=200, tail_rel=0.005, val_abs=0.01,
            against=None, names=("driftless", "torch bf16"), rerun=None):
    """dl, bf16, fp32, against, rerun: (losses, validation losses) of read_metrics. The distance
    is measured from `against` (default bf16); names label the run and its reference. rerun:
    the reference run again with other rounding, whose distance from it widens the band."""
    (dl_loss, dl_val), (bf_loss, bf_val), (fp_loss, fp_val) = dl, bf16, fp32
    ref_loss, ref_val = against if against is not None else bf16
    re_loss, re_val = rerun if rerun is not None else ({}, {})
    steps = sorted(set(dl_loss) & set(ref_loss) & set(bf_loss))
    if not steps:
        raise SystemExit(f"parity_compare: the {names[0]} and {names[1]} runs share no step")
    per_step = []
    for s in steps:
        d = abs(dl_loss[s] - ref_loss[s])
        b = abs(bf_loss[s] - fp_loss[s]) if s in fp_loss else None
        spread = abs(re_loss[s] - ref_loss[s]) if s in re_loss else None
        per_step.append({"step": s, "run": dl_loss[s], "reference": ref_loss[s],
                         "torch_bf16": bf_loss[s], "torch_fp32": fp_loss.get(s), "distance": d,
                         "band": b, "rerun_spread": spread})
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
        spreads = [r["rerun_spread"] for r in rows if r["rerun_spread"] is not None]
        spread = mean(spreads) if spreads else None
        torch_band = band
        if spread is not None and (band is None or spread > band):
            band = spread
        d = mean([r["distance"] for r in rows])
        if band is None:
            ratio = None
        elif band > 0:
            ratio = d / band
        else:
            ratio = 0.0 if d == 0 else float("inf")
        windows.append({"steps": [rows[0]["step"], rows[-1]["step"]], "distance": d,
                        "band": band, "torch_band": torch_band, "rerun_spread": spread,
                        "band_measured": measured, "ratio": ratio,
                        "pass": ratio is not None and ratio <= factor})
    tail_steps = steps[-tail:]
    tail_dl = mean([dl_loss[s] for s in tail_steps])
    tail_ref = mean([ref_loss[s] for s in tail_steps])
    tail_diff = abs(tail_dl - tail_ref) / abs(tail_ref)
    tail_fp = tail_band = None
    if all(s in fp_loss for s in tail_steps):
        tail_fp = mean([fp_loss[s] for s in tail_steps])
        tail_band = abs(mean([bf_loss[s] for s in tail_steps]) - tail_fp) / abs(tail_fp)
    tail_spread = None
    if tail_steps and all(s in re_loss for s in tail_steps):
        tail_spread = abs(mean([re_loss[s] for s in tail_steps]) - tail_ref) / abs(tail_ref)
    tail_limit = limit(tail_rel, factor, tail_band, tail_spread)
    val_steps = sorted(set(dl_val) & set(ref_val))
    val = None
    if val_steps:
        s = val_steps[-1]
        band = abs(bf_val[s] - fp_val[s]) if s in bf_val and s in fp_val else None
        spread = abs(re_val[s] - ref_val[s]) if s in re_val else None
        val = {"step": s, "run": dl_val[s], "reference": ref_val[s],
               "difference": abs(dl_val[s] - ref_val[s]), "torch_fp32": fp_val.get(s),
               "band": band, "rerun_spread": spread,
               "limit": limit(val_abs, factor, band, spread)}
    checks = {
        "windows": all(w["pass"] for w in windows if w["band_measured"]),
        "band_complete": all(w["band_measured"] for w in windows),
        "tail": tail_diff <= tail_limit,
        "val": val is not None and val["difference"] <= val["limit"],
    }
    return {"names": {"run": names[0], "reference": names[1]}, "window": window,
            "rerun": rerun is not None,
            "factor": factor, "tail": len(tail_steps), "tail_rel": tail_rel,
            "val_abs": val_abs, "steps": len(steps),
            "band_steps": sum(1 for r in per_step if r["band"] is not None),
            "windows": windows, "tail_mean": {"run": tail_dl, "reference": tail_ref,
                                              "relative_difference": tail_diff,
                                              "torch_fp32": tail_fp, "band": tail_band,
                                              "rerun_spread": tail_spread,
                                              "limit": tail_limit},
            "final_val": val, "checks": checks, "per_step": per_step}


def status(r):
    """The verdict as an exit status: 0 pass, 1 a criterion failed, 2 pass on the measured
    windows (the band incomplete)."""
    c = r["checks"]
    if not (c["windows"] and c["tail"] and c["val"]):
        return 1
    return 0 if c["band_complete"] else 2


# The verdict's words by status.
VERDICTS = ("PASS", "FAIL", "PASS on the measured windows (band incomplete)")


def passed(r):
    """The verdict line's word: PASS, PASS on the measured windows, or FAIL."""
    return VERDICTS[status(r)]


def limit_reason(r, band, spread, floor, scale, unit):
    """How a tail or validation limit was set: the floor, or factor x the larger of torch
    bf16's distance from torch fp32 and the rerun's from the reference."""
    precision = 3 if unit else 4
    parts = []
    if band is not None:
        parts.append(f"torch bf16's {scale * band:.{precision}f}{unit} from torch fp32")
    if spread is not None:
        parts.append(f"the rerun's {scale * spread:.{precision}f}{unit} from "
                     f"{r['names']['reference']}")
    if not parts:
        return f"the floor {floor}, torch fp32 not measured there"
    which = parts[0] if len(parts) == 1 else f"the larger of {parts[0]} and {parts[1]}"
    return f"{r['factor']} x {which}, at least {floor}"


def table(r):
    run, ref = r["names"]["run"], r["names"]["reference"]
    rerun = f" | mean abs(rerun - {ref})" if r["rerun"] else ""
    lines = [f"| steps | mean abs({run} - {ref}) | mean abs(torch bf16 - torch fp32){rerun} "
             "| ratio | verdict |", "| --- | --- | --- | --- | --- |" + (" --- |" if rerun else "")]
    for w in r["windows"]:
        band = "none" if w["torch_band"] is None else f"{w['torch_band']:.5f}"
        if not w["band_measured"] and w["torch_band"] is not None:
            band += " (held)"
        if r["rerun"]:
            band += " | " + ("-" if w["rerun_spread"] is None else f"{w['rerun_spread']:.5f}")
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
    if r["rerun"]:
        lines.append(f"Each window's ratio is over the larger of its two bands (the rerun: "
                     f"{ref} again with other rounding).")
    fp = "" if t["torch_fp32"] is None else f", torch fp32 {t['torch_fp32']:.4f}"
    lines.append(f"Mean loss of the last {r['tail']} steps: {run} {t['run']:.4f}, "
                 f"{ref} {t['reference']:.4f}{fp} ({100 * t['relative_difference']:.3f}%, "
                 f"limit {100 * t['limit']:.3f}%: "
                 + limit_reason(r, t["band"], t["rerun_spread"], f"{100 * r['tail_rel']:.1f}%",
                                100, "%") + ").")
    v = r["final_val"]
    if v:
        fp = "" if v["torch_fp32"] is None else f", torch fp32 {v['torch_fp32']:.4f}"
        lines.append(f"Final validation loss (step {v['step']}): {run} {v['run']:.4f}, "
                     f"{ref} {v['reference']:.4f}{fp} (difference {v['difference']:.4f}, "
                     f"limit {v['limit']:.4f}: "
                     + limit_reason(r, v["band"], v["rerun_spread"], f"{r['val_abs']} nats", 1,
                                    "") + ").")
    else:
        lines.append("Final validation loss: not in both runs.")
    lines.append(f"fp32 band measured over {r['band_steps']} of {r['steps']} steps.")
    lines.append("PARITY: " + passed(r))
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
    ap.add_argument("--against", default="",
                    help="measure the distance from this run instead of torch bf16")
    ap.add_argument("--rerun", default="",
                    help="the reference run again with other rounding: its distance from the "
                         "reference widens the band")
    ap.add_argument("--names", default="",
                    help="RUN,REFERENCE: the table's names of the run and of its reference "
                         "(default driftless and torch bf16, or the --against directory)")
    ap.add_argument("--json", default="", help="write every number here")
    a = ap.parse_args()
    names = ("driftless", a.against.rstrip("/") if a.against else "torch bf16")
    if a.names:
        names = tuple(a.names.split(",", 1))
        if len(names) != 2:
            ap.error(f"--names takes RUN,REFERENCE, got {a.names!r}")
    against = read_metrics(a.against) if a.against else None
    rerun = read_metrics(a.rerun) if a.rerun else None
    r = compare(read_metrics(a.driftless), read_metrics(a.torch_bf16), read_metrics(a.torch_fp32),
                a.window, a.factor, a.tail, a.tail_rel, a.val_abs, against, names, rerun)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    print(table(r))
    return status(r)


if __name__ == "__main__":
    sys.exit(main())
