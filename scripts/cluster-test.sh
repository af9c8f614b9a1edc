#!/usr/bin/env bash
# Opt-in: everything tokentap brings to a cluster, in one run (see docs/cluster.md):
#   1. every Kubernetes manifest validates (scripts/kubernetes-test.sh);
#   2. promtool checks the rules and runs their unit tests (scripts/prometheus-test.sh);
#   3. a real Prometheus scrapes a loaded tokentap and every dashboard query returns data
#      (scripts/grafana-test.sh);
#   4. records on stdout (`--log -`), diagnostics on stderr;
#   5. OTLP spans received and parsed with the opentelemetry-proto package;
#   6. a reload mid-stream: the stream completes, new requests take the new upstream, a bad
#      config is refused;
#   7. kill -9 under load leaves whole lines, and a restart appends.
# Installs what it needs (Debian's prometheus, a venv under target/), runs on loopback only and
# stops everything it started.
#
#   scripts/cluster-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== 1. manifests";   scripts/kubernetes-test.sh
echo "== 2. rules";       scripts/prometheus-test.sh
echo "== 3. dashboard";   scripts/grafana-test.sh
cargo build --release --locked -q
VENV=target/cluster-venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q opentelemetry-proto==1.27.0
fi
exec "$VENV/bin/python" scripts/cluster_test.py target/release/tokentap
