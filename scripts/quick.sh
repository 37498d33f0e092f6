#!/usr/bin/env bash
# The quick unit run while working: the unit tier without the tests marked slow (CI runs them
# all, through scripts/test.sh), on two workers (pytest-xdist), with bytecode kept under .venv
# so sbx and the tests are not compiled again on every run (the dev machines set
# PYTHONDONTWRITEBYTECODE, which would). Extra arguments go to pytest (-x, -k WORDS, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
exec env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX="$PWD/.venv/pycache" \
  .venv/bin/python -m pytest -p no:cacheprovider -n 2 -m "not slow" tests/unit "$@"
