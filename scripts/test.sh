#!/usr/bin/env bash
# The whole test suite, as CI runs it: format, lints, then every test target (benches run in
# test mode, once each). Needs only the Rust toolchain; the opt-in suites against real software
# are scripts/rig-test.sh and scripts/rig-tap.sh (vLLM + LiteLLM), scripts/report-screenshot.sh
# (Chromium), scripts/prometheus-test.sh and scripts/grafana-test.sh (Prometheus),
# scripts/kubernetes-test.sh (kubernetes-validate), scripts/cluster-test.sh (all three, plus
# stdout records, OTLP, reload and kill -9), scripts/container-test.sh (buildah),
# scripts/clickhouse-test.sh (chdb and clickhouse-server), scripts/report-layout-test.sh
# (Chromium), scripts/record-live-logs.sh (the rig), scripts/fuzz.sh (nightly, cargo-fuzz) and
# scripts/soak.sh (the sim, 30 minutes) and scripts/nginx-stream-test.sh (nginx between a tap's
# routes, with and without gzip).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --locked --all-targets 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -E '^test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
echo "tests: $passed passed, $failed failed"
exit "$status"
