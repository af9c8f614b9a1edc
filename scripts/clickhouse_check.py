"""Load tokentap JSONL logs into ClickHouse's own engine (chdb, served over HTTP by this script),
or with --server URL into a ClickHouse server over its HTTP interface, with
deploy/clickhouse/schema.sql; then `tokentap report --clickhouse` (the queries of
deploy/clickhouse/report.sql, run where the rows are) must give the JSON report
`tokentap report` gives of the same files: every figure, counts and names exactly, values to
1e-12, wall-time figures to 1e-6. The dashboards' gateway_hop query is compared with the
report's gateway-hop section too.
With --sink-db DB the rows are not loaded: they are the ones tokentap's [clickhouse] sink inserted
into DB.requests while it wrote FILE (its own log), so the check is that the sink's rows give the
report the log gives. Usage: clickhouse_check.py [--server URL [--sink-db DB]] TOKENTAP FILE..."""
import json
import os
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
    """A record as a row of the requests table: nested objects flattened with their prefixes
    (tests/suite/schema.rs holds these to the table's, `FLATTENED`)."""
    row = {k: v for k, v in r.items() if not isinstance(v, dict)}
    exp = r.get("experiment") or {}
    row["experiment_arm"] = exp.get("arm")
    row["experiment_pair_id"] = exp.get("pair_id")
    for k, v in (r.get("gateway_tap") or {}).items():
        row[f"tap_{k}"] = v
    for k, v in (r.get("ttft_split") or {}).items():
        row[f"ttft_split_{k}"] = v
    for k, v in (r.get("delivery") or {}).items():
        row[f"delivery_{k}"] = v
    row["stream"] = 1 if r.get("stream") else 0
    for k, v in row.items():
        if isinstance(v, bool):
            row[k] = int(v)
    return row


rows = []
for f in FILES:
    with open(f, "rb") as fh:
        for line in fh:
            line = line.strip()
            if line:
                rows.append(json.dumps(flatten(json.loads(line))))

DB = "tokentap_check"
if SERVER:

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

    import http.server
    import threading

    s = session.Session()
    s.query(f"CREATE DATABASE IF NOT EXISTS {DB}")
    s.query(f"USE {DB}")
    lock = threading.Lock()

    def q(sql, data=None, **settings):
        if settings:
            sql = sql.replace("FORMAT ", "SETTINGS " + ", ".join(f"{k} = {v}" for k, v in settings.items()) + " FORMAT ", 1)
        with lock:
            return str(s.query(sql + ("\n" + data if data is not None else "")))

    class Http(http.server.BaseHTTPRequestHandler):
        """ClickHouse's HTTP interface, as much of it as `report --clickhouse` uses: POST a
        query, settings in the query string; an error is a 500 with the exception's text."""

        def do_POST(self):
            sql = self.rfile.read(int(self.headers["content-length"])).decode()
            settings = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(self.path).query))
            try:
                out, code = q(sql, **settings).encode(), 200
            except Exception as e:  # chdb raises its server's exception
                out, code = str(e).encode(), 500
            self.send_response(code)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    shim = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Http)
    threading.Thread(target=shim.serve_forever, daemon=True).start()
    SERVER = f"http://127.0.0.1:{shim.server_address[1]}"

if not SINK_DB:
    # Comments out first: one may hold a `;`.
    schema = "\n".join(l for l in open("deploy/clickhouse/schema.sql").read().splitlines() if not l.strip().startswith("--"))
    for stmt in schema.split(";"):
        body = stmt.strip()
        if body:
            q(body)
    q("INSERT INTO requests FORMAT JSONEachRow", "\n".join(rows), input_format_skip_unknown_fields=1)

def run(*args):
    p = subprocess.run([TT, "report", *args, "--format", "json"], capture_output=True, text=True)
    assert p.returncode == 0, f"tokentap report {' '.join(args)}: exit {p.returncode}: {p.stderr}"
    return json.loads(p.stdout)


ARGS = [[], ["--by-arm", "--top", "7"]]
# A window (`--since`/`--until`): the middle of the records' time span, bounds in the records'
# own form, so that ClickHouse's string comparison and the files' parsed one pick the same rows.
_ts = sorted(json.loads(r)["ts"] for r in rows)
if len(_ts) >= 3:
    ARGS.append(["--since", _ts[len(_ts) // 3], "--until", _ts[2 * len(_ts) // 3]])
# Wall-time figures: the report adds E2E to the start as a Duration (nanoseconds), SQL as
# float64 nanoseconds: they can differ by a nanosecond, about 1e-9 of a one-second cell.
LOOSE = ("aggregate_tok_s", "tokens_per_day_at_interactive_ceiling")
checked = 0


# What the files give that the ClickHouse table cannot (docs/report.md says so): the streaming
# section (no delivery columns), a repeated sweep's spread (no run column), and what bench's
# run.json beside the records adds (the engine per cell, its plateau and time slices, the GPU,
# the binding constraint, bench's own stall share and reader lag), with the answers drawn from
# them; and the window's count of records left out, which the files count as they read and the
# query never sees.
FILE_ONLY = {"streaming", "spread", "hardware", "binding", "engine", "steady_state", "timeslices",
             "buffered_streams", "window", "bench_stall_share", "bench_reader_lag_p99_ms"}
FILE_ANSWERS = {"Is it really streaming?", "What binds, at the knee or ceiling?",
                "How close to the hardware's limit is it?"}


def files_only(report):
    """`report` without what only the files give."""
    if isinstance(report, dict):
        return {k: files_only(v) for k, v in report.items() if k not in FILE_ONLY}
    if isinstance(report, list):
        return [files_only(x) for x in report
                if not (isinstance(x, dict) and x.get("question") in FILE_ANSWERS)]
    return report


def same(a, b, path):
    global checked
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{path}: {a!r} vs {b!r}"
        rel = 1e-6 if any(k in path for k in LOOSE) else 1e-12
        assert abs(a - b) <= rel * max(1.0, abs(a), abs(b)), f"{path}: ClickHouse {a}, files {b}"
        checked += 1
    else:
        assert a == b, f"{path}: ClickHouse {a!r}, files {b!r}"
        checked += 1


# What is judged and what is not: these must be in the report, so that they are compared.
JUDGED = {"traffic": ["generation", "served", "cancelled", "failed", "throttled", "client_errors", "other"],
          "other_traffic": ["endpoint", "method", "status", "class", "requests"],
          "cells": ["axis", "requests", "error_rate", "throttled"],
          "keys": ["requests", "error_rate", "client_errors"],
          "provisioning": ["top", "ceiling", "failure_mode"]}


def judged(report):
    for section, fields in JUDGED.items():
        assert section in report, f"the report has no {section}"
        for item in report[section] if isinstance(report[section], list) else [report[section]]:
            missing = [f for f in fields if f not in item]
            assert not missing, f"{section}: no {missing} in {item}"


for extra in ARGS:
    # ClickHouse returns cells, not requests: its figures are whole cells' (docs/report.md).
    want = run(*FILES, "--whole-cell", *extra)
    got = run("--clickhouse", SERVER, "--clickhouse-table", f"{DB}.requests", *extra)
    judged(want)
    same(files_only(got), files_only(want), "report " + " ".join(extra))
want = run(*FILES, "--whole-cell")

# The dashboards' gateway_hop query (in report.sql, not run by the report) against the section.
queries = {}
for stmt in open("deploy/clickhouse/report.sql").read().split(";"):
    lines = stmt.strip().splitlines()
    names = [l[3:].split(":")[0] for l in lines if l.startswith("-- ") and ":" in l]
    if names and any(l.startswith("SELECT") for l in lines):
        queries[names[-1]] = "\n".join(lines).replace("default.requests", f"{DB}.requests")
rows_of = lambda sql: [json.loads(l) for l in q(sql + "\nFORMAT JSONEachRow").splitlines() if l.strip()]
got_hop = rows_of(queries["gateway_hop"])
hop = want.get("gateway_hop")
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
        assert int(g["pairs"]) == h["pairs"], (g, h["pairs"])
        for m in ["ttft", "upstream_headers", "tpot", "e2e"]:
            for p in ["n", "median", "p95", "p99"]:
                a, b = g[f"{m}_{p}"], h[f"{m}_ms"][p]
                a = float(a) if isinstance(a, str) else a
                assert (a is None and b is None) or abs(a - b) <= 1e-12 * max(1, abs(b)), \
                    f"gateway_hop {g['scope']} {g['name']} {m} {p}: ClickHouse {a}, report {b}"
                checked += 1
        hop_scopes += 1

# The per-minute rollup holds every record once, with the same token totals.
roll = json.loads(q("SELECT sum(requests) AS n, sum(output_tokens) AS out FROM requests_per_minute FORMAT JSONEachRow"))
out = sum(json.loads(r).get("output_tokens") or 0 for r in rows)
assert int(roll["n"]) == len(rows) and int(roll["out"]) == out, (roll, len(rows), out)
engine = "ClickHouse (chdb)" if not sys.argv[1:2] == ["--server"] else f"ClickHouse at {SERVER}"
if SINK_DB:
    engine += f" (rows inserted by tokentap's sink into {SINK_DB})"
t = want["traffic"]
print(f"{len(rows)} records ({t['generation']} generations, {t['client_errors']} client errors, "
      f"{t['other']} other; {len(want['other_traffic'])} not-judged rows), {len(want['cells'])} cells, "
      f"{len(want['keys'])} keys, {len(want['by_bucket'])} buckets, {hop_scopes} gateway-hop scopes, "
      f"{checked} figures: "
      f"tokentap report --clickhouse on {engine} equals tokentap report on the files")
sys.stdout.flush()
if "shim" in globals():
    # chdb's own teardown at interpreter exit can crash after the work is done: skip it.
    shim.shutdown()
    os._exit(0)
