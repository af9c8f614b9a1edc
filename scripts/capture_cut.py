#!/usr/bin/env python3
"""Capture one streamed exchange with a loopback server that is stopped mid-stream, byte-exact.

    capture_cut.py URL BODY_JSON OUT_PREFIX --after N --signal TERM|INT|KILL[,…] --pid PID [-H 'K: v']...

Sends the request (HTTP/1.1, `Connection: close`), reads the response, and once N SSE events
with generated text have arrived sends the signal to PID (a negative PID: its process group);
several signals (`TERM,INT`) go 200 ms apart.
Then it reads until the server ends the connection (or 60 s of silence) and writes, as the
rig's capture_sse.py does:

  OUT_PREFIX.request  .headers  .wire  .sse  .timing.jsonl

and one more file, OUT_PREFIX.end (JSON): the signal and when it was sent, how the connection
ended (`eof`: the server closed it; `reset`: a TCP reset; `timeout`), when, and whether the
chunked body had its terminating 0-chunk. Loopback targets only; standard library only.
"""
import json
import os
import signal
import socket
import sys
import time
from urllib.parse import urlsplit


def parse_args(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    url, body, prefix = argv[:3]
    opts = {"after": 20, "signal": "TERM", "pid": None, "headers": []}
    rest = argv[3:]
    while rest:
        k = rest[0]
        if k == "-H":
            opts["headers"].append(rest[1])
        elif k in ("--after", "--signal", "--pid"):
            opts[k[2:]] = rest[1]
        else:
            sys.exit(f"bad arg {k}")
        rest = rest[2:]
    if opts["pid"] is None:
        sys.exit("--pid is required")
    return url, body, prefix, opts


def dechunk(wire, arrival, hdr_end):
    """The chunked body's payload and per-chunk timings; whether the 0-chunk came."""
    body, timing, i = b"", [], 0
    while True:
        j = wire.find(b"\r\n", i)
        if j < 0:
            return body, timing, False
        size = int(wire[i:j].split(b";")[0], 16)
        start = j + 2
        if size == 0:
            return body, timing, True
        if start + size > len(wire):
            return body, timing, False
        body += wire[start:start + size]
        timing.append({"t_ms": round(arrival(hdr_end + start + size - 1), 3), "len": size})
        i = start + size + 2


def content_events(raw):
    """Events so far that carry generated text (chat, completions, Responses, Messages)."""
    keys = (b'"content":"', b'"text":"', b'"delta":"', b'"text": "')
    n = 0
    for ev in raw.split(b"\n\n"):
        for k in keys:
            at = ev.find(k)
            if at >= 0 and ev[at + len(k):at + len(k) + 1] not in (b'"', b""):
                n += 1
                break
    return n


def main():
    url, body, prefix, opts = parse_args(sys.argv[1:])
    u = urlsplit(url)
    host, port = u.hostname, u.port or 80
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("refusing non-loopback target")
    body_b = body.encode()
    lines = [f"POST {u.path} HTTP/1.1", f"Host: {host}:{port}", "User-Agent: rig-capture/1",
             "Accept: */*", "Content-Type: application/json", f"Content-Length: {len(body_b)}"]
    lines += opts["headers"] + ["Connection: close"]
    req = ("\r\n".join(lines) + "\r\n\r\n").encode() + body_b
    sigs = [getattr(signal, "SIG" + name) for name in opts["signal"].split(",")]
    pid, after = int(opts["pid"]), int(opts["after"])

    s = socket.create_connection((host, port))
    s.settimeout(60.0)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    ms = lambda: round((time.perf_counter() - t0) * 1000.0, 3)
    s.sendall(req)
    raw, recvs, signal_ms, end = b"", [], None, "eof"
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            end = "timeout"
            break
        except ConnectionResetError:
            end = "reset"
            break
        if not d:
            break
        raw += d
        recvs.append((ms(), len(raw)))
        if signal_ms is None and content_events(raw) >= after:
            signal_ms = ms()
            for i, sig in enumerate(sigs):
                time.sleep(0.2 if i else 0)
                os.kill(pid, sig) if pid > 0 else os.killpg(-pid, sig)
    end_ms = ms()
    s.close()

    hdr_end = raw.index(b"\r\n\r\n") + 4
    headers, wire = raw[:hdr_end], raw[hdr_end:]
    chunked = any(l.lower().replace(b" ", b"") == b"transfer-encoding:chunked"
                  for l in headers.split(b"\r\n"))

    def arrival(offset):
        return next((t for t, e in recvs if e > offset), recvs[-1][0])

    if chunked:
        body_out, timing, terminated = dechunk(wire, arrival, hdr_end)
    else:
        body_out, terminated = wire, True
        timing = [{"t_ms": round(arrival(len(raw) - 1), 3), "len": len(wire)}]
    files = {".request": req, ".headers": headers, ".wire": wire, ".sse": body_out}
    for ext, data in files.items():
        with open(prefix + ext, "wb") as f:
            f.write(data)
    with open(prefix + ".timing.jsonl", "w") as f:
        for t in timing:
            f.write(json.dumps(t) + "\n")
    note = {"signal": ",".join("SIG" + n for n in opts["signal"].split(",")), "signal_ms": signal_ms, "after_content_events": after,
            "end": end, "end_ms": end_ms, "terminating_chunk": terminated}
    with open(prefix + ".end", "w") as f:
        f.write(json.dumps(note) + "\n")
    status = headers.split(b"\r\n", 1)[0].decode()
    print(f"{prefix}: {status}; body {len(body_out)} B in {len(timing)} chunk(s); {json.dumps(note)}")


if __name__ == "__main__":
    main()
