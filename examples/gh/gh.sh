#!/bin/sh
# A stand-in for the GitHub CLI: `gh api [-X METHOD] PATH` sends one request to api.github.com.
# GH_TOKEN holds a sentinel inside the sandbox; the boundary swaps in the real token.
set -eu
[ "${1:-}" = "api" ] || { echo "usage: gh api [-X METHOD] PATH" >&2; exit 2; }
shift
method=GET
if [ "${1:-}" = "-X" ]; then method=$2; shift 2; fi
path=${1:?path}
exec curl -sS -X "$method" -H "Authorization: Bearer ${GH_TOKEN:-}" "https://api.github.com$path"
