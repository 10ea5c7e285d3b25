#!/usr/bin/env bash
# bash hostile_check.sh CASE DRIFTLESS DIR
# Hostile and careless files met through the command line (tests/e2e/hostile.cmake): each
# command must exit 1 within its bound (60 s, 8 GB of address space) with a message naming
# the file or key, and leave every file driftless did not create as it was.
set -u
case_name=$1
driftless=$2
dir=$3
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir" || exit 2

fail() {
  echo "FAIL ($case_name): $*" >&2
  exit 1
}

# expect_refusal <pattern> <command...>: exit status 1 and <pattern> (grep -E) on stderr.
expect_refusal() {
  local pattern=$1
  shift
  (ulimit -v 8000000 && timeout 60 "$@") >out.txt 2>err.txt
  local rc=$?
  echo "\$ $*  -> exit $rc"
  cat err.txt
  [ "$rc" -ne 124 ] || fail "timed out (hung): $*"
  [ "$rc" -eq 1 ] || fail "exit status $rc, expected 1: $*"
  grep -Eq -- "$pattern" err.txt || fail "stderr does not match '$pattern'"
}

# A small config of the tiny random-data run.
cat >config.yaml <<YAML
model: {vocab_size: 257, n_positions: 64, n_layer: 1, n_head: 2, n_embd: 16}
data: {format: random, tokenizer: bytes, random_documents: 20, random_mean_length: 20, random_max_length: 60}
batch: {sequence_length: 32, sequences: 2}
optimizer: {lr: 1.0e-2, warmup_steps: 1}
training: {steps: 2, eval_interval: 0, checkpoint_interval: 2}
run: {output_dir: $dir/run}
YAML

# A safetensors file whose JSON header is `header` (no data).
write_safetensors() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
header = sys.argv[2].encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header)
PY
}

case "$case_name" in
  resume_fifo)
    mkdir -p run/checkpoints
    mkfifo run/checkpoints/step_000009.safetensors
    expect_refusal "--resume: no checkpoint in $dir/run" \
      "$driftless" train -c config.yaml -q --resume
    # The lock went with the refused run: a fresh one trains.
    rm run/checkpoints/step_000009.safetensors
    "$driftless" train -c config.yaml -q >/dev/null || fail "a run after the refusal failed"
    # A name no run writes blocks neither --resume nor --overwrite, nor the summary.
    mkdir run/checkpoints/step_000099.safetensors
    touch "run/checkpoints/step_$(printf '9%.0s' {1..30}).safetensors"
    timeout 60 "$driftless" train -c config.yaml --resume --set training.steps=3 --allow-change training.steps >out.txt 2>&1 \
      || { cat out.txt; fail "--resume past impossible names failed"; }
    grep -q "checkpoint $dir/run/checkpoints/step_000002.safetensors" out.txt \
      || { cat out.txt; fail "the summary does not name the newest real checkpoint"; }
    timeout 60 "$driftless" train -c config.yaml -q --overwrite >/dev/null \
      || fail "--overwrite past impossible names failed"
    ;;
  lock_symlink)
    mkdir -p run
    echo "keep me" >precious.txt
    ln -s "$dir/precious.txt" run/.lock
    expect_refusal "run/.lock\): it is a symbolic link" "$driftless" train -c config.yaml -q
    [ "$(cat precious.txt)" = "keep me" ] || fail "the lock's target was changed"
    ;;
  overwrite_foreign)
    mkdir -p project/checkpoints
    echo weights >project/checkpoints/my_model.bin
    echo '{"step": 0, "loss": 1}' >project/metrics.jsonl
    ln -s "$dir/project" run
    timeout 60 "$driftless" train -c config.yaml -q --overwrite >out.txt 2>&1 \
      || { cat out.txt; fail "--overwrite failed"; }
    [ "$(cat project/checkpoints/my_model.bin)" = weights ] || fail "my_model.bin was deleted"
    expect_refusal "run.output_dir / resolves to /, a system directory" \
      "$driftless" train -c config.yaml -q --overwrite --set run.output_dir=/
    ;;
  safetensors_nesting)
    write_safetensors deep.safetensors "{\"x\":$(printf '[%.0s' {1..30000})$(printf ']%.0s' {1..30000})}"
    expect_refusal "deep.safetensors: JSON header nested deeper than 64 levels" \
      "$driftless" attention --in deep.safetensors --out out.safetensors
    mkdir hf
    echo '{"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 8, "n_positions": 8}' >hf/config.json
    cp deep.safetensors hf/model.safetensors
    expect_refusal "model.safetensors: JSON header nested deeper" \
      "$driftless" import --hf hf --out imported.safetensors
    write_safetensors wrap.safetensors \
      '{"x":{"dtype":"F64","shape":[8,2,144115188075855873],"data_offsets":[0,0]}}'
    expect_refusal "wrap.safetensors: tensor \"x\" at byte [0-9]+: F64 shape .* needs more than 2\^63 bytes" \
      "$driftless" attention --in wrap.safetensors --out out.safetensors
    ;;
  hf_fifo)
    mkdir hf
    echo '{"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 8, "n_positions": 8}' >hf/config.json
    echo '{"weight_map": {"transformer.wte.weight": "model-00001-of-00001.safetensors"}}' \
      >hf/model.safetensors.index.json
    mkfifo hf/model-00001-of-00001.safetensors
    expect_refusal "model-00001-of-00001.safetensors \(a FIFO\)" \
      "$driftless" import --hf hf --out imported.safetensors
    mkfifo checkpoint.safetensors
    expect_refusal "checkpoint.safetensors \(a FIFO\)" \
      "$driftless" export --checkpoint checkpoint.safetensors --hf out
    ;;
  config_keys)
    printf 'include: config.yaml\noptimizer: {lr: 0.1}\noptimizer: {lr: 5}\n' >dup.yaml
    expect_refusal "optimizer is given twice \(lines 2 and 3\)" "$driftless" config -c dup.yaml
    expect_refusal "override '.=1'" "$driftless" config -c config.yaml --set .=1
    mkdir folder
    printf 'include: folder\n' >inc.yaml
    expect_refusal "folder \(a directory\)" "$driftless" config -c inc.yaml
    expect_refusal "model.score_mod_params.bias.shape\[1\]: expected at most 16777216" \
      "$driftless" config -c config.yaml --set "model.score_mod=score + bias[h, 0]" \
      --set "model.score_mod_params={bias: {shape: [heads, 100000000], init: 0}}"
    expect_refusal "model.score_mod_params.bias.init: expected a finite number" \
      "$driftless" config -c config.yaml --set "model.score_mod=score + bias[h, 0]" \
      --set "model.score_mod_params={bias: {shape: [heads, 2], init: .nan}}"
    expect_refusal "batch.sequences \(1048576\) x batch.sequence_length \(16777216\)" \
      "$driftless" train -c config.yaml -q --set batch.sequence_length=16777216 \
      --set batch.sequences=1048576 --set model.n_positions=16777216
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "ok: $case_name"
