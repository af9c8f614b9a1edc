#!/usr/bin/env python3
"""bench's ceiling (docs/bench.md, "bench's ceiling"): the most requests a second bench sends and
reads, against `tokentap sim --pace 0,0,N` (every token at once, no delay), beside wrk on the same
endpoint with the same connections, in turn, several rounds. The sim is pinned to one core and
the client to another (taskset), so they never compete; each client's CPU seconds and peak RSS
are its own (wait4's rusage).

Modes:
  whole    non-streamed answers of 16 tokens: bench --stream false; wrk posting the same body.
  stream   streamed answers of 16 tokens: bench's requests/s and SSE events/s; wrk reads each
           whole stream too (it counts requests).
  streams  long paced streams (--pace 0,GAP,TOKENS from STREAMS_PACE) at C = STREAMS_C: bench
           alone, its CPU, RSS, events/s per core, stall share and ITL p99 (does it keep up?).

Usage: bench_ceiling.py TOKENTAP WORKDIR [--rounds 3] [--conns 64] [--seconds 5]
       [--sim-core 0] [--client-core 1] [--streams-c 1000] [--streams-pace 0,50,100]
Prints a Markdown table (medians over the rounds; bench/wrk is the median of the rounds' ratios,
each round's bench run right after its wrk run); writes WORKDIR/bench-ceiling.json; exits 1 when
bench's requests/s is below 0.8 x wrk's in a mode, 2 when a client failed.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import urllib.request

GOAL = 0.8
OUT_TOKENS = 16
PROMPT_TOKENS = 127


# The port helpers and the client runner of client_error.py (this folder is on the path when
# run as a script).
from client_error import free_port, run, wait_port  # noqa: E402


def start_sim(tokentap, core, pace, work, name):
    port = free_port()
    log = open(f"{work}/{name}.log", "w")
    p = subprocess.Popen(
        ["taskset", "-c", str(core), tokentap, "sim", "--listen", f"127.0.0.1:{port}",
         "--model", "sim", "--pace", pace],
        stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, p, f"sim --pace {pace}")
    return p, port


def body(stream):
    """The JSON body bench sends for its synthetic 127-token prompt (same fields, same size)."""
    text = ("Measure the latency of this request carefully and report it. " * 10)[: PROMPT_TOKENS * 4]
    b = {"model": "sim", "messages": [{"role": "user", "content": text}],
         "max_tokens": OUT_TOKENS, "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    b.update({"ignore_eos": True, "min_tokens": OUT_TOKENS})
    return json.dumps(b)


def events_per_answer(port, stream):
    """SSE data events in one answer (the role chunk, the tokens, usage, [DONE])."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body(stream).encode(),
        headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    if not stream:
        u = json.loads(text)["usage"]["completion_tokens"]
        assert u == OUT_TOKENS, text
        return 0
    return sum(1 for line in text.splitlines() if line.startswith("data: "))


def wrk(a, port, mode, conns, work, tag):
    lua = f"{work}/{mode}.lua"
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        f.write(f"wrk.body = {json.dumps(body(mode == 'stream'))}\n")
    log = f"{work}/{tag}.log"
    cmd = ["taskset", "-c", str(a.client_core), "wrk", "-t1", f"-c{conns}",
           f"-d{a.seconds}s", "--timeout", "30s", "-s", lua,
           f"http://127.0.0.1:{port}/v1/chat/completions"]
    code, cpu, rss, wall = run(cmd, log)
    out = open(log).read()
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    n = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    if code != 0 or not m or not n or bad:
        return {"failed": f"wrk exit {code}: {out[-400:]}"}
    requests = int(n.group(1))
    return {"rps": float(m.group(1)), "requests": requests, "cpu_s": cpu, "rss_mb": rss,
            "wall_s": wall, "per_cpu_s": requests / cpu if cpu else None,
            "socket_errors": errs.group(1) if errs else None}


def bench(a, port, mode, conns, requests, work, tag):
    out = f"{work}/{tag}"
    # The long streams ask for the pace's tokens; the others for 16.
    n = a.streams_pace.split(",")[2] if mode == "streams" else OUT_TOKENS
    cmd = ["taskset", "-c", str(a.client_core), a.tokentap, "bench",
           "--target", f"http://127.0.0.1:{port}", "--out", out, "--force", "--model", "sim",
           "--synthetic", str(PROMPT_TOKENS), "--buckets", "short-long",
           "--outputs", f"{n},{n},{n}",
           "--concurrency", str(conns), "--requests", str(requests),
           "--warmup", str(conns), "--no-calibrate", "--no-estimate",
           "--stream", "false" if mode == "whole" else "true"]
    code, cpu, rss, wall = run(cmd, f"{out}.log")
    if code != 0:
        return {"failed": f"bench exit {code}: {open(out + '.log').read()[-400:]}"}
    info = json.load(open(f"{out}/run.json"))
    cell = info["cells"][0]
    events = itl = 0
    itls = []
    with open(f"{out}/requests.jsonl") as f:
        for line in f:
            r = json.loads(line)
            events += r.get("events") or 0
            if r.get("itl_p99_ms") is not None:
                itls.append(r["itl_p99_ms"])
    itl = max(itls) if itls else None
    sent = requests + conns
    per_event = events / max(cell["served"], 1)
    return {"rps": cell["served"] / cell["wall_s"], "requests": cell["served"],
            "errors": cell["errors"], "events_s": events / cell["wall_s"], "cpu_s": cpu,
            "rss_mb": rss, "wall_s": wall, "cell_wall_s": cell["wall_s"],
            "per_cpu_s": sent / cpu if cpu else None,
            "events_per_cpu_s": sent * per_event / cpu if cpu else None,
            "stall_share": info.get("stall_share"),
            "itl_p99_max_ms": itl, "stream": info.get("stream")}


def fmt(v, d=0):
    return "-" if v is None else f"{v:,.{d}f}"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokentap")
    ap.add_argument("work")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--sim-core", type=int, default=0)
    ap.add_argument("--client-core", type=int, default=1)
    ap.add_argument("--streams-c", type=int, default=1000)
    ap.add_argument("--streams-pace", default="0,50,100")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    uptime = [open("/proc/loadavg").read().split()[:3]]
    fast, fast_port = start_sim(a.tokentap, a.sim_core, f"0,0,{OUT_TOKENS}", a.work, "sim-fast")
    slow, slow_port = start_sim(a.tokentap, a.sim_core, a.streams_pace, a.work, "sim-paced")
    results = []
    try:
        per_answer = {m: events_per_answer(fast_port, m == "stream") for m in ("whole", "stream")}
        # bench sends a count: size it to wrk's duration from the first wrk round of each mode.
        count = {}
        for r in range(1, a.rounds + 1):
            for mode in ("whole", "stream"):
                w = wrk(a, fast_port, mode, a.conns, a.work, f"wrk-{mode}-r{r}")
                if "rps" in w:
                    w["events_s"] = w["rps"] * per_answer[mode]
                    w["events_per_cpu_s"] = w["per_cpu_s"] * per_answer[mode]
                    count.setdefault(mode, max(1000, int(w["rps"] * a.seconds)))
                results.append({"client": "wrk", "mode": mode, "c": a.conns, "round": r, **w})
                b = bench(a, fast_port, mode, a.conns, count.get(mode, 20000), a.work,
                          f"bench-{mode}-r{r}")
                results.append({"client": "bench", "mode": mode, "c": a.conns, "round": r, **b})
                print(f"round {r} {mode}: wrk {w.get('rps', 0):.0f}/s, bench {b.get('rps', 0):.0f}/s",
                      file=sys.stderr)
            # Long paced streams: bench alone, two rounds of C streams.
            c = a.streams_c
            b = bench(a, slow_port, "streams", c, 2 * c, a.work, f"bench-streams-r{r}")
            results.append({"client": "bench", "mode": "streams", "c": c, "round": r, **b})
    finally:
        for p in (fast, slow):
            p.terminate()
            p.wait()
    uptime.append(open("/proc/loadavg").read().split()[:3])
    return report(a, results, uptime)


def report(a, results, uptime):
    failed = [r for r in results if "failed" in r]
    rows, verdict = [], 0
    print("| client | mode | C | requests/s | events/s | CPU s | peak RSS MB | requests per CPU s | events per CPU s | bench/wrk (rounds) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode in ("whole", "stream", "streams"):
        med = {}
        for client in ("wrk", "bench"):
            rs = [r for r in results if r["client"] == client and r["mode"] == mode and "rps" in r]
            if not rs:
                continue
            m = {k: median(r.get(k) for r in rs)
                 for k in ("rps", "events_s", "cpu_s", "rss_mb", "per_cpu_s", "events_per_cpu_s",
                           "stall_share", "itl_p99_max_ms")}
            med[client] = m
            ratio = ""
            if client == "bench" and "wrk" in med:
                # Paired round by round (bench right after wrk), so that the machine's drift
                # between rounds cancels; the median of the rounds' ratios.
                by_round = {r["round"]: r["rps"] for r in results
                            if r["client"] == "wrk" and r["mode"] == mode and "rps" in r}
                qs = [r["rps"] / by_round[r["round"]] for r in rs if r["round"] in by_round]
                q = median(qs)
                m["ratio"], m["round_ratios"] = q, qs
                ratio = f"{q:.2f} ({', '.join(f'{x:.2f}' for x in qs)})"
                if q < GOAL:
                    verdict = max(verdict, 1)
            print(f"| {client} | {mode} | {rs[0]['c']:,} | {fmt(m['rps'])} | {fmt(m['events_s'])} | "
                  f"{fmt(m['cpu_s'], 2)} | {fmt(m['rss_mb'], 1)} | {fmt(m['per_cpu_s'])} | "
                  f"{fmt(m['events_per_cpu_s'])} | {ratio} |")
            rows.append({"client": client, "mode": mode, "c": rs[0]["c"], "rounds": len(rs), **m})
        if mode == "streams" and "bench" in med:
            m = med["bench"]
            print(f"\nstreams: bench's stall share {fmt(100 * (m['stall_share'] or 0), 2)} %, "
                  f"worst ITL p99 {fmt(m['itl_p99_max_ms'], 1)} ms (the pace's gap: "
                  f"{a.streams_pace.split(',')[1]} ms)")
    print(f"\nload average before {' '.join(uptime[0])}, after {' '.join(uptime[1])}")
    for f in failed:
        print(f"FAILED {f['client']} {f['mode']} round {f['round']}: {f['failed']}", file=sys.stderr)
    with open(f"{a.work}/bench-ceiling.json", "w") as f:
        json.dump({"rows": rows, "runs": results, "loadavg": uptime}, f, indent=1)
    if failed:
        return 2
    if verdict:
        print(f"bench below {GOAL} x wrk's requests/s in a mode", file=sys.stderr)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
