#!/usr/bin/env bash
# The gateway board (docs/gateways.md): real gateways, each a plain OpenAI-compatible streaming
# pass-through in front of the same engine, measured on identical traffic by one tokentap that
# taps every gateway on both sides:
#
#   bench ─▶ tokentap route <row> ─▶ gateway ─▶ tokentap route engine-<row> (behind <row>) ─▶ engine
#   bench ─▶ tokentap route direct ─────────────────────────────────────────────────────────▶ engine
#
# Rows (GATEWAY_BOARD_ROWS, default all): nginx (as shipped), nginx-stream (its streaming
# settings), haproxy, haproxy-nodelay, caddy, caddy-flush, litellm, portkey (1.15.2 as shipped)
# and portkey-hono (1.15.2 with @hono/node-server pinned to 1.13.5, the version its own lockfile
# holds). nginx-gzip (gzip on for text/event-stream) is checked with curl --compressed only:
# bench does not ask for gzip, so under bench it is the nginx row again.
#
#   scripts/gateway-board.sh                              # board: one N-arm bench, every row
#   GATEWAY_BOARD_MODE=pairs scripts/gateway-board.sh     # one 2-arm bench per row (direct,<row>)
#   GATEWAY_BOARD_MODE=verify scripts/gateway-board.sh    # start every row, curl it, stop
#   GATEWAY_BOARD_ROWS="nginx nginx-stream litellm" GATEWAY_BOARD_PROFILE=both scripts/gateway-board.sh
#
# Env:
#   GATEWAY_BOARD_MODE      board | pairs | verify (board)
#   GATEWAY_BOARD_PROFILE   public (sim --pace 20,20,64,16: 64 deltas 20 ms apart, 16 bytes each,
#                           the public board's mock) | realistic (sim --pace 50,10,100) | both (public)
#   GATEWAY_BOARD_REALISTIC_PACE  the realistic profile's --pace (50,10,100); "model" = the sim's
#                           cost model (no pace: sustained streams are then not judged)
#   GATEWAY_BOARD_LEVELS    bench --concurrency (1,8,32)
#   GATEWAY_BOARD_REQUESTS  bench --requests per cell (pairs mode: 24; board mode: GROUPS × arms)
#   GATEWAY_BOARD_GROUPS    board mode: prompts a level, each sent through every arm (20)
#   GATEWAY_BOARD_ENGINE    sim | rig (sim). rig: the shared rig's vLLM, started with
#                           RIG_ONLY=vllm $GATEWAY_BOARD_RIG/start.sh and stopped with its stop.sh;
#                           it needs the rig installed (RIG_HOME, default /opt/rig: install.sh) and
#                           serves model "tiny"; the pace profiles do not apply to it
#   GATEWAY_BOARD_HOME      installs (LiteLLM venv, Portkey node_modules): ~/.cache/tokentap-gateway-board
#   GATEWAY_BOARD_TOKENTAP  a tokentap binary (default: cargo build --release)
#   GATEWAY_BOARD_PIN       auto | off (auto). auto on 2+ cores: the gateways on the upper half of
#                           the CPUs (CPU 1 of 2), bench, tokentap and the sim on the lower half
#   GATEWAY_BOARD_OUT       output folder (default: a new folder under /tmp)
#   GATEWAY_BOARD_TIMEOUT   seconds each bench may run (1800)
#
# Opt-in (not in scripts/test.sh). Installs what is missing: nginx, haproxy, caddy (apt-get, as
# root), LiteLLM 1.106.12 in a venv from the rig's lock file (PyPI), @portkey-ai/gateway from the
# npm registry (Node 20). Binds 127.0.0.1 only (Portkey listens on every interface by itself: a
# preload binds it to 127.0.0.1). Starts what it measures and stops it by pid on exit. Every step
# is bounded by `timeout`. A row that fails to start or to stream stays on the board (its errors
# counted) and the script prints the cause it found (the gateway's last log lines).
#
# Board mode depends on the N-arm flags: [experiment] arms with more than two routes and
# `baseline`, `bench --arms` with more than two names, `--baseline`, `--arm-pid`; and on the
# report's "Gateway board" section. Pairs mode runs on today's two-arm experiment.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

MODE=${GATEWAY_BOARD_MODE:-board}
PROFILE=${GATEWAY_BOARD_PROFILE:-public}
REALISTIC_PACE=${GATEWAY_BOARD_REALISTIC_PACE:-50,10,100}
LEVELS=${GATEWAY_BOARD_LEVELS:-1,8,32}
REQUESTS=${GATEWAY_BOARD_REQUESTS:-}
GROUPS_PER_LEVEL=${GATEWAY_BOARD_GROUPS:-20}
[ -n "$REQUESTS" ] || [ "$MODE" = board ] || REQUESTS=24
ENGINE=${GATEWAY_BOARD_ENGINE:-sim}
RIG=${GATEWAY_BOARD_RIG:-/work/shared/rig}
HOME_DIR=${GATEWAY_BOARD_HOME:-$HOME/.cache/tokentap-gateway-board}
PIN=${GATEWAY_BOARD_PIN:-auto}
BENCH_TIMEOUT=${GATEWAY_BOARD_TIMEOUT:-1800}
ALL_ROWS="nginx nginx-stream haproxy haproxy-nodelay caddy caddy-flush litellm portkey portkey-hono"
ROWS=${GATEWAY_BOARD_ROWS:-$ALL_ROWS}
LITELLM_VERSION=1.106.12
LITELLM_SHA256=b633c99425b84721f82e661f623432d87361092c4520aebbe97e999291fe3a00
PORTKEY_VERSION=1.15.2
HONO_PIN=1.13.5
KEY=sk-gateway-board-local # a local key: LiteLLM's master key, and the key bench sends

say() { printf '%s\n' "$*" >&2; }
case $MODE in board | pairs | verify) ;; *) say "GATEWAY_BOARD_MODE: $MODE is not board, pairs or verify"; exit 64 ;; esac
case $PROFILE in public | realistic | both) ;; *) say "GATEWAY_BOARD_PROFILE: $PROFILE is not public, realistic or both"; exit 64 ;; esac
case $ENGINE in sim | rig) ;; *) say "GATEWAY_BOARD_ENGINE: $ENGINE is not sim or rig"; exit 64 ;; esac
for r in $ROWS; do
  [[ " $ALL_ROWS nginx-gzip " == *" $r "* ]] || { say "GATEWAY_BOARD_ROWS: $r is not one of $ALL_ROWS nginx-gzip"; exit 64; }
done
command -v python3 >/dev/null || { say "gateway-board: needs python3"; exit 3; }
OUT=${GATEWAY_BOARD_OUT:-$(mktemp -d /tmp/gateway-board.XXXXXX)}
mkdir -p "$OUT"
chmod 755 "$OUT" # nginx's workers (user nobody) write their temp files below

# ---------------------------------------------------------------- install what is missing
need_pkgs=()
for r in $ROWS; do
  case $r in
    nginx*) command -v nginx >/dev/null || need_pkgs+=(nginx) ;;
    haproxy*) command -v haproxy >/dev/null || need_pkgs+=(haproxy) ;;
    caddy*) command -v caddy >/dev/null || need_pkgs+=(caddy) ;;
  esac
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${need_pkgs[*]} (apt-get)"
    timeout 300 apt-get update -qq >/dev/null || true
    # Debian starts a packaged server where it can (policy-rc.d permitting); this script never
    # uses one: each row runs from its own config, on its own port.
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${need_pkgs[@]}" >/dev/null ||
      say "gateway-board: apt-get install ${need_pkgs[*]} failed: those rows will fail"
  else
    say "gateway-board: ${need_pkgs[*]} missing and not installable here (not root or no apt-get): those rows will fail"
  fi
fi

mkdir -p "$HOME_DIR"
LITELLM_VENV=$HOME_DIR/venv-litellm
if [[ " $ROWS " == *" litellm "* ]] && ! "$LITELLM_VENV/bin/python" -c 'import litellm.proxy.proxy_server' 2>/dev/null; then
  say "installing LiteLLM $LITELLM_VERSION into $LITELLM_VENV (PyPI, the rig's lock file)"
  (
    PY=${GATEWAY_BOARD_PYTHON:-python3.11}
    [ -x "$LITELLM_VENV/bin/python" ] || timeout 120 "$PY" -m venv "$LITELLM_VENV"
    timeout 300 "$LITELLM_VENV/bin/pip" install -q pip==25.3
    mkdir -p "$HOME_DIR/dl"
    ls "$HOME_DIR"/dl/litellm-"$LITELLM_VERSION"-*.whl >/dev/null 2>&1 ||
      timeout 300 "$LITELLM_VENV/bin/pip" download -q --no-deps --only-binary=:all: -d "$HOME_DIR/dl" "litellm==$LITELLM_VERSION"
    whl=$(ls "$HOME_DIR"/dl/litellm-"$LITELLM_VERSION"-*.whl | head -1)
    echo "$LITELLM_SHA256  $whl" | sha256sum -c --quiet -
    timeout 900 "$LITELLM_VENV/bin/pip" install -q "$whl" -r <(grep -v '^litellm==' "$RIG/requirements-litellm.lock")
  ) >"$OUT/install-litellm.log" 2>&1 || say "gateway-board: LiteLLM install failed ($OUT/install-litellm.log): its row will fail"
fi

portkey_install() { # dir, override-json
  local d=$1
  [ -f "$d/node_modules/@portkey-ai/gateway/build/start-server.js" ] && return 0
  mkdir -p "$d"
  printf '{"name":"gateway-board-portkey","private":true,"version":"0.0.0", "dependencies":{"@portkey-ai/gateway":"%s"}%s}\n' \
    "$PORTKEY_VERSION" "$2" >"$d/package.json"
  # --ignore-scripts: its postinstall is `patch-package`, and the package ships no patches.
  (cd "$d" && timeout 600 npm install --no-audit --no-fund --ignore-scripts) >"$OUT/install-$(basename "$d").log" 2>&1 ||
    say "gateway-board: npm install in $d failed: its row will fail"
}
if [[ " $ROWS " == *" portkey"* ]]; then
  command -v node >/dev/null || say "gateway-board: node missing: the portkey rows will fail"
  [[ " $ROWS " == *" portkey "* ]] && portkey_install "$HOME_DIR/portkey-$PORTKEY_VERSION" ""
  [[ " $ROWS " == *" portkey-hono "* ]] &&
    portkey_install "$HOME_DIR/portkey-$PORTKEY_VERSION-hono-$HONO_PIN" ", \"overrides\":{\"@hono/node-server\":\"$HONO_PIN\"}"
fi

if [ -z "${GATEWAY_BOARD_TOKENTAP:-}" ]; then
  timeout 3600 cargo build --release --locked -q --bin tokentap
  GATEWAY_BOARD_TOKENTAP=target/release/tokentap
fi
cp "$GATEWAY_BOARD_TOKENTAP" "$OUT/tokentap"
TT=$OUT/tokentap

# ---------------------------------------------------------------- processes, ports, pinning
PIDS=()
RIG_STARTED=
stop_all() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$RIG_STARTED" ]; then RIG_HOME=$RIG_STARTED timeout 120 "$RIG/stop.sh" >&2 || true; fi
}
trap stop_all EXIT
stop_pid() { # pid: one process this script started (its own process group), and its children
  kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}
last_lines() { # files...: the first error line they hold, else their last lines, on one line
  local e
  e=$({ grep -h -m1 -E 'Error|error|emerg|ALERT' "$@" 2>/dev/null || true; } | head -1)
  [ -n "$e" ] && { printf '%s' "$e" | cut -c1-300; return 0; }
  { tail -q -n 3 "$@" 2>/dev/null || true; } | tr '\n' ' ' | cut -c1-300
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { # port pid seconds
  local i
  for i in $(seq 1 $((${3:-30} * 10))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

NCPU=$(nproc)
BENCH_CPUS="" GW_CPUS=""
if [ "$PIN" = auto ] && [ "$NCPU" -ge 2 ] && command -v taskset >/dev/null; then
  half=$((NCPU / 2))
  BENCH_CPUS="0-$((half - 1))"
  GW_CPUS="$half-$((NCPU - 1))"
fi
on() { # cpus cmd...: run pinned when pinning is on
  local cpus=$1
  shift
  if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi
}
# Each server is started in a process group of its own (setsid), so that its workers stop with it.
spawn() { # name cpus log cmd...: start in the background; sets SPAWNED
  local name=$1 cpus=$2 log=$3
  shift 3
  if [ -n "$cpus" ]; then
    setsid taskset -c "$cpus" "$@" >"$log" 2>&1 </dev/null &
  else
    setsid "$@" >"$log" 2>&1 </dev/null &
  fi
  SPAWNED=$!
  PIDS+=("$SPAWNED")
  say "started $name (pid $SPAWNED${cpus:+, CPU $cpus})"
}

say "machine: $NCPU cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$GW_CPUS" ]; then
  say "pinned: gateways on CPU $GW_CPUS; bench, tokentap and the engine on CPU $BENCH_CPUS"
else
  say "pinned: nothing (GATEWAY_BOARD_PIN=$PIN, $NCPU cores)"
fi

TT_PORT=$(free_port)
declare -A GW_PORT GW_PID GW_LOG GW_CAUSE
for r in $ROWS; do GW_PORT[$r]=$(free_port); done

# ---------------------------------------------------------------- the engine
ENGINE_PID=""
MODEL=sim
start_engine() { # pace ("" = the cost model)
  if [ "$ENGINE" = rig ]; then
    local rh=${RIG_HOME:-/opt/rig}
    [ -x "$rh/venv-vllm/bin/python" ] || { say "gateway-board: GATEWAY_BOARD_ENGINE=rig needs the rig's vLLM installed in $rh ($RIG/install.sh)"; exit 3; }
    ENGINE_PORT=${VLLM_PORT:-8000}
    RIG_HOME=$rh VLLM_PORT=$ENGINE_PORT RIG_ONLY=vllm timeout 600 "$RIG/start.sh" >&2
    RIG_STARTED=$rh
    MODEL=tiny
    return
  fi
  ENGINE_PORT=$(free_port)
  local pace=()
  [ -n "$1" ] && pace=(--pace "$1")
  spawn sim "$BENCH_CPUS" "$OUT/sim.log" "$TT" sim --listen "127.0.0.1:$ENGINE_PORT" --model "$MODEL" "${pace[@]}"
  ENGINE_PID=$SPAWNED
  wait_port "$ENGINE_PORT" "$ENGINE_PID" 30 || { say "gateway-board: the sim did not start:"; tail -5 "$OUT/sim.log" >&2; exit 1; }
}
stop_engine() {
  if [ -n "$ENGINE_PID" ]; then stop_pid "$ENGINE_PID"; ENGINE_PID=""; fi
}

# ---------------------------------------------------------------- the gateways
inner() { printf 'http://127.0.0.1:%s/engine-%s' "$TT_PORT" "$1"; }

write_nginx() { # row dir
  local r=$1 d=$2 port=${GW_PORT[$1]} loc
  case $r in
    nginx) # as shipped: proxy_pass alone (HTTP/1.0 upstream, proxy_buffering on, no keep-alive)
      loc="proxy_pass $(inner "$r")/;" ;;
    nginx-stream) # its streaming settings: no response buffering, HTTP/1.1 with keep-alive upstream
      loc="proxy_pass http://up$(inner "$r" | sed 's#^http://[^/]*##')/; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off;" ;;
    nginx-gzip) # as shipped, plus gzip for text/event-stream (for clients that ask for it)
      loc="proxy_pass $(inner "$r")/; gzip on; gzip_proxied any; gzip_types text/event-stream application/json; gzip_min_length 0;" ;;
  esac
  mkdir -p "$d/logs"
  cat >"$d/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $d/error.log warn;
pid $d/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $d/body; proxy_temp_path $d/proxy; fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;
  upstream up { server 127.0.0.1:$TT_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$port;
    location / { $loc }
  }
}
EOF
}

write_haproxy() { # row dir
  local r=$1 d=$2 nodelay=""
  [ "$r" = haproxy-nodelay ] && nodelay="  option http-no-delay"
  cat >"$d/haproxy.cfg" <<EOF
global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
$nodelay
frontend f
  bind 127.0.0.1:${GW_PORT[$r]}
  default_backend b
backend b
  http-request set-path /engine-$r%[path]
  server s1 127.0.0.1:$TT_PORT
EOF
}

write_caddy() { # row dir
  local r=$1 d=$2 flush=""
  [ "$r" = caddy-flush ] && flush=$'\n\t\tflush_interval -1'
  cat >"$d/Caddyfile" <<EOF
{
	admin off
	auto_https off
}
:${GW_PORT[$r]} {
	bind 127.0.0.1
	rewrite * /engine-$r{uri}
	reverse_proxy 127.0.0.1:$TT_PORT {$flush
	}
}
EOF
}

write_litellm() { # row dir
  local r=$1 d=$2
  cat >"$d/config.yaml" <<EOF
model_list:
  - model_name: $MODEL
    litellm_params:
      model: hosted_vllm/$MODEL
      api_base: $(inner "$r")/v1
      api_key: "none"
      max_retries: 0
      timeout: 120
      stream_timeout: 120
litellm_settings:
  telemetry: false
  drop_params: false
  num_retries: 0
  request_timeout: 120
general_settings:
  master_key: $KEY
  disable_spend_logs: true
  disable_reset_budget: true
  forward_client_headers_to_llm_api: true   # x- headers upstream: the tap's join header
EOF
}

# Portkey's node server listens on every interface (serve() without a hostname): this preload
# binds its listeners to 127.0.0.1.
write_loopback_preload() {
  cat >"$1" <<'EOF'
import net from 'node:net';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number') {
    if (args.length >= 2 && (args[1] === undefined || args[1] === null)) args[1] = '127.0.0.1';
    else if (args.length < 2 || typeof args[1] === 'function' || typeof args[1] === 'number') args.splice(1, 0, '127.0.0.1');
  } else if (args[0] && typeof args[0] === 'object' && args[0].path === undefined) {
    args[0] = { ...args[0], host: '127.0.0.1' };
  }
  return listen.apply(this, args);
};
EOF
}

start_gateway() { # row
  local r=$1 d="$OUT/gw/$1" port=${GW_PORT[$1]}
  mkdir -p "$d"
  GW_LOG[$r]=$d/stderr
  case $r in
    nginx*)
      write_nginx "$r" "$d"
      spawn "$r" "$GW_CPUS" "$d/stderr" nginx -p "$d" -c "$d/nginx.conf" ;;
    haproxy*)
      write_haproxy "$r" "$d"
      spawn "$r" "$GW_CPUS" "$d/stderr" haproxy -db -f "$d/haproxy.cfg" ;;
    caddy*)
      write_caddy "$r" "$d"
      spawn "$r" "$GW_CPUS" "$d/stderr" env HOME="$d" XDG_DATA_HOME="$d" XDG_CONFIG_HOME="$d" \
        caddy run --config "$d/Caddyfile" --adapter caddyfile ;;
    litellm)
      write_litellm "$r" "$d"
      mkdir -p "$d/cwd"
      spawn "$r" "$GW_CPUS" "$d/stderr" env -C "$d/cwd" LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_MODE=PRODUCTION \
        DISABLE_ADMIN_UI=True DO_NOT_TRACK=1 LITELLM_LOG=WARNING \
        "$LITELLM_VENV/bin/litellm" --config "$d/config.yaml" --host 127.0.0.1 --port "$port" --num_workers 1 ;;
    portkey | portkey-hono)
      local pk="$HOME_DIR/portkey-$PORTKEY_VERSION"
      [ "$r" = portkey-hono ] && pk="$HOME_DIR/portkey-$PORTKEY_VERSION-hono-$HONO_PIN"
      write_loopback_preload "$d/loopback.mjs"
      spawn "$r" "$GW_CPUS" "$d/stderr" env NODE_ENV=production node --import "$d/loopback.mjs" \
        "$pk/node_modules/@portkey-ai/gateway/build/start-server.js" "--port=$port" --headless ;;
  esac
  GW_PID[$r]=$SPAWNED
  local wait_s=30
  [ "$r" = litellm ] && wait_s=120
  if ! wait_port "$port" "$SPAWNED" "$wait_s"; then
    GW_CAUSE[$r]="did not start: $(last_lines "$d/stderr" "$d/error.log")"
    say "gateway-board: $r ${GW_CAUSE[$r]}"
  fi
}

# The outer route's headers for a row: what that gateway needs from a client.
route_headers() {
  case $1 in
    portkey*) printf 'set_headers = { "x-portkey-provider" = "openai", "x-portkey-custom-host" = "%s/v1", "x-portkey-forward-headers" = "x-tokentap-join" }\n' "$(inner "$1")" ;;
  esac
}

write_tokentap_config() { # file arms-csv
  local f=$1 arms=$2 r
  {
    printf '[listen]\naddr = "127.0.0.1:%s"\n[admin]\naddr = "off"\n[log]\npath = "%s"\n\n' "$TT_PORT" "$PROXYLOG"
    printf '[[routes]]\nname = "direct"\nupstream = "http://127.0.0.1:%s"\n\n' "$ENGINE_PORT"
    for r in $ROWS; do
      printf '[[routes]]\nname = "%s"\nupstream = "http://127.0.0.1:%s"\npath_prefix = "/%s"\n' "$r" "${GW_PORT[$r]}" "$r"
      route_headers "$r"
      printf '\n[[routes]]\nname = "engine-%s"\nupstream = "http://127.0.0.1:%s"\npath_prefix = "/engine-%s"\n' "$r" "$ENGINE_PORT" "$r"
      printf 'behind = "%s"\nbehind_sources = ["127.0.0.1/32"]\n\n' "$r"
    done
    printf '[experiment]\nallow_forcing = true\narms = [%s]\n' "$(printf '"%s", ' ${arms//,/ } | sed 's/, $//')"
    if [ "$MODE" = board ]; then
      printf 'baseline = "direct"\n' # N-arm flag
    else
      printf 'gateway = "%s"\n' "${arms#direct,}"
    fi
    printf 'direct_keys = ["%s"]\n' "$(printf %s "$KEY" | "$TT" fingerprint)"
  } >"$f"
}

TT_PID=""
start_tokentap() { # config
  spawn tokentap "$BENCH_CPUS" "$OUT/tokentap-$(basename "$1" .toml).log" "$TT" serve --config "$1"
  TT_PID=$SPAWNED
  wait_port "$TT_PORT" "$TT_PID" 30 || { say "gateway-board: tokentap did not start:"; tail -5 "$OUT/tokentap-$(basename "$1" .toml).log" >&2; exit 1; }
}

# A stock client first: curl -N a streamed chat through the gateway itself, then the same stream
# timed per read (python), printed as one line: status, headers that matter, events, reads,
# first event, largest silence, and the verdict.
verify_row() { # row tokens
  local r=$1 d="$OUT/gw/$1" url="http://127.0.0.1:${GW_PORT[$1]}/v1/chat/completions"
  local hdr=(-H 'content-type: application/json' -H "authorization: Bearer $KEY")
  case $r in
    portkey*) hdr+=(-H 'x-portkey-provider: openai' -H "x-portkey-custom-host: $(inner "$r")/v1") ;;
  esac
  local body="{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"gateway board check $r\"}],\"stream\":true,\"max_tokens\":$2}"
  local enc=()
  [ "$r" = nginx-gzip ] && enc=(--compressed)
  local code
  code=$(timeout 60 curl -sS -N "${enc[@]}" -m 50 -D "$d/curl.headers" -o "$d/curl.body" -w '%{http_code}' "${hdr[@]}" "$url" -d "$body" 2>"$d/curl.err" || true)
  local done=no
  grep -q '\[DONE\]' "$d/curl.body" 2>/dev/null && done=yes
  printf '%-16s curl -N: HTTP %s, [DONE] %s' "$r" "${code:-000}" "$done" >&2
  [ "$code" = 200 ] && [ "$done" = yes ] || GW_CAUSE[$r]=${GW_CAUSE[$r]:-"stream failed: HTTP ${code:-000} $({ head -c 200 "$d/curl.body" 2>/dev/null || true; } | tr '\n' ' ') $(last_lines "${GW_LOG[$r]}")"}
  printf '\n' >&2
  local gz=0
  [ "$r" = nginx-gzip ] && gz=1
  timeout 60 python3 - "${GW_PORT[$r]}" "$body" "$gz" "$KEY" "$(route_headers "$r" | grep -o '"x-portkey-custom-host" = "[^"]*"' | sed 's/.*= "//; s/"$//')" <<'PY' >&2 || true
import socket, sys, time, json
port, body, gz, key, custom = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3] == "1", sys.argv[4], sys.argv[5]
h = [f"POST /v1/chat/completions HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
     f"Authorization: Bearer {key}", f"Content-Length: {len(body)}", "Connection: close"]
if gz: h.append("Accept-Encoding: gzip")
if custom: h += ["x-portkey-provider: openai", f"x-portkey-custom-host: {custom}"]
s = socket.create_connection(("127.0.0.1", port), timeout=50)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t0 = time.monotonic(); s.sendall(("\r\n".join(h) + "\r\n\r\n").encode() + body)
buf, reads = b"", []
while True:
    try: c = s.recv(65536)
    except socket.timeout: break
    if not c: break
    reads.append((time.monotonic() - t0, c)); buf += c
head, _, _ = buf.partition(b"\r\n\r\n")
hl = head.decode("latin1").lower().split("\r\n")
status = hl[0] if hl else "-"
pick = lambda n: next((l.split(":", 1)[1].strip() for l in hl if l.startswith(n + ":")), "-")
ev = [(t, c.count(b"data: ")) for t, c in reads]
evs = [(t, n) for t, n in ev if n]
times = [t for t, _ in evs]
gaps = [b - a for a, b in zip(times, times[1:])]
total = sum(n for _, n in evs)
if pick("content-encoding") != "-": verdict = f"compressed ({pick('content-encoding')}): events not visible; {len(reads)} reads, last at {reads[-1][0]*1e3:.0f} ms" if reads else "no body"
elif not evs: verdict = "no events"
else:
    first = times[0] * 1e3; most = max(n for _, n in evs)
    verdict = (f"{total} events in {len(evs)} reads (at most {most} a read), first {first:.0f} ms, "
               f"largest silence {max(gaps, default=0)*1e3:.0f} ms, last {times[-1]*1e3:.0f} ms")
print(f"{'':16} timed: {status}; content-type {pick('content-type')}; transfer-encoding {pick('transfer-encoding')}; "
      f"content-encoding {pick('content-encoding')}; {verdict}")
PY
}

# ---------------------------------------------------------------- one profile
bench_args() { # out arms-csv
  local a=(bench --target "http://127.0.0.1:$TT_PORT" --out "$1" --model "$MODEL" --route-header x-tokentap-route
    --arms "$2" --concurrency "$LEVELS" --requests "$REQUESTS" --warmup 2 --buckets balanced
    --synthetic 200,200,200 --outputs "$TOKENS,$TOKENS,$TOKENS" --no-estimate)
  if [ "$MODE" = board ]; then
    a+=(--baseline direct) # N-arm flag
    local r
    for r in $ROWS; do [ -n "${GW_PID[$r]:-}" ] && a+=(--arm-pid "$r=${GW_PID[$r]}"); done # N-arm flag
  fi
  printf '%s\n' "${a[@]}"
}

run_bench() { # label arms-csv
  local label=$1 arms=$2 run="$POUT/bench-$1"
  local cfg="$POUT/tokentap-$1.toml"
  PROXYLOG="$POUT/proxy-$1.jsonl"
  write_tokentap_config "$cfg" "$arms"
  start_tokentap "$cfg"
  mapfile -t args < <(bench_args "$run" "$arms")
  say "bench ($label): tokentap ${args[*]}"
  if ! OPENAI_API_KEY=$KEY on "$BENCH_CPUS" timeout "$BENCH_TIMEOUT" "$TT" "${args[@]}" >"$POUT/bench-$label.log" 2>&1; then
    say "gateway-board: bench ($label) failed; its last lines:"
    tail -5 "$POUT/bench-$label.log" >&2
  fi
  stop_pid "$TT_PID"
  if [ -f "$run/run.json" ]; then
    local hop=()
    [ "$MODE" = pairs ] && hop=(--hop-arms "$label,direct") # today's gateway_hop: the row against direct
    timeout 300 "$TT" report "$run" --tap "$PROXYLOG" "${hop[@]}" "${PACE_ARGS[@]}" >"$POUT/report-$label.txt" 2>&1 || true
    timeout 300 "$TT" report "$run" --tap "$PROXYLOG" "${hop[@]}" "${PACE_ARGS[@]}" --format json --out "$POUT/report-$label.json" 2>/dev/null || true
    timeout 300 "$TT" report "$run" --tap "$PROXYLOG" "${hop[@]}" "${PACE_ARGS[@]}" --format html --out "$POUT/report-$label.html" 2>/dev/null || true
    say "report: $POUT/report-$label.txt, JSON $POUT/report-$label.json"
  fi
}

run_profile() { # name pace
  local name=$1 pace=$2
  POUT="$OUT/$name"
  mkdir -p "$POUT"
  TOKENS=64
  [ -n "$pace" ] && TOKENS=$(cut -d, -f3 <<<"$pace")
  say ""
  say "== profile $name: engine ${ENGINE}${pace:+ --pace $pace}, levels $LEVELS, ${REQUESTS:-$GROUPS_PER_LEVEL prompts × every arm} a cell, $TOKENS tokens"
  start_engine "$pace"
  # tokentap first (the gateways' upstream), with every route; then each gateway; then verify.
  PROXYLOG="$POUT/proxy-verify.jsonl"
  local varms="direct,$(tr -s ' ' ',' <<<"${ROWS% }")"
  [ "$MODE" = board ] || varms="direct,$(awk '{print $1}' <<<"$ROWS")" # today's experiment: two arms
  write_tokentap_config "$POUT/tokentap-verify.toml" "$varms"
  start_tokentap "$POUT/tokentap-verify.toml"
  local r
  for r in $ROWS; do [ -n "${GW_PID[$r]:-}" ] || start_gateway "$r"; done
  for r in $ROWS; do # a first request each (LiteLLM's first one is slow), not measured
    timeout 60 curl -sS -m 50 -o /dev/null "http://127.0.0.1:${GW_PORT[$r]}/v1/models" -H "authorization: Bearer $KEY" 2>/dev/null || true
  done
  say "-- a streamed chat through each gateway (curl -N, then timed per read):"
  for r in $ROWS; do verify_row "$r" "$TOKENS"; done
  stop_pid "$TT_PID"
  local bench_rows
  bench_rows=$(tr ' ' '\n' <<<"$ROWS" | grep -vx nginx-gzip | tr '\n' ' ')
  # The board judges sustained streams against the mock's pace (its gap), when there is one.
  PACE_ARGS=()
  [ -n "$pace" ] && PACE_ARGS=(--pace-gap-ms "$(cut -d, -f2 <<<"$pace")")
  case $MODE in
    verify) ;;
    board)
      local arms_csv
      arms_csv="direct,$(tr ' ' ',' <<<"${bench_rows% }")"
      # Every prompt goes through every arm: whole groups a level.
      [ -n "${GATEWAY_BOARD_REQUESTS:-}" ] || REQUESTS=$((GROUPS_PER_LEVEL * $(tr ',' '\n' <<<"$arms_csv" | grep -c .)))
      run_bench board "$arms_csv"
      ;;
    pairs) for r in $bench_rows; do run_bench "$r" "direct,$r"; done ;;
  esac
  for r in $ROWS; do
    if [ -n "${GW_CAUSE[$r]:-}" ]; then say "row $r: ${GW_CAUSE[$r]}"; fi
  done
  stop_engine
}

case $PROFILE in
  public) run_profile public 20,20,64,16 ;;
  realistic) run_profile realistic "$([ "$REALISTIC_PACE" = model ] || echo "$REALISTIC_PACE")" ;;
  both)
    run_profile public 20,20,64,16
    run_profile realistic "$([ "$REALISTIC_PACE" = model ] || echo "$REALISTIC_PACE")"
    ;;
esac
[ "$ENGINE" = rig ] && [ "$PROFILE" != realistic ] && say "note: the rig's vLLM has no pace: the profile's pace did not apply"

if [ "$MODE" != verify ]; then
  for f in "$OUT"/*/report-*.txt; do
    [ -f "$f" ] || continue
    printf '\n===== %s\n' "${f#"$OUT"/}"
    cat "$f"
  done
fi
say "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
say "everything in $OUT"
