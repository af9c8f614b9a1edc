#!/usr/bin/env bash
# Opt-in: every query of the Grafana dashboard (deploy/grafana/tokentap-dashboard.json), evaluated
# by a real Prometheus (Debian's, installed here if missing) scraping a tokentap under load:
# the simulated engine, a simulated 20±2 ms gateway hop tapped on both sides, bench on both
# paths with an API key. Each query must return data. Also checks that the ConfigMap carries the
# same dashboard. Everything runs on loopback and is stopped at the end.
#
#   scripts/grafana-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v prometheus >/dev/null || apt-get install -y prometheus >/dev/null
cargo build --release --locked -q
TT=target/release/tokentap
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ENGINE=$(free_port); HOP=$(free_port); LISTEN=$(free_port); ADMIN=$(free_port); PROM=$(free_port)

cat > "$WORK/tap.toml" <<EOF
[listen]
addr = "127.0.0.1:$LISTEN"
[admin]
addr = "127.0.0.1:$ADMIN"
[log]
path = "off"
[[routes]]
name = "direct"
upstream = "http://127.0.0.1:$ENGINE"
[[routes]]
name = "gateway"
upstream = "http://127.0.0.1:$HOP"
path_prefix = "/gateway"
[[routes]]
name = "engine"
upstream = "http://127.0.0.1:$ENGINE"
path_prefix = "/engine"
behind = "gateway"
behind_sources = ["127.0.0.1"]
EOF
"$TT" serve --config "$WORK/tap.toml" 2> "$WORK/tokentap.err" &
PIDS+=($!)
"$TT" sim --listen "127.0.0.1:$ENGINE" --gateway-hop 20±2 --hop-listen "127.0.0.1:$HOP" \
  --hop-upstream "http://127.0.0.1:$LISTEN/engine" 2> "$WORK/sim.err" &
PIDS+=($!)
cat > "$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tokentap
    static_configs:
      - targets: ["127.0.0.1:$ADMIN"]
EOF
prometheus --config.file "$WORK/prometheus.yml" --storage.tsdb.path "$WORK/tsdb" \
  --web.listen-address "127.0.0.1:$PROM" 2> "$WORK/prometheus.err" &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PROM/-/ready" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$PROM/-/ready" >/dev/null

# Load on both paths for about 40 s, with a key (for the per-key panel).
export OPENAI_API_KEY=sk-dashboard-test
for base in "" /gateway; do
  "$TT" bench --target "http://127.0.0.1:$LISTEN$base" --out "$WORK/bench$(echo "$base" | tr / _)" \
    --concurrency 1,4 --requests 40 --warmup 0 --outputs 8,16,16 --prompts-per-bucket 10 \
    --no-calibrate > /dev/null 2>&1 &
  PIDS+=($!)
done
sleep 30

python3 - "$PROM" deploy/grafana/tokentap-dashboard.json deploy/grafana/configmap.yaml <<'PY'
import json, math, sys, urllib.parse, urllib.request
prom, dash_path, cm_path = sys.argv[1:]
dash = json.load(open(dash_path))
# The ConfigMap carries the same dashboard.
cm = open(cm_path).read().split("tokentap.json: |\n", 1)[1]
assert json.loads("".join(l[4:] + "\n" for l in cm.splitlines())) == dash, "configmap.yaml is stale"
failed = 0
for p in dash["panels"]:
    for t in p["targets"]:
        expr = t["expr"].replace("$__rate_interval", "1m").replace("$route", ".*")
        url = f"http://127.0.0.1:{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        res = json.load(urllib.request.urlopen(url))["data"]["result"]
        vals = [float(r["value"][1]) for r in res]
        ok = any(not math.isnan(v) for v in vals)
        failed += not ok
        print(f"{'ok ' if ok else 'NO DATA'} {p['title'][:48]:48s} {t['legendFormat']:28s} {len(res)} series")
assert failed == 0, f"{failed} queries returned no data"
print(f"every dashboard query returned data ({sum(len(p['targets']) for p in dash['panels'])} queries)")
PY
