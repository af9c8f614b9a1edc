#!/usr/bin/env bash
# Opt-in: `tokentap report --clickhouse` (the queries of deploy/clickhouse/report.sql) run in
# ClickHouse's own engine (chdb, from PyPI, in a venv under target/) and in a real ClickHouse
# server (Debian's clickhouse-server 18.16, installed here if missing, started on free loopback
# ports with its data in a temporary folder, stopped at the end) over tokentap logs loaded with
# deploy/clickhouse/schema.sql, compared figure by figure with `tokentap report --format json`
# on the same logs. Without arguments it makes its logs with `tokentap demo` (about 80 s):
# bench's records (arms × levels × buckets) and the proxy's (live in-flight levels, a gateway
# tap's inner side left out); copies of them over many keys with failures, client errors,
# throttling and traffic that is not judged; and the report's generated test data.
#
# Then tokentap's [clickhouse] sink against the same server: a proxy in front of `tokentap sim`
# inserts every record while bench drives it; the rows must give the report its own log gives.
# Then the server is stopped: traffic goes on, rows are dropped and counted; started again, rows
# flow again without a restart of tokentap.
#
#   scripts/clickhouse-test.sh [LOG.jsonl ...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q
VENV=target/ch-venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q chdb==4.4.0
fi
WORK=$(mktemp -d)
CH_PID=
SIM_PID=
PX_PID=
source scripts/ch-server.sh
cleanup() {
  stop "$PX_PID"; stop "$SIM_PID"; stop "$CH_PID"
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ "$#" -eq 0 ]; then
  (cd "$WORK" && "$OLDPWD/target/release/tokentap" demo >/dev/null 2>&1)
  # The demo has one key: a copy of its proxy log spread over 30 keys (uneven, so the top 20
  # and their order matter), some of them failing.
  python3 - "$WORK/tokentap-demo/proxy.jsonl" "$WORK/keys.jsonl" <<'PY'
import json, sys
out = open(sys.argv[2], "w")
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    r["key_id"] = f"sha256:{int(30 * (i / 109) ** 2):064x}"
    if i % 13 == 0:
        r["outcome"], r["status"] = "upstream_error", 503
    out.write(json.dumps(r) + "\n")
PY
  # What is not judged, beside what is: bench's A/B records over 5 keys with some of them
  # refused (401, 400 as the client left), throttled (429) or failed (503), and listings,
  # probes and embeddings among them, some without an `api` or a status (older logs).
  python3 - "$WORK/tokentap-demo/bench/requests.jsonl" "$WORK/edges.jsonl" <<'PY'
import json, sys
out = open(sys.argv[2], "w")
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    r["key_id"] = None if i % 23 == 0 else f"sha256:{i % 5:064x}"
    refused = dict(outcome="upstream_error", input_tokens=None, output_tokens=None, ttft_ms=None,
                   ttfo_ms=None, tpot_ms=None, e2e_ms=3.0, ttft_split=None)
    if i % 11 == 3:
        r.update(refused, status=401)
    elif i % 11 == 5:
        r.update(refused, status=429)
    elif i % 11 == 7:
        r.update(outcome="client_cancelled", status=400)
    elif i % 11 == 9:
        r.update(outcome="upstream_error", status=503)
    out.write(json.dumps(r) + "\n")
    if i % 6 == 0:
        other = dict(r, experiment=None, ttft_ms=None, ttfo_ms=None, tpot_ms=None, ttft_split=None,
                     stream=False, outcome="ok", status=200, e2e_ms=1.5)
        for api, method, endpoint in [("models", "GET", "/v1/models"), ("other", "GET", "/health"),
                                      ("embeddings", "POST", "/v1/embeddings")][: 1 + i // 6 % 3]:
            out.write(json.dumps(dict(other, api=api, method=method, endpoint=endpoint)) + "\n")
        old = {k: v for k, v in other.items() if k not in ("api", "status")}
        out.write(json.dumps(dict(old, endpoint="/metrics", method="GET")) + "\n")
PY
  # The report's generated test data: live traffic, bench levels, experiment arms, both sides of
  # a gateway tap, prefix-cache hits and TTFT splits (6,000 records, seed 7).
  cargo run --release --locked -q -p tokentap-test-support --bin records -- 6000 everything >"$WORK/everything.jsonl"
  # A load generator's open-loop cells (offered rates, client queue and lag) and conversation
  # turns (3,000 records, seed 7).
  cargo run --release --locked -q -p tokentap-test-support --bin records -- 3000 load >"$WORK/load.jsonl"
  set -- "$WORK/tokentap-demo/bench/requests.jsonl" "$WORK/tokentap-demo/proxy.jsonl" "$WORK/keys.jsonl" "$WORK/edges.jsonl" "$WORK/everything.jsonl" "$WORK/load.jsonl"
fi
start_ch
echo "clickhouse-server $(curl -fsS "http://127.0.0.1:$HTTP_PORT/?query=SELECT%20version()") on 127.0.0.1:$HTTP_PORT"
for log in "$@"; do
  "$VENV/bin/python" scripts/clickhouse_check.py target/release/tokentap "$log"
  python3 scripts/clickhouse_check.py --server "http://127.0.0.1:$HTTP_PORT" target/release/tokentap "$log"
done

# ---- the sink ----
CH="http://127.0.0.1:$HTTP_PORT"
chq() { curl -fsS "$CH/?database=tokentap_sink" --data-binary "$1"; }
ch_schema tokentap_sink
read -r SIM_PORT PX_PORT ADM_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
mkdir -p "$WORK/sink"
cat >"$WORK/sink/tokentap.toml" <<TOML
[listen]
addr = "127.0.0.1:$PX_PORT"
[admin]
addr = "127.0.0.1:$ADM_PORT"
[log]
path = "$WORK/sink/proxy.jsonl"
[[routes]]
name = "default"
upstream = "http://127.0.0.1:$SIM_PORT"
[clickhouse]
url = "$CH"
database = "tokentap_sink"
batch = 50
flush_ms = 200
timeout_ms = 2000
TOML
target/release/tokentap sim --listen "127.0.0.1:$SIM_PORT" >"$WORK/sink/sim.log" 2>&1 &
SIM_PID=$!
target/release/tokentap serve --config "$WORK/sink/tokentap.toml" >"$WORK/sink/serve.log" 2>&1 &
PX_PID=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$ADM_PORT/readyz" >/dev/null 2>&1 \
    && curl -fsS "http://127.0.0.1:$SIM_PORT/v1/models" >/dev/null 2>&1 && break
  sleep 0.1
done
sink_logs() { tail -n 20 "$WORK/sink/bench.log" "$WORK/sink/serve.log" "$WORK/sink/sim.log" >&2 || true; }
target/release/tokentap bench --target "http://127.0.0.1:$PX_PORT" --out "$WORK/sink/bench" \
  --concurrency 1,4 --requests 8 --warmup 1 --outputs 8,16,32 >"$WORK/sink/bench.log" 2>&1 \
  || { echo "sink: bench through the proxy failed" >&2; sink_logs; exit 1; }
metric() { curl -fsS "http://127.0.0.1:$ADM_PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
rows() { chq "SELECT count() FROM requests" | tr -d '"'; }
wait_for() { for _ in $(seq 200); do eval "$1" && return 0; sleep 0.1; done; echo "timed out: $1" >&2; return 1; }
logged() { wc -l <"$WORK/sink/proxy.jsonl"; }
wait_for '[ "$(rows)" = "$(logged)" ]'
split=$(chq "SELECT countIf(isNotNull(ttft_split_proxy_ms)) FROM requests" | tr -d '"')
want_split=$(grep -c '"ttft_split":{' "$WORK/sink/proxy.jsonl" || true)
[ "$split" = "$want_split" ] || { echo "ttft_split in $split rows, $want_split records" >&2; exit 1; }
echo "sink: $(rows) rows in ClickHouse, $(logged) records in the log, the TTFT split in $split of them"
"$VENV/bin/python" scripts/clickhouse_check.py --server "$CH" --sink-db tokentap_sink \
  target/release/tokentap "$WORK/sink/proxy.jsonl"

# Down: every request still served at once; its rows dropped and counted.
stop "$CH_PID"; CH_PID=
before=$(logged)
chat() {
  curl -fsS -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$PX_PORT/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d '{"model":"sim-qwen2.5-7b","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
}
slowest=$(for _ in $(seq 20); do chat; done \
  | awk '$1 != 200 { bad = 1 } { if ($2 > m) m = $2 } END { if (bad) print "failed"; else print m }')
[ "$slowest" != failed ] || { echo "a request failed while ClickHouse was down" >&2; exit 1; }
DROPPED='tokentap_records_dropped_total{sink="clickhouse"}'
wait_for '[ "$(metric "$DROPPED")" = 20 ]'
echo "sink, ClickHouse down: 20 requests served (slowest ${slowest} s), $(metric "$DROPPED") rows dropped and counted, $(metric tokentap_clickhouse_insert_failures_total) INSERTs failed"
# Back up: rows flow again, without restarting tokentap.
start_ch
for _ in $(seq 10); do chat >/dev/null; done
wait_for '[ "$(rows)" = "$(( before + 10 ))" ]'
echo "sink, ClickHouse back: $(rows) rows ($(metric tokentap_clickhouse_rows_inserted_total) inserted, $(metric "$DROPPED") dropped, $(logged) records in the log)"
echo "PASS"
