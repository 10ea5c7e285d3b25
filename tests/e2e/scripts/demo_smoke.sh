#!/usr/bin/env bash
# `make demo` in short (the demo_smoke test): scripts/demo.sh with 20 training steps and three
# regression layouts into BUILD_DIR/scratch/demo, then checks that every job said what the
# README says it says: the loss plot, a passing regression, the planted fault found in layer
# 1's attention, and the closing list of what to open.
# Usage: demo_smoke.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build=$2
log="$build/scratch/demo.log"
mkdir -p "$build/scratch"
DEMO_DIR="$build/scratch/demo" DEMO_STEPS=20 DEMO_LAYOUTS="ms2 sdp2 cp2_ring" \
  bash "$source_dir/scripts/demo.sh" "$build" 2>&1 | tee "$log"
expect() {
  grep -qE "$1" "$log" || { echo "demo_smoke: the demo did not print /$1/"; exit 1; }
}
expect '^summary: 20 steps, final loss'
expect '^plot: .*/scratch/demo/loss\.html'
expect '^all layouts match their baseline'
expect '^sdp2_ms2_fault +2 +FAIL .*step 0 h\.1\.attn'
expect "^sdp2_ms2_fault: the drift is born at h\.1\.attn"
expect 'Open in a browser'
[ -s "$build/scratch/demo/fault/report.html" ] || { echo "demo_smoke: no fault report"; exit 1; }
echo "demo_smoke: all three jobs ran"
