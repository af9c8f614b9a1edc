#!/usr/bin/env bash
# Opt-in: build docker/Dockerfile with buildah and check the image: non-root user, HEALTHCHECK,
# a dependency layer that a code change does not rebuild, and the binary inside answering
# `check`, `serve` and `health`. Installs buildah (and debootstrap) from Debian if missing.
#
#   scripts/container-test.sh
#
# Where the Dockerfile's base images cannot be pulled (no registry reachable), both are built
# here from Debian's packages: a `debootstrap --variant=minbase` bookworm as the runtime base,
# and the same plus gcc, make (jemalloc's build), a rustup toolchain and this machine's CA bundle
# as the builder. The build runs with `--isolation chroot`: where containers cannot set their own
# rlimits (some sandboxes refuse crun's setrlimit), `podman run` cannot start the image, so the
# image's binary is run with `buildah run --isolation chroot` and the HEALTHCHECK is read from the
# image's config. Every container and temporary directory this makes is removed at the end; the
# images stay.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || apt-get install -y "$tool" >/dev/null
done
WORK=$(mktemp -d)
CONTAINERS=()
cleanup() {
  for c in "${CONTAINERS[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
B=(buildah --isolation chroot)
IMAGE=localhost/tokentap:test

builder=docker.io/library/rust:1-bookworm
runtime=docker.io/library/debian:bookworm-slim
if ! timeout 60 buildah pull -q "$runtime" >/dev/null 2>&1; then
  echo "== $runtime cannot be pulled: building local bases from Debian's packages"
  runtime=localhost/tokentap-base:bookworm
  builder=localhost/tokentap-rust:bookworm
  if ! buildah inspect "$runtime" >/dev/null 2>&1; then
    debootstrap --variant=minbase --include=ca-certificates bookworm "$WORK/rootfs" \
      http://deb.debian.org/debian >"$WORK/debootstrap.log"
    tar -C "$WORK/rootfs" -c . | buildah import - "$runtime" >/dev/null 2>&1 \
      || tar -C "$WORK/rootfs" -c . | podman import - "$runtime" >/dev/null
  fi
  if ! buildah inspect "$builder" >/dev/null 2>&1; then
    c=$(buildah from "$runtime"); CONTAINERS+=("$c")
    "${B[@]}" run "$c" -- sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev make curl >/dev/null'
    # The builder trusts what this machine trusts: where downloads pass a TLS-inspecting proxy,
    # its CA is in the host's bundle, not in Debian's (the runtime base keeps Debian's).
    buildah copy -q "$c" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
    "${B[@]}" run "$c" -- sh -c 'curl -sSf https://static.rust-lang.org/rustup/dist/x86_64-unknown-linux-gnu/rustup-init -o /tmp/rustup-init && chmod +x /tmp/rustup-init && /tmp/rustup-init -y -q --profile minimal --default-toolchain 1.95.0 && rm /tmp/rustup-init'
    buildah config --env PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
    buildah commit -q "$c" "$builder" >/dev/null
  fi
fi

echo "== build (builder $builder, runtime $runtime)"
t0=$(date +%s)
"${B[@]}" build --format docker --layers -f docker/Dockerfile \
  --build-arg BUILDER="$builder" --build-arg RUNTIME="$runtime" -t "$IMAGE" . >"$WORK/build1.log" 2>&1 \
  || { tail -30 "$WORK/build1.log"; exit 1; }
echo "   first build: $(( $(date +%s) - t0 )) s"

echo "== a code change reuses the dependency layer"
cp -r src "$WORK/src.bak"
echo "// touched by container-test.sh" >> src/lib.rs
t0=$(date +%s)
status=0
"${B[@]}" build --format docker --layers -f docker/Dockerfile \
  --build-arg BUILDER="$builder" --build-arg RUNTIME="$runtime" -t "$IMAGE" . >"$WORK/build2.log" 2>&1 || status=$?
rm -rf src && mv "$WORK/src.bak" src
[ "$status" = 0 ] || { tail -30 "$WORK/build2.log"; exit 1; }
echo "   rebuild after a code change: $(( $(date +%s) - t0 )) s"
grep -q "Using cache" "$WORK/build2.log" || { echo "FAIL: no cached layer in the rebuild"; exit 1; }
grep -A1 "cargo build --release --locked --bin tokentap &&\|RUN mkdir -p src benches" "$WORK/build2.log" | grep -q "Using cache" \
  || { echo "FAIL: the dependency layer was rebuilt"; sed -n 1,40p "$WORK/build2.log"; exit 1; }

echo "== the image's config"
user=$(buildah inspect --format '{{.Docker.Config.User}}' "$IMAGE")
[ "$user" = "65534:65534" ] || { echo "FAIL: user is '$user'"; exit 1; }
health=$(buildah inspect --format '{{.Docker.Config.Healthcheck.Test}}' "$IMAGE")
case "$health" in *"tokentap health"*|*"/usr/local/bin/tokentap health"*) ;; *) echo "FAIL: healthcheck '$health'"; exit 1;; esac
echo "   user $user; healthcheck $health"
echo "   size: $(buildah images --format '{{.Size}}' "$IMAGE" | head -1)"

echo "== the binary in the image"
c=$(buildah from "$IMAGE"); CONTAINERS+=("$c")
"${B[@]}" run --user 65534:65534 "$c" -- sh -c 'id -u; test ! -w /usr/local/bin && test -w /var/lib/tokentap'
"${B[@]}" run --user 65534:65534 "$c" -- /usr/local/bin/tokentap --version
VLLM_API_KEY=x LITELLM_MASTER_KEY=y "${B[@]}" run --user 65534:65534 --env VLLM_API_KEY=x --env LITELLM_MASTER_KEY=y "$c" -- \
  /usr/local/bin/tokentap check --config /etc/tokentap/tokentap.toml
# serve and health inside the image, on free loopback ports (chroot isolation shares the host's
# network), stopped by SIGTERM.
read -r P A < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
"${B[@]}" run --user 65534:65534 "$c" -- sh -c "
  /usr/local/bin/tokentap serve --upstream http://127.0.0.1:9 --listen 127.0.0.1:$P --admin 127.0.0.1:$A --log - 2>/tmp/serve.log &
  pid=\$!
  for i in \$(seq 50); do /usr/local/bin/tokentap health --admin 127.0.0.1:$A >/dev/null 2>&1 && break; sleep 0.1; done
  /usr/local/bin/tokentap health --admin 127.0.0.1:$A && /usr/local/bin/tokentap health --admin 127.0.0.1:$A --ready
  ok=\$?
  kill -TERM \$pid; wait \$pid; echo \"serve exited \$?\"
  exit \$ok"
echo "PASS: the image builds from its dependency layer, runs as 65534 with a HEALTHCHECK, and serves"
