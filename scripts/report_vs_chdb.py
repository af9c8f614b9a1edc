"""tokentap report against ClickHouse's own engine (chdb, one thread) on the same log.

The report must stay at least 1.5x as fast as chdb doing less: one grouped query (count,
errors, exact TTFT / TPOT / E2E quantiles, token sums and the median gap, per route, bucket
and level) over the same JSON lines, with `max_threads = 1` and `input_format_parallel_parsing
= 0`, and the columns declared (no schema inference). tokentap's whole report (every section)
runs as `tokentap report --format json --exact-values 0 LOG`, one process. Each is run
ROUNDS times, alternating; the best CPU time of each is compared.

    python scripts/report_vs_chdb.py TOKENTAP LOG [ROUNDS]

Needs chdb (scripts/clickhouse-test.sh installs chdb 4.4 in target/ch-venv). Make a log with
`REPORT_BENCH_RECORDS=1000000 cargo bench --bench report` (target/report-bench/).
"""
import os
import resource
import subprocess
import sys
import time

import chdb

COLUMNS = (
    "route String, bucket Nullable(String), concurrency Nullable(UInt64), outcome String, "
    "ttft_ms Nullable(Float64), tpot_ms Nullable(Float64), e2e_ms Float64, "
    "output_tokens Nullable(UInt64), input_tokens Nullable(UInt64), itl_p50_ms Nullable(Float64)"
)


def chdb_once(log):
    q = f"""
    SELECT route, bucket, concurrency, count(), countIf(outcome != 'ok'),
      quantilesExact(0.5, 0.95, 0.99)(ttft_ms), quantilesExact(0.5, 0.95, 0.99)(tpot_ms),
      quantilesExact(0.5, 0.95, 0.99)(e2e_ms), sum(output_tokens), sum(input_tokens),
      quantileExact(0.5)(itl_p50_ms)
    FROM file('{log}', 'JSONEachRow', '{COLUMNS}')
    GROUP BY route, bucket, concurrency
    SETTINGS max_threads = 1, input_format_parallel_parsing = 0,
             input_format_skip_unknown_fields = 1
    """
    c0, t0 = time.process_time(), time.perf_counter()
    out = chdb.query(q, "CSV").bytes()
    assert out, "chdb returned nothing"
    return time.process_time() - c0, time.perf_counter() - t0


def tokentap_once(tokentap, log):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([tokentap, "report", "--format", "json", "--exact-values", "0", log],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tokentap, log = sys.argv[1], os.path.abspath(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tt, ch = [], []
    for _ in range(rounds):
        tt.append(tokentap_once(tokentap, log))
        ch.append(chdb_once(log))
    (tc, tw), (cc, cw) = min(tt), min(ch)
    print(f"{log}: {os.path.getsize(log) / 1e9:.2f} GB, best of {rounds}")
    print(f"tokentap report (every section): {tc:.2f} s CPU, {tw:.2f} s wall")
    print(f"chdb, one thread (one grouped query): {cc:.2f} s CPU, {cw:.2f} s wall")
    ratio = cc / tc
    print(f"tokentap is {ratio:.1f}x chdb (CPU); required: 1.5x")
    sys.exit(0 if ratio >= 1.5 else 1)


if __name__ == "__main__":
    main()
