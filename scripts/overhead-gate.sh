#!/usr/bin/env bash
# The request path's overhead gate: this tree's release build against a baseline build, as an
# interleaved A/B in one run of benches/overhead.rs (OVERHEAD_TOKENTAP_B), at C=1 and C=8 in step
# (paced 64-event streams, proxies pinned to core 1, as scripts/overhead.sh), repeated. It prints
# every repetition and the medians, and exits 1 when C=8's added TTFT p50 median exceeds the
# baseline's by more than the baseline's own run-to-run spread (max − min over the repetitions);
# it exits 2 when a measurement is missing, a request was cut or the machine was too busy to
# measure (no figure, no pass). Its table
# goes in the closing note of any change to the request path (CONTRIBUTING.md).
#
#   scripts/overhead-gate.sh                                   # against OVERHEAD_GATE_REF
#   OVERHEAD_GATE_BASE=/path/to/tokentap scripts/overhead-gate.sh   # against a binary
#   OVERHEAD_GATE_REF=bc11cac OVERHEAD_GATE_REPS=6 scripts/overhead-gate.sh
#
# Env: OVERHEAD_GATE_REF (the baseline commit, built here with the release profile and kept in
# target/overhead-gate/; default: the newest `v*` tag, or while there is none the commit where
# HEAD left `main`); OVERHEAD_GATE_BASE (a baseline binary instead); OVERHEAD_GATE_NEW (measure
# this binary instead of building the tree); OVERHEAD_GATE_REPS (repetitions, default 4; each
# is one interleaved run, about a minute); OVERHEAD_GATE_PEERS (default `nginx,haproxy`, also
# measured for reference; empty for none); OVERHEAD_GATE_FULL=1 (also the C=64 full-speed cell:
# chunks/s and CPU per chunk of both builds); OVERHEAD_GATE_MAX_BUSY (default 90: a latency cell
# whose load-generator core was busier than this % makes the run unjudgeable, exit 2);
# OVERHEAD_GATE_BENCH (a benches/overhead binary already built, run instead of `cargo bench`);
# OVERHEAD_GATE_SPREAD=1 (also C=8 spread, reported as C=8s; the verdict stays C=8 in step's).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${OVERHEAD_GATE_REPS:-4}
peers=${OVERHEAD_GATE_PEERS-nginx,haproxy}
[ "$reps" -ge 2 ] || { echo "overhead-gate: OVERHEAD_GATE_REPS must be 2 or more (the spread needs two runs)" >&2; exit 2; }
missing_peer=0
for p in nginx haproxy; do
  if [[ ",$peers," == *",$p,"* ]] && ! command -v "$p" >/dev/null; then missing_peer=1; fi
done
if [ "$missing_peer" = 1 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light haproxy >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx haproxy >/dev/null
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
gate=target/overhead-gate
mkdir -p "$gate"

# The baseline: a binary given, or a commit built once (kept by its hash).
if [ -n "${OVERHEAD_GATE_BASE:-}" ]; then
  base=$OVERHEAD_GATE_BASE
  base_name=$base
else
  ref=${OVERHEAD_GATE_REF:-}
  if [ -z "$ref" ]; then
    ref=$(git describe --tags --abbrev=0 --match 'v*' 2>/dev/null || git merge-base HEAD main)
  fi
  sha=$(git rev-parse --verify "$ref^{commit}")
  base="$gate/tokentap-${sha:0:12}"
  base_name="$ref (${sha:0:12})"
  if [ ! -x "$base" ]; then
    echo "building the baseline $base_name (release profile) ..." >&2
    src="$scratch/base-src"
    mkdir -p "$src"
    git archive "$sha" | tar -x -C "$src"
    (cd "$src" && CARGO_TARGET_DIR="$PWD/../base-target" cargo build --release --locked --quiet)
    cp "$scratch/base-target/release/tokentap" "$base"
  fi
fi
[ -x "$base" ] || { echo "overhead-gate: no baseline binary at $base" >&2; exit 2; }

# This tree's release build, copied out before the bench's own build replaces it.
if [ -n "${OVERHEAD_GATE_NEW:-}" ]; then
  new=$OVERHEAD_GATE_NEW
else
  cargo build --release --locked --quiet
  new="$scratch/tokentap"
  cp target/release/tokentap "$new"
fi
[ -x "$new" ] || { echo "overhead-gate: no binary at $new" >&2; exit 2; }

export OVERHEAD_PROXIES="tokentap${peers:+,$peers}"
export OVERHEAD_LATENCY_C=1,8 OVERHEAD_SPREAD_C= OVERHEAD_STREAMS=0 OVERHEAD_H2_STREAMS=0
if [ "${OVERHEAD_GATE_SPREAD:-}" = 1 ]; then export OVERHEAD_SPREAD_C=8; fi
export OVERHEAD_ROUNDS=${OVERHEAD_ROUNDS:-4}
if [ "${OVERHEAD_GATE_FULL:-}" = 1 ]; then export OVERHEAD_FULL_C=64; else export OVERHEAD_FULL_C=; fi
bench=(cargo bench --locked --bench overhead --quiet)
if [ -n "${OVERHEAD_GATE_BENCH:-}" ]; then
  bench=("$OVERHEAD_GATE_BENCH" --bench)
else
  cargo bench --locked --bench overhead --no-run --quiet
fi
pin=()
if [ "$(nproc)" -ge 2 ]; then
  export OVERHEAD_PROXY_CPU=1
  pin=(taskset -c 0)
fi
echo "new: $new; baseline: $base_name; $reps interleaved runs, the builds swapping places each run (C=1, C=8 in step; beside: ${peers:-none})"
# NB: the two builds swap places every run: the first tokentap in the interleaving (target
# `tokentap`) measured some 30–60 µs slower at C=8 than the second (`tokentap-b`), whichever
# build it was, as much as the regressions this gate is for. Odd runs: new first.
for i in $(seq 1 "$reps"); do
  out="$scratch/run-$i.txt"
  if [ $((i % 2)) = 1 ]; then
    export OVERHEAD_TOKENTAP="$new" OVERHEAD_TOKENTAP_B="$base"
  else
    export OVERHEAD_TOKENTAP="$base" OVERHEAD_TOKENTAP_B="$new"
  fi
  if ! "${pin[@]}" "${bench[@]}" >"$out" 2>"$scratch/run-$i.err"; then
    cat "$out" "$scratch/run-$i.err" >&2
    echo "overhead-gate: run $i failed" >&2
    exit 2
  fi
  if grep -q 'unfinished after' "$out"; then
    grep 'unfinished after' "$out" >&2
    echo "overhead-gate: run $i cut requests: its figures are not whole" >&2
    exit 2
  fi
  cp "$out" "$gate/last-run-$i.txt"
done

# One row per (run, target, C): added TTFT p50, req p50, CPU µs/event; full speed: chunks/s, CPU µs/chunk.
python3 - "$scratch" "$reps" "${peers}" "${OVERHEAD_GATE_FULL:-}" "${OVERHEAD_GATE_MAX_BUSY:-90}" \
  "${OVERHEAD_GATE_SPREAD:-}" <<'EOF'
import re, statistics as st, sys
scratch, reps, peers, full = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
max_busy = float(sys.argv[5])
cells = ("1", "8", "8s") if sys.argv[6] == "1" else ("1", "8")
peer_names = [p for p in peers.split(",") if p]
names = ["new", "baseline"] + peer_names
label = {n: n for n in names}
lat, fast = {}, {}
for i in range(1, reps + 1):
    # Odd runs measured the new build as `tokentap`, even runs as `tokentap-b`.
    as_name = {"tokentap": "new", "tokentap-b": "baseline"} if i % 2 else {"tokentap": "baseline", "tokentap-b": "new"}
    as_name.update({p: p for p in peer_names})
    section = "latency"
    for line in open(f"{scratch}/run-{i}.txt"):
        if line.startswith("full speed"):
            section = "full"
        busy = re.search(r"load generator \+ upstream: .* ([0-9.]+) % busy", line)
        if busy and float(busy.group(1)) > max_busy:
            print(f"overhead-gate: run {i}: the load generator's core was {busy.group(1)} % busy over a cell "
                  f"(over {max_busy:.0f} %): the machine is too busy for these figures to judge a change "
                  "(see target/overhead-gate/last-run-*.txt)", file=sys.stderr)
            sys.exit(2)
        f = line.split()
        if len(f) > 3 and f[2] == "spread":  # "8 spread": the cell C=8s
            f = [f[0], f[1] + "s"] + f[3:]
        if len(f) < 4 or f[0] not in as_name or f[2] != "|":
            continue
        f[0] = as_name[f[0]]
        try:
            if section == "latency" and len(f) == 13:
                lat.setdefault((f[0], f[1]), []).append((float(f[3]), float(f[9]), float(f[12])))
            elif section == "full" and len(f) == 8:
                fast.setdefault((f[0], f[1]), []).append((float(f[4]), float(f[6])))
        except ValueError:
            continue
missing = [(n, c) for n in names for c in cells if len(lat.get((n, c), [])) != reps]
if full:
    missing += [(n, "64 full") for n in ("new", "baseline") if len(fast.get((n, "64"), [])) != reps]
if missing:
    print(f"overhead-gate: figures missing for {missing}: see target/overhead-gate/last-run-*.txt", file=sys.stderr)
    sys.exit(2)
med = lambda xs: st.median(xs)
print()
print("| added TTFT p50 (µs), each run | " + " | ".join(label.get(n, n) for n in names) + " |")
print("| --- |" + " --- |" * len(names))
for c in cells:
    print(f"| C={c} | " + " | ".join(", ".join(f"{v[0]:.0f}" for v in lat[(n, c)]) for n in names) + " |")
    print(f"| C={c} median (spread) | " + " | ".join(
        f"{med([v[0] for v in lat[(n, c)]]):.0f} ({max(v[0] for v in lat[(n, c)]) - min(v[0] for v in lat[(n, c)]):.0f})" for n in names) + " |")
    print(f"| C={c} req p50 median | " + " | ".join(f"{med([v[1] for v in lat[(n, c)]]):.0f}" for n in names) + " |")
    print(f"| C={c} CPU µs/event median | " + " | ".join(f"{med([v[2] for v in lat[(n, c)]]):.1f}" for n in names) + " |")
if full:
    for n in ("new", "baseline"):
        v = fast[(n, "64")]
        print(f"| C=64 full speed, {label[n]}: chunks/s | " + ", ".join(f"{x[0]:.0f}" for x in v)
              + f" | CPU µs/chunk | " + ", ".join(f"{x[1]:.2f}" for x in v) + " |")
new8 = [v[0] for v in lat[("new", "8")]]
base8 = [v[0] for v in lat[("baseline", "8")]]
spread = max(base8) - min(base8)
excess = med(new8) - med(base8)
print()
print(f"C=8 added TTFT p50: new median {med(new8):.0f} µs, baseline median {med(base8):.0f} µs, "
      f"baseline spread {spread:.0f} µs: the new build is {excess:+.0f} µs from the baseline")
if excess > spread:
    print("overhead-gate: FAIL — C=8 added TTFT p50 exceeds the baseline's by more than its run-to-run spread")
    sys.exit(1)
print("overhead-gate: pass")
EOF
