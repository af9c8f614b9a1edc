#!/usr/bin/env bash
# Opt-in: a soak of `tokentap serve` against the simulated engine (docs/security.md#soak).
# Mixed traffic from 12 clients (streams of every API shape, cancels, resets, slow readers,
# refusals, an upstream that resets), a SIGHUP reload every minute, the OTLP and ClickHouse
# stand-ins down for a minute in every three. Samples RSS, open fds, threads, in-flight requests,
# records and requests every 10 s; then a clean SIGTERM. It passes when RSS and fds are flat
# over the last two thirds, there is exactly one record per request sent, and no key appears in
# any output. Loopback only; needs python3 and nothing else; stops everything it started, by pid.
#
#   scripts/soak.sh                                   # 30 minutes, the release build first
#   SOAK_MINUTES=10 TOKENTAP=target/release/tokentap scripts/soak.sh
#   (SOAK_CONCURRENCY=12 clients, SOAK_OUT=target/soak for the log, samples.json, summary.json, soak.svg)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TOKENTAP:-}" ]; then
  cargo build --release --locked -q
  TOKENTAP=target/release/tokentap
fi
python3 scripts/soak.py "$TOKENTAP" &
soak=$!
finish() { kill -TERM "$soak" 2>/dev/null || true; wait "$soak" 2>/dev/null || true; exit 130; }
trap finish INT TERM
wait "$soak"
