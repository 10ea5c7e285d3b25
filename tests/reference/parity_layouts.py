#!/usr/bin/env python3
"""The verdict of the parity run's layouts part (docs/parity.md, scripts/parity_run.sh
PARTS=layouts): each layout of several ranks trained the one-rank run's config, weights and
batches, and its loss curve must lie on the one-rank driftless run's (one GPU, or one CPU
process) by parity_compare.py's rules. The band is torch bf16 against torch fp32, widened with
--rerun to the one-rank run's own spread: the same run again with other rounding (the
atomic-dQ backward), measured from it. Each layout is also compared with torch bf16 under the
plain band, shown beside the verdict but not part of it: two bf16 runs of different programs
drift apart by more than one run drifts from fp32 (BENCHMARKS.md), and the one-rank run's own
distance from torch bf16 is the parity run's verdict. Standard library only.

  parity_layouts.py --driftless D --torch-bf16 T --band B [--rerun S] [--batches F]
                    [--window N] --out DIR LAYOUT_RUN...

Each LAYOUT_RUN is a run directory named for its layout (dp2, sdp2, cp2_a2a); one without a
metrics.jsonl is a layout whose training failed. Writes DIR/<layout>.md (both tables),
DIR/<layout>.json (both comparisons) and DIR/layouts.md (one row a layout, and what the batches'
sequences are made of: the share of sequences that hold a single document piece), and prints
layouts.md (with a row for the rerun against the one-rank run under the plain band: the spread
that rounding alone gives). Exit status: 0 every layout passes against the one-rank run with
the band measured in every window; 1 a layout failed a criterion or did not train; 2 no
criterion failed but some windows had no measured band.
"""
import argparse
import array
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_compare as pc  # noqa: E402
from safetensors_io import read_raw  # noqa: E402


def documents(batches):
    """What the training batches' sequences hold, from driftless batch --export's file: the
    number of sequences, how many are a single document piece, the mean number of pieces a
    sequence and the longest piece."""
    tensors, _ = read_raw(batches)
    counts = array.array("i", tensors["train.document_counts"][2])
    lengths = array.array("i", tensors["train.document_lengths"][2])
    if sys.byteorder != "little":
        counts.byteswap()
        lengths.byteswap()
    n = len(counts)
    return {"sequences": n, "one_piece": sum(1 for c in counts if c == 1),
            "mean_pieces": sum(counts) / n if n else float("nan"),
            "longest_piece": max(lengths) if lengths else 0}


def last_rate(run_dir):
    """The last tokens/s a run's metrics.jsonl records, or None."""
    rate = None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                v = json.loads(line).get("tokens_per_second")
                if v is not None and math.isfinite(v):
                    rate = v
    return rate


def worse(a, b):
    """The worse of two statuses (pc.status): a failure (1) over an incomplete band (2) over a
    pass (0)."""
    return max(a, b, key=lambda x: (x == 1, x))


def worst_ratio(r):
    ratios = [w["ratio"] for w in r["windows"] if w["ratio"] is not None]
    return max(ratios) if ratios else None


def cells(r):
    """The summary's cells of one comparison: worst window ratio, tail, final validation."""
    w = worst_ratio(r)
    v = r["final_val"]
    return [("-" if w is None else f"{w:.2f}"),
            f"{100 * r['tail_mean']['relative_difference']:.3f}%",
            ("-" if v is None else f"{v['difference']:.4f}")]


def row(name, run_dir, vs_torch, vs_one, verdict):
    """The summary's row of one run: its tokens/s, both comparisons' cells and the verdict."""
    rate = last_rate(run_dir)
    return (f"| {name} | {'-' if rate is None else f'{rate:.0f}'} | "
            + " | ".join(cells(vs_torch) + cells(vs_one)) + f" | {verdict} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layouts", nargs="+", help="the layouts' run directories")
    ap.add_argument("--driftless", required=True, help="the one-rank driftless run")
    ap.add_argument("--torch-bf16", required=True)
    ap.add_argument("--band", required=True, help="torch fp32's losses (the band's run)")
    ap.add_argument("--rerun", default="",
                    help="the one-rank run again with other rounding (widens the band)")
    ap.add_argument("--batches", default="", help="the batches file, for what sequences hold")
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    bf16, fp32 = pc.read_metrics(a.torch_bf16), pc.read_metrics(a.band)
    one_gpu = pc.read_metrics(a.driftless)
    rerun = None
    if a.rerun:
        if os.path.exists(os.path.join(a.rerun, "metrics.jsonl")):
            rerun = pc.read_metrics(a.rerun)
        else:
            print(f"parity_layouts: no rerun in {a.rerun}: the band is torch bf16's alone",
                  file=sys.stderr)
    rows, status, limits = [], 0, "no layout trained"
    for run in a.layouts:
        name = os.path.basename(os.path.normpath(run))
        if not os.path.exists(os.path.join(run, "metrics.jsonl")):
            rows.append(f"| {name} | - | - | - | - | - | - | - | did not train |")
            status = 1
            continue
        m = pc.read_metrics(run)
        vs_torch = pc.compare(m, bf16, fp32, a.window, names=(name, "torch bf16"))
        vs_one = pc.compare(m, bf16, fp32, a.window, against=one_gpu,
                            names=(name, "driftless 1 rank"), rerun=rerun)
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump({"torch_bf16": vs_torch, "driftless_1rank": vs_one}, f, indent=1)
        with open(os.path.join(a.out, name + ".md"), "w") as f:
            f.write(f"## {name} against torch bf16\n\n{pc.table(vs_torch)}\n\n"
                    f"## {name} against driftless on one rank\n\n{pc.table(vs_one)}\n")
        limits = (f"{100 * vs_one['tail_mean']['limit']:.3f}% and "
                  + ("-" if vs_one["final_val"] is None
                     else f"{vs_one['final_val']['limit']:.4f} nats"))
        s = pc.status(vs_one)
        status = worse(status, s)
        rows.append(row(name, run, vs_torch, vs_one, pc.VERDICTS[s]))
    if rerun is not None:
        spread_torch = pc.compare(rerun, bf16, fp32, a.window, names=("rerun", "torch bf16"))
        spread = pc.compare(rerun, bf16, fp32, a.window, against=one_gpu,
                            names=("rerun", "driftless 1 rank"))
        rows.append(row("rerun: 1 rank, other rounding", a.rerun, spread_torch, spread,
                        "(the spread)"))
    band = ("the larger of mean abs(torch bf16 - torch fp32) and mean abs(rerun - driftless 1 "
            "rank)" if rerun is not None else "mean abs(torch bf16 - torch fp32)")
    lines = [f"Each layout's loss against driftless on one rank (the verdict) and against torch "
             f"bf16 (shown, under the plain band), by the rules of the parity verdict: worst "
             f"window (of {a.window} steps) of mean distance over the band, {band} (limit 1.5), "
             f"the last steps' mean loss and the final validation loss (limits 1.5 x the band's "
             f"distances on each, at least 0.5% and 0.01 nats: {limits} against one rank). The "
             f"rerun's row is its distance from the one-rank run under the plain band.", "",
             "| layout | tokens/s | worst ratio vs torch bf16 | tail vs torch bf16 "
             "| val vs torch bf16 | worst ratio vs 1 rank | tail vs 1 rank | val vs 1 rank "
             "| verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |", *rows]
    if a.batches:
        d = documents(a.batches)
        share = 100 * d["one_piece"] / d["sequences"] if d["sequences"] else float("nan")
        lines += ["", f"Training sequences: {d['sequences']}, of which {d['one_piece']} "
                  f"({share:.1f}%) hold a single document piece; {d['mean_pieces']:.2f} pieces "
                  f"a sequence on average, the longest {d['longest_piece']} tokens."]
    lines += ["", "LAYOUTS: " + pc.VERDICTS[status]]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "layouts.md"), "w") as f:
        f.write(text)
    print(text, end="")
    return status


if __name__ == "__main__":
    sys.exit(main())
