#!/bin/sh
# `gemini`: Gemini CLI's bundle on the Node binary npm-fetch.sh unpacked (what npm's bin link
# `gemini -> bundle/gemini.js` runs through `#!/usr/bin/env node`).
root=/opt/gemini-cli/node_modules
for node in "$root"/node-linux-*/bin/node; do
  if [ -x "$node" ] && [ -f "$root/@google/gemini-cli/bundle/gemini.js" ]; then
    exec "$node" "$root/@google/gemini-cli/bundle/gemini.js" "$@"
  fi
done
echo "gemini: Gemini CLI is not installed in this image (see examples/agents/README.md)" >&2
exit 127
