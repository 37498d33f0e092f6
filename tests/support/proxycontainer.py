"""The egress proxy as a container on the engine (docs/data-plane.md), set up by hand for a test
or a bench: two networks (internal with no host address, and egress), the runtime image, and
the real proxy started from it with its state sent over stdin. Everything it creates is named
``sbx-dp-*``/``*-<tag>`` and removed by :meth:`DataPlane.close`; it sends traffic only inside
the networks it made."""

from __future__ import annotations

import io
import os
import select
import subprocess
import tarfile
import time
import uuid
from pathlib import Path
from typing import Final

from sbx.domain.egress.ca import CertificateAuthority
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.kits.compose import Network
from sbx.seams.host.runtimepack import RuntimePack, build_context, runtime_pack

HOME: Final = "/run/sbx"  # the proxy's tmpfs: its state home in the container
PORT: Final = 3128
READY_S: Final = 60.0
LOCKED: Final = ("--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")


def docker(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}: {done.stderr.strip()}")
    return done.stdout.strip()


class DataPlane:
    """Networks and containers of one test; :meth:`close` removes all of them."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:10]
        self.internal = f"sbx-dp-in-{self.tag}"
        self.egress = f"sbx-dp-eg-{self.tag}"
        self.containers: list[str] = []
        self.pack: RuntimePack = runtime_pack()
        self.image = ""
        self.proxy: subprocess.Popen[bytes] | None = None
        docker("network", "create", "--internal", "-o",
               "com.docker.network.bridge.inhibit_ipv4=true", self.internal)
        docker("network", "create", self.egress)

    def build_image(self) -> str:
        context = build_context(self.pack)
        done = subprocess.run(["docker", "build", "-q", "-t", self.pack.tag, "-"],
                              input=context, capture_output=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode(errors="replace"))
        self.image = self.pack.tag
        return self.image

    def network_value(self, template: str) -> str:
        return docker("network", "inspect", self.internal, "--format",
                      f"{{{{(index .IPAM.Config 0).{template}}}}}")

    def address(self, container: str, network: str) -> str:
        return docker("inspect", container, "--format",
                      f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}')

    def run_detached(self, name: str, network: str, *argv: str) -> str:
        docker("run", "-d", "--name", name, "--network", network, *LOCKED, self.image, *argv)
        self.containers.append(name)
        return name

    def run(self, network: str, *argv: str, timeout: float = 300) -> str:
        return docker("run", "--rm", "--network", network, *LOCKED, self.image, *argv,
                      timeout=timeout)

    def start_proxy(self, name: str, config: ProxyConfig, token: str, ca_home: Path) -> None:
        """The real proxy in a container on both networks, its state sent over stdin."""
        docker("create", "-i", "--name", name, "--network", self.internal, *LOCKED,
               "--tmpfs", f"{HOME}:rw,mode=0700,uid=65534,gid=65534", self.image,
               "-m", "sbx.proxy.boot", HOME)
        self.containers.append(name)
        docker("network", "connect", self.egress, name)
        self.proxy = subprocess.Popen(["docker", "start", "-ai", name], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proxy.stdin is not None
        self.proxy.stdin.write(state_message(config, token, ca_home))
        self.proxy.stdin.flush()
        line = _first_line(self.proxy)
        if not line.startswith("SBX-PROXY-READY"):
            raise RuntimeError(f"the proxy container did not get ready: {line!r}")

    def read_file(self, container: str, path: str) -> str:
        return docker("exec", container, self.pack.python, "-c",
                      f"print(open({path!r}).read(), end='')")

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.communicate(timeout=30)  # the owner's pipe ends: the proxy stops
        for name in self.containers:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60,
                           check=False)
        for network in (self.internal, self.egress):
            subprocess.run(["docker", "network", "rm", network], capture_output=True,
                           timeout=60, check=False)


def proxy_config(network: Network, subnet: str, *, upstream: str | None = None,
                 ) -> ProxyConfig:
    state = Path(HOME, "state")
    return ProxyConfig(
        run_id=f"run-{uuid.uuid4().hex[:8]}", state_home=state,
        audit_log=state / "audit.jsonl", network=network,
        listen_host="0.0.0.0", listen_port=PORT, peer_network=subnet,  # noqa: S104
        upstream_proxy=upstream, request_log=state / "requests.jsonl")


def state_message(config: ProxyConfig, token: str, ca_home: Path) -> bytes:
    """What the proxy would read from a state home (its config and the CA) as the boot's
    length-prefixed tar, then the owner pipe's first line."""
    CertificateAuthority.load_or_create(ca_home)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(ca_home, arcname="state")
        body = config.to_json().encode()
        info = tarfile.TarInfo("proxy.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    state = buffer.getvalue()
    return f"{len(state)}\n".encode() + state + f"{token}\n".encode()


def _first_line(proxy: subprocess.Popen[bytes]) -> str:
    assert proxy.stdout is not None
    deadline = time.monotonic() + READY_S
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([proxy.stdout], [], [], 1.0)
        if ready:
            byte = os.read(proxy.stdout.fileno(), 1)  # unbuffered: select sees the rest
            if not byte:
                break
            line += byte
    return line.decode(errors="replace")


__all__ = ["HOME", "LOCKED", "PORT", "DataPlane", "docker", "proxy_config", "state_message"]
