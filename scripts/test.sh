#!/usr/bin/env bash
# Set everything up (scripts/setup.sh), then run every check: lint, types, the import layers,
# generated-file drift, and the whole test suite with the real-engine tests required (a missing
# engine fails them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check cli tests scripts bench
.venv/bin/mypy
# The layers (pyproject [tool.importlinter]): an import back up fails here.
.venv/bin/lint-imports --no-cache
if [ "$#" -gt 0 ]; then  # a developer's selection: run just that
  exec env SBX_REQUIRE_ENGINE=1 .venv/bin/python -m pytest -p no:cacheprovider "$@"
fi
# The unit tier under coverage, held to the floor in pyproject ([tool.coverage.report]
# fail_under); then the engine tiers, which must find a real engine.
SBX_REQUIRE_ENGINE=1 .venv/bin/python -m pytest -p no:cacheprovider tests/unit --cov=sbx \
  --cov-report=term:skip-covered
SBX_REQUIRE_ENGINE=1 .venv/bin/python -m pytest -p no:cacheprovider tests/integration \
  tests/acceptance
