#!/usr/bin/env bash
# The parity run of docs/parity.md: driftless trains GPT-2 124M in bf16
# (configs/runs/parity_124m.yaml) and PyTorch trains the same model from driftless's step-0
# weights on the same batches (tests/reference/train_parity.py) in bf16 autocast, both at once on
# one GPU; the verdict (tests/reference/parity_compare.py) measures driftless's distance from
# torch bf16 against the noise band, torch bf16's distance from torch fp32 (TF32 off), whose
# curve is a recorded input (tests/reference/parity_band.py); then the plot of the curves
# (`driftless plot`) and, with PARTS=report, the tensor-by-tensor drift report at step 0;
# with PARTS=layouts, the same training on several ranks (mpirun) in each of LAYOUTS, each
# curve judged against torch bf16 and against the one-GPU driftless run within the same band.
#
# PARTS (default curve; SMOKE: "fp32 curve"), any of:
#   fp32    record the band: torch fp32 from the step-0 weights, stopped at the deadline (BUDGET
#           seconds after the start) with its model and optimizer kept in PARITY_DIR, continued
#           by the next PARTS=fp32 invocation; each invocation writes the band file BAND (the
#           losses so far, marked complete once the last step is reached). Nothing to do when a
#           complete band for these inputs is already there.
#   curve   driftless and torch bf16 side by side, then the verdict against the recorded band.
#           The band is looked for in BAND, then in tests/reference/parity_band/: the first
#           complete one whose fingerprint (the config's model, optimizer, batch and training
#           length, the step-0 weights, the batches) is this run's. None: the curves are kept
#           but there is no verdict (exit status 3).
#   report  the drift report at step 0 on REPORT_SEQS sequences, driftless against torch bf16
#           with torch fp32 as each tensor's band.
#   layouts driftless under mpirun in each of LAYOUTS (default "dp2 sdp2 cp2_a2a": dpN, sdpN,
#           cpN_a2a, cpN_ring), from the same step-0 weights on the same batches, after a
#           one-rank rerun with RERUN set (default training.deterministic=false: the atomic-dQ
#           backward, other rounding; empty: none); each curve judged by parity_compare.py's
#           rules against the one-GPU driftless run, the band widened to the rerun's distance
#           from it, and shown against torch bf16 (tests/reference/parity_layouts.py). The
#           one-GPU curves are this invocation's (with curve) or an earlier one's in CURVES
#           (default the work folder, or a RESULTS folder) made from the same inputs; none:
#           refused (exit 3).
#
#   PARTS=fp32 scripts/parity_run.sh            # GPU: record the band (again until complete)
#   scripts/parity_run.sh                       # GPU: the two curves and the verdict
#   PARTS=report scripts/parity_run.sh          # GPU: the drift report at step 0
#   PARTS="curve layouts" scripts/parity_run.sh # 2 GPUs: the curves, then dp2, sdp2, cp2 a2a
#   SMOKE=1 BUILD=build scripts/parity_run.sh   # CPU: 2-layer model, 20 steps, band and curve
#   SMOKE=1 PARTS="fp32 curve layouts" scripts/parity_run.sh   # CPU: and 2 MPI ranks a layout
#
# Environment: BUILD (default build-gpu; apps/driftless must be built), PARITY_DIR (work
# folder, default $BUILD/parity: checkpoints, batches, run directories, the fp32 run's state,
# the inductor cache), BAND (the band file, default $PARITY_DIR/parity_band.json), RESULTS
# (where the small results are copied at the end: tables, plots, logs, metrics, the band;
# default none), CONFIG (default configs/runs/parity_124m.yaml), DATA (a folder of prepare's
# train.* and validation.*, default the config's: debian-text), SET (more `--set key=value`
# for both sides), STEPS, WINDOW (steps in a window of the verdict, default 100; 10 with SMOKE),
# BUDGET (seconds, default 470: the fp32 run's deadline, less RESERVE, default 20), PARTS,
# REPORT_SEQS (sequences of the report's step, default 2), ATTENTION (the PyTorch side's
# attention: auto, flex or dense; auto is FlexAttention on CUDA), COMPILE_MODEL (auto, on, off:
# torch.compile of the PyTorch model; auto compiles it with flex), PYTHON (default python3, with
# torch), LAYOUTS, RERUN, CURVES, MPIRUN (default mpirun). Data: scripts/prepare_parity_data.sh.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1, unless set otherwise), also in the ranks mpirun starts.
# Exit status: 0 pass (curve) or the band complete (fp32 alone); 1 a criterion failed or a side
# failed (with layouts: or a layout failed); 2 the band is still incomplete after PARTS=fp32 (run
# it again); 3 curve or layouts refused: no complete recorded band fits this run, or (layouts
# alone) no one-GPU curves of these inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
build=${BUILD:-build-gpu}
dl="$build/apps/driftless"
work=${PARITY_DIR:-$build/parity}
python=${PYTHON:-python3}
budget=${BUDGET:-470}
ref=tests/reference
[ -x "$dl" ] || { echo "parity_run: no $dl (build it first)" >&2; exit 1; }
mkdir -p "$work"
band=${BAND:-$work/parity_band.json}
# Compiled kernels (FlexAttention, the compiled model) kept for the next invocation.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$(realpath "$work")/inductor}
# No NVLink multicast: on a shared host it can put the GPUs out of service.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
# A side that fails ends the invocation: the runs still going in the background end with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

sets=()
device=cuda
parts=${PARTS:-curve}
if [ -n "${SMOKE:-}" ]; then
  device=cpu
  parts=${PARTS:-fp32 curve}
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
# rate DIR: the tokens/s of a run directory (the summary of train_parity.py, else the last
# metrics line that has one).
rate() {
  "$python" - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
s = os.path.join(d, "parity_run.json")
if os.path.exists(s):
    r = json.load(open(s))
    print(f"{r['tokens_per_second']:.0f} tokens/s", end="")
    if r.get("steady_tokens_per_second"):
        print(f" ({r['steady_tokens_per_second']:.0f} after the first steps)", end="")
    print(f", attention {r.get('attention')}, model {'compiled' if r.get('compiled_model') else 'eager'}")
else:
    rates = [json.loads(l).get("tokens_per_second") for l in open(os.path.join(d, "metrics.jsonl"))]
    rates = [x for x in rates if x]
    print(f"{rates[-1]:.0f} tokens/s" if rates else "no tokens/s recorded")
PY
}

# Every part but report works on the inputs the fingerprint covers: made again each time.
inputs=""
[[ $parts == *curve* || $parts == *fp32* || $parts == *layouts* ]] && inputs=1
if [ -n "$inputs" ] || [ ! -f "$work/init_checkpoint" ]; then
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
        --device "$device" --attention "${ATTENTION:-auto}" --compile-model "${COMPILE_MODEL:-auto}")
curves=${CURVES:-$work}
[[ $parts == *curve* ]] && curves=$work
if [ -n "$inputs" ]; then
  "$dl" batch --config "$work/run.yaml" --export "$work/batches.safetensors" --steps "$steps" \
    --validation-batches "$(get training eval_batches)"
  # What the fp32 curve depends on: the config's model, optimizer, batch and training length,
  # the step-0 weights and the batches.
  fp=$("$python" $ref/parity_band.py fingerprint --config "$work/run.yaml" --init "$ckpt" \
       --batches "$work/batches.safetensors" --out "$work/fingerprint.json")
  echo "== inputs' fingerprint $fp"
  # The curves without a band to judge them by would be spent: refused before they start.
  if [[ $parts == *curve* || $parts == *layouts* ]] && [[ $parts != *fp32* ]] &&
     ! "$python" $ref/parity_band.py check --fingerprint "$work/fingerprint.json" "$band" \
       $ref/parity_band >/dev/null; then
    exit 3
  fi
  # The layouts alone are judged against one-GPU curves made earlier from these very inputs.
  if [[ $parts == *layouts* && $parts != *curve* ]] &&
     [ "$(cat "$curves/curves_fingerprint.txt" 2>/dev/null)" != "$fp" ]; then
    echo "parity_run: no one-rank curves of these inputs in $curves (curves_fingerprint.txt):" \
         "run PARTS=\"curve layouts\", or set CURVES to an earlier RESULTS folder" >&2
    exit 3
  fi
fi

# The band: torch fp32 (TF32 off), the slowest side, stops at the deadline and keeps its model
# and optimizer for the next invocation; continued only from a state of the same inputs.
fp32_pid=""
if [[ $parts == *fp32* ]]; then
  if "$python" $ref/parity_band.py check --fingerprint "$work/fingerprint.json" "$band" \
       2>/dev/null; then
    echo "== the band in $band is complete for these inputs: nothing to record"
  else
    resume=()
    if [ -f "$work/torch_fp32.state" ] && [ -f "$work/torch_fp32.fingerprint" ] &&
       [ "$(cat "$work/torch_fp32.fingerprint")" = "$fp" ]; then
      resume=(--resume)
      echo "== torch fp32: continuing the run kept in $work/torch_fp32.state"
    else
      rm -rf "$work/torch_fp32" "$work/torch_fp32.state" "$work/torch_fp32.log"
      echo "$fp" >"$work/torch_fp32.fingerprint"
    fi
    "$python" $ref/train_parity.py "${common[@]}" --precision fp32 \
      --deadline $(( t0 + budget - ${RESERVE:-20} )) --state "$work/torch_fp32.state" \
      "${resume[@]}" --out "$work/torch_fp32" 2>&1 | grep -v Warning >>"$work/torch_fp32.log" &
    fp32_pid=$!
  fi
fi

if [[ $parts == *curve* ]]; then
  rm -rf "$work/driftless" "$work/torch_bf16" "$work/band_fp32" "$work/parity.md" \
    "$work/parity.json" "$work/curves_fingerprint.txt"
  "$dl" train -c "$work/run.yaml" --set "training.init_from=$ckpt" \
    --set "run.output_dir=$work/driftless" -q >"$work/driftless.log" 2>&1 &
  dl_pid=$!
  "$python" $ref/train_parity.py "${common[@]}" --data "$data" --precision bf16 \
    --out "$work/torch_bf16" 2>&1 | grep -v Warning | tee "$work/torch_bf16.log"
  [ -s "$work/torch_bf16/parity_run.json" ] || { echo "parity_run: torch bf16 failed" >&2; exit 1; }
  wait "$dl_pid" || { tail -5 "$work/driftless.log"; exit 1; }
  grep "summary" "$work/driftless.log" || true
  # Which inputs the curves are of, for a later PARTS=layouts (here or from RESULTS).
  echo "$fp" >"$work/curves_fingerprint.txt"
  echo "== driftless and torch bf16 done at $(elapsed) s"
fi

if [[ $parts == *layouts* ]]; then
  # The same training on several ranks, one layout after another (each takes every rank's
  # device: on GPUs one rank a GPU, by its local rank).
  mpirun=(${MPIRUN:-mpirun} --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE
          -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS)
  [ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
  export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
  rm -rf "$work/layouts"
  mkdir -p "$work/layouts"
  layout_dirs=()
  rerun_dir=""
  rerun_set=${RERUN-training.deterministic=false}
  if [ -n "$rerun_set" ]; then
    # The one-rank run again with other rounding: how far rounding alone moves the curve.
    if "$dl" train -c "$work/run.yaml" --set "training.init_from=$ckpt" --set "$rerun_set" \
         --set "run.output_dir=$work/layouts/rerun" -q >"$work/layouts/rerun.log" 2>&1; then
      rerun_dir=$work/layouts/rerun
      echo "== rerun (1 rank, $rerun_set) done at $(elapsed) s:" \
        "$(grep summary "$work/layouts/rerun.log" || true)"
    else
      echo "parity_run: the rerun failed (the band stays torch bf16's):" >&2
      tail -5 "$work/layouts/rerun.log" >&2
    fi
  fi
  for l in ${LAYOUTS:-dp2 sdp2 cp2_a2a}; do
    case $l in
      dp[0-9]*) n=${l#dp}; lset=(--set "distributed.data_parallel=$n") ;;
      sdp[0-9]*) n=${l#sdp}; lset=(--set "distributed.sequence_data_parallel=$n") ;;
      cp[0-9]*_a2a | cp[0-9]*_ring)
        n=${l%_*}; n=${n#cp}
        lset=(--set "distributed.context_parallel.size=$n"
              --set "distributed.context_parallel.kind=${l##*_}") ;;
      *) echo "parity_run: layout $l is none of dpN, sdpN, cpN_a2a, cpN_ring" >&2; exit 1 ;;
    esac
    [[ $n =~ ^[0-9]+$ ]] || { echo "parity_run: layout $l: no rank count" >&2; exit 1; }
    layout_dirs+=("$work/layouts/$l")
    if "${mpirun[@]}" -np "$n" "$dl" train -c "$work/run.yaml" --set "training.init_from=$ckpt" \
         --set "run.output_dir=$work/layouts/$l" "${lset[@]}" -q >"$work/layouts/$l.log" 2>&1; then
      echo "== $l ($n ranks) done at $(elapsed) s: $(grep summary "$work/layouts/$l.log" || true)"
    else
      echo "parity_run: $l failed:" >&2
      # driftless's first error (with its indented lines), not mpirun's notice after it.
      msg=$(awk '/error/ {p = 1} /^---/ && p {exit} p' "$work/layouts/$l.log" | head -8)
      if [ -n "$msg" ]; then echo "$msg" >&2; else tail -5 "$work/layouts/$l.log" >&2; fi
      rm -f "$work/layouts/$l/metrics.jsonl"  # judged as a layout that did not train
    fi
  done
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
      --attention "${ATTENTION:-auto}" --out "$r/torch_$p" 2>&1 | grep -v Warning
  done
  "$dl" report "$r/torch_bf16" "$r/driftless" --band "$r/torch_fp32" --band-factor 1.5 \
    -o "$r/drift" | tee "$r/report.txt" || true
  echo "== report done at $(elapsed) s"
fi

status=0
if [ -n "$fp32_pid" ]; then
  wait "$fp32_pid" || true
  tail -3 "$work/torch_fp32.log"
  if [ ! -s "$work/torch_fp32/metrics.jsonl" ]; then
    echo "parity_run: the fp32 run wrote no losses:" >&2
    tail -20 "$work/torch_fp32.log" >&2
    exit 1
  fi
  "$python" $ref/parity_band.py record --fingerprint "$work/fingerprint.json" \
    --run "$work/torch_fp32" --out "$band"
  echo "== torch fp32 stopped at $(elapsed) s: $(rate "$work/torch_fp32")"
  if ! "$python" $ref/parity_band.py check --fingerprint "$work/fingerprint.json" "$band" \
       >/dev/null 2>&1; then
    echo "== the band is incomplete: PARTS=fp32 scripts/parity_run.sh continues it"
    status=2
  fi
fi

if [[ $parts == *curve* ]]; then
  echo "== driftless: $(rate "$work/driftless")"
  echo "== torch bf16: $(rate "$work/torch_bf16")"
  if "$python" $ref/parity_band.py check --fingerprint "$work/fingerprint.json" \
       --extract "$work/band_fp32" "$band" $ref/parity_band; then
    status=0
    "$python" $ref/parity_compare.py "$work/driftless" "$work/torch_bf16" "$work/band_fp32" \
      --window "${window:-${WINDOW:-100}}" --json "$work/parity.json" >"$work/parity.md" \
      || status=$?
    cat "$work/parity.md"
    # torch bf16 first: the difference chart shows driftless - torch bf16 and the band,
    # torch fp32 - torch bf16, side by side.
    for f in parity.html parity.svg; do
      "$dl" plot "$work/torch_bf16" "$work/driftless" "$work/band_fp32" --difference \
        -o "$work/$f" --title "driftless vs PyTorch: the parity run" >/dev/null
    done
  else
    status=3
    echo "parity_run: no verdict: the curves are in $work/driftless and $work/torch_bf16" >&2
  fi
fi
if [[ $parts == *layouts* ]]; then
  lstatus=0
  if "$python" $ref/parity_band.py check --fingerprint "$work/fingerprint.json" \
       --extract "$work/band_fp32" "$band" $ref/parity_band >/dev/null; then
    rerun_args=()
    [ -n "$rerun_dir" ] && rerun_args=(--rerun "$rerun_dir")
    "$python" $ref/parity_layouts.py "${layout_dirs[@]}" --driftless "$curves/driftless" \
      --torch-bf16 "$curves/torch_bf16" --band "$work/band_fp32" "${rerun_args[@]}" \
      --batches "$work/batches.safetensors" --window "${window:-${WINDOW:-100}}" \
      --out "$work/layouts" || lstatus=$?
    trained=()
    for d in "${layout_dirs[@]}" ${rerun_dir:+"$rerun_dir"}; do [ -s "$d/metrics.jsonl" ] && trained+=("$d"); done
    for f in layouts.html layouts.svg; do
      "$dl" plot "$curves/torch_bf16" "$curves/driftless" "${trained[@]}" "$work/band_fp32" \
        --difference -o "$work/layouts/$f" --title "driftless layouts vs PyTorch: the parity run" \
        >/dev/null
    done
  else
    lstatus=3
    echo "parity_run: no verdict for the layouts: their curves are in $work/layouts" >&2
  fi
  # A failure anywhere is the invocation's; else the curve's status, else the layouts'.
  if [ "$lstatus" = 1 ] || [ "$status" = 0 ]; then status=$lstatus; fi
fi
if [ -n "${RESULTS:-}" ]; then
  mkdir -p "$RESULTS"
  (cd "$work" && find . \( -name '*.md' -o -name '*.json' -o -name '*.html' -o -name '*.svg' \
     -o -name '*.log' -o -name '*.txt' -o -name 'metrics.jsonl' -o -name '*.yaml' \) \
     -not -path './report/*/step_*' -not -path './inductor/*' -size -20M -print0 |
     xargs -0 -I{} cp --parents {} "$RESULTS/")
  if [ -f "$band" ]; then cp "$band" "$RESULTS/"; fi
fi
echo "== parity_run: done in $(elapsed) s (status $status)"
exit $status
