#!/usr/bin/env bash
# Set up and run the whole test suite (lint, unit, golden vs HF transformers, the demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q "$@"
