#!/usr/bin/env bash
# Set up, lint and run the whole test suite (unit, integration, golden vs HF transformers, the live
# server, the demo model, Dynamo's frontend and workers); `--fast` runs only the unit lane (tests/unit: no
# model, under a minute), `--dynamo` only the Dynamo lane (tests/dynamo). Any other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
lane=()
if [ "${1:-}" = "--fast" ]; then
  shift
  lane=(tests/unit)
elif [ "${1:-}" = "--dynamo" ]; then
  shift
  lane=(tests/dynamo)
fi
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q "${lane[@]}" "$@"
