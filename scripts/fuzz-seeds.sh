#!/usr/bin/env bash
# Build the fuzz targets' seed corpora from the fixtures: fuzz/corpus/<target>/seed-<sha1>.
# Idempotent; the fuzzer's own finds are kept beside the seeds (and not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
fx=tests/fixtures/sse
shared=/work/shared/fixtures/sse

# seed TARGET < bytes: one seed file named by its content.
seed() {
    local dir=fuzz/corpus/$1 tmp
    mkdir -p "$dir"
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -s "$tmp" ]; then
        mv "$tmp" "$dir/seed-$(sha1sum "$tmp" | cut -c1-16)"
    else
        rm -f "$tmp"
    fi
}

# The body of a recorded request (after its blank line).
body() { sed '1,/^\r\{0,1\}$/d' "$1"; }

dirs=("$fx")
[ -d "$shared" ] && dirs+=("$shared")
for d in "${dirs[@]}"; do
    for h in "$d"/*.headers; do
        seed http_head <"$h"
        { cat "$h"; head -c 200 "${h%.headers}.wire"; } | seed http_head
        if grep -qi '^transfer-encoding: *chunked' "$h"; then
            { printf '\007'; cat "${h%.headers}.wire"; } | seed http_chunked
        fi
    done
    for s in "$d"/*.sse; do
        { printf '\200\007'; cat "$s"; } | seed sse_split
        { printf '\002\005'; cat "$s"; } | seed sse_split
        seed event_verdict <"$s"
    done
    for r in "$d"/*.request; do
        body "$r" | seed fingerprint
        { echo "Qwen/Qwen2.5-7B-Instruct"; body "$r"; } | seed request_splice
    done
done
printf '\0015\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nx-t: 1\r\n\r\n' | seed http_chunked
printf '\002\001data: a\r\ndata: b\r: c\rid: 1\n\ndata:x\n\n' | seed sse_split

# Records: the one the report's checks teach first, and the lines its unit tests read.
grep -ho 'r#"{.*}"#' src/report/fast_check.rs src/report/fast_tests.rs |
    sed 's/^r#"//; s/"#$//' | seed report_line
grep -ho 'r#"{.*}"#' src/report/fast_check.rs | sed 's/^r#"//; s/"#$//' | seed report_line

# Compressed bodies: a fixture stream in each coding (mode byte 0 gzip, 1 deflate, 2 br, 3 zstd;
# then where reads split), a brotli stream of uncompressed meta-blocks, and round trips (128 up).
sse=$fx/vllm-chat-stream-usage.sse
[ -f "$sse" ] || sse=$(ls "$fx"/*.sse | head -1)
{ printf '\000\007'; gzip -c <"$sse"; } | seed compressed_body
{ printf '\001\005'; python3 -c 'import sys, zlib; sys.stdout.buffer.write(zlib.compress(sys.stdin.buffer.read()))' <"$sse"; } | seed compressed_body
{ printf '\001\003'; python3 -c 'import sys, zlib; c = zlib.compressobj(wbits=-15); sys.stdout.buffer.write(c.compress(sys.stdin.buffer.read()) + c.flush())' <"$sse"; } | seed compressed_body
if command -v zstd >/dev/null; then
    { printf '\003\011'; zstd -q -c <"$sse"; } | seed compressed_body
fi
printf '\002\011\217\002\200hello\n\003' | seed compressed_body
{ printf '\200\021'; cat "$sse"; } | seed compressed_body
{ printf '\201\052'; cat "$sse"; } | seed compressed_body

seed config <config/tokentap.toml
printf '[[routes]]\nname = "a"\nupstream = "http://127.0.0.1:8000"\nmodel_map = { tiny = "Qwen/Qwen2.5-7B" }\n' | seed config
printf 'listen = "127.0.0.1:0"\n[limits]\nmax_concurrent = 0\n' | seed config
du -sh fuzz/corpus
