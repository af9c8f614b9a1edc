#!/usr/bin/env python3
"""A burst of new connections, for scripts/connect-burst.sh.

  connect_burst.py burst --target 127.0.0.1:8080 --n 1000 --label tokentap [--metrics URL]
      N clients connect at once (asyncio, one thread, non-blocking sockets), each connect timed
      from its own connect() call; then each sends one small request (GET /v1/models,
      Connection: close) and reads the answer to its end. Prints one JSON line: how many connects
      waited > 0.5 s and > 1 s (a dropped handshake waits for the kernel's SYN retransmit: 1 s,
      then 3 s more), p50/p99/max of the connect times and of the whole exchange, errors, and
      the kernel's TcpExt ListenOverflows / ListenDrops deltas over the burst (host-wide).
  connect_burst.py table FILE
      The JSON lines of FILE as one Markdown table, rounds of a (label, N) pooled.

Loopback only; every burst is bounded (--timeout).
"""

import argparse
import asyncio
import json
import socket
import statistics
import sys
import time
import urllib.request


def tcp_ext():
    """(ListenOverflows, ListenDrops) from /proc/net/netstat."""
    with open("/proc/net/netstat") as f:
        rows = [l.split() for l in f if l.startswith("TcpExt:")]
    d = dict(zip(rows[0][1:], (int(v) for v in rows[1][1:])))
    return d["ListenOverflows"], d["ListenDrops"]


def quantile(xs, q):
    """Nearest rank."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-q * len(xs) // 1)) - 1))]


async def one(addr, go, request, timeout, out):
    loop = asyncio.get_running_loop()
    await go.wait()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    t0 = time.perf_counter()
    connect = None
    try:
        await asyncio.wait_for(loop.sock_connect(s, addr), timeout)
        connect = time.perf_counter() - t0
        await loop.sock_sendall(s, request)
        head = b""
        while True:
            left = timeout - (time.perf_counter() - t0)
            chunk = await asyncio.wait_for(loop.sock_recv(s, 65536), max(left, 0.001))
            if not chunk:
                break
            if len(head) < 16:
                head += chunk[:16]
        status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/") else "none"
        out.append((connect, time.perf_counter() - t0, status))
    except Exception as e:  # noqa: BLE001 - every failure is counted by kind
        out.append((connect, None, type(e).__name__))
    finally:
        s.close()


async def burst(addr, n, timeout):
    go = asyncio.Event()
    out = []
    request = b"GET /v1/models HTTP/1.1\r\nHost: burst\r\nConnection: close\r\n\r\n"
    tasks = [asyncio.create_task(one(addr, go, request, timeout, out)) for _ in range(n)]
    await asyncio.sleep(0.2)  # every task waits at the gate
    before = tcp_ext()
    go.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout + 5)
    after = tcp_ext()
    return out, (after[0] - before[0], after[1] - before[1])


def tokentap_metrics(url):
    """tokentap's own listener lines from its /metrics (absent on builds without them)."""
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception as e:  # noqa: BLE001
        return {"error": type(e).__name__}
    lines = {}
    for l in text.splitlines():
        if l.startswith("tokentap_listen_"):
            k, _, v = l.rpartition(" ")
            lines[k] = float(v)
    return lines


def run_burst(a):
    host, port = a.target.rsplit(":", 1)
    out, (overflows, drops) = asyncio.run(burst((host, int(port)), a.n, a.timeout))
    connects = [c for c, _, _ in out if c is not None]
    exchanges = [e for _, e, _ in out if e is not None]
    statuses = {}
    for _, _, st in out:
        statuses[st] = statuses.get(st, 0) + 1
    ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
    rec = {
        "label": a.label,
        "n": a.n,
        "round": a.round,
        "connected": len(connects),
        "waited_gt_0_5s": sum(1 for c in connects if c > 0.5),
        "waited_gt_1s": sum(1 for c in connects if c > 1.0),
        "connect_ms": {
            "p50": ms(quantile(connects, 0.5)),
            "p99": ms(quantile(connects, 0.99)),
            "max": ms(max(connects, default=None)),
        },
        "exchange_gt_1s": sum(1 for e in exchanges if e > 1.0),
        "exchange_ms": {
            "p50": ms(quantile(exchanges, 0.5)),
            "p99": ms(quantile(exchanges, 0.99)),
            "max": ms(max(exchanges, default=None)),
        },
        "status": statuses,
        "listen_overflows": overflows,
        "listen_drops": drops,
    }
    if a.metrics:
        rec["tokentap_metrics"] = tokentap_metrics(a.metrics)
    print(json.dumps(rec), flush=True)


def table(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows.setdefault((r["n"], r["label"]), []).append(r)
    print(
        "| N | target | rounds | connects > 0.5 s | connects > 1 s | connect p50 / p99 / max (ms) "
        "| exchanges > 1 s | exchange p99 (ms) | ListenOverflows Δ | ListenDrops Δ | not 200 |"
    )
    print("| ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for (n, label), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], order(kv[0][1]))):
        tot = len(rs) * n
        med = lambda k, q: statistics.median(r[k][q] for r in rs)  # noqa: E731
        top = lambda k, q: max(r[k][q] for r in rs)  # noqa: E731
        not_ok = sum(c for r in rs for st, c in r["status"].items() if st != "200")
        print(
            f"| {n:,} | {label} | {len(rs)} "
            f"| {sum(r['waited_gt_0_5s'] for r in rs)} of {tot:,} "
            f"| {sum(r['waited_gt_1s'] for r in rs)} of {tot:,} "
            f"| {med('connect_ms', 'p50'):.1f} / {med('connect_ms', 'p99'):.1f} / {top('connect_ms', 'max'):.0f} "
            f"| {sum(r['exchange_gt_1s'] for r in rs)} "
            f"| {med('exchange_ms', 'p99'):.0f} "
            f"| {'/'.join(str(r['listen_overflows']) for r in rs)} "
            f"| {'/'.join(str(r['listen_drops']) for r in rs)} "
            f"| {not_ok} |"
        )
    print(
        "\np50 and p99: the median over rounds; max: the largest; waits, exchanges and failures: "
        "summed over rounds; the kernel's deltas: each round's, host-wide."
    )


def order(label):
    known = ["sim", "tokentap-b", "tokentap", "nginx", "haproxy"]
    return known.index(label) if label in known else len(known)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("burst")
    b.add_argument("--target", required=True)
    b.add_argument("--n", type=int, required=True)
    b.add_argument("--label", required=True)
    b.add_argument("--round", type=int, default=1)
    b.add_argument("--timeout", type=float, default=20.0, help="per connection, seconds")
    b.add_argument("--metrics", help="tokentap's admin /metrics URL, read after the burst")
    t = sub.add_parser("table")
    t.add_argument("file")
    a = p.parse_args()
    if a.cmd == "burst":
        run_burst(a)
    else:
        table(a.file)


if __name__ == "__main__":
    sys.exit(main())
