#!/usr/bin/env bash
# The work tokentap builds do for the same fixed load, counted rather than timed (so a busy
# machine does not move the figures): system calls per request (perf's syscall tracepoints),
# user-space instructions per request (valgrind's callgrind) and heap allocations per request
# (valgrind's dhat), at C=8 in step, for 64-event paced streams and for 1-event ones (the
# difference over 63 is the cost of one more event). scripts/overhead_count.py is the harness:
# its own SSE upstream (real-time priority, core 0), `tokentap serve` on core 1, C clients in
# step. Under valgrind the events are 10 ms apart, so that the slowed proxy still reads them
# one by one (it prints events per client read: 1.0 is event by event).
#
#   scripts/overhead-count.sh BIN [BIN …]        # e.g. this tree's release build and bc11cac's
#   COUNT_TOOLS=syscalls scripts/overhead-count.sh target/release/tokentap
#
# Under valgrind also the full-speed case (`fast`: the upstream writes the 64 events at once).
#
# Env: COUNT_TOOLS (default `syscalls callgrind dhat`), COUNT_C (default 8), COUNT_MODES (the
# valgrind runs' upstream, default `paced fast`), COUNT_OUT (keep the runs' files there:
# perf.data, callgrind and dhat outputs, by binary and tool).
# Needs root (perf tracepoints, real-time priority); installs perf and valgrind if missing. docs/overhead.md has
# figures and what they showed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/overhead-count.sh BIN [BIN …]" >&2; exit 2; }
# perf and valgrind from Debian, when missing.
if ! command -v perf >/dev/null || ! command -v valgrind >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf valgrind >/dev/null
fi
tools=${COUNT_TOOLS:-syscalls callgrind dhat}
c=${COUNT_C:-8}
modes=${COUNT_MODES:-paced fast}
out=${COUNT_OUT:-$(mktemp -d)}
for bin in "$@"; do
  [ -x "$bin" ] || { echo "overhead-count: no binary at $bin" >&2; exit 2; }
  name=$(basename "$bin")-$(sha1sum "$bin" | cut -c1-8)
  for tool in $tools; do
    case $tool in
      syscalls)
        python3 scripts/overhead_count.py --bin "$bin" --tool syscalls --conc "$c" --requests 400 \
          --out "$out/$name/syscalls-c$c"
        python3 scripts/overhead_count.py --bin "$bin" --tool syscalls --conc 1 --requests 48 \
          --out "$out/$name/syscalls-c1" ;;
      callgrind | dhat)
        for mode in $modes; do
          for events in 64 1; do
            python3 scripts/overhead_count.py --bin "$bin" --tool "$tool" --conc "$c" --events "$events" \
              --mode "$mode" --gap-ms 10 --warm 32 --requests $((events == 1 ? 320 : 160)) --top 25 \
              --out "$out/$name/$tool-$mode-e$events"
          done
        done ;;
      *) echo "overhead-count: unknown tool $tool" >&2; exit 2 ;;
    esac
  done
done
echo "files: $out"
