#!/usr/bin/env bash
# Builds the local base images sbx's examples and tests use. Nothing comes from Docker Hub:
# every image is made here from Debian packages. Images are kept by tag and rebuilt only when
# missing (pass --force to rebuild).
set -euo pipefail

BUSYBOX_TAG="sbx-test/busybox:1"
BOOKWORM_TAG="sbx-base/bookworm:1"
# The base of the agent kits (examples/agents): what a coding agent expects to find on a
# developer's machine, from Debian packages. No Node here: bookworm's nodejs is 18, older than
# Gemini CLI needs; that kit brings an npm-published Node (see examples/agents/README.md).
AGENT_TAG="sbx-base/agent:1"
AGENT_PACKAGES="bash,python3,curl,ca-certificates,git,ripgrep,procps,less,jq,openssh-client,xz-utils,unzip,patch,diffutils,file"
# The browser mixin's overlay (examples/browser): Debian's Chromium with its libraries, fonts and
# NSS tools, and the observer's Xvfb, x11vnc and noVNC; only the paths the agent base lacks, so
# the overlay adds files and never replaces one of the workload's (sbx refuses collisions).
BROWSER_TAG="sbx-base/browser-overlay:1"
# debootstrap resolves no virtual package: dbus-x11 and python3-cffi-backend provide the two
# that dconf-service and python3-cryptography (under websockify) depend on.
BROWSER_PACKAGES="chromium,fonts-liberation,libnss3-tools,xvfb,x11vnc,novnc,python3-websockify,xauth,dbus-x11,python3-cffi-backend"
force=0
[ "${1:-}" = "--force" ] && force=1

have_image() { [ "$force" = 0 ] && docker image inspect "$1" >/dev/null 2>&1; }

# The Debian mirror is read from this machine's own package sources at run time, never written
# into the repository.
debian_mirror() {
  local uri=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $2 !~ /security/ && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || { echo "build-images: no Debian mirror found in /etc/apt sources" >&2; exit 1; }
  printf '%s\n' "$uri"
}

build_busybox() {
  have_image "$BUSYBOX_TAG" && return 0
  local dir
  dir=$(mktemp -d)
  mkdir -p "$dir/bin" "$dir/etc" "$dir/tmp" "$dir/home/agent"
  cp /bin/busybox "$dir/bin/busybox"
  for applet in $("$dir/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$dir/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n' > "$dir/etc/passwd"
  printf 'root:x:0:\nagent:x:1000:\n' > "$dir/etc/group"
  chmod 1777 "$dir/tmp"
  chown 1000:1000 "$dir/home/agent"
  tar -C "$dir" -c . | docker import \
    --change 'ENV PATH=/bin' --change 'CMD ["/bin/sh"]' - "$BUSYBOX_TAG" >/dev/null
  rm -rf "$dir"
  echo "build-images: built $BUSYBOX_TAG"
}

build_bookworm() {
  have_image "$BOOKWORM_TAG" && return 0
  local dir mirror
  mirror=$(debian_mirror)
  dir=$(mktemp -d)
  echo "build-images: debootstrap bookworm (about a minute)..."
  debootstrap --variant=minbase --include=bash,python3,curl,ca-certificates,git \
    bookworm "$dir" "$mirror" >/tmp/sbx-debootstrap.log 2>&1 \
    || { tail -20 /tmp/sbx-debootstrap.log >&2; exit 1; }
  chroot "$dir" useradd --create-home --uid 1000 --user-group --shell /bin/bash agent
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$BOOKWORM_TAG" >/dev/null
  rm -rf "$dir"
  echo "build-images: built $BOOKWORM_TAG"
}

build_agent() {
  have_image "$AGENT_TAG" && return 0
  local dir mirror
  mirror=$(debian_mirror)
  dir=$(mktemp -d)
  echo "build-images: debootstrap the agent base (a minute or two)..."
  debootstrap --variant=minbase --include="$AGENT_PACKAGES" \
    bookworm "$dir" "$mirror" >/tmp/sbx-debootstrap-agent.log 2>&1 \
    || { tail -20 /tmp/sbx-debootstrap-agent.log >&2; exit 1; }
  chroot "$dir" useradd --create-home --uid 1000 --user-group --shell /bin/bash agent
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' - "$AGENT_TAG" >/dev/null
  rm -rf "$dir"
  echo "build-images: built $AGENT_TAG"
}

build_browser() {
  have_image "$BROWSER_TAG" && return 0
  local dir mirror base
  mirror=$(debian_mirror)
  dir=$(mktemp -d)
  base=$(mktemp)
  echo "build-images: debootstrap the browser overlay (Chromium: a few minutes)..."
  debootstrap --variant=minbase --include="$AGENT_PACKAGES,$BROWSER_PACKAGES" \
    bookworm "$dir" "$mirror" >/tmp/sbx-debootstrap-browser.log 2>&1 \
    || { tail -20 /tmp/sbx-debootstrap-browser.log >&2; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/var/log/* \
    "$dir"/usr/share/doc "$dir"/usr/share/man "$dir"/usr/share/info
  # Every path of the agent base (what the overlay must not provide again).
  local cid
  cid=$(docker create "$AGENT_TAG" /bin/true)
  docker export "$cid" | tar -t | sed 's#^\./##; s#/$##' | sort -u > "$base"
  docker rm "$cid" >/dev/null
  python3 - "$dir" "$base" <<'EOF'
import os, sys
root, listing = sys.argv[1], sys.argv[2]
present = set(open(listing, encoding="utf-8", errors="surrogateescape").read().splitlines())
for top, dirs, files in os.walk(root, topdown=False):
    for name in files:
        path = os.path.join(top, name)
        if os.path.relpath(path, root) in present:
            os.unlink(path)
    for name in dirs:
        path = os.path.join(top, name)
        rel = os.path.relpath(path, root)
        if os.path.islink(path):
            if rel in present:
                os.unlink(path)
        elif not os.listdir(path):
            os.rmdir(path)
EOF
  rm -f "$base"
  tar -C "$dir" -c . | docker import --change 'CMD ["/bin/true"]' - "$BROWSER_TAG" >/dev/null
  rm -rf "$dir"
  echo "build-images: built $BROWSER_TAG"
}

build_busybox
build_bookworm
build_agent
build_browser
