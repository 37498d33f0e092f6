#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh Debian machine, as root: the Docker engine and the
# tools the examples and tests use, a running dockerd, the Python environment, and the locally
# built base images. Safe to run again: every step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
[ -x /bin/busybox ] || need_pkgs+=(busybox-static)
command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap)
command -v iptables >/dev/null 2>&1 || need_pkgs+=(iptables)
# Shells and groff let the completion and man-page tests run instead of skipping.
command -v zsh >/dev/null 2>&1 || need_pkgs+=(zsh)
command -v fish >/dev/null 2>&1 || need_pkgs+=(fish)
command -v groff >/dev/null 2>&1 || need_pkgs+=(groff-base)
# `man` reads the page the wheel installs (tests/acceptance/test_wheel_install.py).
command -v man >/dev/null 2>&1 || need_pkgs+=(man-db)
# Interactive sessions are tested as a person uses them: in a real terminal (tmux), and as a
# host user who is neither root nor uid 1000 (run with setpriv from util-linux).
command -v tmux >/dev/null 2>&1 || need_pkgs+=(tmux)
command -v setpriv >/dev/null 2>&1 || need_pkgs+=(util-linux)
[ -x /usr/bin/python3 ] || need_pkgs+=(python3)
# The agent kits' releases (examples/agents) are npm packages, packed on the host with npm (the
# host reaches the npm registry; containers and kit builds do not).
command -v npm >/dev/null 2>&1 || need_pkgs+=(npm)
# A real OCI registry for the `sbx pull` / `sbx kit push` tests (started per test on loopback).
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] \
  || need_pkgs+=(docker-registry)
# The second engine host of the remote-engine tests is reached over ssh (its own sshd in a
# network namespace, started per test session): the server binary, never the service.
[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need_pkgs+=(openssh-client)
# A second OCI runtime, registered with the second engine host of the `--runtime` tests.
[ -x /usr/bin/crun ] || need_pkgs+=(crun)
# Podman's Docker-compatible service, which sbx refuses by name (tests/integration/test_podman.py).
command -v podman >/dev/null 2>&1 || need_pkgs+=(podman)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  # Installing openssh-server must not start a machine-wide sshd: no service starts here.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! timeout 10 docker version >/dev/null 2>&1; then
  log "starting dockerd"
  setsid nohup dockerd >/var/log/sbx-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    timeout 5 docker version >/dev/null 2>&1 && break
    sleep 1
  done
  timeout 10 docker version >/dev/null 2>&1 || {
    log "dockerd did not answer within 60 s; its log:"; tail -30 /var/log/sbx-dockerd.log >&2; exit 1; }
fi

# The non-root host user of the ownership tests: in the docker group, uid 4321 (not 1000, the
# usual image user, so a test can tell the two apart).
if ! id -u sbx-tester >/dev/null 2>&1; then
  log "creating the test user sbx-tester (uid 4321, group docker)"
  useradd --uid 4321 --user-group --groups docker --create-home --shell /bin/bash sbx-tester
fi

# The pull tests push to and pull from 127.0.0.1:<port> over plain HTTP; dockerd treats
# 127.0.0.0/8 registries as insecure by default. Say so loudly if a daemon.json changed that.
if ! timeout 10 docker info --format '{{json .RegistryConfig.InsecureRegistryCIDRs}}' 2>/dev/null \
    | grep -q '127.0.0.0/8'; then
  log "warning: dockerd does not treat 127.0.0.0/8 registries as insecure; the pull tests will fail"
fi

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
# The distribution was called `sbx` before it became sbx-sandbox (the PyPI name `sbx` is
# taken): an old editable install of it would shadow the new one's console script.
if .venv/bin/python -m pip show -q sbx >/dev/null 2>&1; then
  log "removing the old 'sbx' distribution from .venv (now sbx-sandbox)"
  .venv/bin/python -m pip uninstall -q -y sbx
  rm -f .venv/.sbx-installed
fi
if ! .venv/bin/python -c 'import sbx, pytest, hypothesis, mypy, hatchling, pipx, importlinter, pytest_cov, xdist, mcp, acp' >/dev/null 2>&1 \
    || [ pyproject.toml -nt .venv/.sbx-installed ]; then
  log "installing sbx and its development tools into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
  touch .venv/.sbx-installed
fi
# The runtime dependencies as wheels, pinned to what .venv has: the packaging test installs
# the built wheel with pipx from here, offline (a no-op when already filled).
.venv/bin/python scripts/wheelhouse.py .venv/sbx-wheelhouse

bash scripts/build-images.sh

# Stage the agent kits' pinned npm packages for `--arg source=staged` builds (the agent tests
# build them that way). Downloads are cached outside the repository ($SBX_AGENT_CACHE, else
# ~/.cache/sbx/agents), so a second run only checks what is there.
log "staging the agent kits' npm packages"
.venv/bin/python scripts/stage_agents.py
