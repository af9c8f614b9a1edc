#!/usr/bin/env bash
# Opt-in: record the Responses (/v1/responses) and Anthropic Messages (/v1/messages) fixtures,
# and prefix-cache hits, byte-exact from a running rig (vLLM started with
# RIG_VLLM_ARGS=--enable-prompt-tokens-details), directly and through LiteLLM, into
# tests/fixtures/sse/ with the rig's capture_sse.py. Re-recording changes token text, ids and
# times, not the structure the tests check.
#
#   RIG_VLLM_ARGS=--enable-prompt-tokens-details ../shared/rig/start.sh && scripts/capture-shapes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RIG_DIR=${RIG_DIR:-../shared/rig}
OUT=${1:-tests/fixtures/sse}
VLLM="http://127.0.0.1:${VLLM_PORT:-8000}"
LLM="http://127.0.0.1:${LITELLM_PORT:-4000}"
cap() { python3 "$RIG_DIR/capture_sse.py" "$@"; }

Q='Say hello to the proxy.'
RESP_STREAM='{"model":"tiny","input":"'"$Q"'","max_output_tokens":16,"stream":true}'
RESP_NONSTREAM='{"model":"tiny","input":"'"$Q"'","max_output_tokens":16}'
RESP_ERR='{"model":"no-such-model","input":"'"$Q"'","max_output_tokens":16,"stream":true}'
MSG_STREAM='{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"'"$Q"'"}],"stream":true}'
MSG_NONSTREAM='{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"'"$Q"'"}]}'
MSG_ERR='{"model":"no-such-model","max_tokens":16,"messages":[{"role":"user","content":"'"$Q"'"}],"stream":true}'
# A prompt long enough to fill whole KV blocks: its second send hits vLLM's prefix cache.
LONG=$(python3 -c 'print(" ".join(["The proxy measures every token it forwards."] * 40))')
CHAT_CACHED='{"model":"tiny","messages":[{"role":"user","content":"'"$LONG"'"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"seed":7}'
RESP_CACHED='{"model":"tiny","input":"'"$LONG"'","max_output_tokens":8,"stream":true}'

for side in vllm litellm; do
  if [ $side = vllm ]; then B=$VLLM; H=(); HM=(); else
    B=$LLM; H=(-H "Authorization: Bearer sk-rig-master-key"); HM=(-H "x-api-key: sk-rig-master-key"); fi
  cap "$B/v1/responses" "$RESP_STREAM"    "$OUT/$side-responses-stream"      "${H[@]}"
  cap "$B/v1/responses" "$RESP_NONSTREAM" "$OUT/$side-responses-nonstream"   "${H[@]}"
  cap "$B/v1/responses" "$RESP_ERR"       "$OUT/$side-responses-error-unknown-model" "${H[@]}"
  cap "$B/v1/messages"  "$MSG_STREAM"     "$OUT/$side-messages-stream"       "${HM[@]}"
  cap "$B/v1/messages"  "$MSG_NONSTREAM"  "$OUT/$side-messages-nonstream"    "${HM[@]}"
  cap "$B/v1/messages"  "$MSG_ERR"        "$OUT/$side-messages-error-unknown-model" "${HM[@]}"
  # Twice: the second is the cache hit that is kept.
  for i in 1 2; do
    cap "$B/v1/chat/completions" "$CHAT_CACHED" "$OUT/$side-chat-stream-cached" "${H[@]}" >/dev/null
    cap "$B/v1/responses" "$RESP_CACHED" "$OUT/$side-responses-stream-cached" "${H[@]}" >/dev/null
  done
done
ls -la "$OUT" | grep -E "responses|messages|cached"
