#!/usr/bin/env bash
# Set up, build the SmolLM2-135M demo engine (configs/demo-smollm2.yaml: its GGUF's Q4_1 kept as int4,
# float32), inspect it, generate a reply offline, then serve it.
# DEMO_NO_SERVE=1 stops after the offline reply.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
ENGINE=${ENGINE:-engines/smollm2-135m}
PORT=${PORT:-8000}
if trtserve inspect "$ENGINE" --json >/dev/null 2>&1; then
  echo "reusing the verified engine in $ENGINE"
else
  trtserve build --config configs/demo-smollm2.yaml -o "$ENGINE" --force
fi
trtserve inspect "$ENGINE" --memory 4GiB
trtserve generate "$ENGINE" "What is the capital of France?" "Write a haiku about the sea." --max-tokens 64
[ "${DEMO_NO_SERVE:-0}" = 1 ] && exit 0
cat <<MSG

Serving $ENGINE on http://127.0.0.1:$PORT (Ctrl-C to stop). Try, from another shell:

  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$(basename "$ENGINE")", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 32, "temperature": 0}'

MSG
exec trtserve run "$ENGINE" --port "$PORT" --kv-cache-memory 2GiB
