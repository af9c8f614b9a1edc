#!/usr/bin/env python3
"""A burst of new connections, for scripts/connect-burst.sh.

  connect_burst.py burst --target 127.0.0.1:8080 --n 1000 --label tokentap [--metrics URL]
      N clients connect at once (asyncio, non-blocking sockets made beforehand, spread over
      --procs processes that open them at one instant), each connect timed from its own
      connect() call; then each sends one small request (GET /v1/models, Connection: close) and
      reads the answer to its end. Prints one JSON line: how many connects waited > 0.5 s and
      > 1 s (a dropped handshake waits for the kernel's SYN retransmit: 1 s, then 3 s more), how
      many connections the kernel retransmitted on (tcp_info's total_retrans: a dropped SYN, or
      the request after a dropped last ACK), p50/p99/max of the connect times and of the whole
      exchange, answers by status, and the kernel's TcpExt ListenOverflows / ListenDrops deltas
      over the burst (host-wide), and the deepest accept queue the target's listener had
      (/proc/net/tcp, sampled every 2 ms).
  connect_burst.py table FILE
      The JSON lines of FILE as one Markdown table, rounds of a (label, N) pooled.

A connect's time includes the client's own delay in seeing it done: each asyncio loop opens and
reads one connection at a time, so at thousands of connections the client itself adds hundreds
of milliseconds (the sim alone, with nothing in front, shows that floor). The retransmissions
and the kernel's counters do not depend on it. Loopback only; every burst is bounded
(--timeout).
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import struct
import sys
import threading
import time
import urllib.request


def tcp_ext():
    """(ListenOverflows, ListenDrops) from /proc/net/netstat."""
    with open("/proc/net/netstat") as f:
        rows = [l.split() for l in f if l.startswith("TcpExt:")]
    d = dict(zip(rows[0][1:], (int(v) for v in rows[1][1:])))
    return d["ListenOverflows"], d["ListenDrops"]


def queue_depth(port):
    """The accept queue's depth of the listener on 127.0.0.1:port: rx_queue of its LISTEN line in
    /proc/net/tcp. The kernel lists listening sockets first: reading stops at the first other
    line, so the burst's own thousands of connections are not read."""
    want = "0100007F:%04X" % port
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] != "0A":
                return None
            if fields[1] == want:
                return int(fields[4].split(":")[1], 16)
    return None


class Peak(threading.Thread):
    """The deepest accept queue seen during the burst, sampled every 2 ms."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.peak, self.done = port, 0, threading.Event()

    def run(self):
        while not self.done.wait(0.002):
            self.peak = max(self.peak, queue_depth(self.port) or 0)


def quantile(xs, q):
    """Nearest rank."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-q * len(xs) // 1)) - 1))]


def total_retrans(s):
    """The kernel's count of this connection's retransmissions (tcp_info.tcpi_total_retrans): a
    SYN sent again because the listener dropped it, or the request sent again because the
    listener dropped the handshake's last ACK."""
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return struct.unpack_from("I", info, 100)[0] if len(info) >= 104 else None
    except OSError:
        return None


async def one(s, addr, go, request, timeout, out):
    loop = asyncio.get_running_loop()
    await go.wait()
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
        out.append((connect, time.perf_counter() - t0, status, total_retrans(s)))
    except Exception as e:  # noqa: BLE001 - every failure is counted by kind
        out.append((connect, None, type(e).__name__, total_retrans(s)))
    finally:
        s.close()


async def burst(addr, n, timeout, start_at):
    """N connections from this process, opened at `start_at` (time.monotonic)."""
    go = asyncio.Event()
    out = []
    request = b"GET /v1/models HTTP/1.1\r\nHost: burst\r\nConnection: close\r\n\r\n"
    # The sockets are made before the gate: after it, each task only calls connect().
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        socks.append(s)
    tasks = [asyncio.create_task(one(s, addr, go, request, timeout, out)) for s in socks]
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    go.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout + 5)
    return out


def worker(addr, n, timeout, start_at, q):
    q.put(asyncio.run(burst(addr, n, timeout, start_at)))


def burst_in(procs, addr, n, timeout):
    """N connections from `procs` processes at once (one asyncio loop each): one Python thread
    takes about 0.1 ms a connection to open and read it, and every connection still unopened
    or unread adds to the times of those before it."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    start_at = time.monotonic() + 0.5 + n / 20000  # every process has made its sockets
    shares = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    ps = [ctx.Process(target=worker, args=(addr, k, timeout, start_at, q)) for k in shares if k]
    for p in ps:
        p.start()
    before_wait = max(0.0, start_at - time.monotonic() - 0.05)
    time.sleep(before_wait)
    before = tcp_ext()
    peak = Peak(addr[1])
    peak.start()
    out = []
    for _ in ps:
        out.extend(q.get(timeout=timeout + 30))
    peak.done.set()
    peak.join()
    after = tcp_ext()
    for p in ps:
        p.join()
    return out, (after[0] - before[0], after[1] - before[1]), peak.peak


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
    out, (overflows, drops), peak = burst_in(a.procs, (host, int(port)), a.n, a.timeout)
    connects = [c for c, _, _, _ in out if c is not None]
    exchanges = [e for _, e, _, _ in out if e is not None]
    statuses = {}
    for _, _, st, _ in out:
        statuses[st] = statuses.get(st, 0) + 1
    ms = lambda v: None if v is None else round(v * 1000, 2)  # noqa: E731
    rec = {
        "label": a.label,
        "n": a.n,
        "round": a.round,
        "procs": a.procs,
        "connected": len(connects),
        "retransmitted": sum(1 for *_, r in out if r),
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
        "peak_queue": peak,
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
        "| N | target | rounds | connects > 0.5 s | connects > 1 s | retransmitted "
        "| connect p50 / p99 / max (ms) | exchange p50 / p99 (ms) | deepest accept queue "
        "| ListenOverflows Δ | ListenDrops Δ | not 200 |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for (n, label), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], order(kv[0][1]))):
        tot = len(rs) * n
        med = lambda k, q: statistics.median(r[k][q] for r in rs)  # noqa: E731
        top = lambda k, q: max(r[k][q] for r in rs)  # noqa: E731
        not_ok = sum(c for r in rs for st, c in r["status"].items() if st != "200")
        print(
            f"| {n:,} | {label} | {len(rs)} "
            f"| {sum(r['waited_gt_0_5s'] for r in rs)} of {tot:,} "
            f"| {sum(r['waited_gt_1s'] for r in rs)} of {tot:,} "
            f"| {sum(r['retransmitted'] for r in rs)} "
            f"| {med('connect_ms', 'p50'):.0f} / {med('connect_ms', 'p99'):.0f} / {top('connect_ms', 'max'):.0f} "
            f"| {med('exchange_ms', 'p50'):.0f} / {med('exchange_ms', 'p99'):.0f} "
            f"| {max(r['peak_queue'] for r in rs)} "
            f"| {'/'.join(str(r['listen_overflows']) for r in rs)} "
            f"| {'/'.join(str(r['listen_drops']) for r in rs)} "
            f"| {not_ok} |"
        )
    print(
        "\np50 and p99: the median over rounds; max and the deepest queue: the largest; waits, "
        "retransmissions and failures: "
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
    b.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="client processes")
    t = sub.add_parser("table")
    t.add_argument("file")
    a = p.parse_args()
    if a.cmd == "burst":
        run_burst(a)
    else:
        table(a.file)


if __name__ == "__main__":
    sys.exit(main())
