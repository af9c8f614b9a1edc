#!/usr/bin/env bash
# A burst of new connections (docs/overhead.md, "A burst of new connections"): N clients connect
# at once to tokentap serve in front of the sim, and to nginx and HAProxy in front of the same
# sim (and to the sim alone), in interleaved rounds. A Python asyncio client times each connect,
# then sends one small request (GET /v1/models). Per target: connects that waited > 0.5 s and
# > 1 s (a dropped handshake waits for the kernel's SYN retransmit), p50/p99/max connect time,
# and the kernel's ListenOverflows / ListenDrops deltas (/proc/net/netstat, host-wide).
#   scripts/connect-burst.sh                                   # N = 1000 and 5000, 3 rounds
#   BURST_N="1000" BURST_ROUNDS=1 scripts/connect-burst.sh
#   BURST_TOKENTAP_B=/tmp/tokentap-old scripts/connect-burst.sh   # another build beside it
#   BURST_TOKENTAP=/path/to/tokentap scripts/connect-burst.sh    # skip the release build
# Opt-in (not in scripts/test.sh): installs nginx and haproxy with apt-get when missing (root),
# starts what it measures and stops it by pid, binds 127.0.0.1 only; every burst is bounded
# (BURST_TIMEOUT_S per connection, and `timeout` on each burst's client). Raises the open-file
# limit when it is too low for the largest N, and says so. Linux only (/proc). Run it on a quiet
# machine: it prints the load average before and after.
set -euo pipefail
cd "$(dirname "$0")/.."

N_LIST=${BURST_N:-"1000 5000"}
ROUNDS=${BURST_ROUNDS:-3}
TIMEOUT_S=${BURST_TIMEOUT_S:-20}
PEERS=${BURST_PEERS:-"nginx haproxy"}

say() { printf '%s\n' "$*" >&2; }

[ -r /proc/net/netstat ] || { say "connect-burst: needs Linux (/proc/net/netstat)"; exit 3; }
command -v python3 >/dev/null || { say "connect-burst: needs python3"; exit 3; }

missing=()
for p in $PEERS; do command -v "$p" >/dev/null || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]} (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    say "connect-burst: ${missing[*]} missing and cannot be installed here (not root or no apt-get): measured without"
  fi
fi

# Every connection is a descriptor in the client, and two in a proxy (client and upstream side).
max_n=0
for n in $N_LIST; do [ "$n" -gt "$max_n" ] && max_n=$n; done
need=$((2 * max_n + 1024))
soft=$(ulimit -Sn)
if [ "$soft" != unlimited ] && [ "$soft" -lt "$need" ]; then
  hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
    ulimit -Hn "$need" 2>/dev/null || true
    hard=$(ulimit -Hn)
  fi
  target=$need
  [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ] && target=$hard
  ulimit -Sn "$target"
  say "raised the open-file limit (ulimit -n) from $soft to $(ulimit -Sn) (needed: $need)"
  if [ "$(ulimit -Sn)" -lt "$need" ]; then
    say "connect-burst: the hard limit ($(ulimit -Hn)) is below $need: bursts of $max_n may fail for descriptors"
  fi
fi

if [ -z "${BURST_TOKENTAP:-}" ]; then
  cargo build --release --locked --bin tokentap >&2
  BURST_TOKENTAP=target/release/tokentap
fi
scratch=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap stop_all EXIT
cp "$BURST_TOKENTAP" "$scratch/tokentap"
tt="$scratch/tokentap"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() { # port log
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  say "connect-burst: nothing listens on 127.0.0.1:$1; $2 says:"
  tail -5 "$2" >&2 || true
  exit 1
}

declare -A addr metrics
sim=$(free_port)
"$tt" sim --listen "127.0.0.1:$sim" >"$scratch/sim.log" 2>&1 &
pids+=($!)
wait_port "$sim" "$scratch/sim.log"
addr[sim]="127.0.0.1:$sim"
targets=(sim)

start_tokentap() { # label binary
  local port admin
  port=$(free_port)
  admin=$(free_port)
  "$2" serve --upstream "http://127.0.0.1:$sim" --listen "127.0.0.1:$port" \
    --admin "127.0.0.1:$admin" --log "$scratch/$1.jsonl" >"$scratch/$1.log" 2>&1 &
  pids+=($!)
  wait_port "$port" "$scratch/$1.log"
  addr[$1]="127.0.0.1:$port"
  metrics[$1]="http://127.0.0.1:$admin/metrics"
  targets+=("$1")
}
start_tokentap tokentap "$tt"
if [ -n "${BURST_TOKENTAP_B:-}" ]; then
  cp "$BURST_TOKENTAP_B" "$scratch/tokentap-b"
  start_tokentap tokentap-b "$scratch/tokentap-b"
fi

if [[ " $PEERS " == *" nginx "* ]] && command -v nginx >/dev/null; then
  port=$(free_port)
  d=$scratch
  mkdir -p "$d/logs"
  # nginx's own default backlog (511 on Linux); a worker per core, as `worker_processes auto`.
  cat >"$d/nginx.conf" <<EOF
worker_processes auto; daemon off; error_log $d/nginx.err warn; pid $d/nginx.pid;
worker_rlimit_nofile $need;
events { worker_connections $need; }
http { access_log off; client_body_temp_path $d; proxy_temp_path $d; fastcgi_temp_path $d; uwsgi_temp_path $d; scgi_temp_path $d;
  upstream up { server 127.0.0.1:$sim; keepalive 1024; }
  server { listen 127.0.0.1:$port; location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
EOF
  nginx -c "$d/nginx.conf" -p "$d" >"$d/nginx.out" 2>&1 &
  pids+=($!)
  wait_port "$port" "$d/nginx.err"
  addr[nginx]="127.0.0.1:$port"
  targets+=(nginx)
fi
if [[ " $PEERS " == *" haproxy "* ]] && command -v haproxy >/dev/null; then
  port=$(free_port)
  # HAProxy's own default backlog: the frontend's maxconn, capped by net.core.somaxconn (a
  # maxconn of at least somaxconn, so its backlog is the system's maximum). Each connection is
  # two descriptors to HAProxy, which refuses to start when the limit cannot hold maxconn.
  somax=$(cat /proc/sys/net/core/somaxconn)
  maxconn=$((max_n + 100 > somax ? max_n + 100 : somax))
  cat >"$scratch/haproxy.cfg" <<EOF
global
  maxconn $maxconn
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend f
  bind 127.0.0.1:$port
  default_backend b
backend b
  server s1 127.0.0.1:$sim
EOF
  haproxy -db -f "$scratch/haproxy.cfg" >"$scratch/haproxy.out" 2>&1 &
  pids+=($!)
  wait_port "$port" "$scratch/haproxy.out"
  addr[haproxy]="127.0.0.1:$port"
  targets+=(haproxy)
fi

say "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r)"
say "net.core.somaxconn $(cat /proc/sys/net/core/somaxconn), tcp_max_syn_backlog $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog), tcp_syncookies $(cat /proc/sys/net/ipv4/tcp_syncookies), open files $(ulimit -Sn)"
say "listeners (ss -lnt: Recv-Q is the accept queue's depth, Send-Q its backlog):"
for t in "${targets[@]}"; do
  p=${addr[$t]##*:}
  say "  $t 127.0.0.1:$p backlog $(ss -Hlnt "sport = :$p" | awk '{print $3}' | head -1)"
done
say "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

results="$scratch/results.jsonl"
for n in $N_LIST; do
  for r in $(seq 1 "$ROUNDS"); do
    for t in "${targets[@]}"; do
      extra=()
      [ -n "${metrics[$t]:-}" ] && extra=(--metrics "${metrics[$t]}")
      timeout $((TIMEOUT_S + 60)) python3 scripts/connect_burst.py burst --target "${addr[$t]}" \
        --n "$n" --label "$t" --round "$r" --timeout "$TIMEOUT_S" "${extra[@]}" | tee -a "$results" >&2
      sleep 2 # the previous burst's connections close
    done
  done
done
say "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/connect_burst.py table "$results"
