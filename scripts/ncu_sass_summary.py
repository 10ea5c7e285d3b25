#!/usr/bin/env python3
"""What a kernel's instructions do, from Nsight Compute's SASS page: the warp stall reasons of
the whole kernel and of its hot loop, the hot loop's instructions per iteration by opcode, and
the instructions with the most stall samples.

The input is the CSV that
  ncu --set full --import-source yes -k regex:KERNEL -c 1 -o prof <command>
  ncu --import prof.ncu-rep --page source --csv --print-source sass > prof-sass.csv
writes. The hot loop's iteration count is the execution count that the most instructions share
(for the attention kernels, a consumer warp's query steps; a spin loop, run more often by
fewer instructions, is not it), or --iterations; the hot loop is the instructions executed at
least --hot (default 0.9) times that often, and "per iteration" figures are per warp and step.

  python3 scripts/ncu_sass_summary.py prof-sass.csv [--top 30] [--hot 0.9]
"""
import argparse
import collections
import csv


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    names = rows[header]
    return names, [dict(zip(names, r)) for r in rows[header + 1:] if len(r) == len(names)]


def stall_table(rows, stalls, title):
    total = collections.Counter()
    for r in rows:
        for s in stalls:
            total[s] += number(r[s])
    all_samples = sum(total.values()) or 1.0
    print(f"{title}: {all_samples:.0f} samples")
    for s, v in total.most_common(10):
        print(f"  {s[len('stall_'):]:<24} {100 * v / all_samples:5.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=30, help="instructions listed by stall samples")
    ap.add_argument("--hot", type=float, default=0.9,
                    help="share of the iteration count that makes an instruction the hot loop's")
    ap.add_argument("--iterations", type=float, default=0,
                    help="the hot loop's iteration count (default: the most shared count)")
    a = ap.parse_args()
    names, rows = read_rows(a.csv)
    stalls = [n for n in names if n.startswith("stall_") and "Not Issued" not in n]
    samples = sum(number(r["# Samples"]) for r in rows) or 1.0
    stall_table(rows, stalls, "whole kernel")

    executed = [number(r["Instructions Executed"]) for r in rows]
    shared = collections.Counter(e for e in executed if e > 0)
    iterations = a.iterations or (shared.most_common(1)[0][0] if shared else 0.0)
    hot = [r for r, e in zip(rows, executed)
           if iterations and a.hot * iterations <= e <= iterations / a.hot]
    hot_samples = sum(number(r["# Samples"]) for r in hot)
    print(f"\nhot loop: {len(hot)} instructions, {iterations:.0f} warp iterations, "
          f"{100 * hot_samples / samples:.1f}% of the samples")
    stall_table(hot, stalls, "hot loop stalls")
    per_op = collections.Counter()
    for r in hot:
        per_op[opcode(r["Source"])] += number(r["Instructions Executed"])
    per_iteration = sum(per_op.values()) / iterations if iterations else 0.0
    print(f"  instructions per iteration: {per_iteration:.0f}")
    print("  by opcode: " + ", ".join(f"{op} {n / iterations:.0f}"
                                      for op, n in per_op.most_common(20)))

    print(f"\ntop {a.top} instructions by stall samples (address, share, executions, top two stalls)")
    for r in sorted(rows, key=lambda r: -number(r["# Samples"]))[:a.top]:
        top = sorted(((number(r[s]), s[len("stall_"):]) for s in stalls), reverse=True)[:2]
        print(f"  {r['Address'][-6:]:>6} {100 * number(r['# Samples']) / samples:5.2f}% "
              f"{number(r['Instructions Executed']):>10.0f}  {r['Source'][:60]:<60} "
              f"{top[0][1]} {top[0][0]:.0f}, {top[1][1]} {top[1][0]:.0f}")


if __name__ == "__main__":
    main()
