#!/usr/bin/env bash
# signal_check.sh MODE DRIFTLESS DIR [MPIRUN...]: a stopped run ends with one checkpoint
# at a step every rank agrees on, and a message that names it (docs/guarantees.md).
#   single_sigterm    SIGTERM to a one-process run; a second run into its directory while it
#                     runs is refused; then --resume continues from the checkpoint
#   mpi_sigint_rank   SIGINT to rank 1 only of an mpirun -np 2 data-parallel run
#   mpi_sigterm_mpirun SIGTERM to mpirun itself
set -u
mode=$1 driftless=$2 dir=$3
shift 3
mpirun=("$@")
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "FAIL: $*"; cat "$dir"/out.txt 2>/dev/null; exit 1; }

cat > "$dir/config.yaml" <<YAML
model: {vocab_size: 257, n_positions: 64, n_layer: 2, n_head: 4, n_embd: 32}
data: {format: random, tokenizer: bytes, random_documents: 100, random_mean_length: 20, random_max_length: 60}
batch: {sequence_length: 32, sequences: 4}
optimizer: {lr: 1.0e-3, warmup_steps: 1, decay: constant}
training: {steps: 1000000, eval_interval: 0, seed: 11}
run: {output_dir: $dir/run}
YAML

# Waits until metrics.jsonl holds at least $1 lines (at most 60 s).
wait_for_steps() {
  for _ in $(seq 600); do
    [ -f "$dir/run/metrics.jsonl" ] && [ "$(wc -l < "$dir/run/metrics.jsonl")" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "the run did not reach $1 steps"
}

# The job must end within $2 seconds of the signal; sets status.
wait_bounded() {
  local pid=$1 limit=$2
  for _ in $(seq $((limit * 10))); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; status=$?; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  fail "the job did not end within $limit s of the signal"
}

# The message names a step whose checkpoint exists and is the last step in metrics.jsonl.
check_checkpoint() {
  local signal=$1
  step=$(sed -n "s/.*interrupted by $signal: checkpoint written at step \([0-9]*\) .*/\1/p" "$dir/out.txt" | head -1)
  [ -n "$step" ] || fail "no 'interrupted by $signal: checkpoint written at step N' message"
  [ "$(grep -c 'checkpoint written' "$dir/out.txt")" -eq 1 ] || fail "more than one rank claims a checkpoint"
  local file
  file=$(printf '%s/run/checkpoints/step_%06d.safetensors' "$dir" "$step")
  [ -f "$file" ] || fail "the message names step $step but $file does not exist"
  [ "$(ls "$dir/run/checkpoints" | grep -c safetensors)" -eq 1 ] || fail "expected exactly one checkpoint"
  local last
  last=$(tail -1 "$dir/run/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
  [ "$last" = "$step" ] || fail "checkpoint at step $step but metrics.jsonl ends at step $last"
  echo "checkpoint at step $step, as the message says"
}

case "$mode" in
single_sigterm)
  "$driftless" train -c "$dir/config.yaml" -q > "$dir/out.txt" 2>&1 &
  pid=$!
  wait_for_steps 3
  "$driftless" train -c "$dir/config.yaml" -q --resume > "$dir/second.txt" 2>&1
  second=$?
  cat "$dir/second.txt"
  [ "$second" -eq 1 ] || fail "a second run into the directory exited $second, expected 1"
  grep -q "is in use by another run (pid $pid on " "$dir/second.txt" || fail "second run: no 'in use' message"
  kill -TERM "$pid"
  wait_bounded "$pid" 30
  cat "$dir/out.txt"
  [ "$status" -eq 143 ] || fail "exit status $status, expected 143 (128 + SIGTERM)"
  check_checkpoint SIGTERM
  # A fresh run into the used directory is refused; --resume continues after the step.
  "$driftless" train -c "$dir/config.yaml" -q > "$dir/fresh.txt" 2>&1
  [ $? -eq 1 ] || fail "a fresh run into a used directory was not refused"
  grep -q "already holds a run" "$dir/fresh.txt" || fail "no 'already holds a run' message"
  "$driftless" train -c "$dir/config.yaml" -q --resume --set training.steps=$((step + 3)) \
    > "$dir/resume.txt" 2>&1 || { cat "$dir/resume.txt"; fail "--resume failed"; }
  grep -q "resumed from .*step_$(printf %06d "$step").safetensors (step $step)" "$dir/resume.txt" ||
    { cat "$dir/resume.txt"; fail "--resume did not continue from step $step"; }
  ;;
mpi_sigint_rank)
  "${mpirun[@]}" -np 2 "$driftless" train -c "$dir/config.yaml" -q \
    --set distributed.data_parallel=2 > "$dir/out.txt" 2>&1 &
  pid=$!
  wait_for_steps 3
  rank1=""
  for p in $(pgrep -P "$pid"); do
    tr '\0' '\n' < "/proc/$p/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=1' && rank1=$p
  done
  [ -n "$rank1" ] || fail "rank 1 not found among mpirun's children"
  kill -INT "$rank1"
  wait_bounded "$pid" 30
  cat "$dir/out.txt"
  [ "$status" -ne 0 ] || fail "mpirun exited 0 after SIGINT"
  check_checkpoint SIGINT
  ;;
mpi_sigterm_mpirun)
  # Open MPI's mpirun sends the ranks SIGCONT, SIGTERM odls_base_sigkill_timeout (T) seconds
  # later and SIGKILL after another T: they have T seconds to stop and checkpoint.
  "${mpirun[@]}" --mca odls_base_sigkill_timeout 5 -np 2 "$driftless" train \
    -c "$dir/config.yaml" -q --set distributed.data_parallel=2 > "$dir/out.txt" 2>&1 &
  pid=$!
  wait_for_steps 3
  kill -TERM "$pid"
  wait_bounded "$pid" 20
  cat "$dir/out.txt"
  check_checkpoint SIGTERM
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac
echo "PASS $mode"
