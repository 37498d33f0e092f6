#!/usr/bin/env bash
# Regenerate the committed completion scripts, man page and root help page from the command
# tree, and the README's layout map from the package tree.
# Run after changing any command, option, reason code or exit status; the drift tests
# (tests/unit/test_generated_docs.py) fail until you do. Pass --check to only compare.
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
status=0
"$python" scripts/gen_completions.py "$@" || status=1
"$python" scripts/gen_man.py "$@" || status=1
"$python" scripts/gen_help.py "$@" || status=1
"$python" scripts/gen_layout.py "$@" || status=1
exit "$status"
