"""The egress proxy as a container beside its sandbox (docs/data-plane.md): its locked-down
shape, the config it is given there, and the state it reads from its stdin.

It runs the runtime image as nobody, read-only, without capabilities, on the sandbox's
internal network (whose bridge gives the engine's host no address) and on an egress network
of its own. Its config, CA and policy arrive as a tar on its stdin, unpacked into a tmpfs
(:mod:`sbx.proxy.boot`): nothing of them is in its environment, labels, argv, image or on the
engine's disk. Its records come back as lines on its stdout (:mod:`sbx.domain.egress.proxystream`).
"""

from __future__ import annotations

import dataclasses
import io
import tarfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Final

from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.seams.containerspec import NO_ENGINE_LOG, ContainerSpec

HOME: Final = Path("/run/sbx")  # the proxy's tmpfs: its state home there
PORT: Final = 3128
PROGRAM_USER: Final = "65534:65534"
MEMORY_BYTES: Final = 256 * 1024 * 1024
PIDS_LIMIT: Final = 128
NANO_CPUS: Final = 1_000_000_000
TMPFS_BYTES: Final = 64 * 1024 * 1024
UPSTREAM_CA: Final = "upstream-ca.pem"
POLICY: Final = "policy.json"


def container_name(run_id: str) -> str:
    return f"sbx-proxy-{run_id}"


def egress_network_name(home_hash: str) -> str:
    """One per state home and engine, shared by its runs' proxies."""
    return f"sbx-egress-{home_hash[:16]}"


def proxy_spec(image: str, *, run_id: str, network: str, labels: Mapping[str, str],
               runtime: str | None) -> ContainerSpec:
    """The proxy container: the same locks as a sandbox, its state in memory only."""
    return ContainerSpec(
        image=image, user=PROGRAM_USER, working_dir="/",
        command=("-m", "sbx.proxy.boot", str(HOME)), entrypoint=None, env={},
        labels=dict(labels), memory_bytes=MEMORY_BYTES, memory_swap_bytes=MEMORY_BYTES,
        pids_limit=PIDS_LIMIT, nano_cpus=NANO_CPUS,
        tmpfs={str(HOME): f"rw,nosuid,nodev,noexec,size={TMPFS_BYTES},mode=0700,"
                          "uid=65534,gid=65534"},
        network_mode=network, stdin_open=True, stdin_once=True,
        log_driver=NO_ENGINE_LOG[0], log_options=NO_ENGINE_LOG[1],
        name=container_name(run_id), runtime=runtime,
        # On two networks, it must never route between them: only its listening port joins them.
        sysctls={"net.ipv4.ip_forward": "0", "net.ipv4.conf.all.forwarding": "0"})


def in_container(config: ProxyConfig, *, peer_network: str, upstream_ca: bool,
                 ) -> ProxyConfig:
    """``config`` as the proxy sees it inside its container: every path under its tmpfs, its
    records streamed, no relay or store of this host's."""
    state = HOME / "state"
    return dataclasses.replace(
        config, state_home=state, audit_log=state / "audit.jsonl",
        listen_host="0.0.0.0", listen_port=PORT, peer_network=peer_network,  # noqa: S104
        upstream_ca_file=HOME / UPSTREAM_CA if upstream_ca else None,
        phase_file=None, login_dir=None, request_log=None,
        user_policy=None if config.user_policy is None else state / POLICY,
        ssh_agent=None, kit_registry=None, stream_records=True)


def state_message(config: ProxyConfig, files: Mapping[str, bytes], owner_line: bytes) -> bytes:
    """What the proxy reads on stdin (:mod:`sbx.proxy.boot`): the state's length, the state
    as a tar (``proxy.json`` and ``files``, each by its path under the tmpfs, private), then
    the owner pipe's first line."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for name, data in (("proxy.json", config.to_json().encode("utf-8")), *files.items()):
            parts = PurePosixPath(name).parts
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in made:
                    made.add(directory)
                    entry = tarfile.TarInfo(directory)
                    entry.type = tarfile.DIRTYPE
                    entry.mode = 0o700
                    tar.addfile(entry)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
    state = buffer.getvalue()
    return f"{len(state)}\n".encode("ascii") + state + owner_line


__all__ = ["HOME", "PORT", "POLICY", "UPSTREAM_CA", "container_name", "egress_network_name",
           "in_container", "proxy_spec", "state_message"]
