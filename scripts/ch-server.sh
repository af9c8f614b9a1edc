# Sourced by the opt-in scripts that need a real ClickHouse: Debian's clickhouse-server (18.16),
# installed if missing, on free loopback ports with its data in "$WORK/ch". Sets HTTP_PORT and
# CH_PID, and defines start_ch (start and wait for /ping), ch_schema DB (the database made anew
# with deploy/clickhouse/schema.sql) and stop PID. The caller stops CH_PID.
command -v clickhouse-server >/dev/null || apt-get install -y clickhouse-server >/dev/null
stop() { if [ -n "$1" ]; then kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; fi; }
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
start_ch() {
  (cd "$WORK/ch" && exec clickhouse-server --config-file="$WORK/ch/config.xml" >>"$WORK/ch/log/stdout.log" 2>&1) &
  CH_PID=$!
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$HTTP_PORT/ping" >/dev/null 2>&1 && return
    sleep 0.2
  done
  echo "clickhouse-server did not start" >&2; exit 1
}
ch_schema() {
  curl -fsS "http://127.0.0.1:$HTTP_PORT/" --data-binary "DROP DATABASE IF EXISTS $1" >/dev/null
  curl -fsS "http://127.0.0.1:$HTTP_PORT/" --data-binary "CREATE DATABASE $1" >/dev/null
  python3 - <<'PY' | while IFS= read -r -d '' stmt; do curl -fsS "http://127.0.0.1:$HTTP_PORT/?database=$1" --data-binary "$stmt" >/dev/null; done
import sys
# Comments out first: one may hold a `;`.
schema = "\n".join(l for l in open("deploy/clickhouse/schema.sql").read().splitlines() if not l.strip().startswith("--"))
for stmt in schema.split(";"):
    body = stmt.strip()
    if body:
        sys.stdout.write(body + "\0")
PY
}
