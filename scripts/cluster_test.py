"""Parts 4-7 of scripts/cluster-test.sh, against the release binary given as the argument:
stdout records, OTLP spans, reload mid-stream, kill -9. Every process started here is stopped
here, by pid."""
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

TT = os.path.abspath(sys.argv[1])
WORK = tempfile.mkdtemp(prefix="tokentap-cluster-")
PROCS = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(args, **kw):
    p = subprocess.Popen([TT] + args, **kw)
    PROCS.append(p)
    return p


def wait_port(port, what):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"FAIL: {what} never listened on {port}")


INSTANT = """name = "instant"
prefill_base_ms = 0.0
prefill_per_token_ms = 0.0
prefill_per_seq_ms = 0.0
step_base_ms = 0.0
step_per_seq_ms = 0.0
max_batch = 256
max_prefill_tokens = 16384
kv_tokens = 2000000
max_model_len = 8192
reasoning_tokens = 0
prefix_cache = false
"""


def sim(model, instant=False):
    """A simulated engine: the V100 profile, or one that costs nothing (for load)."""
    port = free_port()
    args = ["sim", "--listen", f"127.0.0.1:{port}", "--model", model]
    if instant:
        profile = os.path.join(WORK, "instant.toml")
        open(profile, "w").write(INSTANT)
        args += ["--profile", profile]
    start(args, stderr=subprocess.DEVNULL)
    wait_port(port, f"sim {model}")
    return port


def chat(port, path="/v1/chat/completions", headers=None, max_tokens=8, stream=True, timeout=60):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello there"}],
                       "max_tokens": max_tokens, "stream": stream}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body,
                                 {"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def admin(port, path, method="GET", token=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=40)


def config(path, listen, adm, upstream, model, extra=""):
    """One route to a sim; clients ask for model "m", mapped to the sim's."""
    with open(path, "w") as f:
        f.write(f'[listen]\naddr = "127.0.0.1:{listen}"\n[admin]\naddr = "127.0.0.1:{adm}"\n'
                f'{extra}\n[[routes]]\nname = "r"\nupstream = "http://127.0.0.1:{upstream}"\n'
                f'model_map = {{ "m" = "{model}" }}\n')


def stdout_records():
    print("== 4. records on stdout")
    engine = sim("sim-a")
    listen, adm = free_port(), free_port()
    cfg = os.path.join(WORK, "stdout.toml")
    config(cfg, listen, adm, engine, "sim-a")
    p = start(["serve", "--config", cfg, "--log", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_port(listen, "tokentap")
    for _ in range(5):
        assert chat(listen)[0] == 200
    stop(p)
    out, err = p.stdout.read().decode(), p.stderr.read().decode()
    recs = [json.loads(l) for l in out.splitlines()]
    assert len(recs) == 5 and all(r["outcome"] == "ok" for r in recs), out
    assert "tokentap serving" in err and "tokentap serving" not in out
    print(f"   5 records on stdout, diagnostics on stderr ({len(err.splitlines())} lines)")


class Collector(http.server.BaseHTTPRequestHandler):
    got = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)  # the real schema: a malformed payload raises here
        Collector.got.append((self.path, self.headers.get("content-type"), req))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def otlp_spans():
    print("== 5. OTLP spans")
    col_port = free_port()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", col_port), Collector)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    engine = sim("sim-otel")
    listen, adm = free_port(), free_port()
    cfg = os.path.join(WORK, "otlp.toml")
    config(cfg, listen, adm, engine, "sim-otel",
           f'[log]\npath = "off"\n[otlp]\nendpoint = "http://127.0.0.1:{col_port}"\nflush_ms = 100\n')
    p = start(["serve", "--config", cfg], stderr=subprocess.DEVNULL)
    wait_port(listen, "tokentap")
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    for i in range(4):
        assert chat(listen, headers={"traceparent": parent} if i == 0 else {})[0] == 200
    stop(p)  # the shutdown sends what is queued
    srv.shutdown()
    spans = [s for _, _, r in Collector.got for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert all(path == "/v1/traces" and ct == "application/x-protobuf" for path, ct, _ in Collector.got)
    assert len(spans) == 4, len(spans)
    res = {a.key: a.value.string_value for a in Collector.got[0][2].resource_spans[0].resource.attributes}
    assert res["service.name"] == "tokentap", res
    child = [s for s in spans if s.parent_span_id]
    assert len(child) == 1 and child[0].trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert child[0].parent_span_id.hex() == "00f067aa0ba902b7"
    for s in spans:
        a = {kv.key: kv.value for kv in s.attributes}
        assert s.name == "chat m" and s.kind == 2, s.name
        assert a["gen_ai.operation.name"].string_value == "chat"
        assert a["gen_ai.request.model"].string_value == "m"
        assert 1 <= a["gen_ai.usage.output_tokens"].int_value <= 8, a["gen_ai.usage.output_tokens"]
        assert a["gen_ai.response.model"].string_value == "sim-otel"
        assert a["server.port"].int_value == engine
        ttft = a["tokentap.ttft_ms"].double_value
        (ev,) = [e for e in s.events if e.name == "first_token"]
        assert abs((ev.time_unix_nano - s.start_time_unix_nano) / 1e6 - ttft) < 0.001
        assert abs((s.end_time_unix_nano - s.start_time_unix_nano) / 1e6 - a["tokentap.e2e_ms"].double_value) < 0.001
    print(f"   4 spans parsed as ExportTraceServiceRequest; one continues the caller's trace")


def reload_mid_stream():
    print("== 6. reload mid-stream")
    a, b = sim("sim-old"), sim("sim-new")
    listen, adm = free_port(), free_port()
    token = "cluster-test-token-0123456789"
    cfg = os.path.join(WORK, "reload.toml")
    log = os.path.join(WORK, "reload.jsonl")
    config(cfg, listen, adm, a, "sim-old", f'[log]\npath = "{log}"\n')
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace("[admin]\n", f'[admin]\nreload_token = "{token}"\n'))
    p = start(["serve", "--config", cfg], stderr=subprocess.DEVNULL)
    wait_port(listen, "tokentap")
    long = {}
    t = threading.Thread(target=lambda: long.update(r=chat(listen, max_tokens=300)))
    t.start()
    time.sleep(0.5)
    assert t.is_alive(), "the long stream ended before the reload"
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace(f"127.0.0.1:{a}", f"127.0.0.1:{b}").replace("sim-old", "sim-new"))
    st, body = admin(adm, "/reload", "POST", token)
    assert st == 200 and json.loads(body)["result"] == "ok", body
    st, new = chat(listen, stream=False)
    assert st == 200 and '"sim-new"' in new, new
    assert t.is_alive(), "the reload cut the stream"
    t.join(60)
    st, old = long["r"]
    assert st == 200 and '"sim-old"' in old and old.rstrip().endswith("data: [DONE]"), old[-200:]
    with open(cfg, "w") as f:
        f.write(text.replace('upstream = "http', 'upstream = "ftp'))
    st, body = admin(adm, "/reload", "POST", token)
    assert st == 422 and "routes[0].upstream" in body, body
    assert '"sim-new"' in chat(listen, stream=False)[1]
    assert admin(adm, "/reload", "POST", "wrong-token-0123456789")[0] == 401
    m = admin(adm, "/metrics")[1]
    for want in ['tokentap_config_reloads_total{result="ok"} 1', 'tokentap_config_reloads_total{result="error"} 1',
                 'tokentap_config_reloads_total{result="unauthorized"} 1']:
        assert want in m, want
    stop(p)
    recs = [json.loads(l) for l in open(log)]
    assert len(recs) == 3 and all(r["outcome"] == "ok" for r in recs), recs
    print("   the stream finished on sim-old; new requests went to sim-new; a bad file was refused")


def crash():
    print("== 7. kill -9 under load")
    engine = sim("sim-crash", instant=True)
    listen, adm = free_port(), free_port()
    log = os.path.join(WORK, "crash.jsonl")
    cfg = os.path.join(WORK, "crash.toml")
    config(cfg, listen, adm, engine, "sim-crash", f'[log]\npath = "{log}"\n')
    p = start(["serve", "--config", cfg], stderr=subprocess.DEVNULL)
    wait_port(listen, "tokentap")
    bench = start(["bench", "--target", f"http://127.0.0.1:{listen}", "--out", os.path.join(WORK, "b"),
                   "--concurrency", "64", "--requests", "30000", "--warmup", "0", "--outputs", "4,4,4"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3.0)
    assert bench.poll() is None, "the load ended before the kill"
    p.kill()
    p.wait()
    bench.kill()
    bench.wait()

    def lines():
        n = 0
        for suffix in ["", ".1", ".2", ".3"]:
            path = log + suffix
            if os.path.exists(path):
                data = open(path, "rb").read()
                assert not data or data.endswith(b"\n"), f"{path}: a cut line"
                for l in data.splitlines():
                    json.loads(l)
                    n += 1
        return n

    before = lines()
    assert before >= 100, f"only {before} records before the kill: not under load"
    p = start(["serve", "--config", cfg], stderr=subprocess.DEVNULL)
    wait_port(listen, "tokentap")
    for _ in range(3):
        assert chat(listen)[0] == 200
    stop(p)
    after = lines()
    assert after == before + 3, (before, after)
    print(f"   {before} whole records after kill -9; the restart appended (now {after})")


try:
    stdout_records()
    otlp_spans()
    reload_mid_stream()
    crash()
    print("PASS: cluster parts 4-7")
finally:
    for p in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()
