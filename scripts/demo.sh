#!/usr/bin/env bash
# Set everything up (scripts/setup.sh), then run the bundled example workload in a sandbox with
# this repository's examples/hello directory as a read-only workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/sbx run examples/hello examples/hello --access ro "$@"
