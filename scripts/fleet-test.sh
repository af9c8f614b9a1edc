#!/usr/bin/env bash
# Opt-in: a distributed bench run on one machine, read back as one run by its folders and from
# ClickHouse (docs/bench.md, "One run from many processes"). The paced mock (`tokentap sim
# --pace 50,10,100`) behind two `tokentap serve` replicas; four `bench --shard I/4` processes,
# two through each replica, with one --start-at and --cell-window, inserting their records into a
# real clickhouse-server (Debian's, installed if missing, on loopback); then one bench process
# with the same load. Checked: every request of the plan once; `report` of the shard folders
# equals `report --clickhouse --run-id` cell by cell (counts and exact percentiles); the
# fleet's TTFT and TPOT agree with the single process's. Everything it starts, it stops.
#
#   scripts/fleet-test.sh   (FLEET_LEVELS, default 8,32; FLEET_REQUESTS a cell, default 128)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q
TT=target/release/tokentap
WORK=$(mktemp -d)
CH_PID= SIM_PID= PX1= PX2=
source scripts/ch-server.sh
cleanup() { stop "$PX1"; stop "$PX2"; stop "$SIM_PID"; stop "$CH_PID"; rm -rf "$WORK"; }
trap cleanup EXIT
start_ch
ch_schema tokentap_fleet
CH="http://127.0.0.1:$HTTP_PORT"
read -r SIM A B < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
ulimit -n 65536 2>/dev/null || true
"$TT" sim --listen "127.0.0.1:$SIM" --pace 50,10,100 >"$WORK/sim.log" 2>&1 & SIM_PID=$!
"$TT" serve --upstream "http://127.0.0.1:$SIM" --listen "127.0.0.1:$A" --admin off --log "$WORK/a.jsonl" >"$WORK/a.log" 2>&1 & PX1=$!
"$TT" serve --upstream "http://127.0.0.1:$SIM" --listen "127.0.0.1:$B" --admin off --log "$WORK/b.jsonl" >"$WORK/b.log" 2>&1 & PX2=$!
for p in "$SIM" "$A" "$B"; do
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$p/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
done
LEVELS=${FLEET_LEVELS:-8,32}
N=${FLEET_REQUESTS:-128}
load=(--concurrency "$LEVELS" --requests "$N" --warmup 8 --buckets balanced --no-estimate --scrape off)
START=$(date -u -d '+8 sec' +%Y-%m-%dT%H:%M:%SZ)
pids=()
for i in 1 2 3 4; do
  port=$([ "$i" -le 2 ] && echo "$A" || echo "$B")
  "$TT" bench --target "http://127.0.0.1:$port" "${load[@]}" --out "$WORK/run" \
    --shard "$i/4" --start-at "$START" --cell-window 20s \
    --clickhouse "$CH" --clickhouse-table tokentap_fleet.requests >"$WORK/shard-$i.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { tail -n 20 "$WORK"/shard-*.log >&2; exit 1; }; done
RUN_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$WORK/run/shard-1-of-4/run.json")
echo "4 shards of run $RUN_ID done; $(cat "$WORK"/run/shard-*/requests.jsonl | wc -l) records"
"$TT" bench --target "http://127.0.0.1:$A" "${load[@]}" --out "$WORK/single" >"$WORK/single.log" 2>&1
"$TT" report --format json --whole-cell "$WORK/run" >"$WORK/files.json"
"$TT" report --format json --clickhouse "$CH" --clickhouse-table tokentap_fleet.requests --run-id "$RUN_ID" >"$WORK/ch.json"
"$TT" report --format json --whole-cell "$WORK/single" >"$WORK/single.json"
python3 - "$WORK" "$LEVELS" "$N" <<'PY'
import json, sys
work, levels, n = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
files, ch, single = (json.load(open(f"{work}/{f}.json")) for f in ("files", "ch", "single"))
cells = lambda r: {c["concurrency"]: c for c in r["cells"]}
F, C, S = cells(files), cells(ch), cells(single)
assert files["distributed"]["present"] == [1, 2, 3, 4], files["distributed"]
assert ch["distributed"]["present"] == [1, 2, 3, 4], ch["distributed"]
print("| C | requests | TTFT p50 / p99 ms (fleet) | (ClickHouse) | (one process) | TPOT p50 ms (fleet / one) |")
print("| ---: | ---: | --- | --- | --- | --- |")
for lv in levels:
    f, c, s = F[lv], C[lv], S[lv]
    assert f["requests"] == c["requests"] == n, (lv, f["requests"], c["requests"])
    for m in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for p in ("p50", "p95", "p99"):
            a, b = f[m][p], c[m][p]
            assert abs(a - b) <= 1e-6 * max(1, abs(a)), (lv, m, p, a, b)
    # The paced mock answers alike at any load: one process and the fleet read the same
    # TTFT and TPOT, to within a few ms of the mock's own lateness.
    assert abs(f["ttft_ms"]["p50"] - s["ttft_ms"]["p50"]) < 5, (lv, f["ttft_ms"], s["ttft_ms"])
    assert abs(f["tpot_ms"]["p50"] - s["tpot_ms"]["p50"]) < 1, (lv, f["tpot_ms"], s["tpot_ms"])
    print(f"| {lv} | {f['requests']} | {f['ttft_ms']['p50']:.2f} / {f['ttft_ms']['p99']:.2f} | "
          f"{c['ttft_ms']['p50']:.2f} / {c['ttft_ms']['p99']:.2f} | {s['ttft_ms']['p50']:.2f} / {s['ttft_ms']['p99']:.2f} | "
          f"{f['tpot_ms']['p50']:.2f} / {s['tpot_ms']['p50']:.2f} |")
PY
echo "PASS"
