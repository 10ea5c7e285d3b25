#!/usr/bin/env bash
# The three jobs of driftless, behind `make demo`, in about three minutes on 2 CPU cores:
#   1. train a small byte-level GPT-2 on the fortunes corpus (configs/runs/demo.yaml), plot
#      its loss and sample from it;
#   2. run 24 batch layouts (micro-sequences, SDP, context parallelism, ZeRO-1, under
#      mpirun -np 2) against the single-process baseline (configs/regress/tiny.yaml);
#   3. run one layout with a planted fault and show where the drift report says it is born
#      (configs/regress/demo_fault.yaml).
# Everything goes to runs/demo, rebuilt from scratch on every run; nothing is downloaded.
# Usage: scripts/demo.sh [BUILD_DIR]
# Environment: DEMO_CORPUS (default /usr/share/games/fortunes), DEMO_STEPS (training steps,
# for a short smoke run), DEMO_LAYOUTS (space-separated layouts of tiny.yaml; default all),
# DEMO_DIR (output folder instead of runs/demo, as the demo_smoke test uses).
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
bin="$build/apps/driftless"
cd "$root"
if [[ ! -x "$bin" ]]; then
  echo "demo: $bin not found; build first (make build, or make demo)" >&2
  exit 1
fi
corpus=${DEMO_CORPUS:-/usr/share/games/fortunes}
if [[ ! -e "$corpus" ]]; then
  echo "demo: no corpus at $corpus (Debian package 'fortunes'; scripts/install_deps.sh installs it)" >&2
  exit 1
fi

bold=$'\033[1m' off=$'\033[0m'
[[ -t 1 ]] || bold='' off=''
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
show() { printf '$ %s\n' "$*"; }  # the command as a user would type it (driftless on PATH)
export PATH="$build/apps:$PATH"
# Containers often forbid Open MPI's cross-memory-attach copy; plain copies always work.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
demo_start=$(date +%s)
elapsed() { echo "$(($(date +%s) - $1)) s"; }

out=${DEMO_DIR:-runs/demo}
rm -rf "$out"
mkdir -p "$out"
overrides=()
if [[ "$out" != runs/demo ]]; then  # configs/runs/demo.yaml reads and writes runs/demo
  overrides+=(--set "data.path=$out/data/train" --set "data.validation_path=$out/data/validation"
              --set "run.output_dir=$out")
fi

# ---------------------------------------------------------------------------------------
say "1/3 train: a byte-level GPT-2 (2 layers, 64 wide) on the fortunes corpus"
start=$(date +%s)
show "driftless prepare $corpus -o $out/data --format fortune --tokenizer byte"
driftless prepare "$corpus" -o "$out/data" --format fortune --tokenizer byte |
  grep -E '^(tokenizer|train:|validation:)'

if [[ -n "${DEMO_STEPS:-}" ]]; then
  overrides+=(--set "training.steps=$DEMO_STEPS" --set "training.eval_interval=$DEMO_STEPS"
              --set "training.log_interval=$(((DEMO_STEPS + 3) / 4))"
              --set "optimizer.warmup_steps=$((DEMO_STEPS / 10))")
fi
# Two ranks split each batch (data parallel) when there are two cores: the same gradients
# as one process (that is what driftless checks), in about half the time.
launch=()
if [[ $(nproc) -ge 2 ]] && command -v mpirun >/dev/null; then
  launch=(mpirun -np 2 --oversubscribe)  # a 2-vCPU machine may be 1 core with 2 threads
  [[ $(id -u) -eq 0 ]] && launch+=(--allow-run-as-root)
  overrides+=(--set distributed.data_parallel=2)
  echo "2 cores: training as 2 data-parallel ranks (each computes half of every batch)"
fi
show "${launch[*]:+${launch[*]} }driftless train -c configs/runs/demo.yaml ${overrides[*]:-}"
${launch[@]+"${launch[@]}"} "$bin" train -c configs/runs/demo.yaml ${overrides[@]+"${overrides[@]}"}
train_time=$(elapsed "$start")

show "driftless plot $out"
driftless plot "$out"

say "samples: top-k 40, temperature 0.7 (an empty prompt starts a new fortune)"
show "driftless sample -c $out -p \"The secret of life is\" -p \"\" -p \"\" -p \"Q:\" -n 120 --temperature 0.7"
driftless sample -c "$out" -n 120 --top-k 40 --temperature 0.7 --seed 1 \
  -p "The secret of life is" -p "" -p "" -p "Q:"
echo "(job 1 took $train_time)"

# ---------------------------------------------------------------------------------------
say "2/3 regress: 24 layouts of one batch, each against the single-process run"
start=$(date +%s)
only=()
for l in ${DEMO_LAYOUTS:-}; do only+=(--only "$l"); done
cat <<'EOF'
Every layout computes the same global batch another way: ms4 = 4 micro-sequences, df4 / bf4 =
4 depth- / breadth-first micro-batches, sdp2 = 2 ranks share each sequence, dp2 = 2 ranks split
the batch, cp2_ring / cp2_a2a = context parallelism, zero1 = sharded optimizer, *_pad = padded
documents. Every forward output, input gradient, parameter gradient and updated parameter is
compared with the single-process run ("simple") tensor by tensor; rms_rel must stay <= 1e-5.
EOF
show "driftless regress -c configs/regress/tiny.yaml -o $out/regress${only[*]:+ ${only[*]}}"
driftless regress -c configs/regress/tiny.yaml -o "$out/regress" ${only[@]+"${only[@]}"}
echo "(job 2 took $(elapsed "$start"))"

# ---------------------------------------------------------------------------------------
say "3/3 a planted fault: layer 1 forgets to sum its K/V gradients over the 2 ranks"
start=$(date +%s)
cat <<'EOF'
sdp2_ms2_fault is sdp2_ms2 with DRIFTLESS_TEST_FAULT=layer=1,skip_kv_reduce_scatter, a
test-only switch that breaks one collective. The regression fails (exit status 1, expected
here) and the report names the first tensor, in execution order, that drifts.
EOF
show "driftless regress -c configs/regress/demo_fault.yaml -o $out/fault"
if driftless regress -c configs/regress/demo_fault.yaml -o "$out/fault"; then
  echo "demo: the planted fault was not caught; this is a bug, please report it" >&2
  exit 1
fi
python3 - "$out/fault/report.json" <<'EOF'
import json, re, sys
kinds = {"forward": "the output of", "backward": "the gradient flowing into",
         "param_grad": "a parameter gradient of", "param": "a parameter (after the update) of"}
parts = {"attn": "attention", "mlp": "MLP", "ln_1": "first layer norm", "ln_2": "second layer norm"}
for layout in json.load(open(sys.argv[1]))["layouts"]:
    f = layout.get("first_failure")
    if layout["pass"] or not f:
        continue
    tensors = layout["tensors"]
    t = next(t for t in tensors if t["name"] == f["name"] and t["step"] == f["step"])
    m = re.match(r"(?:param(?:_grad)?/)?h\.(\d+)\.(\w+)", f["name"])
    where = f"layer {m.group(1)}'s {parts.get(m.group(2), m.group(2))}" if m else "a layer outside the blocks"
    at = (t["step"], t["order"])
    before = [u for u in tensors if (u["step"], u["order"]) < at]
    after = [u for u in tensors if (u["step"], u["order"]) > at]
    print(f"\n{layout['layout']}: the drift is born at {f['name']} (step {f['step']}):")
    print(f"  {kinds.get(t['kind'], 'a tensor of')} {where}, rms_rel {float(t['rms_rel']):.2e} "
          f"against a tolerance of {t['tolerance']:.0e}.")
    print(f"  The {len(before)} tensors logged before it match the baseline; "
          f"{sum(not u['pass'] for u in after)} of the {len(after)} after it fail, inheriting its drift.")
EOF
echo "(job 3 took $(elapsed "$start"))"

# ---------------------------------------------------------------------------------------
say "done in $(elapsed "$demo_start"). Open in a browser:"
printf '  %-34s %s\n' "$out/loss.html" "job 1: loss and validation loss" \
  "$out/regress/report.html" "job 2: every layout, tensor by tensor" \
  "$out/fault/report.html" "job 3: where the planted fault shows up"
cat <<EOF

Try next (README.md, and docs/ for the details):
  your own data:  driftless prepare my_texts/ -o runs/mine/data --tokenizer byte
                  driftless train -c configs/runs/demo.yaml --set data.path=runs/mine/data/train \\
                    --set data.validation_path=runs/mine/data/validation --set run.output_dir=runs/mine
  a GPU:          make gpu-test   (builds build-gpu/ with CUDA and runs the GPU tests), then
                  build-gpu/apps/driftless train -c configs/runs/demo.yaml --set precision.device=cuda
  several GPUs:   build-gpu/apps/driftless regress -c configs/regress/gpu2.yaml   (2 GPUs; gpu4.yaml, gpu8.yaml)
  GPT-2 124M:     build-gpu/apps/driftless bench train -c configs/models/gpt2_124m.yaml
  every test:     make test
EOF
