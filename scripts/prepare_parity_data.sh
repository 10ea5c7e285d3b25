#!/usr/bin/env bash
# Prepares the parity run's data (docs/parity.md): the Debian fortunes corpus (packages
# fortunes and fortunes-min, installed by scripts/install_deps.sh) through the GPT-2 tokenizer
# into driftless's memmap files OUT/train.{bin,idx,json} and OUT/validation.{bin,idx,json}.
# Needs the GPT-2 vocabulary (`make vocab`: .cache/gpt2-vocab). The files are small (a few
# MB), so they travel to a GPU machine with the working tree (.cache/ is git-ignored).
#   scripts/prepare_parity_data.sh [OUT]    (default .cache/parity-data/fortunes)
# Environment: BUILD (build dir holding apps/driftless, default build), FORTUNES (the corpus
# folder, default /usr/share/games/fortunes), EXTRA_TEXT (more files or folders to add;
# --format auto: a file with "%" lines is read as fortunes, another as one document), e.g.
# the reStructuredText of Debian's linux-doc-6.1 (about 7M more tokens: the 2,000 steps then
# pass over the data about 4 times instead of about 48):
#   EXTRA_TEXT=/usr/share/doc/linux-doc-6.1/html/_sources \
#     scripts/prepare_parity_data.sh .cache/parity-data/fortunes-linux-doc
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.cache/parity-data/fortunes}
dl=${BUILD:-build}/apps/driftless
src=${FORTUNES:-/usr/share/games/fortunes}
[ -x "$dl" ] || { echo "prepare_parity_data: build $dl first (make build)" >&2; exit 1; }
# The cookie files themselves: regular files without an extension (not the strfile .dat
# indexes, not the .u8 links to the same text).
mapfile -t files < <(find "$src" -maxdepth 1 -type f ! -name '*.*' | sort)
[ ${#files[@]} -gt 0 ] || { echo "prepare_parity_data: no fortune files in $src" >&2; exit 1; }
# EXTRA_TEXT folders are taken whole, subfolders included (prepare reads a folder's own files).
for x in ${EXTRA_TEXT:-}; do
  if [ -d "$x" ]; then mapfile -t -O ${#files[@]} files < <(find "$x" -type f | sort); else files+=("$x"); fi
done
"$dl" prepare "${files[@]}" -o "$out" --tokenizer gpt2 --format auto -q \
  --validation-fraction 0.05 --seed 56
du -sh "$out"
