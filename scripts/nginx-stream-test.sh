#!/usr/bin/env bash
# Opt-in: a real buffering hop caught. nginx (Debian's, installed here if missing) is the gateway
# between the two routes of a tokentap gateway tap, in front of the sim:
#
#   curl --compressed ─▶ tokentap /gateway ─▶ nginx ─▶ tokentap /engine (behind gateway) ─▶ sim
#
# Three runs of STREAMS streamed chats of TOKENS tokens each, the client asking for gzip:
#   gzip      nginx `gzip on` for text/event-stream (proxy_buffering on): every stream of 16
#             tokens or more is measured (TTFT, tokens), flagged `buffered` outside, streamed
#             inside, and pinned on the hop (relay_verdict `held`); the report's answer names it;
#   buffering `proxy_buffering on`, no gzip: what nginx's buffering alone does with a reading
#             client (printed, and asserted: nothing flagged);
#   off       `proxy_buffering off`, no gzip: nothing flagged.
#
#   scripts/nginx-stream-test.sh
#
# Env: STREAMS (8), TOKENS (64), OUT (default: a temporary folder). Loopback only; it stops what
# it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${STREAMS:-8}
TOKENS=${TOKENS:-64}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
chmod 755 "$OUT" # nginx's worker (user nobody) writes its temp files below
if ! command -v nginx >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
cargo build --release --locked -q
TT=target/release/tokentap
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SIM_PORT=$(port); NGX_PORT=$(port); TT_PORT=$(port)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
wait_port() {
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  return 1
}

"$TT" sim --listen "127.0.0.1:$SIM_PORT" --model sim 2> "$OUT/sim.err" &
PIDS+=($!)
wait_port "$SIM_PORT"

run() {
  local mode=$1 dir="$OUT/$1"
  mkdir -p "$dir/ngx/logs"
  local gzip=off buffering=on
  case $mode in
    gzip) gzip=on ;;
    off) buffering=off ;;
  esac
  cat > "$dir/ngx/nginx.conf" <<EOF
worker_processes 1;
error_log $dir/ngx/error.log warn;
pid $dir/ngx/nginx.pid;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $dir/ngx/body;
  proxy_temp_path $dir/ngx/proxy;
  fastcgi_temp_path $dir/ngx/fastcgi;
  uwsgi_temp_path $dir/ngx/uwsgi;
  scgi_temp_path $dir/ngx/scgi;
  server {
    listen 127.0.0.1:$NGX_PORT;
    location / {
      proxy_pass http://127.0.0.1:$TT_PORT/engine/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering $buffering;
      gzip $gzip;
      gzip_proxied any;
      gzip_types text/event-stream application/json;
      gzip_min_length 0;
    }
  }
}
EOF
  cat > "$dir/tap.toml" <<EOF
[listen]
addr = "127.0.0.1:$TT_PORT"
[admin]
addr = "127.0.0.1:0"
[log]
path = "$dir/proxy.jsonl"
[[routes]]
name = "gateway"
upstream = "http://127.0.0.1:$NGX_PORT"
path_prefix = "/gateway"
[[routes]]
name = "engine"
upstream = "http://127.0.0.1:$SIM_PORT"
path_prefix = "/engine"
behind = "gateway"
behind_sources = ["127.0.0.1"]
EOF
  "$TT" serve --config "$dir/tap.toml" 2> "$dir/tokentap.err" &
  local tt=$!
  "$NGINX" -p "$dir/ngx" -c "$dir/ngx/nginx.conf" -g 'daemon off;' 2> "$dir/ngx/stderr" &
  local ngx=$!
  PIDS+=("$tt" "$ngx")
  wait_port "$TT_PORT"
  wait_port "$NGX_PORT"
  for i in $(seq "$STREAMS"); do
    curl -sS -N --compressed -H 'Accept-Encoding: gzip' -H 'Content-Type: application/json' \
      -o "$dir/client-$i.txt" "http://127.0.0.1:$TT_PORT/gateway/v1/chat/completions" \
      -d "{\"model\":\"sim\",\"messages\":[{\"role\":\"user\",\"content\":\"stream $i\"}],\"stream\":true,\"max_tokens\":$TOKENS,\"ignore_eos\":true}"
    grep -q '\[DONE\]' "$dir/client-$i.txt" || { echo "FAIL $mode: stream $i reached the client incomplete" >&2; exit 1; }
  done
  kill -TERM "$tt" "$ngx"
  wait "$tt" "$ngx" 2>/dev/null || true
  "$TT" report "$dir/proxy.jsonl" --format json --out "$dir/report.json"
  python3 - "$mode" "$dir" "$STREAMS" <<'PY'
import json, sys
mode, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
recs = [json.loads(l) for l in open(f"{d}/proxy.jsonl")]
side = lambda r: (r.get("gateway_tap") or {}).get("side")
outer = [r for r in recs if side(r) == "outer"]
inner = [r for r in recs if side(r) == "inner"]
assert len(outer) == n and len(inner) == n, (len(outer), len(inner))
print(f"== {mode}: {n} streams, client asked for gzip")
print("side   outcome enc   ttft_ms  tokens  reads  most/read  share  verdict    relay p50/max ms  held  relay")
for r in outer + inner:
    dl, g = r.get("delivery") or {}, r.get("gateway_tap") or {}
    p50, mx = g.get("relay_p50_ms"), g.get("relay_max_ms")
    print(f"{side(r):<6} {r['outcome']:<7} {r.get('content_encoding') or '-':<5} {r.get('ttft_ms') or 0:>8.1f}  "
          f"{r.get('output_tokens')!s:>6}  {dl.get('content_reads')!s:>5}  {dl.get('max_events_per_read')!s:>9}  "
          f"{dl.get('coalesced_share', 0):.2f}   {dl.get('verdict')!s:<9}  "
          f"{'-' if p50 is None else f'{p50:.1f}/{mx:.1f}':>16}  {g.get('held_tokens')!s:>4}  {g.get('relay_verdict')}")
answer = next(a["answer"] for a in json.load(open(f"{d}/report.json"))["answers"]
              if a["question"] == "Is it really streaming?")
print("report:", answer)
fail = []
for r in outer + inner:
    if r["outcome"] != "ok" or r.get("output_tokens") is None or r.get("ttft_ms") is None:
        fail.append(f"{side(r)} {r['id']}: not measured ({r['outcome']}, {r.get('decode_error')})")
for r in inner:
    if (r.get("delivery") or {}).get("verdict") == "buffered":
        fail.append(f"inner {r['id']}: the sim's stream called buffered")
if mode == "gzip":
    for r in outer:
        if r.get("output_tokens", 0) >= 16:
            dl, g = r.get("delivery") or {}, r.get("gateway_tap") or {}
            if r.get("content_encoding") != "gzip":
                fail.append(f"outer {r['id']}: not gzip ({r.get('content_encoding')})")
            if dl.get("verdict") != "buffered":
                fail.append(f"outer {r['id']}: {dl.get('verdict')}, not buffered")
            if g.get("relay_verdict") != "held":
                fail.append(f"outer {r['id']}: relay {g.get('relay_verdict')}, not held")
    if "came buffered on gateway" not in answer or "the gateway is the hop that held them" not in answer:
        fail.append(f"the report's answer does not name the route and the hop: {answer}")
else:
    for r in outer:
        if (r.get("delivery") or {}).get("verdict") == "buffered":
            fail.append(f"outer {r['id']}: flagged buffered with gzip off")
if fail:
    sys.exit("FAIL " + mode + ":\n  " + "\n  ".join(fail))
print(f"PASS {mode}")
PY
}

run gzip
run buffering
run off
echo "records and reports in $OUT"
