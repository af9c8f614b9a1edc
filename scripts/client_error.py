#!/usr/bin/env python3
"""A load generator's own TTFT error, measured the way that isolates it (docs/bench.md, "The
client's own error"): client -> tokentap serve -> `tokentap sim --pace 50,10,100` (50 ms to the
first token, then one every 10 ms, 100 tokens, whatever the load). tokentap stamps every request
with the kernel's receive stamps, so a client's error is its TTFT minus the proxy's, request by
request, joined by x-request-id. The difference also holds two loopback hops and the proxy's relay
of the first token: tens of microseconds each on an idle machine (docs/overhead.md), more on a busy
one. Stated, and also subtracted in part: the proxy's records carry its own lag reading the first
token (`stamp_lag_ms`, the kernel's arrival to the proxy's read), and the error less that lag is
given beside the error.

Each level runs every client in turn (bench, then AIPerf when installed) against the same proxy
and mock. Per client and level: the error's p50, p99 and max, the client's CPU seconds and peak
RSS, and how busy the machine was (/proc/stat over the run).

Usage: client_error.py TOKENTAP WORKDIR [--levels 1,100,500,1000] [--aiperf PATH]
Prints a Markdown table and writes WORKDIR/client-error.json.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what):
    for _ in range(200):
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port}")


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v), idle


def busy(before, after):
    total, idle = after[0] - before[0], after[1] - before[1]
    return 1 - idle / total if total else 0.0


def rank(sorted_values, p):
    """Nearest rank: the value at rank ceil(p * n)."""
    n = len(sorted_values)
    i = max(1, -(-int(p * n * 1000) // 1000))
    return sorted_values[min(n, i) - 1]


def run(cmd, log):
    """Run a client; its (exit, user+sys CPU s, peak RSS MB, wall s)."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, time.monotonic() - t0


def proxy_ttft(log):
    """request id -> (arrival, TTFT ms, its lag reading the first token ms) of the proxy's records."""
    out = {}
    with open(log) as f:
        for line in f:
            r = json.loads(line)
            if r.get("request_id") and r.get("ttft_ms") is not None:
                out[r["request_id"]] = (r["ts"], r["ttft_ms"], r.get("stamp_lag_ms") or 0.0)
    return out


def summary(diffs):
    d = sorted(diffs)
    return {"n": len(d), "p50": rank(d, 0.5), "p99": rank(d, 0.99), "max": d[-1]}


def bench(tt, target, c, n, work):
    out = f"{work}/bench-{c}"
    cmd = [tt, "bench", "--target", target, "--concurrency", str(c), "--requests", str(n),
           "--warmup", "0", "--buckets", "balanced", "--no-estimate", "--no-calibrate",
           "--out", out, "--force"]
    code, cpu, rss, wall = run(cmd, f"{work}/bench-{c}.log")
    ttft = {}
    with open(f"{out}/requests.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("ttft_ms") is not None:
                ttft[r["request_id"]] = r["ttft_ms"]
    return code, cpu, rss, wall, ttft


WORDS = ("the a of and to in is you that it he was for on are as with his they at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could people")


def tokenizer(exe, work):
    """A word-level tokenizer in AIPerf's own venv: its `builtin` one downloads its encoding,
    and this machine reaches no such server. Token counts are not what is measured here."""
    d = f"{work}/tokenizer"
    py = os.path.join(os.path.dirname(exe), "python")
    code = f"""
import os
from tokenizers import Tokenizer, models, pre_tokenizers
vocab = {{"[UNK]": 0, **{{w: i + 1 for i, w in enumerate({WORDS!r}.split())}}}}
t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
t.pre_tokenizer = pre_tokenizers.Whitespace()
os.makedirs({d!r}, exist_ok=True)
t.save({d!r} + "/tokenizer.json")
open({d!r} + "/tokenizer_config.json", "w").write('{{"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}}')
"""
    subprocess.run([py, "-c", code], check=True)
    return d


def aiperf(exe, target, c, n, work):
    out = f"{work}/aiperf-{c}"
    cmd = [exe, "profile", "--model", "tokentap-sim", "--url", target, "--endpoint-type", "chat",
           "--streaming", "--concurrency", str(c), "--request-count", str(n),
           "--output-artifact-dir", out, "--ui-type", "none",
           "--tokenizer", tokenizer(exe, work)]
    code, cpu, rss, wall = run(cmd, f"{work}/aiperf-{c}.log")
    ttft = {}
    for root, _, files in os.walk(out):
        for name in files:
            if name != "profile_export.jsonl":
                continue
            with open(os.path.join(root, name)) as f:
                for line in f:
                    r = json.loads(line)
                    meta, metrics = r.get("metadata", {}), r.get("metrics", {})
                    t = metrics.get("time_to_first_token", {})
                    rid = meta.get("x_request_id")
                    if rid and t.get("value") is not None:
                        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[t.get("unit", "ms")]
                        ttft[rid] = t["value"] * scale
    return code, cpu, rss, wall, ttft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokentap")
    ap.add_argument("work")
    ap.add_argument("--levels", default="1,100,500,1000")
    ap.add_argument("--aiperf")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    sim_port, px_port = free_port(), free_port()
    proxy_log = f"{a.work}/proxy.jsonl"
    procs = []
    try:
        sim = subprocess.Popen([a.tokentap, "sim", "--listen", f"127.0.0.1:{sim_port}",
                                "--pace", "50,10,100", "--model", "tokentap-sim"],
                               stdout=subprocess.DEVNULL,
                               stderr=open(f"{a.work}/sim.log", "w"))
        procs.append(sim)
        wait_port(sim_port, sim, "tokentap sim")
        px = subprocess.Popen([a.tokentap, "serve", "--upstream", f"http://127.0.0.1:{sim_port}",
                               "--listen", f"127.0.0.1:{px_port}", "--admin", "off",
                               "--log", proxy_log], stdout=subprocess.DEVNULL,
                              stderr=open(f"{a.work}/serve.log", "w"))
        procs.append(px)
        wait_port(px_port, px, "tokentap serve")
        target = f"http://127.0.0.1:{px_port}"
        rows = []
        for c in [int(x) for x in a.levels.split(",")]:
            n = max(30, 3 * c)
            clients = [("bench", lambda t, c, n, w: bench(a.tokentap, t, c, n, w))]
            if a.aiperf:
                clients.append(("aiperf", lambda t, c, n, w: aiperf(a.aiperf, t, c, n, w)))
            for name, fn in clients:
                before = cpu_times()
                code, cpu, rss, wall, ttft = fn(target, c, n, a.work)
                load = busy(before, cpu_times())
                time.sleep(1.5)  # the proxy's last records reach its log
                proxy = proxy_ttft(proxy_log)
                # In arrival order at the proxy: the first C opened the cell's connections.
                joined = sorted((proxy[k][0], ttft[k] - proxy[k][1], proxy[k][2])
                                for k in ttft if k in proxy)
                diffs = [d for _, d, _ in joined]
                # Less the proxy's own lag reading the first token (part of its relay).
                net = [d - lag for _, d, lag in joined]
                later = diffs[c:]
                row = {"client": name, "concurrency": c, "requests": n, "exit": code,
                       "joined": len(diffs), "ttft_recorded": len(ttft), "cpu_s": round(cpu, 2),
                       "peak_rss_mb": round(rss, 1), "wall_s": round(wall, 1),
                       "machine_busy": round(load, 3)}
                for key, ds in (("error_ms", diffs), ("error_after_first_round_ms", later),
                                ("error_less_proxy_lag_ms", net)):
                    if ds:
                        row[key] = {k: round(v, 3) if k != "n" else v
                                    for k, v in summary(ds).items()}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        with open(f"{a.work}/client-error.json", "w") as f:
            json.dump(rows, f, indent=1)
        print("| client | C | requests (joined) | error p50 ms | p99 ms | max ms | p99 after the first round | p99 less the proxy's read lag | CPU s | peak RSS MB | machine busy |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            e, l = r.get("error_ms", {}), r.get("error_after_first_round_ms", {})
            net = r.get("error_less_proxy_lag_ms", {})
            print(f"| {r['client']} | {r['concurrency']:,} | {r['requests']:,} ({r['joined']:,}) | "
                  f"{e.get('p50', '—')} | {e.get('p99', '—')} | {e.get('max', '—')} | {l.get('p99', '—')} | "
                  f"{net.get('p99', '—')} | "
                  f"{r['cpu_s']} | {r['peak_rss_mb']} | {100 * r['machine_busy']:.0f} % |")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
