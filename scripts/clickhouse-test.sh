#!/usr/bin/env bash
# Opt-in: deploy/clickhouse/report.sql run in ClickHouse's own engine (chdb, from PyPI, in a venv
# under target/) and in a real ClickHouse server (Debian's clickhouse-server 18.16, installed here
# if missing, started on free loopback ports with its data in a temporary folder, stopped at the
# end) over tokentap logs loaded with deploy/clickhouse/schema.sql, compared cell by cell with
# `tokentap report --format json` on the same logs. Without arguments it makes its
# logs with `tokentap demo` (about 80 s): bench's records (arms × levels × buckets) and the
# proxy's (live in-flight levels, a gateway tap's inner side left out).
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
command -v clickhouse-server >/dev/null || apt-get install -y clickhouse-server >/dev/null
WORK=$(mktemp -d)
CH_PID=
cleanup() {
  if [ -n "$CH_PID" ]; then kill -TERM "$CH_PID" 2>/dev/null || true; wait "$CH_PID" 2>/dev/null || true; fi
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
  set -- "$WORK/tokentap-demo/bench/requests.jsonl" "$WORK/tokentap-demo/proxy.jsonl" "$WORK/keys.jsonl"
fi
# A copy of Debian's config with data, logs and ports of its own.
HTTP_PORT=$(python3 - "$WORK/ch" <<'PY'
import re, socket, sys, os
d = sys.argv[1]
os.makedirs(d + "/log")
s = open("/etc/clickhouse-server/config.xml").read()
def port():
    x = socket.socket(); x.bind(("127.0.0.1", 0)); p = x.getsockname()[1]; x.close(); return p
http = port()
for tag, val in [("http_port", http), ("tcp_port", port()), ("interserver_http_port", port()),
                 ("path", d + "/data/"), ("tmp_path", d + "/tmp/"), ("user_files_path", d + "/user_files/"),
                 ("format_schema_path", d + "/format_schemas/"), ("log", d + "/log/server.log"),
                 ("errorlog", d + "/log/error.log")]:
    s = re.sub(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{val}</{tag}>", s, count=1)
s = re.sub(r"<(listen_host|https_port|mysql_port)>[^<]*</\1>", "", s)
s = s.replace("<http_port>", "<listen_host>127.0.0.1</listen_host>\n<http_port>", 1)
open(d + "/config.xml", "w").write(s)
print(http)
PY
)
cp /etc/clickhouse-server/users.xml "$WORK/ch/"
(cd "$WORK/ch" && exec clickhouse-server --config-file="$WORK/ch/config.xml" >"$WORK/ch/log/stdout.log" 2>&1) &
CH_PID=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$HTTP_PORT/ping" >/dev/null 2>&1 && break
  sleep 0.2
done
echo "clickhouse-server $(curl -fsS "http://127.0.0.1:$HTTP_PORT/?query=SELECT%20version()") on 127.0.0.1:$HTTP_PORT"
for log in "$@"; do
  "$VENV/bin/python" scripts/clickhouse_check.py target/release/tokentap "$log"
  python3 scripts/clickhouse_check.py --server "http://127.0.0.1:$HTTP_PORT" target/release/tokentap "$log"
done
