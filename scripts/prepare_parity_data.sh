#!/usr/bin/env bash
# Prepares the parity run's data (docs/parity.md): Debian-packaged English text through the
# GPT-2 tokenizer into driftless's memmap files OUT/train.{bin,idx,json} and
# OUT/validation.{bin,idx,json}, plus OUT/sources.txt (each package and its version).
# Needs the GPT-2 vocabulary (`make vocab`: .cache/gpt2-vocab). The files (some 37 MB for
# debian-text) travel to a GPU machine with the working tree (.cache/ is git-ignored).
#   scripts/prepare_parity_data.sh [OUT]    (default .cache/parity-data/$CORPUS)
# CORPUS (default debian-text):
#   debian-text  the fortunes (packages fortunes and fortunes-min, installed by
#                scripts/install_deps.sh) and the documentation packages of the table below,
#                which this script fetches with `apt-get download` (no root needed; the apt
#                package lists must be there: `apt-get update`) into SOURCES and unpacks
#                there: about 17.8M tokens, so 2,000 steps of 16 x 1024 tokens pass over the
#                training split about twice.
#   fortunes     the fortunes alone (680k tokens, passed over about 48 times).
# Environment: BUILD (build dir holding apps/driftless, default build), FORTUNES (the fortunes
# folder, default /usr/share/games/fortunes), SOURCES (the packages' cache, default
# .cache/parity-sources: debs/ as downloaded, text/PACKAGE/ the files taken; a package whose
# .deb is there is not downloaded again, so the same cache gives the same data), EXTRA_TEXT
# (more files or folders to add, folders taken whole). Every file is read with --format auto:
# one with a line holding only "%" as fortunes, another as one document.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=${CORPUS:-debian-text}
out=${1:-.cache/parity-data/$corpus}
dl=${BUILD:-build}/apps/driftless
src=${FORTUNES:-/usr/share/games/fortunes}
cache=${SOURCES:-.cache/parity-sources}
[ -x "$dl" ] || { echo "prepare_parity_data: build $dl first (make build)" >&2; exit 1; }
case $corpus in debian-text | fortunes) ;; *)
  echo "prepare_parity_data: CORPUS must be debian-text or fortunes, got '$corpus'" >&2; exit 1 ;;
esac

# Each package and the members taken from it (tar wildcards, which match "/" too): prose in
# reStructuredText, POD, AsciiDoc, plain text and Info, never HTML. A *.gz is decompressed.
packages=(
  "linux-doc-6.1        ./usr/share/doc/linux-doc-6.1/html/_sources/*"
  "python3.11-doc       ./usr/share/doc/python3.11/html/_sources/*"
  "perl-doc             ./usr/share/perl/*/pod/*.pod"
  "git-doc              ./usr/share/doc/git-doc/*.txt"
  "sphinx-doc           ./usr/share/doc/sphinx-doc/html/_sources/*"
  "debian-policy        ./usr/share/doc/debian-policy/policy.html/_sources/*"
  "developers-reference ./usr/share/developers-reference/_sources/*"
  "debian-reference-en  ./usr/share/debian-reference/debian-reference.en.txt.gz"
  "gnu-standards        ./usr/share/doc/gnu-standards/*.text.gz"
  "bash-doc             ./usr/share/info/bash.info.gz"
)
[ "$corpus" = fortunes ] && packages=()

# The cookie files themselves: regular files without an extension (not the strfile .dat
# indexes, not the .u8 links to the same text).
mapfile -t files < <(find "$src" -maxdepth 1 -type f ! -name '*.*' | sort)
[ ${#files[@]} -gt 0 ] || { echo "prepare_parity_data: no fortune files in $src" >&2; exit 1; }
sources=("fortunes folder $src")

mkdir -p "$cache/debs"
for entry in "${packages[@]}"; do
  read -r pkg members <<<"$entry"
  debs=("$cache"/debs/"${pkg}"_*.deb)
  if [ ! -f "${debs[0]}" ]; then
    (cd "$cache/debs" && apt-get download -q "$pkg" >/dev/null) || {
      echo "prepare_parity_data: 'apt-get download $pkg' failed (run apt-get update?)" >&2
      exit 1
    }
    debs=("$cache"/debs/"${pkg}"_*.deb)
  fi
  text="$cache/text/$pkg"
  rm -rf "$text"
  mkdir -p "$text"
  # shellcheck disable=SC2086  # members are globs for tar, split on purpose
  dpkg-deb --fsys-tarfile "${debs[0]}" | tar -x -C "$text" --wildcards $members
  find "$text" -type f -name '*.gz' -exec gunzip -f {} +
  mapfile -t -O ${#files[@]} files < <(find "$text" -type f | sort)
  sources+=("$pkg $(dpkg-deb -f "${debs[0]}" Version)")
done

# EXTRA_TEXT folders are taken whole, subfolders included (prepare reads a folder's own files).
for x in ${EXTRA_TEXT:-}; do
  if [ -d "$x" ]; then mapfile -t -O ${#files[@]} files < <(find "$x" -type f | sort); else files+=("$x"); fi
  sources+=("extra $x")
done
"$dl" prepare "${files[@]}" -o "$out" --tokenizer gpt2 --format auto -q \
  --validation-fraction 0.05 --seed 56
printf '%s\n' "${sources[@]}" >"$out/sources.txt"
du -sh "$out"
