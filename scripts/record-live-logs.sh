#!/usr/bin/env bash
# Opt-in: re-record the live logs in tests/fixtures/logs/ through tokentap in front of a real
# vLLM (CPU) and a real LiteLLM on loopback (the rig, ../shared/rig):
#
#   client ─▶ tokentap /        ─▶ vLLM    127.0.0.1:8000   (route direct)
#   client ─▶ tokentap /gateway ─▶ LiteLLM 127.0.0.1:4000 ─▶ vLLM   (route gateway)
#
#   live-rig.jsonl       mixed traffic (scripts/live_traffic.py healthy): health, models, metrics,
#                        401/400/404/429, malformed bodies, cancelled streams, every API shape,
#                        generation at concurrency 1, 2, 4
#   live-rig-slow.jsonl  long prompts at concurrency 8 and 12 (live_traffic.py slow): the engine is
#                        overloaded and TTFT misses an interactive SLO
#
#   scripts/record-live-logs.sh          # installs the rig on first use (~3 min, ~7 GB under $RIG_HOME)
#
# LiteLLM runs from a copy of the rig's scripts with its config plus one model, `tiny-limited`
# (a deployment with max_parallel_requests = 1), which gives real 429s to a burst.
# Env: RIG_DIR (default ../shared/rig), RIG_HOME (default /opt/rig), OUT (default tests/fixtures/logs),
#      TOKENTAP (a tokentap binary; default: cargo build --release), PHASE_TIMEOUT (s, each traffic phase, 600).
# Bounded: start.sh waits at most its RIG_*_TIMEOUT, each traffic phase runs under `timeout`.
#      RIG_KEEP=1 leaves the rig it started running (a later run then uses it).
# It starts the rig from the copy unless one with this config is up, and stops only what it started (stop.sh: by pid).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RIG_DIR=${RIG_DIR:-$ROOT/../shared/rig}
RIG_HOME=${RIG_HOME:-/opt/rig}
OUT=${OUT:-$ROOT/tests/fixtures/logs}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-600}
export RIG_HOME

started_rig=0
if curl -sf -m 2 http://127.0.0.1:8000/health >/dev/null || curl -sf -m 2 http://127.0.0.1:4000/health/readiness >/dev/null; then
  # a running rig will do if its LiteLLM has this run's config (an earlier run's, left up); it is not stopped
  if ! curl -sf -m 5 -H "Authorization: Bearer sk-rig-master-key" http://127.0.0.1:4000/v1/models | grep -q '"tiny-limited"'; then
    echo "a rig is already running without tiny-limited: stop it ($RIG_DIR/stop.sh) so LiteLLM starts with this run's config" >&2
    exit 1
  fi
  echo "using the rig already running (its LiteLLM serves tiny-limited); it stays up"
else
  started_rig=1
fi
[ -x "$RIG_HOME/venv-litellm/bin/python" ] || bash "$RIG_DIR/install.sh"
if [ -z "${TOKENTAP:-}" ]; then
  cargo build --release --locked -q
  TOKENTAP=$ROOT/target/release/tokentap
fi
WORK=$(mktemp -d)
mkdir -p "$OUT"

# The rig's scripts, run from a copy so that start.sh reads this config (the rig's, plus tiny-limited).
cp -r "$RIG_DIR" "$WORK/rig"
cat > "$WORK/rig/litellm-config.yaml" <<'EOF'
model_list:
  - model_name: tiny
    litellm_params:
      model: hosted_vllm/tiny
      api_base: os.environ/RIG_VLLM_API_BASE
      api_key: "none"
      max_retries: 0
      timeout: 120
      stream_timeout: 120
  # one slot: a request arriving while it is taken gets LiteLLM's 429 (it does not queue)
  - model_name: tiny-limited
    litellm_params:
      model: hosted_vllm/tiny
      api_base: os.environ/RIG_VLLM_API_BASE
      api_key: "none"
      max_retries: 0
      timeout: 120
      stream_timeout: 120
      max_parallel_requests: 1

litellm_settings:
  telemetry: false
  drop_params: false
  num_retries: 0
  request_timeout: 120
  callbacks: ["prometheus"]

general_settings:
  master_key: sk-rig-master-key
  disable_spend_logs: true
  disable_reset_budget: true
EOF

TT_PID=
stop_tokentap() {
  if [ -n "$TT_PID" ]; then
    kill -TERM "$TT_PID" 2>/dev/null || true
    wait "$TT_PID" 2>/dev/null || true
    TT_PID=
  fi
}
cleanup() {
  stop_tokentap
  if [ "$started_rig" = 1 ] && [ "${RIG_KEEP:-0}" != 1 ]; then bash "$WORK/rig/stop.sh" || true; fi
}
trap cleanup EXIT

[ "$started_rig" = 1 ] && bash "$WORK/rig/start.sh"

record() {  # name phase
  local name=$1 phase=$2 log="$WORK/$1.jsonl"
  cat > "$WORK/$name.toml" <<EOF
[listen]
addr = "127.0.0.1:0"
[admin]
addr = "127.0.0.1:0"
[log]
path = "$log"
[[routes]]
name = "direct"
upstream = "http://127.0.0.1:8000"
path_prefix = "/"
[[routes]]
name = "gateway"
upstream = "http://127.0.0.1:4000"
path_prefix = "/gateway"
EOF
  "$TOKENTAP" check --config "$WORK/$name.toml" >/dev/null
  "$TOKENTAP" serve --config "$WORK/$name.toml" 2> "$WORK/$name.err" &
  TT_PID=$!
  for _ in $(seq 100); do grep -q "listen=" "$WORK/$name.err" && break; sleep 0.1; done
  local addr
  addr=$(sed -n 's/.*listen=\([^ ]*\).*/\1/p' "$WORK/$name.err" | head -1)
  [ -n "$addr" ] || { echo "tokentap did not start:" >&2; cat "$WORK/$name.err" >&2; exit 1; }
  echo "== $name: tokentap $("$TOKENTAP" --version | awk '{print $2}') on $addr"
  timeout "$PHASE_TIMEOUT" python3 "$ROOT/scripts/live_traffic.py" "$addr" "$phase" | tee "$WORK/$name.summary"
  stop_tokentap  # SIGTERM: every record written
  if grep -q 'sk-' "$log"; then echo "$log holds something like a key (sk-); not copied" >&2; exit 1; fi
  cp "$log" "$OUT/$name.jsonl"
  python3 - "$OUT/$name.jsonl" <<'PY'
import json, sys
from collections import Counter
recs = [json.loads(l) for l in open(sys.argv[1])]
print(f"# {sys.argv[1]}: {len(recs)} records (route, method, endpoint, api, status, outcome: count)")
c = Counter((r["route"], r["method"], r["endpoint"], r.get("api"), r["status"], r["outcome"]) for r in recs)
for k, n in sorted(c.items(), key=lambda kv: tuple(map(str, kv[0]))):
    print(" ".join(f"{x!s:<12}" if i != 2 else f"{x!s:<30}" for i, x in enumerate(k)), n)
gen = sorted(r["ttft_ms"] for r in recs if r.get("ttft_ms") is not None and r["outcome"] == "ok")
if gen:
    p = lambda q: gen[min(len(gen) - 1, int(q * len(gen)))]
    print(f"TTFT of ok streams: n={len(gen)} p50={p(0.5):.1f} p95={p(0.95):.1f} max={gen[-1]:.1f} ms")
PY
}

record live-rig healthy
record live-rig-slow slow
echo "logs in $OUT; scratch (configs, tokentap stderr, summaries) in $WORK"
