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
