#!/usr/bin/env bash
# The parity run of docs/parity.md in one invocation: driftless trains GPT-2 124M in bf16
# (configs/runs/parity_124m.yaml) and PyTorch trains the same model from driftless's step-0
# weights on the same batches (tests/reference/train_parity.py) in bf16 autocast and, for the
# noise band, in fp32 with TF32 off; then the verdict (tests/reference/parity_compare.py), the
# plot of the curves (`driftless plot`) and the tensor-by-tensor drift report at step 0
# (`driftless report` against torch bf16, each tensor's band its torch bf16-vs-fp32 distance).
#
# Time: the fp32 run is the slowest by far (fp32 units, not tensor cores: about
# 6 x 124M x 16384 x 2000 = 2.4e16 FLOP plus attention, 10 minutes or more on an H200 alone,
# against about a minute for driftless and three for torch bf16 eager with a document mask).
# All three start together on the one GPU, so the fp32 run also takes what the others leave
# idle; it stops at the deadline, BUDGET seconds after the start, keeping its model and
# optimizer in PARITY_DIR, and `PARTS=fp32` in a later invocation continues it (the verdict
# is given again each time, over the windows the band has reached).
#
#   scripts/parity_run.sh                       # GPU: the three curves and the verdict
#   PARTS="fp32 report" scripts/parity_run.sh   # GPU: continue the band; the drift report
#   SMOKE=1 BUILD=build scripts/parity_run.sh   # CPU: 2-layer model, 20 steps, same plumbing
#
# Environment: BUILD (default build-gpu; apps/driftless must be built), PARITY_DIR (work
# folder, default $BUILD/parity: checkpoints, batches, run directories), RESULTS (where the
# small results are copied at the end: tables, plots, logs, metrics; default none), CONFIG
# (default configs/runs/parity_124m.yaml), DATA (a folder of prepare's train.* and
# validation.*, default the config's: the fortunes), SET (more `--set key=value` for both sides),
# STEPS, WINDOW (steps in a window of the verdict, default 100; 10 with SMOKE), BUDGET
# (seconds, default 470), PARTS (curve, fp32, report; default curve), REPORT_SEQS (sequences
# of the report's step, default 2), PYTHON (default python3, with torch). Data:
# scripts/prepare_parity_data.sh.
# Exit status: parity_compare.py's (0 pass, 1 fail, 2 pass so far with the band incomplete).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
build=${BUILD:-build-gpu}
dl="$build/apps/driftless"
work=${PARITY_DIR:-$build/parity}
python=${PYTHON:-python3}
budget=${BUDGET:-470}
parts=${PARTS:-curve}
ref=tests/reference
[ -x "$dl" ] || { echo "parity_run: no $dl (build it first)" >&2; exit 1; }
mkdir -p "$work"
# A side that fails ends the invocation: the runs still going in the background end with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

sets=()
device=cuda
if [ -n "${SMOKE:-}" ]; then
  device=cpu
  sets+=(--set model.n_layer=2 --set model.n_head=4 --set model.n_embd=64
         --set model.n_positions=256 --set batch.sequences=2 --set batch.sequence_length=64
         --set training.steps=20 --set training.eval_interval=10 --set training.eval_batches=1
         --set optimizer.warmup_steps=5 --set precision.device=cpu --set precision.compute=f32)
  window=${WINDOW:-10}
fi
[ -n "${STEPS:-}" ] && sets+=(--set "training.steps=$STEPS")
if [ -n "${DATA:-}" ]; then
  sets+=(--set "data.path=$DATA/train" --set "data.validation_path=$DATA/validation")
fi
for s in ${SET:-}; do sets+=(--set "$s"); done

# get KEY SECTION: a scalar of the resolved config (two-level YAML of `driftless config`).
get() { awk -v sec="$1:" -v key="$2:" '/^[^ ]/{s=$1} s==sec && $1==key {print $2}' "$work/run.yaml"; }
elapsed() { echo $(( $(date +%s) - t0 )); }

if [[ $parts == *curve* || ! -f "$work/init_checkpoint" ]]; then
  "$dl" config -c "${CONFIG:-configs/runs/parity_124m.yaml}" "${sets[@]}" >"$work/run.yaml"
  # Step-0 weights: one step at learning rate 0 leaves the seeded initialisation as it is.
  rm -rf "$work/init"
  "$dl" train -c "$work/run.yaml" --set optimizer.lr=0 --set optimizer.min_lr=0 \
    --set optimizer.warmup_steps=0 --set training.steps=1 --set training.eval_interval=0 \
    --set "run.output_dir=$work/init" -q >"$work/init.log" 2>&1
  ls "$work"/init/checkpoints/*.safetensors | tail -1 >"$work/init_checkpoint"
fi
ckpt=$(cat "$work/init_checkpoint")
steps=$(get training steps)
data=$(get data path)
echo "== parity: $(get batch sequences) x $(get batch sequence_length) tokens, $steps steps," \
     "data $data, parts: $parts, work folder $work"
common=(--config "$work/run.yaml" --init "$ckpt" --batches "$work/batches.safetensors"
        --device "$device")
# The fp32 run, the slowest, stops at the deadline; started first, it also takes the GPU
# whenever the others leave it idle (starting up, checking data, evaluating).
fp32_run() {
  "$python" $ref/train_parity.py "${common[@]}" --precision fp32 \
    --deadline $(( t0 + budget - ${RESERVE:-20} )) --state "$work/torch_fp32.state" "$@" \
    --out "$work/torch_fp32" 2>&1 | grep -v Warning >>"$work/torch_fp32.log"
}
fp32_pid=""

if [[ $parts == *curve* ]]; then
  "$dl" batch --config "$work/run.yaml" --export "$work/batches.safetensors" --steps "$steps" \
    --validation-batches "$(get training eval_batches)"
  rm -rf "$work/driftless" "$work/torch_bf16" "$work/torch_fp32" "$work/torch_fp32.state" \
    "$work/torch_fp32.log"
  fp32_run &
  fp32_pid=$!
  "$dl" train -c "$work/run.yaml" --set "training.init_from=$ckpt" \
    --set "run.output_dir=$work/driftless" -q >"$work/driftless.log" 2>&1 &
  dl_pid=$!
  "$python" $ref/train_parity.py "${common[@]}" --data "$data" --precision bf16 \
    --out "$work/torch_bf16" 2>&1 | grep -v Warning | tee "$work/torch_bf16.log"
  wait "$dl_pid" || { tail -5 "$work/driftless.log"; exit 1; }
  grep "summary" "$work/driftless.log" || true
  echo "== driftless and torch bf16 done at $(elapsed) s"
elif [[ $parts == *fp32* && -f "$work/torch_fp32.state" ]]; then
  fp32_run --resume &
  fp32_pid=$!
fi

if [[ $parts == *report* ]]; then
  # The drift report at step 0 on REPORT_SEQS sequences (tensor logs of 16 x 1024 tokens
  # would be some 8 GB a run): driftless against torch bf16, each tensor's band being its
  # distance between torch bf16 and torch fp32.
  r="$work/report"
  rm -rf "$r"
  mkdir -p "$r"
  "$dl" config -c "$work/run.yaml" --set "batch.sequences=${REPORT_SEQS:-2}" \
    --set training.steps=1 --set optimizer.warmup_steps=0 --set training.eval_interval=0 \
    --set "run.tensor_logs.steps=[0]" >"$r/run.yaml"
  "$dl" batch --config "$r/run.yaml" --export "$r/batches.safetensors" --steps 1
  "$dl" train -c "$r/run.yaml" --set "training.init_from=$ckpt" --set "run.output_dir=$r/driftless" \
    -q >"$r/driftless.log" 2>&1
  for p in bf16 fp32; do
    "$python" $ref/train_parity.py --config "$r/run.yaml" --init "$ckpt" \
      --batches "$r/batches.safetensors" --device "$device" --precision $p --log-steps 0 \
      --out "$r/torch_$p" 2>&1 | grep -v Warning
  done
  "$dl" report "$r/torch_bf16" "$r/driftless" --band "$r/torch_fp32" --band-factor 1.5 \
    -o "$r/drift" | tee "$r/report.txt" || true
  echo "== report done at $(elapsed) s"
fi

if [ -n "$fp32_pid" ]; then
  wait "$fp32_pid" || true
  tail -3 "$work/torch_fp32.log"
  echo "== torch fp32 stopped at $(elapsed) s"
fi

status=0
if [ ! -s "$work/torch_fp32/metrics.jsonl" ]; then
  echo "parity_run: the fp32 run wrote no losses:" >&2
  tail -20 "$work/torch_fp32.log" >&2
  exit 1
fi
if [ -f "$work/torch_bf16/metrics.jsonl" ]; then
  "$python" $ref/parity_compare.py "$work/driftless" "$work/torch_bf16" "$work/torch_fp32" \
    --window "${window:-${WINDOW:-100}}" --json "$work/parity.json" >"$work/parity.md" || status=$?
  cat "$work/parity.md"
  # torch bf16 first: the difference chart shows driftless - torch bf16 and the band,
  # torch fp32 - torch bf16, side by side.
  for f in parity.html parity.svg; do
    "$dl" plot "$work/torch_bf16" "$work/driftless" "$work/torch_fp32" --difference \
      -o "$work/$f" --title "driftless vs PyTorch: the parity run" >/dev/null
  done
fi
if [ -n "${RESULTS:-}" ]; then
  mkdir -p "$RESULTS"
  (cd "$work" && find . \( -name '*.md' -o -name '*.json' -o -name '*.html' -o -name '*.svg' \
     -o -name '*.log' -o -name '*.txt' -o -name 'metrics.jsonl' -o -name '*.yaml' \) \
     -not -path './report/*/step_*' -size -20M -print0 | xargs -0 -I{} cp --parents {} "$RESULTS/")
fi
echo "== parity_run: done in $(elapsed) s (status $status)"
exit $status
