#!/usr/bin/env bash
# Set everything up (scripts/setup.sh), then run every check: lint, types, the import layers,
# generated-file drift, and the whole test suite with the real-engine tests required (a missing engine fails them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check cli tests scripts bench
.venv/bin/mypy
# The layers (pyproject [tool.importlinter]): an import back up fails here.
.venv/bin/lint-imports --no-cache
SBX_REQUIRE_ENGINE=1 .venv/bin/python -m pytest -p no:cacheprovider "$@"
