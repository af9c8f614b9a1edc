#!/usr/bin/env bash
# The proxy-overhead benchmark, side by side with nginx and HAProxy (Debian packages, installed
# here if missing): same in-process SSE upstream, same load, interleaved rounds. The proxies run
# pinned to core 1, the load generator and upstream to core 0 (on a 2-core machine).
#   scripts/overhead.sh                 # full run (~7 min on 2 cores, the release build first)
#   OVERHEAD_QUICK=1 OVERHEAD_STREAMS=2000 scripts/overhead.sh
#   OVERHEAD_PROXIES=tokentap,nginx,haproxy,tcp-relay,hyper-only,hyper-tt OVERHEAD_STREAMS=0 \
#     OVERHEAD_H2_STREAMS=0 scripts/overhead.sh   # with three reference proxies (docs/overhead.md)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nginx >/dev/null || ! command -v haproxy >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light haproxy >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx haproxy >/dev/null
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# The tokentap measured is the release build users run, copied out before the bench's own build
# (which has the dev-dependencies' features, tokio's test-util among them) replaces it.
cargo build --release --locked
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp target/release/tokentap "$scratch/tokentap"
export OVERHEAD_TOKENTAP="${OVERHEAD_TOKENTAP:-$scratch/tokentap}"
cores=$(nproc)
if [ "$cores" -ge 2 ]; then
  export OVERHEAD_PROXY_CPU=1
  taskset -c 0 cargo bench --locked --bench overhead
else
  cargo bench --locked --bench overhead
fi
