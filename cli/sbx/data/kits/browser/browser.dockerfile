# Debian's Chromium as a content-only mixin (KIT-SPEC-V3 §4.4): its files are overlaid on the
# workload's. Kit builds have no network, so the packages come from a local image that
# scripts/build-images.sh makes with debootstrap (sbx-base/browser-overlay:1: Chromium, its
# libraries and fonts, certutil, and Xvfb/x11vnc/noVNC; only the paths the agent base lacks).
FROM sbx-base/browser-overlay:1 AS browser

FROM scratch
COPY --from=browser / /
COPY sbx-browser /usr/local/bin/sbx-browser
COPY browser-proxy.py observer-gate.py /usr/local/lib/sbx-browser/
# Managed policy: no Encrypted Client Hello (not even its GREASE, which sbx's proxy refuses in a
# tunnel because it could hide the server name), no metrics, sync, sign-in or background mode.
COPY chromium-policy.json /etc/chromium/policies/managed/sbx.json
# Where the DevTools are, for agents and their tools (Playwright's connectOverCDP, MCP servers).
ENV CHROME_CDP_URL=http://127.0.0.1:9222 \
    BROWSER_CDP_URL=http://127.0.0.1:9222
