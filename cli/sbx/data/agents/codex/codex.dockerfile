# Codex from its official npm release: the native binary OpenAI publishes as the per-platform
# version of @openai/codex (`<version>-linux-<arch>`; no Node needed at run time).
#
# Kit builds have no network. With `--arg source=staged` the package comes from packages/ (filled
# on the host by scripts/stage_agents.py); with the default `source=registry` the image holds
# only the installer, and the kit's install hook fetches the release from registry.npmjs.org
# through the egress proxy (install phase) when a sandbox is created.
FROM sbx-base/agent:1 AS fetch
ARG CODEX_VERSION
ARG AGENT_SOURCE=registry
COPY npm-fetch.sh packages.list packages.lock /usr/local/lib/sbx-agent/
COPY packages/ /packages/
RUN mkdir -p /opt/codex \
 && if [ "$AGENT_SOURCE" = staged ]; then \
      sh /usr/local/lib/sbx-agent/npm-fetch.sh --from /packages --into /opt/codex \
        --set version="$CODEX_VERSION" /usr/local/lib/sbx-agent/packages.list; \
    fi

FROM sbx-base/agent:1
COPY --from=fetch /opt/codex /opt/codex
COPY npm-fetch.sh packages.list packages.lock /usr/local/lib/sbx-agent/
COPY codex-launch.sh /usr/local/bin/codex
RUN chmod 0755 /usr/local/lib/sbx-agent/npm-fetch.sh /usr/local/bin/codex
USER agent
WORKDIR /home/agent/workspace
CMD ["codex"]
