"""Load tokentap JSONL logs into ClickHouse's own engine (chdb) with deploy/clickhouse/schema.sql,
run deploy/clickhouse/report.sql, and compare every cell with `tokentap report --format json`
on the same files: equal (percentiles and counts exactly, aggregate tok/s to 1e-7). Usage: clickhouse_check.py TOKENTAP FILE..."""
import json
import subprocess
import sys

from chdb import session

TT, FILES = sys.argv[1], sys.argv[2:]


def flatten(r):
    """A record as a row of the requests table: nested objects flattened with `_`."""
    row = {k: v for k, v in r.items() if not isinstance(v, dict)}
    exp = r.get("experiment") or {}
    row["experiment_arm"] = exp.get("arm")
    row["experiment_pair_id"] = exp.get("pair_id")
    for k, v in (r.get("gateway_tap") or {}).items():
        row[f"tap_{k}"] = v
    row["stream"] = 1 if r.get("stream") else 0
    return row


rows = []
for f in FILES:
    with open(f, "rb") as fh:
        for line in fh:
            line = line.strip()
            if line:
                rows.append(json.dumps(flatten(json.loads(line))))

s = session.Session()
s.query("CREATE DATABASE IF NOT EXISTS tt")
s.query("USE tt")
for stmt in open("deploy/clickhouse/schema.sql").read().split(";"):
    body = "\n".join(l for l in stmt.splitlines() if not l.strip().startswith("--")).strip()
    if body:
        s.query(body)
s.query("INSERT INTO requests SETTINGS input_format_skip_unknown_fields = 1 FORMAT JSONEachRow\n" + "\n".join(rows))
got = [json.loads(l) for l in str(s.query(open("deploy/clickhouse/report.sql").read())).splitlines() if l.strip()]

rep = json.loads(subprocess.run([TT, "report", *FILES, "--format", "json"], check=True,
                                capture_output=True, text=True).stdout)
want = {(c["bucket"], c["arm"], c["concurrency"]): c for c in rep["cells"]}
assert len(got) == len(want), f"{len(got)} cells in ClickHouse, {len(want)} in the report"


def same(a, b, rel=1e-9):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


fields = [("requests", lambda c: c["requests"]), ("errors", lambda c: c["errors"]),
          ("error_rate", lambda c: c["error_rate"]),
          ("aggregate_tok_s", lambda c: c["aggregate_tok_s"]),
          ("tok_s_per_stream_p50", lambda c: c["tok_s_per_stream"]["p50"])]
for m in ["ttft", "tpot", "e2e"]:
    for p in ["p50", "p95", "p99"]:
        fields.append((f"{m}_{p}", lambda c, m=m, p=p: c[f"{m}_ms"][p]))
fields.append(("ttft_max", lambda c: c["ttft_ms"]["max"]))
checked = 0
for g in got:
    key = (g["bucket_"], g["arm"], g["label"])
    c = want.get(key)
    assert c is not None, f"ClickHouse has a cell the report does not: {key}"
    for name, of in fields:
        a, b = g[name], of(c)
        # The cell's wall time: the report adds E2E to the start as a Duration (nanoseconds),
        # SQL as float microseconds: they agree to about 1e-9, not to the last bit.
        rel = 1e-7 if name == "aggregate_tok_s" else 1e-12
        assert same(a, b, rel), f"{key} {name}: ClickHouse {a}, report {b}"
        checked += 1
print(f"{len(rows)} records, {len(got)} cells, {checked} figures: ClickHouse (chdb) equals tokentap report")
