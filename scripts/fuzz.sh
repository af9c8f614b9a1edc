#!/usr/bin/env bash
# Coverage-guided fuzzing with cargo-fuzz (libFuzzer) on the nightly toolchain: every target in
# fuzz/fuzz_targets/ for FUZZ_SECONDS each (default 60), from the seed corpora
# (scripts/fuzz-seeds.sh) and the regression inputs. Prints per target: executions, corpus size,
# coverage (libFuzzer's cov:/ft:) and crashes (inputs in fuzz/artifacts/<target>/). A crash's
# input goes to fuzz/regressions/<target>/ with its fix; `cargo test --test suite fuzz_replay::`
# replays every corpus and regression input on stable.
#   FUZZ_SECONDS=60 scripts/fuzz.sh                # every target
#   FUZZ_SECONDS=300 scripts/fuzz.sh sse_split     # some targets
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
rustup run nightly cargo --version >/dev/null
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
scripts/fuzz-seeds.sh >/dev/null
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do
        t=${f##*/}
        targets+=("${t%.rs}")
    done
fi
cd fuzz
rustup run nightly cargo fuzz build
mkdir -p logs
rows=()
for t in "${targets[@]}"; do
    # Chunk-size and trailer lines are bounded at 8 KiB: let inputs pass it.
    case $t in
    http_chunked) max_len=20000 ;;
    sse_split | event_verdict | report_line) max_len=16384 ;;
    *) max_len=4096 ;;
    esac
    mkdir -p "corpus/$t" "artifacts/$t"
    before=$(find "artifacts/$t" -type f | wc -l)
    extra=()
    [ -d "regressions/$t" ] && extra+=("regressions/$t")
    echo "== $t: ${secs}s"
    set +e
    rustup run nightly cargo fuzz run "$t" "corpus/$t" "${extra[@]}" -- \
        -max_total_time="$secs" -max_len="$max_len" -timeout=10 -print_final_stats=1 \
        >"logs/$t.log" 2>&1
    status=$?
    set -e
    execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "logs/$t.log" | awk '{print $2}' | tail -1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "logs/$t.log" | tail -1)
    corpus=$(find "corpus/$t" -type f | wc -l)
    crashes=$(($(find "artifacts/$t" -type f | wc -l) - before))
    rows+=("$(printf '%-15s %12s %8s  %-22s %7s %s' "$t" "${execs:-?}" "$corpus" "${cov:-?}" "$crashes" \
        "$([ "$status" -ne 0 ] && echo "exit $status: see fuzz/logs/$t.log")")")
    tail -n 3 "logs/$t.log"
done
echo
printf '%-15s %12s %8s  %-22s %7s\n' target executions corpus coverage crashes
printf '%s\n' "${rows[@]}"
