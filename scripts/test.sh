#!/usr/bin/env bash
# The whole test suite, as CI runs it: format, lints, then every test target (benches run in
# test mode, once each). Every test binary runs even when one fails (--no-fail-fast), so one
# failure never hides another. Needs the Rust toolchain and a C compiler (make is installed here
# when missing).
#
# Opt-in suites against real software (each installs what it needs and stops what it starts):
# - scripts/rig-test.sh, scripts/rig-tap.sh, scripts/record-live-logs.sh: the rig's vLLM + LiteLLM;
# - scripts/kernel-stamps.sh: the rig and tcpdump (records against a packet capture);
# - scripts/capture-shapes.sh, scripts/capture-stops.sh: re-record the rig's SSE fixtures;
# - scripts/report-screenshot.sh, scripts/report-layout-test.sh: Chromium;
# - scripts/prometheus-test.sh, scripts/grafana-test.sh: Prometheus (promtool);
# - scripts/kubernetes-test.sh: kubernetes-validate and promtool;
# - scripts/cluster-test.sh: all three, plus stdout records, OTLP, reload and kill -9;
# - scripts/container-test.sh: buildah;
# - scripts/clickhouse-test.sh: chdb and clickhouse-server;
# - scripts/nginx-stream-test.sh: nginx between a tap's routes, with and without gzip;
# - scripts/connect-burst.sh: a burst of new connections through tokentap, nginx and HAProxy;
# - scripts/client-error.sh: bench's and AIPerf's own TTFT error through tokentap (PyPI);
# - scripts/bench-ceiling.sh: bench's requests/s and events/s beside wrk's on the mock with no
#   delay, each on its own core (wrk from apt-get);
# - scripts/gateway-board.sh: the gateway board over nginx, HAProxy, Caddy, LiteLLM and Portkey's
#   gateway (apt-get, PyPI, npm);
# - scripts/report_vs_chdb.py: the report against chdb on one thread (chdb, a 1 M-record log);
# - scripts/overhead.sh, scripts/overhead-gate.sh, scripts/overhead-trace.sh: the proxy's own
#   cost beside nginx and HAProxy (release builds, a quiet machine);
# - scripts/fuzz.sh (and scripts/fuzz-seeds.sh, its seed corpus): nightly and cargo-fuzz;
# - scripts/soak.sh: the sim, 30 minutes.
# The checks of these that need no outside software are in the suite (e.g. tests/suite/deploy.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
# jemalloc (the binary's allocator) builds from C with make: installed here on a bare machine.
if ! command -v make >/dev/null && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --locked --all-targets --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
echo "tests: $passed passed, $failed failed"
exit "$status"
