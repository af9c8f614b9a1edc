#!/usr/bin/env bash
# Opt-in: render a report's HTML in headless Chromium (Debian's package, installed here if
# missing) and save a screenshot, to look at the charts as a reader would.
#   scripts/report-screenshot.sh [RECORDS_PATH]     # default: runs `tokentap demo` first
# Output: $OUT (default target/report-shot)/report.html and report.png
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/report-shot}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: Chromium is given file:// paths
if ! command -v chromium >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
cargo build --release --locked -q
SRC=${1:-}
if [ -z "$SRC" ]; then
  target/release/tokentap demo --out "$OUT/demo" >/dev/null
  SRC="$OUT/demo/bench"
fi
target/release/tokentap report "$SRC" --format html --out "$OUT/report.html"
PROFILE=$(mktemp -d)
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$PROFILE" --window-size=1400,2200 --hide-scrollbars \
  --screenshot="$OUT/report.png" "file://$OUT/report.html" 2>/dev/null
rm -rf "$PROFILE"
test -s "$OUT/report.png"
echo "screenshot: $OUT/report.png"
