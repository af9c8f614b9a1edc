"""The soak of scripts/soak.sh, against the tokentap binary given as the argument.

Mixed traffic against the simulated engine for SOAK_MINUTES (default 30): chat, completions,
Responses and Messages streams, non-streaming chat, model listings, cancels, resets, slow
readers, a client error passed through, a refused key on a credential-injecting route and an
upstream that resets. A SIGHUP reload every minute, alternating a harmless change. The OTLP and
ClickHouse stand-ins go down for a minute in every three. Every 10 s: RSS, open fds, threads,
in-flight requests, records written and requests sent. Then a clean SIGTERM and the verdict
(docs/security.md#soak). Loopback only; every process started here is stopped here, by pid.

    python3 scripts/soak.py target/release/tokentap            # SOAK_MINUTES, SOAK_CONCURRENCY, SOAK_OUT
    python3 scripts/soak.py sink PORT DUMP                      # one stand-in receiver (used by the soak)
"""
import hashlib
import http.client
import http.server
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

MODEL = "sim-qwen2.5-7b"
SAMPLE_S = 10
RELOAD_S = 60
CYCLE_S = 180  # each sink is down for DOWN_S in every CYCLE_S
DOWN_S = 60
SECRET = b"sk-soak-"  # every key and credential of the soak starts with it


# ---------------------------------------------------------------- the stand-in receivers
class Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP collector or ClickHouse's HTTP interface: takes any POST, answers 200 empty,
    appends the body (4-byte big-endian length, then the bytes) to the dump file."""
    protocol_version = "HTTP/1.1"
    dump = None
    lock = threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with Sink.lock:
            Sink.dump.write(struct.pack(">I", len(body)) + body)
            Sink.dump.flush()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def sink_main(port, dump):
    Sink.dump = open(dump, "ab")
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Sink).serve_forever()


def frames(path):
    """The bodies a stand-in received."""
    if not os.path.exists(path):
        return []
    data, out, i = open(path, "rb").read(), [], 0
    while i + 4 <= len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def pb_fields(buf):
    """(field number, wire type, value) of one protobuf message, length-delimited values as bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield f, wt, v


def varint(buf, i):
    v, s = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << s
        s += 7
        if not b & 0x80:
            return v, i


def count_spans(body):
    """Spans in an ExportTraceServiceRequest: resource_spans(1) → scope_spans(2) → spans(2)."""
    return sum(1 for f, _, rs in pb_fields(body) if f == 1
               for g, _, ss in pb_fields(rs) if g == 2
               for h, _, _ in pb_fields(ss) if h == 2)


# ---------------------------------------------------------------- processes
PROCS = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def listening(port, proc=None):
    for _ in range(300):  # up to about 15 s
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            if proc is not None and proc.poll() is not None:
                return False
            time.sleep(0.05)
    return False


def wait_port(port, what, proc=None):
    if not listening(port, proc):
        sys.exit(f"FAIL: {what} never listened on {port}")


def start(args, **kw):
    p = subprocess.Popen(args, **kw)
    PROCS.append(p)
    return p


def stop(p, sig=signal.SIGTERM, wait=10):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class StandIn:
    """One stand-in receiver on a fixed loopback port, in its own process, so that stopping it
    closes its listener and every connection tokentap holds to it."""

    def __init__(self, name, work):
        self.name, self.port = name, free_port()
        self.dump = os.path.join(work, f"{name}-bodies.bin")
        self.proc, self.down_s, self.downs = None, 0.0, 0
        self.went_down = None

    def up(self):
        for _ in range(50):  # the port may linger a moment after the last stop
            self.proc = start([sys.executable, os.path.abspath(__file__), "sink", str(self.port), self.dump],
                              stderr=subprocess.DEVNULL)
            if listening(self.port, self.proc):
                break
            time.sleep(0.1)
        if self.went_down is not None:
            self.down_s += time.monotonic() - self.went_down
            self.went_down = None

    def down(self):
        stop(self.proc)
        self.downs += 1
        self.went_down = time.monotonic()

    @property
    def is_up(self):
        return self.went_down is None


# ---------------------------------------------------------------- an upstream that resets
def flaky_upstream(stop_flag):
    """Answers a stream's head and one event, then resets the connection (RST)."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    ls.settimeout(0.5)

    def conn(s):
        try:
            s.settimeout(10)
            buf = b""
            while b"\r\n\r\n" not in buf and len(buf) < 65536:
                b = s.recv(4096)
                if not b:
                    return
                buf += b
            head, _, body = buf.partition(b"\r\n\r\n")
            n = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")), 0)
            while len(body) < n:
                b = s.recv(4096)
                if not b:
                    return
                body += b
            ev = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
            s.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                      + b"%x\r\n" % len(ev) + ev + b"\r\n")
            time.sleep(0.05)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            s.close()

    def loop():
        while not stop_flag.is_set():
            try:
                s, _ = ls.accept()
            except OSError:
                continue
            threading.Thread(target=conn, args=(s,), daemon=True).start()
        ls.close()

    threading.Thread(target=loop, daemon=True).start()
    return ls.getsockname()[1]


# ---------------------------------------------------------------- config
def write_config(path, generation, ports, admitted_fp):
    """The soak's config; `generation` alternates a harmless change (a bucket threshold and
    the concurrency cap), so that every reload applies."""
    listen, adm, engine, flaky, otlp, ch = ports
    text = f"""[listen]
addr = "127.0.0.1:{listen}"
[admin]
addr = "127.0.0.1:{adm}"
[log]
path = "{LOG}"
[timeouts]
shutdown_grace_ms = 10000
[limits]
max_concurrent = {1000 + generation % 2}
[buckets]
short_input_max = {300 + generation % 2}
[otlp]
endpoint = "http://127.0.0.1:{otlp}"
headers = {{ authorization = "Bearer ${{SOAK_OTLP_TOKEN}}" }}
flush_ms = 200
timeout_ms = 2000
[clickhouse]
url = "http://127.0.0.1:{ch}"
user = "soak"
password = "${{SOAK_CLICKHOUSE_PASSWORD}}"
flush_ms = 500
batch = 1000
timeout_ms = 2000

[[routes]]
name = "engine"
upstream = "http://127.0.0.1:{engine}"

[[routes]]
name = "injected"
path_prefix = "/inj"
upstream = "http://127.0.0.1:{engine}"
set_headers = {{ authorization = "Bearer ${{SOAK_UPSTREAM_KEY}}" }}
admit_keys = ["{admitted_fp}"]

[[routes]]
name = "flaky"
path_prefix = "/flaky"
upstream = "http://127.0.0.1:{flaky}"
"""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # a reload never reads half a file


# ---------------------------------------------------------------- the client
# kind: (weight, expected outcome in the record)
KINDS = {
    "chat_stream": (20, "ok"),
    "chat": (8, "ok"),
    "completions_stream": (6, "ok"),
    "responses_stream": (9, "ok"),
    "messages_stream": (9, "ok"),
    "models": (3, "ok"),
    "slow_reader": (6, "ok"),
    "cancel": (10, "client_cancelled"),
    "reset": (8, "client_cancelled"),
    "bad_model": (5, "upstream_error"),  # a new model name each: past limits.max_model_labels
    "injected": (6, "ok"),
    "not_admitted": (4, "rejected"),
    "upstream_reset": (6, "upstream_reset"),
}


class Client:
    def __init__(self, port, deadline, admitted_key, seed):
        self.port, self.deadline, self.admitted_key = port, deadline, admitted_key
        self.lock = threading.Lock()
        self.sent = {}  # request id -> kind: the request was written whole
        self.answered = set()  # ids whose response head arrived
        self.errors = []  # (id, kind, what went wrong on the client's side)
        self.pool = [f"sk-soak-pool-{i:02d}-{random.Random(seed + i).getrandbits(64):016x}" for i in range(16)]
        self.seed = seed

    def key(self, rng):
        if rng.random() < 0.2:  # a new key: beyond limits.max_key_labels these become `other`
            return f"sk-soak-fresh-{rng.getrandbits(96):024x}"
        return rng.choice(self.pool)

    def body(self, kind, rng, n):
        prompt = "soak " * rng.randint(4, 200)
        if kind == "responses_stream":
            return "/v1/responses", {"model": MODEL, "input": prompt, "max_output_tokens": n, "stream": True}
        if kind == "messages_stream":
            return "/v1/messages", {"model": MODEL, "max_tokens": n, "stream": True,
                                    "messages": [{"role": "user", "content": prompt}]}
        if kind == "completions_stream":
            return "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": n, "stream": True}
        path = {"injected": "/inj", "not_admitted": "/inj", "upstream_reset": "/flaky"}.get(kind, "") + "/v1/chat/completions"
        model = f"soak-missing-{rng.getrandbits(32):08x}" if kind == "bad_model" else MODEL
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": n,
                "stream": kind != "chat"}
        if kind != "chat":
            body["stream_options"] = {"include_usage": True}
        return path, body

    def headers(self, kind, rng, rid):
        h = {"content-type": "application/json", "x-request-id": rid}
        key = self.admitted_key if kind == "injected" else self.key(rng)
        if kind == "messages_stream":
            h["x-api-key"], h["anthropic-version"] = key, "2023-06-01"
        else:
            h["authorization"] = f"Bearer {key}"
        return h

    def run(self, w):
        rng = random.Random(self.seed * 1000 + w)
        kinds, weights = list(KINDS), [v[0] for v in KINDS.values()]
        conn, last_used = None, 0.0
        for i in range(1_000_000):  # bounded in count and in time
            if time.monotonic() >= self.deadline:
                break
            kind = rng.choices(kinds, weights)[0]
            rid = f"soak-{w}-{i}-{kind}"
            try:
                if kind in ("cancel", "reset", "slow_reader"):
                    self.raw(kind, rng, rid)
                else:
                    # NB: tokentap closes a kept-alive connection idle for timeouts.header_read_ms
                    # (30 s); like any pooled client, don't reuse one idle for 20 s.
                    if conn is not None and time.monotonic() - last_used > 20:
                        conn.close()
                        conn = None
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                    self.kept_alive(conn, kind, rng, rid)
                    last_used = time.monotonic()
            except Exception as e:  # noqa: BLE001 - every client-side failure is reported
                with self.lock:
                    self.errors.append((rid, kind, repr(e)[:200]))
                if conn is not None:
                    conn.close()
                conn = None
            time.sleep(rng.uniform(0.02, 0.25))
        if conn is not None:
            conn.close()

    def mark(self, rid, kind, answered=False):
        with self.lock:
            if answered:
                self.answered.add(rid)
            else:
                self.sent[rid] = kind

    def kept_alive(self, conn, kind, rng, rid):
        if kind == "models":
            conn.request("GET", "/v1/models", headers=self.headers(kind, rng, rid))
        else:
            path, body = self.body(kind, rng, rng.randint(4, 48))
            conn.request("POST", path, json.dumps(body).encode(), self.headers(kind, rng, rid))
        self.mark(rid, kind)
        r = conn.getresponse()
        self.mark(rid, kind, answered=True)
        want = {"bad_model": 404, "not_admitted": 403}.get(kind, 200)
        if r.status != want:
            raise RuntimeError(f"status {r.status}, wanted {want}")
        if kind == "upstream_reset":
            try:
                data = r.read()
            except (http.client.IncompleteRead, ConnectionError):
                data = b""
            conn.close()  # the cut stream leaves the connection unusable
            if b"[DONE]" in data:
                raise RuntimeError("the upstream's reset did not reach the client")
            return
        data = r.read()
        if kind.endswith("_stream") or kind == "injected":
            if b"[DONE]" not in data and b"message_stop" not in data and b"response.completed" not in data:
                raise RuntimeError(f"no end marker in {data[-120:]!r}")

    def raw(self, kind, rng, rid):
        """Cancel (close), reset (RST) after the first event, or read slowly to the end."""
        n = 160 if kind == "slow_reader" else 400
        path, body = self.body("chat_stream", rng, n)
        if kind == "slow_reader":
            body["ignore_eos"] = True
        data = json.dumps(body).encode()
        hdr = self.headers(kind, rng, rid)
        head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(data)}\r\nconnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in hdr.items()) + "\r\n"
        s = socket.socket()
        if kind == "slow_reader":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(60)
        try:
            s.connect(("127.0.0.1", self.port))
            s.sendall(head.encode() + data)
            self.mark(rid, kind)
            got, t_end = b"", time.monotonic() + 60
            while time.monotonic() < t_end:
                b = s.recv(256 if kind == "slow_reader" else 65536)
                if not b:
                    break
                got += b
                if b" 200 " in got[:20] and rid not in self.answered:
                    self.mark(rid, kind, answered=True)
                if kind != "slow_reader" and b"data:" in got:
                    break
                if kind == "slow_reader":
                    time.sleep(0.1)
            if not got.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"{kind}: {got[:80]!r}")
            if kind == "slow_reader" and b"data: [DONE]" not in got:
                raise RuntimeError("slow reader: no [DONE]")
            if kind == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            s.close()


# ---------------------------------------------------------------- readings
def proc_status(pid):
    st = {}
    for l in open(f"/proc/{pid}/status"):
        k, _, v = l.partition(":")
        st[k] = v.strip()
    return int(st["VmRSS"].split()[0]), int(st["Threads"])


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def metric(text, prefix):
    for l in text.splitlines():
        if l.startswith(prefix):
            return float(l.rsplit(" ", 1)[1])
    return 0.0


def fit(xs, ys):
    """Least-squares slope of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0, mx, my


def svg(samples, events, window_t, path, minutes):
    """RSS and open fds over time, two panels, sink outages shaded, reloads ticked."""
    W, H, L, R, T, P = 760, 490, 64, 20, 34, 170  # width, height, margins, panel height
    tmax = max(s["t"] for s in samples) or 1
    X = lambda t: L + (W - L - R) * t / tmax  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="13">tokentap soak, {minutes:g} min: RSS and open fds every {SAMPLE_S} s</text>']
    panels = [("RSS (MiB)", [s["rss_kb"] / 1024 for s in samples], T, "#1f5fa8"),
              ("open fds", [s["fds"] for s in samples], T + P + 50, "#b5482a")]
    for title, ys, top, colour in panels:
        lo, hi = min(ys), max(ys)
        pad = max((hi - lo) * 0.15, 1.0)
        lo, hi = max(0.0, lo - pad), hi + pad
        Y = lambda v, top=top, lo=lo, hi=hi: top + P - P * (v - lo) / (hi - lo)  # noqa: E731
        for name, a, b in events["down"]:  # OTLP in the upper half, ClickHouse in the lower
            a, b = min(a, tmax), min(b, tmax)
            y = top if name == "otlp" else top + P / 2
            fill = "#e8d9f5" if name == "otlp" else "#d9efe0"
            out.append(f'<rect x="{X(a):.1f}" y="{y}" width="{max(X(b) - X(a), 1):.1f}" height="{P / 2}" fill="{fill}"/>')
        for t in events["reloads"]:
            out.append(f'<line x1="{X(t):.1f}" y1="{top + P}" x2="{X(t):.1f}" y2="{top + P - 10}" stroke="#000" stroke-width="1.5"/>')
        out.append(f'<line x1="{X(window_t):.1f}" y1="{top}" x2="{X(window_t):.1f}" y2="{top + P}" stroke="#888" stroke-dasharray="4 3"/>')
        out.append(f'<rect x="{L}" y="{top}" width="{W - L - R}" height="{P}" fill="none" stroke="#333"/>')
        for k in range(5):
            v = lo + (hi - lo) * k / 4
            label = f"{v:.1f}" if hi - lo < 10 else f"{v:.0f}"
            out.append(f'<text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{label}</text>')
        out.append(f'<text x="{L + 6}" y="{top + 14}" fill="{colour}">{title}</text>')
        pts = " ".join(f"{X(s['t']):.1f},{Y(y):.1f}" for s, y in zip(samples, ys))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
        win = [(s["t"], y) for s, y in zip(samples, ys) if s["t"] >= window_t]
        if len(win) >= 2:
            k, mx, my = fit([t for t, _ in win], [y for _, y in win])
            a, b = win[0][0], win[-1][0]
            out.append(f'<line x1="{X(a):.1f}" y1="{Y(my + k * (a - mx)):.1f}" x2="{X(b):.1f}" y2="{Y(my + k * (b - mx)):.1f}" '
                       'stroke="#000" stroke-dasharray="6 3"/>')
    step = max(1, int(tmax // 60) // 10)
    for top in (T, T + P + 50):
        for m in range(0, int(tmax // 60) + 1, step):
            out.append(f'<text x="{X(m * 60):.1f}" y="{top + P + 14}" text-anchor="middle">{m}</text>')
    out.append(f'<text x="{(W + L) / 2}" y="{T + 2 * P + 50 + 30}" text-anchor="middle">minutes</text>')
    legend = [("#e8d9f5", "OTLP stand-in down (upper half)"), ("#d9efe0", "ClickHouse stand-in down (lower half)")]
    for i, (fill, text) in enumerate(legend):
        x = L + i * 230
        out.append(f'<rect x="{x}" y="{H - 20}" width="12" height="10" fill="{fill}"/><text x="{x + 16}" y="{H - 11}">{text}</text>')
    out.append(f'<text x="{L + 460}" y="{H - 11}">ticks: reloads; dashes: judged window, fit</text>')
    out.append("</svg>\n")
    with open(path, "w") as f:
        f.write("\n".join(out))


# ---------------------------------------------------------------- the soak
def soak(tt, out):
    global LOG
    minutes = float(os.environ.get("SOAK_MINUTES", "30"))
    workers = int(os.environ.get("SOAK_CONCURRENCY", "12"))
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.startswith(("tokentap.jsonl", "otlp-", "clickhouse-")):
            os.remove(os.path.join(out, f))
    LOG = os.path.join(out, "tokentap.jsonl")
    salt = os.urandom(6).hex()
    secrets = {"SOAK_UPSTREAM_KEY": f"sk-soak-upstream-{salt}", "SOAK_OTLP_TOKEN": f"sk-soak-otlp-{salt}",
               "SOAK_CLICKHOUSE_PASSWORD": f"sk-soak-clickhouse-{salt}"}
    admitted = f"sk-soak-admitted-{salt}"
    admitted_fp = "sha256:" + hashlib.sha256(admitted.encode()).hexdigest()

    engine = free_port()
    start([tt, "sim", "--listen", f"127.0.0.1:{engine}", "--model", MODEL],
          stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "sim.stderr"), "w"))
    wait_port(engine, "sim")
    stop_flag = threading.Event()
    flaky = flaky_upstream(stop_flag)
    otlp, ch = StandIn("otlp", out), StandIn("clickhouse", out)
    otlp.up()
    ch.up()
    listen, adm = free_port(), free_port()
    ports = (listen, adm, engine, flaky, otlp.port, ch.port)
    cfg = os.path.join(out, "soak.toml")
    generation = 0
    write_config(cfg, generation, ports, admitted_fp)
    t_out, t_err = os.path.join(out, "tokentap.stdout"), os.path.join(out, "tokentap.stderr")
    tp = start([tt, "serve", "--config", cfg], env={**os.environ, **secrets, "TOKENTAP_LOG": "info"},
               stdout=open(t_out, "w"), stderr=open(t_err, "w"))
    wait_port(listen, "tokentap", tp)
    wait_port(adm, "tokentap admin", tp)

    t0 = time.monotonic()
    duration = minutes * 60
    client = Client(listen, t0 + duration, admitted, seed=int(os.environ.get("SOAK_SEED", "7")))
    threads = [threading.Thread(target=client.run, args=(w,), daemon=True) for w in range(workers)]
    for th in threads:
        th.start()
    print(f"soak: {minutes:g} min, {workers} clients, tokentap pid {tp.pid}, out {out}", flush=True)

    samples, events = [], {"down": [], "reloads": []}
    next_sample, next_reload = t0, t0 + RELOAD_S
    down_at = {}
    for _ in range(int(duration) * 20 + 100):  # 50 ms ticks, bounded
        now = time.monotonic()
        t = now - t0
        if t >= duration:
            break
        if tp.poll() is not None:
            sys.exit(f"FAIL: tokentap exited ({tp.returncode}) after {t:.0f} s")
        for s, offset in ((otlp, 60), (ch, 90)):  # OTLP down 1:00-2:00, ClickHouse 1:30-2:30, every 3 min
            phase = (t - offset) % CYCLE_S if t >= offset else None
            should_be_down = phase is not None and phase < DOWN_S
            if should_be_down and s.is_up:
                s.down()
                down_at[s.name] = t
            elif not should_be_down and not s.is_up:
                s.up()
                events["down"].append((s.name, down_at.pop(s.name), t))
        if now >= next_reload:
            generation += 1
            write_config(cfg, generation, ports, admitted_fp)
            tp.send_signal(signal.SIGHUP)
            events["reloads"].append(t)
            next_reload += RELOAD_S
        if now >= next_sample:
            rss, nthreads = proc_status(tp.pid)
            stats = json.loads(get(adm, "/stats"))
            with client.lock:
                sent = len(client.sent)
            samples.append({"t": round(t, 1), "rss_kb": rss, "fds": len(os.listdir(f"/proc/{tp.pid}/fd")),
                            "threads": nthreads, "in_flight": sum(stats["in_flight"].values()),
                            "records_total": stats["records"]["total"], "records_written": stats["records"]["written"],
                            "records_dropped": stats["records"]["dropped"], "sent": sent,
                            "generation": stats["config_generation"], "draining": stats["generations_draining"],
                            "otlp_up": int(otlp.is_up), "clickhouse_up": int(ch.is_up)})
            s = samples[-1]
            print(f"  {s['t']:7.1f}s rss {s['rss_kb'] / 1024:6.1f} MiB fds {s['fds']:3d} threads {s['threads']:2d} "
                  f"in-flight {s['in_flight']:2d} sent {s['sent']:6d} records {s['records_total']:6d} "
                  f"gen {s['generation']} otlp {'up' if otlp.is_up else 'DOWN'} ch {'up' if ch.is_up else 'DOWN'}", flush=True)
            next_sample += SAMPLE_S
        time.sleep(0.05)

    # The end: the clients finish their last request, the sinks come back, the queues drain.
    t_end = time.monotonic() - t0
    for th in threads:
        th.join(timeout=90)
    stuck = sum(th.is_alive() for th in threads)
    for s in (otlp, ch):
        if not s.is_up:
            s.up()
            events["down"].append((s.name, down_at.pop(s.name), t_end))
    for _ in range(100):
        stats = json.loads(get(adm, "/stats"))
        if sum(stats["in_flight"].values()) == 0 and stats["records"]["total"] >= len(client.sent):
            break
        time.sleep(0.1)
    time.sleep(3)  # a batch's flush_ms, several times over
    metrics, stats_text = get(adm, "/metrics"), get(adm, "/stats")
    stats = json.loads(stats_text)
    rss_end, _ = proc_status(tp.pid)
    fds_end = len(os.listdir(f"/proc/{tp.pid}/fd"))
    tp.send_signal(signal.SIGTERM)
    try:
        rc = tp.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = "did not exit within 60 s"
    stop_flag.set()

    # ------------------------------------------------------------ the verdict
    ids, outcomes, lines = {}, {}, 0
    log_bytes = b""
    for suffix in ["", ".1", ".2", ".3", ".4", ".5"]:
        if os.path.exists(LOG + suffix):
            log_bytes += open(LOG + suffix, "rb").read()
    for l in log_bytes.splitlines():
        rec = json.loads(l)
        lines += 1
        rid = rec.get("request_id")
        ids[rid] = ids.get(rid, 0) + 1
        outcomes[rid] = rec["outcome"]
    sent = dict(client.sent)
    missing = [r for r in sent if r not in ids]
    extra = [r for r in ids if r not in sent]
    dup = [r for r, n in ids.items() if n > 1]
    wrong = [(r, sent[r], outcomes[r]) for r in sent if r in outcomes and outcomes[r] != KINDS[sent[r]][1]]
    otlp_bodies, ch_bodies = frames(otlp.dump), frames(ch.dump)
    spans = sum(count_spans(b) for b in otlp_bodies)
    ch_rows = [json.loads(l) for b in ch_bodies for l in b.splitlines() if l.strip()]
    ch_ids = {r["id"] for r in ch_rows}
    outputs = {"log": log_bytes, "tokentap stdout": open(t_out, "rb").read(), "tokentap stderr": open(t_err, "rb").read(),
               "OTLP bodies": b"".join(otlp_bodies), "ClickHouse bodies": b"".join(ch_bodies),
               "/metrics": metrics.encode(), "/stats": stats_text.encode()}
    leaked = {name: data.count(SECRET) for name, data in outputs.items() if SECRET in data}

    window_t = duration / 3
    win = [s for s in samples if s["t"] >= window_t]
    k_rss, _, _ = fit([s["t"] / 60 for s in win], [s["rss_kb"] for s in win])
    k_fds, _, _ = fit([s["t"] / 60 for s in win], [s["fds"] for s in win])
    rss_spread = (max(s["rss_kb"] for s in win) - min(s["rss_kb"] for s in win)) / 1024
    fds_spread = max(s["fds"] for s in win) - min(s["fds"] for s in win)
    reloads_ok = metric(metrics, 'tokentap_config_reloads_total{result="ok"}')
    by_kind = {}
    for r, kind in sent.items():
        by_kind[kind] = by_kind.get(kind, 0) + 1

    RSS_SLOPE_KB_MIN, RSS_SPREAD_MB, FDS_SPREAD, FDS_SLOPE = 64, 8, 2 * workers + 8, 0.5
    checks = [
        (f"RSS slope over the last two thirds {k_rss:+.1f} KB/min ≤ {RSS_SLOPE_KB_MIN}", k_rss <= RSS_SLOPE_KB_MIN),
        (f"RSS spread over the last two thirds {rss_spread:.1f} MiB ≤ {RSS_SPREAD_MB}", rss_spread <= RSS_SPREAD_MB),
        (f"fds slope over the last two thirds {k_fds:+.2f}/min ≤ {FDS_SLOPE}", k_fds <= FDS_SLOPE),
        (f"fds spread over the last two thirds {fds_spread} ≤ {FDS_SPREAD} (2 × clients + 8)", fds_spread <= FDS_SPREAD),
        (f"records {lines} = requests sent {len(sent)}; missing {len(missing)}, extra {len(extra)}, duplicated {len(dup)}",
         lines == len(sent) and not missing and not extra and not dup),
        (f"every record's outcome is its request's ({len(wrong)} differ)", not wrong),
        (f"no client-side failure ({len(client.errors)})", not client.errors and stuck == 0),
        (f"no key or credential in any output ({', '.join(f'{k}: {v}' for k, v in leaked.items()) or 'none found'})", not leaked),
        (f"reloads applied {reloads_ok:.0f} of {len(events['reloads'])}; generations draining at the end {stats['generations_draining']}",
         reloads_ok == len(events["reloads"]) and stats["generations_draining"] == 0),
        (f"SIGTERM: exit {rc}", rc == 0),
    ]
    summary = {
        "minutes": minutes, "clients": workers, "samples": len(samples), "requests_sent": len(sent),
        "by_kind": by_kind, "records": lines, "reloads": len(events["reloads"]), "reloads_ok": reloads_ok,
        "rss_mib": {"first": samples[0]["rss_kb"] / 1024, "window_min": min(s["rss_kb"] for s in win) / 1024,
                    "window_max": max(s["rss_kb"] for s in win) / 1024, "end": rss_end / 1024,
                    "slope_kb_per_min": k_rss, "spread": rss_spread},
        "fds": {"first": samples[0]["fds"], "window_min": min(s["fds"] for s in win),
                "window_max": max(s["fds"] for s in win), "end_idle": fds_end, "slope_per_min": k_fds},
        "threads_max": max(s["threads"] for s in samples), "in_flight_max": max(s["in_flight"] for s in samples),
        "sinks": {"otlp_downs": otlp.downs, "otlp_down_s": otlp.down_s, "clickhouse_downs": ch.downs,
                  "clickhouse_down_s": ch.down_s, "otlp_spans_received": spans,
                  "otlp_spans_exported": metric(metrics, "tokentap_otlp_spans_exported_total"),
                  "otlp_spans_dropped": metric(metrics, 'tokentap_records_dropped_total{sink="otlp"}'),
                  "clickhouse_rows_received": len(ch_rows), "clickhouse_ids_received": len(ch_ids),
                  "clickhouse_rows_inserted": metric(metrics, "tokentap_clickhouse_rows_inserted_total"),
                  "clickhouse_rows_dropped": metric(metrics, 'tokentap_records_dropped_total{sink="clickhouse"}'),
                  "log_dropped": metric(metrics, 'tokentap_records_dropped_total{sink="log"}')},
        "client_errors": client.errors[:20], "missing": missing[:20], "extra": extra[:20], "wrong_outcome": wrong[:20],
        "checks": [{"check": c, "pass": ok} for c, ok in checks],
    }
    with open(os.path.join(out, "samples.json"), "w") as f:
        json.dump(samples, f, indent=0)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    svg(samples, events, window_t, os.path.join(out, "soak.svg"), minutes)
    print(json.dumps({k: summary[k] for k in ("requests_sent", "by_kind", "rss_mib", "fds", "sinks")}, indent=1))
    for c, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {c}")
    sk = summary["sinks"]
    print(f"  info OTLP spans received {spans} + dropped {sk['otlp_spans_dropped']:.0f} = {spans + sk['otlp_spans_dropped']:.0f} "
          f"of {lines} records; ClickHouse rows received {len(ch_ids)} + dropped {sk['clickhouse_rows_dropped']:.0f} = "
          f"{len(ch_ids) + sk['clickhouse_rows_dropped']:.0f} (a batch taken just before a stand-in stopped can be both)")
    print(f"samples, summary and soak.svg in {out}")
    return all(ok for _, ok in checks)


LOG = None

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "sink":
        sink_main(sys.argv[2], sys.argv[3])
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    ok = False
    try:
        ok = soak(os.path.abspath(sys.argv[1]), os.path.abspath(os.environ.get("SOAK_OUT", "target/soak")))
    finally:
        for p in reversed(PROCS):
            stop(p, wait=5)
    print("PASS: soak" if ok else "FAIL: soak")
    sys.exit(0 if ok else 1)
