#!/usr/bin/env bash
# Opt-in: bench's ceiling (docs/bench.md, "bench's ceiling"). The release build's
# `tokentap sim --pace 0,0,16` (every token at once) on one core, and on another, in turn, several
# rounds each: wrk (Debian's, installed here with apt-get if missing) and bench on the same
# endpoint with the same connections, non-streamed and streamed answers of 16 tokens; then bench
# alone with BENCH_CEILING_STREAMS_C long paced streams (BENCH_CEILING_STREAMS_PACE). Prints a
# table (requests/s, events/s, CPU s, peak RSS, requests per CPU second, bench/wrk) and exits 1
# when bench's requests/s is below 0.8 × wrk's in a mode. Loopback only; it stops what it starts.
#
#   scripts/bench-ceiling.sh [WORKDIR]
#   BENCH_CEILING_ROUNDS=3 BENCH_CEILING_CONNS=64 BENCH_CEILING_SECONDS=5
#   BENCH_CEILING_STREAMS_C=1000 BENCH_CEILING_STREAMS_PACE=0,50,100
#   BENCH_CEILING_CORES=0,1 (the sim's core, the client's)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v wrk >/dev/null; then
  apt-get install -y -q wrk >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q wrk >/dev/null; }
fi
cargo build --release --locked -q
WORK=${1:-$(mktemp -d)}
CORES=${BENCH_CEILING_CORES:-0,1}
# Enough descriptors for thousands of streams.
ulimit -n 65536 2>/dev/null || true
echo "uptime before: $(uptime)"
status=0
python3 scripts/bench_ceiling.py target/release/tokentap "$WORK" \
  --rounds "${BENCH_CEILING_ROUNDS:-3}" --conns "${BENCH_CEILING_CONNS:-64}" \
  --seconds "${BENCH_CEILING_SECONDS:-5}" --sim-core "${CORES%%,*}" --client-core "${CORES##*,}" \
  --streams-c "${BENCH_CEILING_STREAMS_C:-1000}" \
  --streams-pace "${BENCH_CEILING_STREAMS_PACE:-0,50,100}" || status=$?
echo "uptime after: $(uptime)"
echo "runs and logs in $WORK"
exit "$status"
