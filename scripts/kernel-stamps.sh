#!/usr/bin/env bash
# Opt-in: tokentap's recorded times against a loopback packet capture, on the real chain.
#
#   client ─▶ tokentap /gateway ─▶ LiteLLM ─▶ tokentap /engine (behind gateway) ─▶ vLLM   (the tap)
#
# tcpdump (Debian's, installed here if missing) captures loopback while 30 sequential streamed
# requests go through the chain, first on a quiet host, then with a CPU hog on tokentap's core
# (tokentap pinned to core 1, the hog beside it). Per request, every time tokentap recorded is
# compared with the capture's: the outer and inner request heads' arrival (t0), the first
# content event's segment from LiteLLM and from vLLM, hence admission (inner t0 − outer t0), the
# first token's relay, both TTFTs and the tap's hop (outer TTFT − inner TTFT). Target: every
# request within 0.2 ms, the median within 0.05 ms; judged over the requests whose first token
# came alone in its read, with every request's figures printed beside them (a first token read
# with the next content event, `delivery.first_read_events` > 1, carries the newer segment's stamp
# when the kernel merged the two: docs/records.md). Also printed: the records' `clock` and
# `stamp_lag_ms` (how late tokentap read the first token: the error today's stamps would have).
#
#   scripts/kernel-stamps.sh        # installs the rig on first use (~3 min, ~7 GB under $RIG_HOME)
#
# Env: RIG_DIR (default ../shared/rig), RIG_HOME (default /opt/rig), TT_PORT (18080),
#      REQUESTS (per phase, 30), HOG (1: also the hog phase; 0: quiet only),
#      OUT (default: a temporary folder, kept: capture, records, the comparison).
# It needs the rig stopped (it starts vLLM and LiteLLM pointed at tokentap) and stops, by pid,
# everything it starts: tokentap, tcpdump, the hog and the rig. Exit 1 when a target is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RIG_DIR=${RIG_DIR:-$ROOT/../shared/rig}
RIG_HOME=${RIG_HOME:-/opt/rig}
TT_PORT=${TT_PORT:-18080}
REQUESTS=${REQUESTS:-30}
HOG=${HOG:-1}
OUT=${OUT:-$(mktemp -d)}
export RIG_HOME

if curl -sf -m 2 http://127.0.0.1:8000/health >/dev/null || curl -sf -m 2 http://127.0.0.1:4000/health/readiness >/dev/null; then
  echo "a rig is already running: stop it ($RIG_DIR/stop.sh) so LiteLLM starts pointed at this run's tokentap" >&2
  exit 1
fi
if ! command -v tcpdump >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >/dev/null
fi
[ -x "$RIG_HOME/venv-litellm/bin/python" ] || bash "$RIG_DIR/install.sh"
cargo build --release --locked -q
mkdir -p "$OUT"
MASTER=sk-rig-master-key
# LiteLLM sends `Authorization: Bearer none` upstream (the rig's api_key): that is the gateway.
GW_FP=$(printf %s none | target/release/tokentap fingerprint)
cat > "$OUT/stamps.toml" <<EOF
[listen]
addr = "127.0.0.1:$TT_PORT"
[admin]
addr = "127.0.0.1:0"
[log]
path = "$OUT/proxy.jsonl"
[[routes]]
name = "direct"
upstream = "http://127.0.0.1:8000"
[[routes]]
name = "gateway"
upstream = "http://127.0.0.1:4000"
path_prefix = "/gateway"
[[routes]]
name = "engine"
upstream = "http://127.0.0.1:8000"
path_prefix = "/engine"
behind = "gateway"
behind_keys = ["$GW_FP"]
EOF
target/release/tokentap check --config "$OUT/stamps.toml"
cores=$(nproc)
pin=()
[ "$cores" -ge 2 ] && pin=(taskset -c 1)
TOKENTAP_KERNEL_STAMPS=1 "${pin[@]}" target/release/tokentap serve --config "$OUT/stamps.toml" 2> "$OUT/tokentap.err" &
TT_PID=$!
DUMP_PID=
HOG_PID=
cleanup() {
  [ -n "$HOG_PID" ] && kill "$HOG_PID" 2>/dev/null || true
  [ -n "$DUMP_PID" ] && kill -INT "$DUMP_PID" 2>/dev/null || true
  [ -n "$DUMP_PID" ] && wait "$DUMP_PID" 2>/dev/null || true
  kill -TERM "$TT_PID" 2>/dev/null || true
  wait "$TT_PID" 2>/dev/null || true
  bash "$RIG_DIR/stop.sh" || true
}
trap cleanup EXIT
RIG_LITELLM_UPSTREAM="http://127.0.0.1:$TT_PORT/engine/v1" bash "$RIG_DIR/start.sh"

# One streamed chat request through the gateway route, on a new connection.
ask() {
  curl -sfN -m 60 "http://127.0.0.1:$TT_PORT/gateway/v1/chat/completions" \
    -H "Authorization: Bearer $MASTER" -H 'content-type: application/json' \
    -d '{"model":"tiny","stream":true,"max_tokens":24,"messages":[{"role":"user","content":"Tell me about the sea and the ships upon it."}]}' \
    > /dev/null
}
records() { tr -cd '\n' < "$OUT/proxy.jsonl" 2>/dev/null | wc -c; }
wait_records() {  # until the log holds $1 whole lines (up to 20 s)
  for _ in $(seq 200); do [ "$(records)" -ge "$1" ] && return 0; sleep 0.1; done
  echo "the log holds $(records) records, not $1" >&2; return 1
}

# Warm-up (LiteLLM's first requests are slow), not compared.
for _ in 1 2 3; do ask; done
wait_records 6

# One phase: capture, REQUESTS sequential requests, stop the capture; its records are the last
# 2 × REQUESTS lines of the log.
phase() {  # name
  local name=$1 before
  before=$(records)
  tcpdump -i lo -n -s 0 -U --time-stamp-precision=nano -w "$OUT/$name.pcap" \
    "tcp port $TT_PORT or tcp port 4000 or tcp port 8000" 2> "$OUT/$name.tcpdump.err" &
  DUMP_PID=$!
  for _ in $(seq 50); do grep -q "listening on" "$OUT/$name.tcpdump.err" && break; sleep 0.1; done
  sleep 0.5
  for _ in $(seq "$REQUESTS"); do ask; done
  wait_records $((before + 2 * REQUESTS))
  # tcpdump stops without draining what the kernel holds for it: give it time (it may share
  # its core with the hog).
  sleep 2
  kill -INT "$DUMP_PID"
  wait "$DUMP_PID" || true
  DUMP_PID=
  tail -n $((2 * REQUESTS)) "$OUT/proxy.jsonl" > "$OUT/$name.jsonl"
}

fail=0
phase quiet
python3 scripts/kernel_stamps.py "$OUT/quiet.pcap" "$OUT/quiet.jsonl" "$TT_PORT" quiet || fail=1
if [ "$HOG" = 1 ] && [ "$cores" -ge 2 ]; then
  # A busy loop on tokentap's core, at the same priority: today's stamps are furthest off here.
  taskset -c 1 sh -c 'while :; do :; done' &
  HOG_PID=$!
  phase hog
  kill "$HOG_PID" 2>/dev/null || true
  wait "$HOG_PID" 2>/dev/null || true
  HOG_PID=
  python3 scripts/kernel_stamps.py "$OUT/hog.pcap" "$OUT/hog.jsonl" "$TT_PORT" "hog on core 1" || fail=1
fi
echo "capture, records and tokentap's log in $OUT"
exit "$fail"
