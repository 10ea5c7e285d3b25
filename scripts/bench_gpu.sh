#!/usr/bin/env bash
# The GPU benchmarks of BENCHMARKS.md in one invocation, on a machine
# with GPUs and PyTorch: GPT-2 124M / 350M training throughput against PyTorch eager and
# torch.compile; gpt2_124m scaling over sequence lengths for 1 GPU, sdp2, dp2 and context
# parallel cp2 ring / a2a (the
# 2-GPU parts are skipped with one GPU); `wide`: sdp2 / sdp4 / sdp8 at S = 65536 and
# 131072 (as many as the machine has GPUs for); and `attention`: the attention
# kernels' forward and forward+backward TFLOP/s on `driftless bench attention`'s shapes,
# then PyTorch's SDPA / FlexAttention on the same shapes in the same invocation, with the
# ratios. Needs a CUDA build: BUILD (default build-gpu).
#   bash scripts/bench_gpu.sh [throughput] [scaling] [context] [dp4] [wide] [attention] [million]
# (`context`: one document of 16384 .. 262144 tokens (CONTEXT_MAX=1048576 for more) on 1 GPU
# against PyTorch, and with 4 GPUs on sdp4, cp4 ring / a2a / hybrid 2x2 against PyTorch's
# context_parallel on 4 ranks, as one table; `dp4`: 16 x 1024 tokens per GPU, dp4 vs 1 GPU;
# `million`: one document of 524288 and 1048576 tokens on 4 GPUs, cp4 a2a and ring, with
# training.recompute full; then the longest document on 1 GPU: 131072 / 262144 / 524288)
#   (default: throughput scaling)
# Logs go to ${OUT:-$BUILD}/bench-*.log.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu}
out=${OUT:-$build}
dl="$build/apps/driftless"
parts=${*:-throughput scaling}
run_one() {  # the two summary lines, or the error's last lines
  "$@" >"$out/run.txt" 2>"$out/err.txt" && head -2 "$out/run.txt" ||
    { echo "FAILED: $*"; grep -v "^  step" "$out/err.txt" | tail -3; }
}
gpus=$(nvidia-smi -L | wc -l)
mpi_n() {  # mpirun with n ranks
  local cmd=(mpirun -np "$1" --oversubscribe --bind-to none)
  [ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root)
  echo "${cmd[@]}"
}
read -ra mpi <<<"$(mpi_n 2)"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export NCCL_NVLS_ENABLE=0  # no NVLink multicast on shared hosts

if [[ $parts == *throughput* ]]; then
  for spec in "124m 16" "350m 8"; do
    set -- $spec
    model=$1 batch=$2
    echo "== GPT-2 $model, $batch x 1024, bf16: driftless vs PyTorch" | tee -a "$out/bench-train.log"
    # One 1024-token document per sequence: the dense causal batch PyTorch runs.
    "$dl" bench train --config "configs/models/gpt2_$model.yaml" --set batch.sequences="$batch" \
      --set data.random_distribution=fixed --set data.random_mean_length=1024 \
      --steps 10 --warmup 3 >"$out/dl-$model.txt" 2>>"$out/bench-train.log"
    cat "$out/dl-$model.txt" >>"$out/bench-train.log"
    python3 tests/reference/bench_gpt2.py --model "$model" --batch "$batch" \
      --driftless "$out/dl-$model.txt" 2>&1 | grep -v Warning | tee -a "$out/bench-train.log"
  done
fi

if [[ $parts == *throughput* ]]; then
  # Llama-shaped models (RMSNorm, rotary, GQA, SwiGLU) at 2048 tokens a sequence against the
  # same architecture in PyTorch (tests/reference/bench_llama.py), same invocation.
  for spec in "smollm2_135m 16" "smollm2_360m 8"; do
    set -- $spec
    model=$1 batch=$2
    echo "== $model, $batch x 2048, bf16: driftless vs PyTorch" | tee -a "$out/bench-train.log"
    "$dl" bench train --config "configs/models/$model.yaml" --set batch.sequences="$batch" \
      --set batch.sequence_length=2048 --set data.random_distribution=fixed \
      --set data.random_mean_length=2048 --set data.random_max_length=2048 \
      --steps 10 --warmup 3 >"$out/dl-$model.txt" 2>>"$out/bench-train.log"
    cat "$out/dl-$model.txt" >>"$out/bench-train.log"
    python3 tests/reference/bench_llama.py --model "$model" --batch "$batch" --seq 2048 \
      --driftless "$out/dl-$model.txt" 2>&1 | grep -v Warning | tee -a "$out/bench-train.log"
  done
fi

if [[ $parts == *attention* ]]; then
  echo "== attention kernels (both backward modes) vs PyTorch" | tee -a "$out/bench-attention.log"
  "$dl" bench attention >"$out/dl-attention.txt" 2>>"$out/bench-attention.log"
  cat "$out/dl-attention.txt" >>"$out/bench-attention.log"
  python3 tests/reference/bench_attention.py --driftless "$out/dl-attention.txt" 2>&1 |
    grep -v Warning | tee -a "$out/bench-attention.log"
fi

if [[ $parts == *scaling* ]]; then
  for S in 4096 16384 65536; do
    common=(--config configs/models/gpt2_124m.yaml --set batch.sequence_length=$S
            --set batch.sequences=2 --steps 4 --warmup 2)
    echo "== scaling S=$S, 2 sequences of packed documents" | tee -a "$out/bench-scaling.log"
    run_one "$dl" bench train "${common[@]}" | tee -a "$out/bench-scaling.log"
    if [ "$gpus" -ge 2 ]; then
      for layout in sequence_data_parallel data_parallel; do
        run_one "${mpi[@]}" "$dl" bench train "${common[@]}" --set distributed.$layout=2 |
          tee -a "$out/bench-scaling.log"
      done
      # sdp2 exchanging whole K/V chunks (the default moves only the rows other ranks read)
      run_one "${mpi[@]}" "$dl" bench train "${common[@]}" --set distributed.sequence_data_parallel=2 \
        --set distributed.kv_exchange=full | tee -a "$out/bench-scaling.log"
      # context parallelism: ring and a2a (Ulysses) side by side with sdp2
      for kind in ring a2a; do
        run_one "${mpi[@]}" "$dl" bench train "${common[@]}" --set distributed.context_parallel.size=2 \
          --set distributed.context_parallel.kind=$kind | tee -a "$out/bench-scaling.log"
      done
    fi
    rm -f "$out/run.txt" "$out/err.txt"
  done
fi

if [[ $parts == *context* ]]; then
  # One sequence holding one document of S tokens (positions up to S), where attention
  # dominates and the causal split decides the balance. Always: 1 GPU, followed by PyTorch's
  # 1-GPU run (tests/reference/bench_one_document.py; TORCH_COMPILE=0 leaves compile out).
  # With 4 GPUs: sdp4, cp4 ring, cp4 a2a, cp4 hybrid (2 x 2) and PyTorch's context_parallel on
  # 4 ranks (tests/reference/bench_context_parallel.py), then one table of tokens/s, peak
  # memory per GPU and each row's ratio to torch's. S up to 262144 (CONTEXT_MAX raises it to
  # 1048576; there activation recomputation is used where `training.recompute` exists).
  compile_flag=--compile
  [ "${TORCH_COMPILE:-1}" = 0 ] && compile_flag=
  recompute=()
  "$dl" config --reference 2>/dev/null | grep -q "training.recompute" &&
    recompute=(--set training.recompute=full)
  read -ra mpi4 <<<"$(mpi_n 4)"
  table="$out/bench-context.jsonl"
  : >"$table"
  # CONTEXT_SIZES, CONTEXT_LAYOUTS (of: sdp4 ring a2a hybrid) and CONTEXT_ONE_GPU=0 narrow
  # a run to the rows wanted; CONTEXT_SET, space-separated key=value, is added to driftless's
  # runs as --set (e.g. CONTEXT_SET=training.deterministic=false: the atomic-dQ backward).
  for S in ${CONTEXT_SIZES:-16384 65536 131072 262144 524288 1048576}; do
    [ "$S" -le "${CONTEXT_MAX:-262144}" ] || continue
    doc=(--config configs/models/gpt2_124m.yaml --set batch.sequence_length=$S --set batch.sequences=1
         --set model.n_positions=$S --set data.random_distribution=fixed
         --set data.random_mean_length=$S --set data.random_max_length=$S --steps 3 --warmup 1)
    [ "$S" -gt 262144 ] && doc+=("${recompute[@]}")
    for kv in ${CONTEXT_SET:-}; do doc+=(--set "$kv"); done
    echo "== one document of S=$S" | tee -a "$out/bench-context.log"
    row() {  # name, then the command; appends its JSON line to the table
      local name=$1
      shift
      run_one "$@" | tee -a "$out/bench-context.log"
      tail -1 "$out/run.txt" 2>/dev/null | grep "^{" |
        python3 -c "import json,sys; d=json.load(sys.stdin); d.update(layout='$name', S=$S); print(json.dumps(d))" \
          >>"$table" 2>/dev/null || echo "{\"layout\": \"$name\", \"S\": $S, \"error\": 1}" >>"$table"
    }
    if [ "$S" -le 131072 ] && [ "${CONTEXT_ONE_GPU:-1}" = 1 ]; then
      row "1 GPU" "$dl" bench train "${doc[@]}"
      cp "$out/run.txt" "$out/dl-document-$S.txt"
      python3 tests/reference/bench_one_document.py --seq "$S" --steps 3 --warmup 1 $compile_flag \
        --driftless "$out/dl-document-$S.txt" 2>&1 | grep -v Warning | tee -a "$out/bench-context.log"
    fi
    if [ "$gpus" -ge 4 ]; then
      layouts=" ${CONTEXT_LAYOUTS:-sdp4 ring a2a hybrid} "
      [[ $layouts == *" sdp4 "* ]] &&
        row sdp4 "${mpi4[@]}" "$dl" bench train "${doc[@]}" --set distributed.sequence_data_parallel=4
      for kind in ring a2a hybrid; do
        [[ $layouts == *" $kind "* ]] || continue
        row "cp4 $kind" "${mpi4[@]}" "$dl" bench train "${doc[@]}" \
          --set distributed.context_parallel.size=4 --set distributed.context_parallel.kind=$kind \
          --set distributed.context_parallel.group_size=2
      done
      torchrun --standalone --nproc_per_node 4 tests/reference/bench_context_parallel.py \
        --seq "$S" --steps 3 --warmup 1 >"$out/torch-cp-$S.txt" 2>"$out/err.txt"
      grep "^{" "$out/torch-cp-$S.txt" | tail -1 | tee -a "$out/bench-context.log" |
        python3 -c "import json,sys; d=json.load(sys.stdin); d.update(layout='torch cp4', S=$S); print(json.dumps(d))" \
          >>"$table" 2>/dev/null || { echo "FAILED: torch context_parallel at S=$S"; tail -3 "$out/err.txt"; }
    fi
  done
  python3 - "$table" <<'PY' | tee -a "$out/bench-context.log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'S':>8} {'layout':<12}{'tokens/s':>12}{'peak GiB/GPU':>14}{'x torch cp4':>13}")
for S in sorted({r["S"] for r in rows}):
    at = [r for r in rows if r["S"] == S]
    torch = next((r for r in at if r["layout"] == "torch cp4" and "tokens_per_s" in r), None)
    best = max((r for r in at if "tokens_per_s" in r and r["layout"].startswith(("sdp4", "cp4"))),
               key=lambda r: r["tokens_per_s"], default=None)
    for r in at:
        if "tokens_per_s" not in r:
            print(f"{S:>8} {r['layout']:<12}{'failed':>12}")
            continue
        peak = r.get("peak_bytes_per_gpu") or max(r.get("peak_bytes_per_rank", [0]))
        ratio = f"{r['tokens_per_s'] / torch['tokens_per_s']:.3f}" if torch else "-"
        print(f"{S:>8} {r['layout']:<12}{r['tokens_per_s']:>12.0f}{peak / 2**30:>14.2f}{ratio:>13}")
    if best and torch:
        print(f"{S:>8} best 4-GPU layout {best['layout']} / torch cp4 = "
              f"{best['tokens_per_s'] / torch['tokens_per_s']:.3f}")
PY
  rm -f "$out/run.txt" "$out/err.txt"
fi

if [[ $parts == *dp4* ]]; then
  # Weak scaling: GPT-2 124M with 16 x 1024 tokens per GPU, 1 GPU against dp4 (64 x 1024).
  if [ "$gpus" -ge 4 ]; then
    read -ra mpi4 <<<"$(mpi_n 4)"
    weak=(--config configs/models/gpt2_124m.yaml --set data.random_distribution=fixed
          --set data.random_mean_length=1024 --steps 6 --warmup 2)
    echo "== dp4 weak scaling, 16 x 1024 tokens per GPU" | tee -a "$out/bench-dp4.log"
    run_one "$dl" bench train "${weak[@]}" --set batch.sequences=16 | tee -a "$out/bench-dp4.log"
    cp "$out/run.txt" "$out/dl-dp1.txt"
    run_one "${mpi4[@]}" "$dl" bench train "${weak[@]}" --set batch.sequences=64 \
      --set distributed.data_parallel=4 | tee -a "$out/bench-dp4.log"
    python3 - "$out/dl-dp1.txt" "$out/run.txt" <<'PY' | tee -a "$out/bench-dp4.log"
import json, sys
one, four = (json.loads([l for l in open(f) if l.startswith("{")][-1]) for f in sys.argv[1:3])
r = four["tokens_per_s"] / one["tokens_per_s"]
print(f"dp4 {four['tokens_per_s']:.0f} tokens/s, 1 GPU {one['tokens_per_s']:.0f}: "
      f"{r:.2f}x (weak-scaling efficiency {r / 4:.1%})")
PY
  else
    echo "dp4: needs 4 GPUs, this machine has $gpus" | tee -a "$out/bench-dp4.log"
  fi
  rm -f "$out/run.txt" "$out/err.txt"
fi

if [[ $parts == *wide* ]]; then
  for S in 65536 131072; do
    echo "== sdp scaling S=$S, 2 sequences of packed documents" | tee -a "$out/bench-wide.log"
    for P in 2 4 8; do
      [ "$gpus" -ge "$P" ] || continue
      # shellcheck disable=SC2046
      run_one $(mpi_n "$P") "$dl" bench train --config configs/models/gpt2_124m.yaml \
        --set batch.sequence_length=$S --set batch.sequences=2 --steps 4 --warmup 2 \
        --set distributed.sequence_data_parallel=$P | tee -a "$out/bench-wide.log"
    done
  done
  rm -f "$out/run.txt" "$out/err.txt"
fi

if [[ $parts == *million* ]]; then
  # One document of S tokens with activation recomputation (training.recompute full: each
  # block keeps only its input). Prints tokens/s and the peak memory of every GPU (bench
  # train's second line). Context parallel on 4 GPUs (each rank holds S / 4 tokens), then
  # the longest document one GPU trains. A run that does not fit prints FAILED and the
  # out-of-memory message; the parts after it still run.
  one_doc() {  # S, micro-sequences
    echo --config configs/models/gpt2_124m.yaml --set batch.sequence_length="$1" \
      --set batch.sequences=1 --set model.n_positions="$1" --set data.random_distribution=fixed \
      --set data.random_mean_length="$1" --set data.random_max_length="$1" \
      --set training.recompute=full --set schedule.micro_sequences="$2" \
      --steps "${MILLION_STEPS:-3}" --warmup 1
  }
  if [ "$gpus" -ge 4 ]; then
    read -ra mpi4 <<<"$(mpi_n 4)"
    # MILLION_SIZES, MILLION_KINDS, MILLION_MS and MILLION_ONE_GPU narrow a run.
    for S in ${MILLION_SIZES:-524288 1048576}; do
      for kind in ${MILLION_KINDS:-a2a ring}; do
        for ms in ${MILLION_MS:-1 4}; do
          echo "== one document of S=$S, cp4 $kind, recompute full, micro_sequences $ms" |
            tee -a "$out/bench-million.log"
          # shellcheck disable=SC2046
          run_one "${mpi4[@]}" "$dl" bench train $(one_doc "$S" "$ms") \
            --set distributed.context_parallel.size=4 \
            --set distributed.context_parallel.kind=$kind | tee -a "$out/bench-million.log"
        done
      done
    done
  fi
  for S in ${MILLION_ONE_GPU:-131072 262144 524288}; do
    for ms in ${MILLION_MS:-1 4}; do
      echo "== one document of S=$S, 1 GPU, recompute full, micro_sequences $ms" |
        tee -a "$out/bench-million.log"
      # shellcheck disable=SC2046
      run_one "$dl" bench train $(one_doc "$S" "$ms") | tee -a "$out/bench-million.log"
    done
  done
  rm -f "$out/run.txt" "$out/err.txt"
fi
