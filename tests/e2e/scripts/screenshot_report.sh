#!/usr/bin/env bash
# Opens a drift report in headless Chromium, takes a screenshot and checks it is not blank
# (the HTML report renders). Exit 77 (skipped) when Chromium is absent.
# Usage: screenshot_report.sh REPORT_HTML OUT_PNG [WIDTH,HEIGHT]   (window, default 1100,900)
set -euo pipefail
report=$1 png=$2 window=${3:-1100,900}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then echo "chromium not installed: skipping"; exit 77; fi
[ -s "$report" ] || { echo "no report at $report"; exit 1; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
rm -f "$png"
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --window-size="$window" --screenshot="$png" "file://$report" \
  >/dev/null 2>&1 || true
[ -s "$png" ] || { echo "chromium wrote no screenshot"; exit 1; }
python3 "$(dirname "$0")/png_not_blank.py" "$png"
