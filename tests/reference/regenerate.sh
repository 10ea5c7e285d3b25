#!/usr/bin/env bash
# Regenerates the committed reference files of tests/layers/gpt_reference_test.cpp and
# tests/train/trainer_reference_test.cpp:
#   golden/gpt2_tiny_input.safetensors      weights + packed batch, written by our C++ side
#   golden/gpt2_tiny_golden.safetensors     PyTorch (float64) logits, loss, gradients, losses
#   golden/trainer_tiny_input.safetensors   those weights + the trainer's batches (C++ side)
#   golden/trainer_tiny_golden.safetensors  PyTorch (float64) steps with clipping and schedule
# Usage: tests/reference/regenerate.sh [BUILD_DIR]   (default: build). Needs Debian's
# python3-torch for /usr/bin/python3 (apt-get install -y python3-torch); override with
# PYTHON=... . The C++ test itself never needs Python.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
python="${PYTHON:-/usr/bin/python3}"
golden="$root/tests/reference/golden"

cmake --build "$build" --target test_layers -j"${JOBS:-2}"
"$build/tests/test_layers" --gtest_also_run_disabled_tests \
  --gtest_filter='GptReferenceInput.DISABLED_Write'
"$python" "$root/tests/reference/gpt2_reference.py" \
  "$golden/gpt2_tiny_input.safetensors" "$golden/gpt2_tiny_golden.safetensors"
"$build/tests/test_layers" --gtest_filter='GptReference.*'

cmake --build "$build" --target test_engine -j"${JOBS:-2}"
"$build/tests/test_engine" --gtest_also_run_disabled_tests \
  --gtest_filter='TrainerReferenceInput.DISABLED_Write'
"$python" "$root/tests/reference/trainer_reference.py" \
  "$golden/trainer_tiny_input.safetensors" "$golden/trainer_tiny_golden.safetensors"
"$build/tests/test_engine" --gtest_filter='TrainerReference.*'

# The drift report against PyTorch (tests/e2e/parity.cmake): PyTorch's float64 run of
# parity_tiny.yaml from driftless's step-0 weights on driftless's batches, as a run directory
# (tensor logs at steps 0 and 2, metrics.jsonl) in golden/parity_tiny.
cmake --build "$build" --target driftless -j"${JOBS:-2}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$build/apps/driftless" config -c "$root/tests/reference/parity_tiny.yaml" >"$tmp/run.yaml"
"$build/apps/driftless" train -c "$tmp/run.yaml" --set optimizer.lr=0 --set optimizer.min_lr=0 \
  --set training.eval_interval=0 --set "run.tensor_logs.steps=[]" \
  --set "run.output_dir=$tmp/init" -q
"$build/apps/driftless" batch --config "$tmp/run.yaml" --export "$tmp/batches.safetensors" \
  --steps 3 --validation-batches 1
rm -rf "$golden/parity_tiny"
"$python" "$root/tests/reference/train_parity.py" --config "$tmp/run.yaml" --device cpu \
  --init "$(ls "$tmp"/init/checkpoints/*.safetensors | tail -1)" --precision fp64 \
  --batches "$tmp/batches.safetensors" --log-steps 0,2 --out "$golden/parity_tiny"
rm -f "$golden/parity_tiny/parity_run.json"
