#!/usr/bin/env bash
# The main job behind `make demo`. Until the trainer exists: a smoke run of the build.
set -euo pipefail
build=${1:-build}
"$build/apps/driftless" info
