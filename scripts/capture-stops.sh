#!/usr/bin/env bash
# Opt-in: record what real vLLM and LiteLLM send a stream's client when they are stopped
# mid-stream, byte-exact, into tests/fixtures/sse/ (tests/fixtures/sse/README.md, "Stopped
# mid-stream"). Each case starts the rig (../shared/rig/start.sh, which is idempotent), sends a
# long streamed chat request with scripts/capture_cut.py, and signals one server once 30 token
# events have arrived; vLLM exits after its SIGTERM, so the next case starts it again (40-80 s).
# Every process signalled is one the rig's pid file names; ../shared/rig/stop.sh stops the rest.
#
# vLLM's ending is a race between its engine process and its API server: the same SIGTERM gives
# the abort chunk, an error event, or a stalled stream (CAPTURE_TIMEOUT seconds, then the
# client gives up). Each run writes OUT/NAME.* whatever came; re-run a case for another variant.
#
#   RIG_HOME=/opt/rig scripts/capture-stops.sh [OUT]     # VLLM_PORT, LITELLM_PORT as for the rig
set -euo pipefail
cd "$(dirname "$0")/.."
RIG_DIR=${RIG_DIR:-../shared/rig}
RIG_HOME=${RIG_HOME:-/opt/rig}
OUT=${1:-tests/fixtures/sse}
VLLM="http://127.0.0.1:${VLLM_PORT:-8000}"
LLM="http://127.0.0.1:${LITELLM_PORT:-4000}"
KEY="Authorization: Bearer sk-rig-master-key"
export RIG_HOME

Q='Say hello to the proxy.'
LONG='{"model":"tiny","messages":[{"role":"user","content":"'"$Q"'"}],"max_tokens":1500,"stream":true,"ignore_eos":true,"seed":7}'
LONG_USAGE='{"model":"tiny","messages":[{"role":"user","content":"'"$Q"'"}],"max_tokens":1500,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"seed":7}'
SHORT='{"model":"tiny","messages":[{"role":"user","content":"'"$Q"'"}],"max_tokens":48,"stream":true,"ignore_eos":true,"seed":7}'

pid_of() { awk -v n="$1" '$1==n{print $2}' "$RIG_HOME/run/pids"; }
up() {  # start the rig and warm both servers (LiteLLM's first request is slow)
  "$RIG_DIR/start.sh" >/dev/null
  local hi='{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'
  curl -sf -m 30 "$VLLM/v1/chat/completions" -H 'content-type: application/json' -d "$hi" >/dev/null
  curl -sf -m 30 "$LLM/v1/chat/completions" -H "$KEY" -H 'content-type: application/json' -d "$hi" >/dev/null
}
cut() { python3 scripts/capture_cut.py "$@" --after 30; sleep 3; }

# vLLM stopped (SIGTERM to its API server, as `docker stop` or Kubernetes send it)
up; cut "$VLLM/v1/chat/completions" "$LONG" "$OUT/vllm-chat-stream-sigterm" --signal TERM --pid "$(pid_of vllm)"
up; cut "$VLLM/v1/chat/completions" "$LONG_USAGE" "$OUT/vllm-chat-stream-usage-sigterm" --signal TERM --pid "$(pid_of vllm)"
# Ctrl-C in its terminal: SIGINT to the whole process group (engine and worker too)
up; cut "$VLLM/v1/chat/completions" "$LONG_USAGE" "$OUT/vllm-chat-stream-usage-sigint" --signal INT --pid "-$(pid_of vllm)"
# LiteLLM stopped: SIGTERM (it drains), and forced (a second SIGINT)
up; cut "$LLM/v1/chat/completions" "$SHORT" "$OUT/litellm-chat-stream-sigterm" --signal TERM --pid "$(pid_of litellm)" -H "$KEY"
up; cut "$LLM/v1/chat/completions" "$LONG" "$OUT/litellm-chat-stream-sigint-twice" --signal INT,INT --pid "$(pid_of litellm)" -H "$KEY"
# vLLM stopped behind LiteLLM
up; cut "$LLM/v1/chat/completions" "$LONG" "$OUT/litellm-chat-stream-vllm-sigterm" --signal TERM --pid "$(pid_of vllm)" -H "$KEY"
ls -la "$OUT" | grep -E "sigterm|sigint"
