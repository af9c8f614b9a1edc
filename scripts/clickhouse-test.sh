#!/usr/bin/env bash
# Opt-in: deploy/clickhouse/report.sql run in ClickHouse's own engine (chdb, from PyPI, in a venv
# under target/) over tokentap logs loaded with deploy/clickhouse/schema.sql, compared cell by
# cell with `tokentap report --format json` on the same logs. Without arguments it makes its
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
if [ "$#" -eq 0 ]; then
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  (cd "$WORK" && "$OLDPWD/target/release/tokentap" demo >/dev/null)
  set -- "$WORK/tokentap-demo/bench/requests.jsonl" "$WORK/tokentap-demo/proxy.jsonl"
fi
for log in "$@"; do
  "$VENV/bin/python" scripts/clickhouse_check.py target/release/tokentap "$log"
done
