#!/usr/bin/env bash
# The main job behind `make demo`: prepare the fortunes corpus (GPT-2 tokenizer, or bytes
# when the vocabulary files cannot be had), train the tiny GPT-2 of configs/runs/demo.yaml
# (about a minute on 2 CPU cores), then sample a few lines from it. Idempotent: runs/demo is
# rebuilt from scratch on every run.
# Usage: scripts/demo.sh [BUILD_DIR]   (env: DEMO_CORPUS, DEMO_STEPS to shorten a smoke run)
set -euo pipefail
build=${1:-build}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
bin="$build/apps/driftless"
cd "$root"
if [[ ! -x "$bin" ]]; then
  echo "demo: $bin not found; build first (make build, or make demo)" >&2
  exit 1
fi
corpus=${DEMO_CORPUS:-/usr/share/games/fortunes}
if [[ ! -e "$corpus" ]]; then
  echo "demo: no corpus at $corpus (Debian package 'fortunes'; scripts/install_deps.sh installs it)" >&2
  exit 1
fi

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# 1. Tokenizer: GPT-2's BPE when its vocabulary can be fetched, else bytes.
vocab=.cache/gpt2-vocab
overrides=()
if data/fetch_gpt2_vocab.sh "$vocab" >/dev/null; then
  tokenizer=gpt2
else
  tokenizer=byte
  overrides=(--set model.vocab_size=257 --set data.tokenizer=bytes)
  echo "demo: note: the GPT-2 vocabulary is not available; using the byte tokenizer instead" >&2
fi
if [[ -n "${DEMO_STEPS:-}" ]]; then
  overrides+=(--set "training.steps=$DEMO_STEPS" --set "training.eval_interval=$DEMO_STEPS")
fi

rm -rf runs/demo

say "prepare: $corpus -> runs/demo/data ($tokenizer tokenizer)"
"$bin" prepare "$corpus" -o runs/demo/data --format fortune --tokenizer "$tokenizer" \
  --vocab-dir "$vocab"

say "train: configs/runs/demo.yaml ${overrides[*]:-}"
start=$(date +%s)
"$bin" train -c configs/runs/demo.yaml ${overrides[@]+"${overrides[@]}"}
echo "demo: training took $(($(date +%s) - start)) s; metrics in runs/demo/metrics.jsonl"

say "sample: top-k 40, temperature 0.8, 40 tokens per prompt"
"$bin" sample --checkpoint runs/demo --vocab-dir "$vocab" --tokens 40 --top-k 40 \
  --temperature 0.8 --seed 1 \
  --prompt "The secret of life is" --prompt "Q: Why did the programmer" \
  --prompt "A fool and his money" --prompt ""
