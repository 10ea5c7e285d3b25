#!/usr/bin/env bash
# Installs the Debian packages driftless builds and runs with, skipping those present.
# Used by `make demo` and `make test` on a fresh Debian machine (as root, or with sudo).
set -euo pipefail
packages=(cmake g++ make ccache libeigen3-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
          libgtest-dev libgmock-dev libopenmpi-dev openmpi-bin fortunes-min fortunes python3
          chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "driftless: installing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "driftless: missing packages (${missing[*]}) and not root; install them and retry" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
