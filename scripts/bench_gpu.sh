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
#   bash scripts/bench_gpu.sh [throughput] [scaling] [context] [wide] [attention] [million]
# (`million`: one document of 524288 and 1048576 tokens on 4 GPUs, cp4 a2a and ring, with
# training.recompute full; then the longest document on 1 GPU: 131072 / 262144 / 524288)
# (`context`: one document of 16384 / 65536 / 131072 tokens on 1 GPU against PyTorch in the
# same invocation, and of 16384 / 65536 on sdp2, cp2 ring and cp2 a2a)
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
  # One sequence holding one document of S tokens (positions up to S): the setting of
  # PyTorch's context_parallel figures (README "Facts"), where attention dominates and the
  # causal split decides the balance: 1 GPU, sdp2 (contiguous halves), cp2 ring (chunks r
  # and 2P-1-r) and cp2 a2a (not at 131072). The 1-GPU run is followed by PyTorch's
  # (tests/reference/bench_one_document.py: SDPA, bf16 autocast, fused AdamW, eager and
  # torch.compile; TORCH_COMPILE=0 leaves compile out) and the ratios.
  compile_flag=--compile
  [ "${TORCH_COMPILE:-1}" = 0 ] && compile_flag=
  for S in 16384 65536 131072; do
    doc=(--config configs/models/gpt2_124m.yaml --set batch.sequence_length=$S --set batch.sequences=1
         --set model.n_positions=$S --set data.random_distribution=fixed
         --set data.random_mean_length=$S --set data.random_max_length=$S --steps 4 --warmup 2)
    echo "== one document of S=$S" | tee -a "$out/bench-context.log"
    run_one "$dl" bench train "${doc[@]}" | tee -a "$out/bench-context.log"
    cp "$out/run.txt" "$out/dl-document-$S.txt"
    python3 tests/reference/bench_one_document.py --seq "$S" --steps 4 --warmup 2 $compile_flag \
      --driftless "$out/dl-document-$S.txt" 2>&1 | grep -v Warning | tee -a "$out/bench-context.log"
    if [ "$gpus" -ge 2 ] && [ "$S" -le 65536 ]; then
      run_one "${mpi[@]}" "$dl" bench train "${doc[@]}" --set distributed.sequence_data_parallel=2 |
        tee -a "$out/bench-context.log"
      for kind in ring a2a; do
        run_one "${mpi[@]}" "$dl" bench train "${doc[@]}" --set distributed.context_parallel.size=2 \
          --set distributed.context_parallel.kind=$kind | tee -a "$out/bench-context.log"
      done
    fi
  done
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
      --set training.recompute=full --set schedule.micro_sequences="$2" --steps 3 --warmup 1
  }
  if [ "$gpus" -ge 4 ]; then
    read -ra mpi4 <<<"$(mpi_n 4)"
    for S in 524288 1048576; do
      for kind in a2a ring; do
        for ms in 1 4; do
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
  for S in 131072 262144 524288; do
    for ms in 1 4; do
      echo "== one document of S=$S, 1 GPU, recompute full, micro_sequences $ms" |
        tee -a "$out/bench-million.log"
      # shellcheck disable=SC2046
      run_one "$dl" bench train $(one_doc "$S" "$ms") | tee -a "$out/bench-million.log"
    done
  done
  rm -f "$out/run.txt" "$out/err.txt"
fi
