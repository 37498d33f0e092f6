# The observer switch: with this file, sbx-browser (examples/browser) draws Chromium on a virtual
# display and serves it through x11vnc and noVNC behind a one-time token.
FROM scratch
COPY observer /etc/sbx-browser/observer
