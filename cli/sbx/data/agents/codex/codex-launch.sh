#!/bin/sh
# `codex`: the native binary npm-fetch.sh unpacked, for this machine's architecture (what the
# package's Node launcher, bin/codex.js, would exec).
for binary in /opt/codex/node_modules/@openai/codex/vendor/*-unknown-linux-musl/bin/codex; do
  [ -x "$binary" ] && exec "$binary" "$@"
done
echo "codex: Codex is not installed in this image (see examples/agents/README.md)" >&2
exit 127
