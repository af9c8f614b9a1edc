#!/usr/bin/env bash
# Where each proxy's time goes at C=1, from the kernel's own clock: runs the C=1 cell of the
# overhead bench (scripts/overhead.sh) under `perf record` with syscall tracepoints,
# then splits every proxy's two legs on its (cold) core:
#   request leg:      woken → recv of the client's request → write to the upstream done
#   first event leg:  woken → recv of the first event      → write to the client done
# "woken → recv" is the event loop's share (epoll_wait returning to the read: the runtime, the
# connection's state machine); "recv → write" is the proxy's own work (parse, route, measure).
# A leg starts at a wake-up after at least 2 ms asleep, so it is the cold case of C=1.
#   scripts/overhead-trace.sh           # about a minute; needs root (perf tracepoints) and perf
#   TRACE_ROUNDS=12 scripts/overhead-trace.sh
# perf runs on core 0 and records core 1 only, where the proxies run; it adds a few µs to every
# syscall of every proxy alike. Tracepoints, not sampling: nothing is estimated.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "overhead-trace: perf is not installed (linux-perf)" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "overhead-trace: needs 2 cores (proxies on core 1)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Both builds overhead.sh makes are done before perf starts recording.
cargo build --release --locked >/dev/null 2>&1
cargo bench --locked --bench overhead --no-run >/dev/null 2>&1
OVERHEAD_PROXIES=${OVERHEAD_PROXIES:-tokentap,nginx,haproxy} OVERHEAD_ROUNDS=${TRACE_ROUNDS:-6} \
  OVERHEAD_LATENCY_C=1 OVERHEAD_SPREAD_C= OVERHEAD_FULL_C= OVERHEAD_STREAMS=0 OVERHEAD_H2_STREAMS=0 \
  scripts/overhead.sh >"$out/bench.txt" 2>&1 &
bench=$!
# perf's own syscalls are filtered out (it runs on core 0, but its pid would match anyway).
taskset -c 0 sh -c 'exec perf record -q -o "$1" -C 1 \
  -e raw_syscalls:sys_enter --filter "common_pid != $$" \
  -e raw_syscalls:sys_exit --filter "common_pid != $$"' _ "$out/perf.data" \
  >/dev/null 2>&1 &
perf_pid=$!
wait "$bench" || true
kill -INT "$perf_pid" 2>/dev/null || true
wait "$perf_pid" 2>/dev/null || true
grep -A4 '^proxy ' "$out/bench.txt" | head -5
perf script -i "$out/perf.data" -F comm,tid,time,event,trace 2>/dev/null | python3 -c '
import re, statistics, sys
# comm on core 1 -> proxy name; tokentap runs its worker as tokio-rt-worker.
NAMES = {"tokio-rt-worker": "tokentap", "nginx": "nginx", "haproxy": "haproxy"}
RECV, SEND, WAIT = {"0", "17", "19", "45", "47"}, {"1", "18", "20", "44", "46"}, {"7", "232", "281"}
calls, cur = {}, {}
for line in sys.stdin:
    m = re.match(r"\s*(\S+)\s+(\d+)\s+(\d+\.\d+):\s+raw_syscalls:sys_(enter|exit):\s*NR (\d+)(.*)", line)
    if not m or m.group(1) not in NAMES:
        continue
    tid, t, kind, nr = m.group(2), float(m.group(3)), m.group(4), m.group(5)
    if kind == "enter":
        cur[tid] = (t, nr)
    elif tid in cur:
        start, nr0 = cur.pop(tid)
        ret = re.search(r"= (-?\d+)", m.group(6))
        calls.setdefault((NAMES[m.group(1)], tid), []).append((start, t, nr0, int(ret.group(1)) if ret else 0))
legs, seen = {}, {}
for (name, _), cs in calls.items():
    for i, (s, e, nr, _) in enumerate(cs):
        if nr not in WAIT or e - s < 0.002:
            continue
        rest = cs[i + 1:i + 16]
        r = next((c for c in rest if c[2] in RECV and c[3] > 0), None)
        if r is None:
            continue
        w = next((c for c in rest if c[2] in SEND and c[0] > r[1]), None)
        if w is None:
            continue
        # 126 bytes: one event as a chunk; the request head is 50-60 bytes (anything else, e.g.
        # a connection the bench opens for its own checks, is no leg of a paced request).
        kind = {126: "first event"}.get(r[3], "request" if 40 <= r[3] <= 100 and r[3] != 80 else None)
        if kind is None:
            continue
        seen.setdefault(name, []).append((e, kind, (r[0] - e) * 1e6, (w[1] - r[1]) * 1e6))
# A request leg counts only if the first event of its stream followed 20 ms later (the
# upstream holds it 20 ms): anything else that woke the proxy is no leg of a paced request.
for name, ls in seen.items():
    ls.sort()
    for i, (e, kind, a, b) in enumerate(ls):
        if kind != "first event":
            continue
        legs.setdefault((name, kind), []).append((a, b))
        req = [l for l in ls[max(0, i - 4):i] if l[1] == "request" and 0.0195 <= e - l[0] <= 0.0225]
        if req:
            legs.setdefault((name, "request"), []).append(req[-1][2:])
print("cold legs at C=1, µs (p50 over n legs): woken → recv | recv → write done | total")
for name in ("tokentap", "nginx", "haproxy"):
    for kind in ("request", "first event"):
        v = legs.get((name, kind))
        if not v:
            continue
        a = statistics.median(x for x, _ in v)
        b = statistics.median(y for _, y in v)
        c = statistics.median(x + y for x, y in v)
        print(f"{name:<9} {kind:<12} n={len(v):<4} {a:6.0f} | {b:6.0f} | {c:6.0f}")
'
