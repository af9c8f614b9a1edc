#!/usr/bin/env bash
# Opt-in: a load generator's own TTFT error (docs/bench.md, "The client's own error"). bench,
# then AIPerf (from PyPI, in a venv under target/, installed here if missing; CLIENT_ERROR_AIPERF=0
# leaves it out), each in turn through `tokentap serve` to `tokentap sim --pace 50,10,100`, at
# every level of CLIENT_ERROR_LEVELS (default 1,100,500,1000). A client's error is its TTFT
# minus the proxy's, per request, joined by x-request-id. Loopback only; everything it starts,
# it stops.
#
#   scripts/client-error.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q
WORK=${1:-$(mktemp -d)}
args=(target/release/tokentap "$WORK" --levels "${CLIENT_ERROR_LEVELS:-1,100,500,1000}")
if [ "${CLIENT_ERROR_AIPERF:-1}" != 0 ]; then
  VENV=target/aiperf-venv
  if [ ! -x "$VENV/bin/aiperf" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q aiperf==0.13.0
  fi
  args+=(--aiperf "$VENV/bin/aiperf")
fi
# Enough descriptors for 1,000 streams through a proxy (two sockets each) and the clients.
ulimit -n 65536 2>/dev/null || true
python3 scripts/client_error.py "${args[@]}"
echo "records and logs in $WORK"
