#!/usr/bin/env bash
# Opt-in: the gateway hop of a real LiteLLM, measured both ways on the same traffic.
#
#   client ─▶ tokentap /gateway ─▶ LiteLLM ─▶ tokentap /engine (behind gateway) ─▶ vLLM   (the tap)
#   client ─▶ tokentap /        ─────────────────────────────────────────────────▶ vLLM   (direct)
#
# bench sends identical prompts through both arms (forced ABBA, x-tokentap-route) at C=1, 4, 8;
# the report gives the paired A/B per level, the tap's per-request hop per level (LiteLLM does not
# forward tokentap's join header by default: the join is by fingerprint, and its rate is printed),
# LiteLLM's own claim beside it, and where TTFT went (vLLM --enable-per-request-metrics).
#
#   scripts/rig-tap.sh            # installs the rig on first use (~3 min, ~7 GB under $RIG_HOME)
#
# Env: RIG_DIR (default ../shared/rig), RIG_HOME (default /opt/rig), TT_PORT (18080),
#      REQUESTS (per cell, 12), CONC (1,4,8), OUT (default: a temporary folder).
# It needs the rig stopped (vLLM and LiteLLM start with the flags above) and stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RIG_DIR=${RIG_DIR:-$ROOT/../shared/rig}
RIG_HOME=${RIG_HOME:-/opt/rig}
TT_PORT=${TT_PORT:-18080}
REQUESTS=${REQUESTS:-12}
CONC=${CONC:-1,4,8}
OUT=${OUT:-$(mktemp -d)}
export RIG_HOME

if curl -sf -m 2 http://127.0.0.1:8000/health >/dev/null || curl -sf -m 2 http://127.0.0.1:4000/health/readiness >/dev/null; then
  echo "a rig is already running: stop it ($RIG_DIR/stop.sh) so vLLM and LiteLLM start with this run's flags" >&2
  exit 1
fi
[ -x "$RIG_HOME/venv-litellm/bin/python" ] || bash "$RIG_DIR/install.sh"
cargo build --release --locked -q
mkdir -p "$OUT"
MASTER=sk-rig-master-key
# LiteLLM sends `Authorization: Bearer none` upstream (the rig's api_key): that is the gateway.
GW_FP=$(printf %s none | target/release/tokentap fingerprint)
BENCH_FP=$(printf %s "$MASTER" | target/release/tokentap fingerprint)
cat > "$OUT/tap.toml" <<EOF
[listen]
addr = "127.0.0.1:$TT_PORT"
[admin]
addr = "127.0.0.1:0"
[log]
path = "$OUT/proxy.jsonl"
[experiment]
arms = ["direct", "gateway"]
allow_forcing = true
direct_keys = ["$BENCH_FP"]
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
target/release/tokentap check --config "$OUT/tap.toml"
target/release/tokentap serve --config "$OUT/tap.toml" 2> "$OUT/tokentap.err" &
TT_PID=$!
cleanup() {
  kill -TERM "$TT_PID" 2>/dev/null || true
  wait "$TT_PID" 2>/dev/null || true
  bash "$RIG_DIR/stop.sh" || true
}
trap cleanup EXIT
RIG_VLLM_ARGS=--enable-per-request-metrics \
RIG_LITELLM_UPSTREAM="http://127.0.0.1:$TT_PORT/engine/v1" \
  bash "$RIG_DIR/start.sh"

export OPENAI_API_KEY=$MASTER
# Warm-up through both arms (LiteLLM's first request is slow); not recorded by bench.
target/release/tokentap bench --target "http://127.0.0.1:$TT_PORT" --out "$OUT/bench" \
  --model tiny --synthetic 600,250,40 --long-min 500 --short-max 100 --outputs 32,64,128 \
  --prompts-per-bucket 24 --concurrency "$CONC" --requests "$REQUESTS" --warmup 2 \
  --route-header x-tokentap-route --arms direct,gateway
sleep 1
target/release/tokentap report "$OUT/bench" --tap "$OUT/proxy.jsonl" --format json --out "$OUT/report.json"
target/release/tokentap report "$OUT/bench" --tap "$OUT/proxy.jsonl" --format html --out "$OUT/report.html"
python3 - "$OUT/report.json" "$OUT/proxy.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2])]
t, h = r["gateway_tap"], r["gateway_hop"]
key = lambda l: int(l.split("-")[-1])
f = lambda v: "-" if v is None else f"{v:+.1f}"
print(f"join: {t['joined']} joined, rate {100 * t['join_rate']:.0f} %, by {t['join_by']}, unjoined {t['unjoined']} {t['unjoined_by_reason']}")
print("level  A/B pairs  A/B TTFT median [CI]         tap joined  tap TTFT hop  admission  relay  LiteLLM claim  tap - claim")
for l in sorted(set(h["by_concurrency"]) | set(t["by_concurrency"]), key=key):
    a, s = h["by_concurrency"].get(l), t["by_concurrency"].get(l)
    claims = [x["gateway_overhead_ms"] for x in recs
              if (x.get("gateway_tap") or {}).get("side") == "outer" and x.get("concurrency") == int(l)
              and x["gateway_tap"].get("peer") and x.get("gateway_overhead_ms") is not None]
    claims.sort()
    claim = claims[len(claims) // 2] if claims else None
    diffs = sorted(x["gateway_tap"]["ttft_ms"] - x["gateway_overhead_ms"] for x in recs
                   if (x.get("gateway_tap") or {}).get("side") == "outer" and x.get("concurrency") == int(l)
                   and x["gateway_tap"].get("ttft_ms") is not None and x.get("gateway_overhead_ms") is not None)
    ci = a["ttft_ms"]["ci95"] if a else None
    print(f"C={l:<4} {a['pairs'] if a else 0:>9}  {f(a['ttft_ms']['median']) if a else '-':>7} "
          f"[{f(ci[0]) if ci else '-'}, {f(ci[1]) if ci else '-'}]   {s['joined'] if s else 0:>10}  "
          f"{f(s['ttft_ms']['median']) if s else '-':>12}  {f(s['admission_ms']['median']) if s else '-':>9}  "
          f"{f(s['relay_ms']['median']) if s else '-':>5}  {f(claim):>13}  {f(diffs[len(diffs) // 2] if diffs else None):>11}")
for c in r["cells"]:
    sp = c.get("ttft_split") or {}
    if c["concurrency"] == "1":
        print(f"split {c['bucket']:<11} [{c['arm']}] C=1 TTFT p50 {c['ttft_ms']['p50']:.1f}: "
              f"engine queue {sp.get('engine_queue_ms')}, prefill {sp.get('engine_prefill_ms')}, outside engine {sp.get('outside_engine_ms')}")
for a in r["answers"]:
    print(f"{a['question']} {a['answer']}")
# Is it really streaming? How each route's streams arrived, per level, and the per-token relay
# through LiteLLM. vLLM's own streams (direct, and inside the gateway) are never called buffered.
from collections import Counter, defaultdict
by = defaultdict(Counter)
share = defaultdict(list)
for x in recs:
    d = x.get("delivery")
    if d:
        k = (x["route"], x.get("concurrency"))
        by[k][d["verdict"]] += 1
        share[k].append(d["coalesced_share"])
print("route    level  streamed  coalesced  buffered  coalesced share (mean, max)  most events in one read")
for k in sorted(by, key=lambda k: (k[0], k[1] or 0)):
    c, s = by[k], share[k]
    most = max(x["delivery"]["max_events_per_read"] for x in recs
               if x.get("delivery") and (x["route"], x.get("concurrency")) == k)
    print(f"{k[0]:<8} C={k[1]!s:<4} {c['streamed']:>8}  {c['coalesced']:>9}  {c['buffered']:>8}  "
          f"{sum(s) / len(s):.3f}, {max(s):.3f}{'':>17}{most}")
relays = sorted(x["gateway_tap"]["relay_p50_ms"] for x in recs
                if (x.get("gateway_tap") or {}).get("relay_p50_ms") is not None)
maxes = sorted(x["gateway_tap"]["relay_max_ms"] for x in recs
               if (x.get("gateway_tap") or {}).get("relay_max_ms") is not None)
verdicts = Counter(x["gateway_tap"].get("relay_verdict") for x in recs
                   if (x.get("gateway_tap") or {}).get("side") == "outer")
if relays:
    print(f"relay through LiteLLM: per-stream median {relays[len(relays) // 2]:.2f} ms, "
          f"largest token relay p50 {maxes[len(maxes) // 2]:.2f} ms, max {maxes[-1]:.2f} ms; verdicts {dict(verdicts)}")
bad = [k for k in by if k[0] in ("direct", "engine") and by[k]["buffered"]]
if bad:
    sys.exit(f"FAIL: vLLM's own streams (direct, or inside the gateway) called buffered at {bad}")
PY
echo "records, report.json and report.html in $OUT"
