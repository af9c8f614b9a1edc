#!/usr/bin/env bash
# Opt-in: check tokentap's Prometheus rules and run their unit tests with promtool (Debian's
# `prometheus` package, installed here if missing).
#
#   scripts/prometheus-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v promtool >/dev/null; then
  apt-get install -y prometheus >/dev/null
fi
promtool check rules deploy/prometheus/tokentap-rules.yml
promtool test rules deploy/prometheus/tokentap-rules.test.yml
