#!/usr/bin/env bash
# make_deps_check.sh SOURCE_DIR: `make -n test` runs scripts/install_deps.sh without the build
# folder's stamp, and not with it (tests/e2e/docs.cmake).
set -euo pipefail
cd "$1"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
plan=$(make -n test BUILD="$build")
grep -q install_deps.sh <<<"$plan" ||
  { echo "FAIL: make test without a stamp does not run install_deps.sh"; exit 1; }
mkdir -p "$build" && touch "$build/.deps-installed"
plan=$(make -n test BUILD="$build")
if grep -q install_deps.sh <<<"$plan"; then
  echo "FAIL: make test runs install_deps.sh although $build/.deps-installed exists"
  exit 1
fi
echo "make test: install_deps.sh only without the stamp"
