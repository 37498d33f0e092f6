#!/bin/sh
# `claude`: the native binary npm-fetch.sh unpacked (the same file npm's postinstall would put
# in place), for this machine's architecture.
for binary in /opt/claude-code/node_modules/@anthropic-ai/claude-code-linux-*/claude; do
  [ -x "$binary" ] && exec "$binary" "$@"
done
echo "claude: Claude Code is not installed in this image (see examples/agents/README.md)" >&2
exit 127
