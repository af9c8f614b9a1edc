#!/usr/bin/env python3
"""Mixed, seeded, bounded traffic through tokentap in front of the rig (vLLM + LiteLLM), for
scripts/record-live-logs.sh. Standard library only.

    live_traffic.py ADDR healthy   # the mixed log: every kind of request, both routes
    live_traffic.py ADDR slow      # generation only, long prompts at high concurrency (engine overloaded)

ADDR is tokentap's listen address (host:port). Route `direct` is `/` (vLLM), route `gateway` is
`/gateway` (LiteLLM, model `tiny`, and `tiny-limited`: one deployment with max_parallel_requests = 1).
Prints one line per kind of request sent (route, kind, status seen by the client: count) at the end.
"""
import http.client
import json
import random
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

ADDR = sys.argv[1]
PHASE = sys.argv[2] if len(sys.argv) > 2 else "healthy"
SEED = 20261203
HOST, PORT = ADDR.rsplit(":", 1)
PORT = int(PORT)
MASTER = "sk-rig-master-key"
PREFIX = {"direct": "", "gateway": "/gateway"}
# vLLM has no auth: the direct route's clients still send a key of their own (it is only fingerprinted).
KEY = {"direct": "direct-client-key", "gateway": MASTER}
TIMEOUT = 120
# No `seed` in any request: vLLM 0.32 CPU's engine dies ("CPU Generator does not use offset",
# gpu_model_runner._bookkeeping_sync) when a seeded request's prompt is prefilled in chunks, which
# long prompts at concurrency 4 do. Lengths are exact anyway (ignore_eos).

WORDS = ("the quick brown fox jumps over lazy dog proxy token stream latency engine batch "
         "prefill decode cache queue route gateway model request answer question river mountain "
         "window garden paper light sound number measure record summary").split()

seen = Counter()
lock = threading.Lock()


def note(route, kind, status):
    with lock:
        seen[(route, kind, status)] += 1


def prompt(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


def conn():
    return http.client.HTTPConnection(HOST, PORT, timeout=TIMEOUT)


def call(route, kind, method, path, body=None, headers=None, key=True, cancel_after=None, raw=None):
    """One request. cancel_after=N: read N SSE data lines, then close the connection (client cancel)."""
    h = {"content-type": "application/json"} if (body is not None or raw is not None) else {}
    if key:
        h["authorization"] = f"Bearer {KEY[route]}"
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c = conn()
    try:
        c.request(method, PREFIX[route] + path, body=data, headers=h)
        r = c.getresponse()
        if cancel_after is not None and r.status == 200:
            n = 0
            while n < cancel_after:
                line = r.fp.readline()
                if not line:
                    break
                if line.startswith(b"data:"):
                    n += 1
            note(route, kind, "cancelled")
            c.sock.close()  # the client goes away mid-stream
            return r.status, None
        payload = r.read()
        note(route, kind, r.status)
        return r.status, payload
    except (OSError, http.client.HTTPException) as e:
        note(route, kind, f"error {type(e).__name__}")
        return 0, None
    finally:
        c.close()


def chat(rng, route, *, stream, usage=None, max_tokens=32, words=12, model="tiny", kind=None, **kw):
    body = {"model": model, "messages": [{"role": "user", "content": prompt(rng, words)}],
            "max_tokens": max_tokens, "ignore_eos": True}
    if stream:
        body["stream"] = True
        if usage is not None:
            body["stream_options"] = {"include_usage": usage}
    if kind is None:
        kind = "chat " + ("stream" + (" usage" if usage else " no-usage") if stream else "non-stream")
    return call(route, kind, "POST", "/v1/chat/completions", body, **kw)


def completions(rng, route, stream=True):
    body = {"model": "tiny", "prompt": prompt(rng, 20), "max_tokens": 32, "ignore_eos": True,
            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return call(route, "completions " + ("stream" if stream else "non-stream"), "POST", "/v1/completions", body)


def responses(rng, route):
    body = {"model": "tiny", "input": prompt(rng, 20), "max_output_tokens": 32, "stream": True,
            "ignore_eos": True}
    return call(route, "responses stream", "POST", "/v1/responses", body)


def messages(rng, route):
    body = {"model": "tiny", "messages": [{"role": "user", "content": prompt(rng, 20)}],
            "max_tokens": 32, "stream": True, "ignore_eos": True}
    # Anthropic clients send x-api-key and anthropic-version
    return call(route, "messages stream", "POST", "/v1/messages", body, key=False,
                headers={"x-api-key": KEY[route], "anthropic-version": "2023-06-01"})


def burst(n, fn):
    with ThreadPoolExecutor(n) as ex:
        for f in [ex.submit(fn, i) for i in range(n)]:
            f.result()


def healthy():
    rng = random.Random(SEED)
    routes = ("direct", "gateway")
    # warm-up: LiteLLM's first request after start is slow (recorded like any other)
    for route in routes:
        chat(rng, route, stream=True, usage=True, max_tokens=16, kind="chat stream usage (warm-up)")

    # ---- non-generating endpoints, forwarded to the upstream ----
    for _ in range(3):
        call("direct", "GET /health", "GET", "/health", key=False)
        call("gateway", "GET /health/readiness", "GET", "/health/readiness", key=False)
        call("direct", "GET /v1/models", "GET", "/v1/models")
        call("gateway", "GET /v1/models", "GET", "/v1/models")
    call("gateway", "GET /health (runs a model check)", "GET", "/health")
    for _ in range(2):
        call("direct", "GET /metrics", "GET", "/metrics", key=False)
        call("gateway", "GET /metrics (no key)", "GET", "/metrics", key=False)
        call("gateway", "GET /metrics", "GET", "/metrics")

    # ---- errors ----
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    for _ in range(2):
        call("gateway", "chat no key", "POST", "/v1/chat/completions", body, key=False)
        call("gateway", "chat bad key", "POST", "/v1/chat/completions", body, key=False,
             headers={"authorization": "Bearer sk-not-a-real-key-0000"})
    for route in routes:
        call(route, "unknown path", "POST", "/v1/no-such-endpoint", body)
        call(route, "unknown path (GET)", "GET", "/v1/nope")
        call(route, "unknown model", "POST", "/v1/chat/completions", dict(body, model="no-such-model"))
        call(route, "malformed JSON", "POST", "/v1/chat/completions", raw=b'{"model": "tiny", "messages": [')
        call(route, "invalid body (no messages)", "POST", "/v1/chat/completions", {"model": "tiny", "max_tokens": 8})
        call(route, "invalid body (max_tokens -1)", "POST", "/v1/chat/completions", dict(body, max_tokens=-1))
    # LiteLLM's 429: a deployment with max_parallel_requests = 1 answers 429 to a caller that
    # arrives while its slot is taken (it does not queue). Bursts of 4 at once, non-streamed and streamed.
    for _ in range(2):
        burst(4, lambda i: chat(rng, "gateway", stream=False, max_tokens=96, model="tiny-limited",
                                kind="chat non-stream tiny-limited burst"))
        time.sleep(0.5)
    burst(4, lambda i: chat(rng, "gateway", stream=True, usage=True, max_tokens=96, model="tiny-limited",
                            kind="chat stream tiny-limited burst"))

    # ---- cancelled streams ----
    for route in routes:
        for after in (1, 5, 20):
            chat(rng, route, stream=True, usage=True, max_tokens=128, kind="chat stream cancelled",
                 cancel_after=after)
            time.sleep(0.3)

    # ---- shapes, both routes ----
    for route in routes:
        for _ in range(3):
            chat(rng, route, stream=True, usage=True)
            chat(rng, route, stream=True, usage=False)
            chat(rng, route, stream=True)  # no stream_options at all
            chat(rng, route, stream=False)
            completions(rng, route, stream=True)
            responses(rng, route)
            messages(rng, route)
        completions(rng, route, stream=False)

    # ---- generation at concurrency 1, 2, 4: short and long prompts, 16-128 tokens ----
    for level in (1, 2, 4):
        for route in routes:
            def one(i, route=route, level=level):
                r = random.Random(SEED * 31 + level * 7 + i + (1000 if route == "gateway" else 0))
                long = r.random() < 0.4
                chat(r, route, stream=True, usage=True, max_tokens=r.choice((16, 32, 64, 128)),
                     words=r.randint(400, 550) if long else r.randint(5, 30),
                     kind=f"chat stream usage C={level} " + ("long" if long else "short"))
            burst(level, lambda w: [one(w * 100 + j) for j in range(max(2, 8 // level))])


def slow():
    """Long prompts at concurrency 8 and 12 on both routes: prefill queues behind prefill."""
    routes = ("direct", "gateway")
    warm = random.Random(SEED)
    for route in routes:
        chat(warm, route, stream=True, usage=True, max_tokens=16, kind="chat stream usage (warm-up)")
    for level in (8, 12):
        for route in routes:
            def worker(w, route=route, level=level):
                r = random.Random(SEED * 17 + level * 101 + w + (5000 if route == "gateway" else 0))
                for _ in range(2):
                    chat(r, route, stream=True, usage=True, max_tokens=r.choice((64, 128)),
                         words=r.randint(450, 600), kind=f"chat stream usage C={level} long")
            burst(level, worker)


t0 = time.monotonic()
{"healthy": healthy, "slow": slow}[PHASE]()
print(f"# phase {PHASE}: {sum(seen.values())} requests in {time.monotonic() - t0:.1f} s (route, kind, status seen by the client: count)")
for (route, kind, status), n in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
    print(f"{route:8} {kind:42} {str(status):10} {n}")
