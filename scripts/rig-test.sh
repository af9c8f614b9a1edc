#!/usr/bin/env bash
# Opt-in integration test against real software: tokentap in front of a real vLLM (CPU build,
# tiny random model) and a real LiteLLM proxy, driven by the stock `openai` Python client,
# streaming. Checks one record per request with usage-based token counts on both routes and
# prints the measured TTFT/TPOT per route. Then the other API shapes on both routes: the
# `openai` client's `responses.create(stream=True)` and Anthropic-style `/v1/messages` streams
# (x-api-key): one record each, with its `api`, TTFT, TTFO and usage-based tokens.
#
#   scripts/rig-test.sh            # installs the rig on first use (~3 min, ~7 GB under $RIG_HOME)
#
# Last, bench straight at vLLM scrapes its /metrics by default: every vLLM metric the report uses
# is found on the real engine, and its KV usage, running and waiting appear per cell in run.json
# and in the report.
#
# Env: RIG_DIR (default ../shared/rig), RIG_HOME (default /opt/rig), N (requests per route, 20),
#      RIG_KEEP=1 leaves the rig running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RIG_DIR=${RIG_DIR:-$ROOT/../shared/rig}
RIG_HOME=${RIG_HOME:-/opt/rig}
N=${N:-20}
export RIG_HOME

[ -x "$RIG_HOME/venv-litellm/bin/python" ] || bash "$RIG_DIR/install.sh"
started_rig=0
if ! curl -sf -m 3 http://127.0.0.1:8000/health >/dev/null || ! curl -sf -m 3 http://127.0.0.1:4000/health/readiness >/dev/null; then
  bash "$RIG_DIR/start.sh"
  started_rig=1
fi

cargo build --release --locked -q
WORK=$(mktemp -d)
cat > "$WORK/rig.toml" <<EOF
[listen]
addr = "127.0.0.1:0"
[admin]
addr = "127.0.0.1:0"
[log]
path = "$WORK/requests.jsonl"
[[routes]]
name = "direct"
upstream = "http://127.0.0.1:8000"
[[routes]]
name = "gateway"
upstream = "http://127.0.0.1:4000"
path_prefix = "/gateway"
EOF
target/release/tokentap check --config "$WORK/rig.toml"
target/release/tokentap serve --config "$WORK/rig.toml" 2> "$WORK/tokentap.err" &
TT_PID=$!
cleanup() {
  kill -TERM "$TT_PID" 2>/dev/null || true
  wait "$TT_PID" 2>/dev/null || true
  if [ "$started_rig" = 1 ] && [ "${RIG_KEEP:-0}" != 1 ]; then bash "$RIG_DIR/stop.sh" || true; fi
}
trap cleanup EXIT
for _ in $(seq 50); do grep -q "listen=" "$WORK/tokentap.err" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*listen=\([^ ]*\).*/\1/p' "$WORK/tokentap.err" | head -1)
ADMIN=$(sed -n 's/.*admin=\([^ ]*\).*/\1/p' "$WORK/tokentap.err" | head -1)
echo "tokentap on $ADDR, log $WORK/requests.jsonl"

# Wait (up to 20 s) until the log holds COUNT whole lines: the writer batches records after
# their requests end, and a line being written is not yet whole.
wait_records() {
  local want=$1
  for _ in $(seq 200); do
    [ "$(tr -cd '\n' < "$WORK/requests.jsonl" 2>/dev/null | wc -c)" -ge "$want" ] && return 0
    sleep 0.1
  done
  echo "the log holds $(wc -l < "$WORK/requests.jsonl") whole lines, not $want" >&2
  return 1
}

"$RIG_HOME/venv-litellm/bin/python" - "$ADDR" "$N" <<'PY'
import sys, time
from openai import OpenAI
addr, n = sys.argv[1], int(sys.argv[2])
routes = {
    "direct": OpenAI(base_url=f"http://{addr}/v1", api_key="unused-by-vllm"),
    "gateway": OpenAI(base_url=f"http://{addr}/gateway/v1", api_key="sk-rig-master-key"),
}
for name, c in routes.items():  # warm-up: LiteLLM's first request is slow
    list(c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "warm"}],
                                   max_tokens=4, stream=True, extra_body={"ignore_eos": True}))
for i in range(n):
    for name in (["direct", "gateway"] if i % 2 == 0 else ["gateway", "direct"]):
        stream = routes[name].chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"Say hello to the proxy {i}."}],
            max_tokens=64, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "seed": 7})
        usage = None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
        assert usage and usage.completion_tokens == 64, usage
print(f"openai client: {2 * n} streamed requests OK")
PY

wait_records $((2 * N + 2))
python3 - "$WORK/requests.jsonl" "$N" <<'PY'
import json, sys, statistics
recs = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
assert len(recs) == 2 * n + 2, f"{len(recs)} records for {2 * n + 2} requests"
for route in ("direct", "gateway"):
    rs = [r for r in recs if r["route"] == route][1:]  # drop the warm-up
    assert all(r["outcome"] == "ok" and r["output_tokens"] == 64 and r["tokens_source"] == "usage" for r in rs), rs[:1]
    assert all(r["input_tokens"] for r in rs)
    ttft = sorted(r["ttft_ms"] for r in rs); tpot = sorted(r["tpot_ms"] for r in rs)
    hdr = sorted(r["upstream_headers_ms"] for r in rs)
    q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]
    print(f"{route:8s} n={len(rs)} TTFT p50 {statistics.median(ttft):6.1f} ms p95 {q(ttft, .95):6.1f} | "
          f"TPOT p50 {statistics.median(tpot):5.2f} ms | headers p50 {statistics.median(hdr):6.1f} ms")
print("rig test OK: one record per request, usage-based token counts on both routes")
PY
# The openai client hangs up right after [DONE]; tokentap drains the rest and keeps the connection.
curl -s "http://$ADMIN/metrics" | sed -n 's/^tokentap_upstream_connections_opened_total{route="\([a-z]*\)"} \(.*\)/upstream connections opened, \1: \2/p'


# The Responses API and Anthropic Messages, on both routes.
"$RIG_HOME/venv-litellm/bin/python" - "$ADDR" <<'PY'
import json, sys
import httpx
from openai import OpenAI
addr = sys.argv[1]
for name, base, key in (("direct", f"http://{addr}/v1", "unused-by-vllm"),
                        ("gateway", f"http://{addr}/gateway/v1", "sk-rig-master-key")):
    c = OpenAI(base_url=base, api_key=key)
    kinds = [e.type for e in c.responses.create(model="tiny", input="Say hello to the proxy.",
                                                 max_output_tokens=16, stream=True)]
    assert "response.completed" in kinds, kinds
    with httpx.stream("POST", f"{base}/messages", timeout=60,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                      json={"model": "tiny", "max_tokens": 16, "stream": True,
                            "messages": [{"role": "user", "content": "Say hello to the proxy."}]}) as r:
        body = r.read().decode()
    assert r.status_code == 200 and "message_stop" in body, (r.status_code, body[:300])
print("openai client responses.create(stream=True) and /v1/messages streams OK on both routes")
PY
wait_records $((2 * N + 2 + 4))
python3 - "$WORK/requests.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
shaped = [r for r in recs if r.get("api") in ("responses", "messages")]
assert len(shaped) == 4, f"{len(shaped)} records for 4 requests"
for r in shaped:
    assert r["outcome"] == "ok" and r["done"], r
    assert r["tokens_source"] == "usage" and r["output_tokens"] and r["input_tokens"], r
    assert r["ttft_ms"] and r["ttfo_ms"] == r["ttft_ms"], r
    print(f"{r['route']:8s} {r['api']:9s} TTFT {r['ttft_ms']:6.1f} ms  TTFO {r['ttfo_ms']:6.1f} ms  "
          f"tokens {r['input_tokens']}/{r['output_tokens']}  E2E {r['e2e_ms']:6.1f} ms")
print("rig test OK: Responses and Messages measured on both routes")
PY

# bench straight at vLLM: its /metrics is scraped by default, every cell.
target/release/tokentap bench --target http://127.0.0.1:8000 --out "$WORK/bench" --model tiny \
  --buckets balanced --concurrency 1,4 --requests 8 --warmup 1 --outputs 16,32,16 \
  --scrape-interval 250ms --no-calibrate --no-estimate > "$WORK/bench.out"
target/release/tokentap report "$WORK/bench" --format json > "$WORK/report.json"
python3 - "$WORK/bench" "$WORK/report.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1] + "/run.json"))
sc = run["scrape"]
assert sc["endpoints"] == ["http://127.0.0.1:8000/metrics"] and sc["failures"] == 0, sc
used = ["vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:estimated_flops_per_gpu_total", "vllm:estimated_read_bytes_per_gpu_total"]
for cell in run["cells"]:
    found = {m["metric"] for m in cell["scrape"]["metrics"]}
    missing = [m for m in used if m not in found]
    assert not missing, (cell["concurrency"], missing)
    t = cell["scrape"]["telemetry"]
    for k in ("kv_cache_usage", "running", "waiting"):
        assert k in t, (k, t)
    print(f"vLLM C={cell['concurrency']}: KV mean/peak {100 * t['kv_cache_usage']['mean']:.1f}/"
          f"{100 * t['kv_cache_usage']['peak']:.1f} %, running mean/peak {t['running']['mean']:.1f}/"
          f"{t['running']['peak']:.0f}, waiting mean/peak {t['waiting']['mean']:.1f}/{t['waiting']['peak']:.0f}, "
          f"preemptions {t.get('preemptions')}, {cell['scrape']['scrapes']} scrapes")
lines = sum(1 for _ in open(sys.argv[1] + "/scrape.jsonl"))
rep = json.load(open(sys.argv[2]))
assert all(c.get("engine", {}).get("kv_cache_usage") for c in rep["cells"]), "report cells without engine figures"
print(f"rig test OK: {lines} raw samples in scrape.jsonl; every vLLM metric the report uses found on the real engine; "
      f"KV usage, running and waiting per cell in run.json and the report")
PY
