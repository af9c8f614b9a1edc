"""Load tokentap JSONL logs into ClickHouse's own engine (chdb), or with --server URL into a
ClickHouse server over its HTTP interface, with deploy/clickhouse/schema.sql,
run deploy/clickhouse/report.sql, and compare every cell with `tokentap report --format json`
on the same files: equal (percentiles and counts exactly, aggregate tok/s to 1e-6).
With --sink-db DB the rows are not loaded: they are the ones tokentap's [clickhouse] sink inserted
into DB.requests while it wrote FILE (its own log), so the check is that the sink's rows give the
report the log gives. Usage: clickhouse_check.py [--server URL [--sink-db DB]] TOKENTAP FILE..."""
import json
import subprocess
import sys
import urllib.parse
import urllib.request

args = sys.argv[1:]
SERVER = None
if args[:1] == ["--server"]:
    SERVER, args = args[1], args[2:]
SINK_DB = None
if args[:1] == ["--sink-db"]:
    SINK_DB, args = args[1], args[2:]
TT, FILES = args[0], args[1:]


def flatten(r):
    """A record as a row of the requests table: nested objects flattened with `_`."""
    row = {k: v for k, v in r.items() if not isinstance(v, dict)}
    exp = r.get("experiment") or {}
    row["experiment_arm"] = exp.get("arm")
    row["experiment_pair_id"] = exp.get("pair_id")
    for k, v in (r.get("gateway_tap") or {}).items():
        row[f"tap_{k}"] = v
    for k, v in (r.get("ttft_split") or {}).items():
        row[f"ttft_split_{k}"] = v
    row["stream"] = 1 if r.get("stream") else 0
    return row


rows = []
for f in FILES:
    with open(f, "rb") as fh:
        for line in fh:
            line = line.strip()
            if line:
                rows.append(json.dumps(flatten(json.loads(line))))

if SERVER:
    DB = "tokentap_check"

    def q(sql, data=None, **settings):
        params = {"database": DB, **settings}
        if data is None:
            req = urllib.request.Request(f"{SERVER}/?{urllib.parse.urlencode(params)}", sql.encode())
        else:
            params["query"] = sql
            req = urllib.request.Request(f"{SERVER}/?{urllib.parse.urlencode(params)}", data.encode())
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            sys.exit(f"ClickHouse refused: {e.read().decode()[:500]}\n{sql[:300]}")

    if SINK_DB:
        DB = SINK_DB
    else:
        urllib.request.urlopen(urllib.request.Request(f"{SERVER}/", f"DROP DATABASE IF EXISTS {DB}".encode())).read()
        urllib.request.urlopen(urllib.request.Request(f"{SERVER}/", f"CREATE DATABASE {DB}".encode())).read()
else:
    from chdb import session

    s = session.Session()
    s.query("CREATE DATABASE IF NOT EXISTS tt")
    s.query("USE tt")

    def q(sql, data=None, **settings):
        if settings:
            sql = sql.replace(" FORMAT ", " SETTINGS " + ", ".join(f"{k} = {v}" for k, v in settings.items()) + " FORMAT ", 1)
        return str(s.query(sql + ("\n" + data if data is not None else "")))

if not SINK_DB:
    for stmt in open("deploy/clickhouse/schema.sql").read().split(";"):
        body = "\n".join(l for l in stmt.splitlines() if not l.strip().startswith("--")).strip()
        if body:
            q(body)
    q("INSERT INTO requests FORMAT JSONEachRow", "\n".join(rows), input_format_skip_unknown_fields=1)
queries = [x for x in open("deploy/clickhouse/report.sql").read().split(";") if "SELECT" in x]
rows_of = lambda sql: [json.loads(l) for l in q(sql.strip()).splitlines() if l.strip()]
got, got_keys = rows_of(queries[0]), rows_of(queries[1])

rep = json.loads(subprocess.run([TT, "report", *FILES, "--format", "json"], check=True,
                                capture_output=True, text=True).stdout)
want = {(c["bucket"], c["arm"], c["concurrency"]): c for c in rep["cells"]}
assert len(got) == len(want), f"{len(got)} cells in ClickHouse, {len(want)} in the report"


def same(a, b, rel=1e-9):
    if a is None or b is None:
        return a is None and b is None
    # ClickHouse 18.16 quotes 64-bit integers in JSON (output_format_json_quote_64bit_integers).
    a = float(a) if isinstance(a, str) else a
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
        # SQL as float64 microseconds since the epoch (a quarter-microsecond resolution today):
        # over a one-second cell they agree to about 3e-7, not to the last bit.
        rel = 1e-6 if name == "aggregate_tok_s" else 1e-12
        assert same(a, b, rel), f"{key} {name}: ClickHouse {a}, report {b}"
        checked += 1
# keys[]: the same keys in the same order, with the same figures.
assert [k["key"] for k in got_keys] == [k["key_id"] for k in rep["keys"]], (got_keys, rep["keys"])
for g, k in zip(got_keys, rep["keys"]):
    pairs = [("requests", k["requests"]), ("error_rate", k["error_rate"]),
             ("input_tokens", k["input_tokens"]), ("output_tokens", k["output_tokens"])]
    for m in ["ttft", "tpot", "e2e"]:
        for p in ["p50", "p95"] + (["p99"] if m == "ttft" else []):
            pairs.append((f"{m}_{p}", k[f"{m}_ms"][p]))
    for name, b in pairs:
        assert same(g[name], b, 1e-12), f"key {k['key_id']} {name}: ClickHouse {g[name]}, report {b}"
        checked += 1

# by_bucket: the same buckets, with the same figures.
got_buckets = rows_of(queries[2])
assert sorted(g["bucket_"] for g in got_buckets) == sorted(rep["by_bucket"]), (got_buckets, list(rep["by_bucket"]))
for g in got_buckets:
    b = rep["by_bucket"][g["bucket_"]]
    pairs = [(k, b[k]) for k in ["requests", "error_rate", "input_tokens", "output_tokens", "reasoning_tokens"]]
    for m in ["ttft", "ttfo", "tpot", "e2e"]:
        for p in ["n", "p50", "p95", "p99", "max"]:
            pairs.append((f"{m}_{p}", b[f"{m}_ms"][p]))
    for name, want_v in pairs:
        assert same(g[name], want_v, 1e-12), f"by_bucket {g['bucket_']} {name}: ClickHouse {g[name]}, report {want_v}"
        checked += 1
# gateway_hop: the paired differences, overall, per bucket and per level.
got_hop = rows_of(queries[3])
hop = rep.get("gateway_hop")
hop_scopes = 0
if not got_hop:
    assert hop is None or hop["pairs"] == 0, "the report has pairs that ClickHouse does not"
else:
    assert hop is not None, "ClickHouse has pairs, the report no gateway_hop"
    scopes = {("overall", ""): hop}
    scopes.update({("bucket", k): v for k, v in hop["by_bucket"].items()})
    scopes.update({("concurrency", k): v for k, v in hop["by_concurrency"].items()})
    assert sorted(scopes) == sorted((g["scope"], g["name"]) for g in got_hop), (sorted(scopes), got_hop)
    for g in got_hop:
        h = scopes[(g["scope"], g["name"])]
        assert same(g["pairs"], h["pairs"]), (g, h["pairs"])
        for m in ["ttft", "upstream_headers", "tpot", "e2e"]:
            for p in ["n", "median", "p95", "p99"]:
                a, b = g[f"{m}_{p}"], h[f"{m}_ms"][p]
                assert same(a, b, 1e-12), f"gateway_hop {g['scope']} {g['name']} {m} {p}: ClickHouse {a}, report {b}"
                checked += 1
        hop_scopes += 1

# The per-minute rollup holds every record once, with the same token totals.
roll = json.loads(q("SELECT sum(requests) AS n, sum(output_tokens) AS out FROM requests_per_minute FORMAT JSONEachRow"))
out = sum(json.loads(r).get("output_tokens") or 0 for r in rows)
assert int(roll["n"]) == len(rows) and int(roll["out"]) == out, (roll, len(rows), out)
engine = f"ClickHouse at {SERVER}" if SERVER else "ClickHouse (chdb)"
if SINK_DB:
    engine += f" (rows inserted by tokentap's sink into {SINK_DB})"
print(f"{len(rows)} records, {len(got)} cells, {len(got_keys)} keys, {len(got_buckets)} buckets, "
      f"{hop_scopes} gateway-hop scopes, {checked} figures: {engine} equals tokentap report")
