#!/usr/bin/env python3
"""batch_check.py DRIFTLESS SOURCE_DIR: `driftless batch` reads the run config and --set as
`driftless train` does (tests/e2e/train.cmake): the layout of the overrides, the plan of the
trainer, the global batch index under its one name, and a bad override refused with its path."""
import json
import subprocess
import sys

binary, root = sys.argv[1], sys.argv[2]
config = f"{root}/configs/runs/regress_tiny.yaml"
sets = ["--set", "schedule.micro_sequences=2", "--set", "distributed.context_parallel.size=2",
        "--set", "distributed.context_parallel.kind=ring"]
out = json.loads(subprocess.run([binary, "batch", "-c", config, *sets, "--rank", "1",
                                 "--compact"], check=True, stdout=subprocess.PIPE,
                                text=True).stdout)
problems = []
if out["context_parallel"] != {"size": 2, "kind": "ring"}:
    problems.append(f"context_parallel {out['context_parallel']}")
if out["micro_sequences"] != 2 or out["sequences"] != 8:
    problems.append(f"micro_sequences {out['micro_sequences']}, sequences {out['sequences']}")
ranks = out["ranks"]
if [r["rank"] for r in ranks] != [1]:
    problems.append(f"ranks {[r['rank'] for r in ranks]}")
plan = ranks[0]["plan"]
forward = plan["depth_first_groups"][0]["forward"]
if len(forward) != 2 or not plan["recompute_loss"]:
    problems.append(f"{len(forward)} forwards, recompute_loss {plan['recompute_loss']}")
# The ring: two inputs per sequence (chunks 1 and 2 of 4), each named by its global sequence.
if len(forward[0]["inputs"]) != 16 or "global_sequence" not in forward[0]["inputs"][0]:
    problems.append(f"inputs {len(forward[0]['inputs'])}: {sorted(forward[0]['inputs'][0])}")
if any("global_sequence" not in s for s in ranks[0]["sequences"]):
    problems.append("a sequence without global_sequence")
bad = subprocess.run([binary, "batch", "-c", config, "--set", "schedule.micro_sequence=2"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
if bad.returncode == 0 or "schedule.micro_sequence" not in bad.stdout:
    problems.append(f"a misspelt key: exit {bad.returncode}, {bad.stdout.strip()[:200]}")
for p in problems:
    print("FAIL:", p)
print("driftless batch:", "ok" if not problems else f"{len(problems)} problems")
sys.exit(1 if problems else 0)
