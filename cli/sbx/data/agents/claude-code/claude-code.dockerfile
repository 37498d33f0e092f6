# Claude Code from its official npm release: the native binary that Anthropic publishes in the
# per-platform package @anthropic-ai/claude-code-linux-<arch> (no Node needed at run time).
#
# Kit builds have no network. With `--arg source=staged` the package comes from packages/ (filled
# on the host by scripts/stage_agents.py); with the default `source=registry` the image holds
# only the installer, and the kit's install hook fetches the release from registry.npmjs.org
# through the egress proxy (install phase) when a sandbox is created.
FROM sbx-base/agent:1 AS fetch
ARG CLAUDE_CODE_VERSION
ARG AGENT_SOURCE=registry
COPY npm-fetch.sh packages.list packages.lock /usr/local/lib/sbx-agent/
COPY packages/ /packages/
RUN mkdir -p /opt/claude-code \
 && if [ "$AGENT_SOURCE" = staged ]; then \
      sh /usr/local/lib/sbx-agent/npm-fetch.sh --from /packages --into /opt/claude-code \
        --set version="$CLAUDE_CODE_VERSION" /usr/local/lib/sbx-agent/packages.list; \
    fi

FROM sbx-base/agent:1
COPY --from=fetch /opt/claude-code /opt/claude-code
COPY npm-fetch.sh packages.list packages.lock /usr/local/lib/sbx-agent/
COPY claude-launch.sh /usr/local/bin/claude
RUN chmod 0755 /usr/local/lib/sbx-agent/npm-fetch.sh /usr/local/bin/claude
# What Claude Code would otherwise contact besides the API (documented in the README):
# the auto-updater, Statsig telemetry and Sentry error reports are switched off here, and their
# hosts are outside the kit's network policy (a request there gets sbx's 403).
ENV DISABLE_AUTOUPDATER=1 \
    DISABLE_TELEMETRY=1 \
    DISABLE_ERROR_REPORTING=1 \
    DISABLE_BUG_COMMAND=1 \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1
USER agent
WORKDIR /home/agent/workspace
CMD ["claude"]
