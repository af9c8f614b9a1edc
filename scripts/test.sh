#!/usr/bin/env bash
# The whole test suite, as CI runs it: format, lints, then every test.
# Needs only the Rust toolchain; opt-in suites against real vLLM/LiteLLM are in scripts/rig-test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked --all-targets
