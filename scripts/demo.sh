#!/usr/bin/env bash
# Set up, build the SmolLM2-135M demo engine, inspect it, and generate a reply offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
ENGINE=${ENGINE:-engines/smollm2-135m}
if trtserve inspect "$ENGINE" --json >/dev/null 2>&1; then
  echo "reusing the verified engine in $ENGINE"
else
  trtserve build --config configs/demo-smollm2.yaml -o "$ENGINE" --force
fi
trtserve inspect "$ENGINE" --memory 4GiB
trtserve generate "$ENGINE" "What is the capital of France?" "Write a haiku about the sea." --max-tokens 64
