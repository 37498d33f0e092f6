# Gemini CLI from its official npm release (@google/gemini-cli, a bundled Node program) on an
# official Node.js build from npm (node-linux-<arch>): Gemini CLI needs Node >= 20, and Debian
# bookworm ships 18.
#
# Kit builds have no network. With `--arg source=staged` the packages come from packages/
# (filled on the host by scripts/stage_agents.py); with the default `source=registry` the image
# holds only the installer, and the kit's install hook fetches them from registry.npmjs.org
# through the egress proxy (install phase) when a sandbox is created.
FROM sbx-base/agent:1 AS fetch
ARG GEMINI_CLI_VERSION
ARG NODE_VERSION
ARG AGENT_SOURCE=registry
COPY npm-fetch.sh packages.list packages.lock /usr/local/lib/sbx-agent/
COPY packages/ /packages/
RUN mkdir -p /opt/gemini-cli \
 && if [ "$AGENT_SOURCE" = staged ]; then \
      sh /usr/local/lib/sbx-agent/npm-fetch.sh --from /packages --into /opt/gemini-cli \
        --set version="$GEMINI_CLI_VERSION" --set nodeVersion="$NODE_VERSION" \
        /usr/local/lib/sbx-agent/packages.list; \
    fi

FROM sbx-base/agent:1
COPY --from=fetch /opt/gemini-cli /opt/gemini-cli
COPY npm-fetch.sh packages.list packages.lock /usr/local/lib/sbx-agent/
COPY gemini-launch.sh /usr/local/bin/gemini
RUN chmod 0755 /usr/local/lib/sbx-agent/npm-fetch.sh /usr/local/bin/gemini
# Gemini CLI re-launches itself under a second Node process; keep that one in the same terminal
# and process group (documented escape hatch of the CLI) so signals reach it directly.
ENV GEMINI_CLI_NO_RELAUNCH=true
USER agent
WORKDIR /home/agent/workspace
CMD ["gemini"]
