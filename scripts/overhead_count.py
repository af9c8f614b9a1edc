#!/usr/bin/env python3
"""The work a tokentap build does for a fixed load, counted (scripts/overhead-count.sh).

    overhead_count.py --bin TOKENTAP --tool TOOL [--requests N] [--conc C] [--events E]
                      [--mode paced|fast] [--gap-ms G] [--first-ms F] [--warm W] [--out DIR]

An SSE upstream like benches/overhead.rs's (events of 120 bytes, chunked; paced: the first event
`--first-ms` after the request, then `--gap-ms` apart, each in its own write; fast: all at once),
`tokentap serve` in front of it on core 1 (this script, its upstream and its clients on core 0;
the upstream, in a process of its own, and tokentap at real-time priority when run as root, so
that other work on the machine delays neither the events nor the proxy's reads), and C clients in step on keep-alive connections: each round the C requests are sent together,
and the next round starts when all C streams have ended. Counts are taken over the measured
requests only, after `--warm` warm-up requests:

- `syscalls`: every system call of every tokentap thread (perf's raw_syscalls tracepoint,
  attached after the warm-up), by name and by thread, per request;
- `callgrind`: user-space instructions (valgrind's Ir), run twice under callgrind (warm-up
  alone, and warm-up + N); the difference per request, and by function (--out keeps the files);
- `dhat`: heap blocks and bytes allocated, likewise (dhat's totals at exit).

Under valgrind tokentap runs some 50 times slower: keep the gap wide enough (10 ms at C=8) that
it still reads a paced stream's events one by one. The client prints the events per its own read
(1.0: it got them one by one; its own delays can raise it, the proxy's counts do not move).
Standard library only; needs perf (syscalls) or valgrind, and root for perf's tracepoints.
"""
import argparse
import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

EVENT = (b'data: {"id":"chatcmpl-overhead","object":"chat.completion.chunk",'
         b'"choices":[{"index":0,"delta":{"content":" token"}}]}\n\n')
CHUNK = b"%x\r\n" % len(EVENT) + EVENT + b"\r\n"
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"


def pin(core):
    try:
        os.sched_setaffinity(0, {core})
    except (AttributeError, OSError):
        pass


def serve_upstream(args):
    """The SSE upstream in a process of its own on core 0, at real-time priority (root): its
    writes keep their pace whatever else runs there. Returns its port."""
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(1024)
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
        except (AttributeError, OSError):
            pass
        upstream_loop(lst, args)
        os._exit(0)
    port = lst.getsockname()[1]
    lst.close()
    return port, pid


def upstream_loop(lst, args):
    def conn(s):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = s.recv(65536)
                if not d:
                    return
                buf += d
            _, buf = buf.split(b"\r\n\r\n", 1)
            try:
                if args.mode == "fast":
                    s.sendall(HEAD + CHUNK * args.events + END)
                    continue
                start = time.monotonic()
                s.sendall(HEAD)
                for k in range(args.events):
                    due = start + (args.first_ms + k * args.gap_ms) / 1000
                    left = due - time.monotonic()
                    if left > 0:
                        time.sleep(left)
                    s.sendall(CHUNK if k + 1 < args.events else CHUNK + END)
            except OSError:
                return

    while True:
        s, _ = lst.accept()
        threading.Thread(target=conn, args=(s,), daemon=True).start()


class Client:
    """One keep-alive connection; `one()` sends a request and reads its whole stream."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reads = 0
        self.events = 0

    def one(self, n):
        self.s.sendall(b"GET /paced?id=%d HTTP/1.1\r\nhost: overhead\r\n\r\n" % n)
        buf = b""
        while not buf.endswith(END) or b"\r\n\r\n" not in buf:
            d = self.s.recv(65536)
            if not d:
                raise OSError("the proxy closed the connection")
            buf += d
            self.reads += 1
        self.events += buf.count(b"data: ")


def load(port, conc, requests, first_id):
    """`requests` requests in rounds of `conc` sent together; returns (reads, events) seen."""
    clients = [Client(port) for _ in range(conc)]
    done = 0
    while done < requests:
        k = min(conc, requests - done)
        barrier = threading.Barrier(k)
        errors = []

        def run(c, n):
            try:
                barrier.wait()
                c.one(n)
            except OSError as e:
                errors.append(e)

        ts = [threading.Thread(target=run, args=(clients[i], first_id + done + i)) for i in range(k)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            sys.exit(f"overhead-count: {errors[0]}")
        done += k
    for c in clients:
        c.s.close()
    return sum(c.reads for c in clients), sum(c.events for c in clients)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(args, up, wrap, log):
    port = free_port()
    # At real-time priority when allowed (root): other work on the machine then cannot delay
    # the proxy's reads, so it reads the events one by one, as on a quiet machine, and the
    # counts do not move with the load.
    rt = ["chrt", "-f", "30"] if os.geteuid() == 0 else []
    cmd = ["taskset", "-c", "1"] + rt + wrap + [args.bin, "serve", "--upstream", f"http://127.0.0.1:{up}",
                                         "--listen", f"127.0.0.1:{port}", "--admin", "off", "--log", log]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(2400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            if p.poll() is not None:
                sys.exit(f"overhead-count: tokentap exited: {p.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
    sys.exit("overhead-count: tokentap never came up")


def stop(p):
    """SIGTERM (tokentap drains and exits, valgrind writes its totals), then wait."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def tokentap_pid(p):
    """The pid of tokentap itself under `taskset … [chrt …] [valgrind …] tokentap`: each execs."""
    return p.pid


def count_syscalls(args, up, work):
    p, port = start(args, up, [], os.path.join(work, "records.jsonl"))
    load(port, args.conc, args.warm, 0)
    data = os.path.join(work, "perf.data")
    perf = subprocess.Popen(["taskset", "-c", "0", "perf", "record", "-q", "-o", data, "-p",
                             str(tokentap_pid(p)), "-e", "raw_syscalls:sys_enter", "-e", "raw_syscalls:sys_exit"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    reads, events = load(port, args.conc, args.requests, args.warm)
    time.sleep(0.2)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    stop(p)
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,event,trace"], capture_output=True,
                         text=True).stdout
    names = syscall_names()
    by_nr, by_comm = collections.Counter(), collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+(\d+)\s+raw_syscalls:sys_enter:\s+NR (\d+)", line)
        if m:
            by_nr[names.get(int(m.group(3)), m.group(3))] += 1
            by_comm[m.group(1)] += 1
    total = sum(by_nr.values())
    n = args.requests
    print(f"syscalls per request: {total / n:.2f} ({total} over {n} requests, {events / max(reads, 1):.2f} events per client read)")
    for name, c in by_nr.most_common():
        print(f"  {name:<16} {c / n:8.2f}")
    print("  by thread: " + ", ".join(f"{k} {v / n:.2f}" for k, v in by_comm.most_common()))
    return {"total": total / n, "by_name": {k: v / n for k, v in by_nr.items()}}


def syscall_names():
    """x86_64 numbers → names, from the kernel headers when present, else the common ones."""
    names = {0: "read", 1: "write", 3: "close", 7: "poll", 9: "mmap", 11: "munmap", 13: "rt_sigaction",
             14: "rt_sigprocmask", 16: "ioctl", 17: "pread64", 19: "readv", 20: "writev", 23: "select",
             24: "sched_yield", 28: "madvise", 41: "socket", 42: "connect", 43: "accept", 44: "sendto",
             45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 48: "shutdown", 54: "setsockopt",
             55: "getsockopt", 72: "fcntl", 202: "futex", 228: "clock_gettime", 232: "epoll_wait",
             233: "epoll_ctl", 257: "openat", 262: "newfstatat", 281: "epoll_pwait", 284: "eventfd",
             288: "accept4", 290: "eventfd2", 291: "epoll_create1", 318: "getrandom", 39: "getpid",
             186: "gettid", 96: "gettimeofday", 35: "nanosleep", 230: "clock_nanosleep",
             441: "epoll_pwait2", 5: "fstat", 8: "lseek", 18: "pwrite64", 74: "fsync", 75: "fdatasync",
             275: "splice", 332: "statx", 334: "rseq", 302: "prlimit64", 56: "clone", 435: "clone3",
             60: "exit", 231: "exit_group", 234: "tgkill", 200: "tkill", 62: "kill"}
    return names


def valgrind_total(args, up, work, tool, n):
    """Runs tokentap under valgrind `tool` through warm-up + n requests; returns its output file."""
    out = os.path.join(work, f"{tool}.{n}.out")
    flags = {"callgrind": ["--tool=callgrind", f"--callgrind-out-file={out}"],
             "dhat": ["--tool=dhat", f"--dhat-out-file={out}"]}[tool]
    p, port = start(args, up, ["valgrind", "-q"] + flags, os.path.join(work, f"records.{tool}.{n}.jsonl"))
    load(port, args.conc, args.warm, 0)
    reads, events = load(port, args.conc, n, args.warm) if n else (0, 0)
    stop(p)
    if n:
        print(f"  ({events / max(reads, 1):.2f} events per client read)")
    return out


def callgrind_fns(path):
    """Self Ir by function, and the total, from callgrind_annotate's function summary. The
    total leaves out one-time work whose length depends on time, so two runs differ by it: the
    metrics recorder's clock calibration, in a OnceCell's initializer (its inclusive cost)."""
    def summary(inclusive):
        out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100",
                              f"--inclusive={inclusive}", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$", line)
            if m:
                yield int(m.group(1).replace(",", "")), re.sub(r"\s*\[[^\]]*\]$", "", m.group(2))
    total, fns = 0, collections.Counter()
    for ir, name in summary("no"):
        if name == "PROGRAM TOTALS":
            total = ir
            continue
        # file:function: keep the function (the file names the crate's version).
        fns[name.split(":", 1)[1] if ":" in name else name] += ir
    once = max((ir for ir, name in summary("yes") if name.endswith(":once_cell::imp::initialize_or_wait")),
               default=0)
    return total - once, fns


def count_callgrind(args, up, work):
    base = callgrind_fns(valgrind_total(args, up, work, "callgrind", 0))
    full = callgrind_fns(valgrind_total(args, up, work, "callgrind", args.requests))
    n = args.requests
    print(f"user instructions per request: {(full[0] - base[0]) / n:,.0f} (warm-up alone {base[0]:,}, with {n} requests {full[0]:,})")
    diff = collections.Counter({k: full[1][k] - base[1].get(k, 0) for k in full[1]})
    for name, c in diff.most_common(args.top):
        print(f"  {c / n:10,.0f}  {name[:150]}")
    with open(os.path.join(work, "callgrind-per-request.json"), "w") as f:
        json.dump({k: v / n for k, v in diff.items()}, f)
    return {"instructions": (full[0] - base[0]) / n}


def dhat_totals(path):
    """Total blocks and bytes allocated over the process's life (dhat's `tbk`, `tb`)."""
    d = json.load(open(path))
    blocks = sum(pp["tbk"] for pp in d["pps"])
    byts = sum(pp["tb"] for pp in d["pps"])
    return blocks, byts


def count_dhat(args, up, work):
    b0, y0 = dhat_totals(valgrind_total(args, up, work, "dhat", 0))
    b1, y1 = dhat_totals(valgrind_total(args, up, work, "dhat", args.requests))
    n = args.requests
    print(f"allocations per request: {(b1 - b0) / n:.1f} blocks, {(y1 - y0) / n:,.0f} bytes")
    return {"blocks": (b1 - b0) / n, "bytes": (y1 - y0) / n}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tool", choices=["syscalls", "callgrind", "dhat", "none"], required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warm", type=int, default=64)
    ap.add_argument("--conc", type=int, default=8)
    ap.add_argument("--events", type=int, default=64)
    ap.add_argument("--mode", choices=["paced", "fast"], default="paced")
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--first-ms", type=float, default=20.0)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pin(0)
    work = args.out or tempfile.mkdtemp(prefix="overhead-count-")
    os.makedirs(work, exist_ok=True)
    up, up_pid = serve_upstream(args)
    try:
        run(args, up, work)
    finally:
        os.kill(up_pid, signal.SIGKILL)
        os.waitpid(up_pid, 0)


def run(args, up, work):
    print(f"{args.bin}: {args.requests} requests at C={args.conc} in step, {args.events} events, {args.mode}"
          + (f" (first {args.first_ms} ms, then {args.gap_ms} ms apart)" if args.mode == "paced" else ""))
    if args.tool == "syscalls":
        r = count_syscalls(args, up, work)
    elif args.tool == "callgrind":
        r = count_callgrind(args, up, work)
    elif args.tool == "dhat":
        r = count_dhat(args, up, work)
    else:
        p, port = start(args, up, [], os.path.join(work, "records.jsonl"))
        t = time.monotonic()
        reads, events = load(port, args.conc, args.requests, 0)
        print(f"{args.requests} requests in {time.monotonic() - t:.2f} s, {events / max(reads, 1):.2f} events per client read")
        stop(p)
        r = {}
    with open(os.path.join(work, f"{args.tool}.json"), "w") as f:
        json.dump(r, f)


if __name__ == "__main__":
    main()
