"""What the kits mount from the host: host-mount@1 directories, the host's skills store
(agent-skills@1) and the SSH agent relay's socket directory (ssh-agent@1).

Host directories are judged by the mount policy and admitted like any host path; the relay's
directory is the run's own, holding the socket the proxy process serves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sbx.base import paths
from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits.types import SKILLS_STAGING, SSH_AGENT_DIR
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.admission import Admission, HostPath
from sbx.domain.sandbox.hardening import BindMount
from sbx.domain.sandbox.hostmounts import HostMountStore
from sbx.seams.host.agent import host_agent
from sbx.usecases.context import AppContext

if TYPE_CHECKING:
    from sbx.domain.egress.sshagent import RelayConfig
    from sbx.domain.sandbox.capabilities import CapabilityPlan

RELAY_DIR: Final = "ssh-agent"  # the SSH agent relay's socket directory in the run directory


def kit_host_mounts(ctx: AppContext, capabilities: CapabilityPlan, taken: Sequence[str],
                    ) -> tuple[list[HostPath], set[str]]:
    """The kits' host-mount@1 directories (made when new) and the host's skills store, to be
    judged by the mount policy and mounted like any host path; and the directories made now."""
    out: list[HostPath] = []
    store_dir = paths.skills_home(ctx.env)
    if capabilities.skills_paths and _non_empty_directory(store_dir):
        # The host's skills store, read-only (sbx's host setting), judged like any mount.
        out += [HostPath(str(store_dir), path, True) for path in capabilities.skills_paths
                if path not in taken and path not in capabilities.bundle_paths]
        if capabilities.bundle_paths:
            # Linked from here into each destination that also takes bundled skills.
            out.append(HostPath(str(store_dir), SKILLS_STAGING, True))
    if not capabilities.host_mounts:
        return out, set()
    store = HostMountStore(paths.host_mounts_home(ctx.env))
    made: set[str] = set()
    for mount in capabilities.host_mounts:
        if mount.path in taken:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"host-mount@1 {mount.path} is also the target of the workspace or "
                           "a --mount; one path holds one mount",
                           hint="Mount the workspace or that --mount somewhere else.")
        directory, new = store.ensure(mount.kit, mount.path, mount.mode)
        out.append(HostPath(str(directory), mount.path, False))
        if new:
            made.add(os.path.realpath(directory))
    return out, made


def own_made_mounts(admission: Admission, made: set[str]) -> None:
    """A host-mount@1 directory made for this run belongs to the sandbox user (as root: the
    opened directory itself, so what is chowned is what is mounted)."""
    if not made or os.geteuid() != 0:
        return
    # deferred: the mount helpers load subprocess; as root, for made mounts only
    from sbx.seams.host.mounts import chown_descriptor

    user = admission.user
    for pin in admission.mounts.pins:
        if pin.source.path in made:
            chown_descriptor(pin.source.fd, user.uid, user.gid)


def kit_mount_targets(capabilities: CapabilityPlan | None) -> set[str]:
    """Where the kits' host directories are mounted (the install step mounts them too)."""
    if capabilities is None:
        return set()
    return ({m.path for m in capabilities.host_mounts} | set(capabilities.skills_paths)
            | ({SKILLS_STAGING} if capabilities.bundle_paths else set()))


def relay_binds(ctx: AppContext, run_id: str, capabilities: CapabilityPlan,
                phase: str | None = None) -> list[BindMount]:
    """The SSH agent relay's directory, read-only (its socket is the proxy process's); for
    the install step only when the install phase is granted."""
    if not capabilities.ssh_agent or (
            phase is not None and all(g[0] != phase for g in capabilities.ssh_agent)):
        return []
    return [BindMount(str(runrecord.run_dir(ctx.state_home, run_id) / RELAY_DIR), SSH_AGENT_DIR,
                      True)]


def relay_config(ctx: AppContext, run_dir: Path,
                 capabilities: CapabilityPlan) -> RelayConfig | None:
    """The SSH agent relay the proxy process serves, on the host agent as it is now."""
    if not capabilities.ssh_agent:
        return None
    # deferred: the relay's protocol and the kits' grants, for ssh-agent@1 runs only
    from sbx.domain.egress.sshagent import RelayConfig, grants_of, known_hosts_files

    upstream, why = host_agent(ctx.env)
    if upstream is None:
        raise SbxError(Reason.SSH_AGENT_MISSING,
                       f"the host's SSH agent went away before the sandbox started: {why}",
                       hint=REGISTRY[Reason.SSH_AGENT_MISSING].fix)
    socket_dir = run_dir / RELAY_DIR
    socket_dir.mkdir(mode=0o755, exist_ok=True)
    socket_dir.chmod(0o755)  # the sandbox's user must reach the socket inside
    return RelayConfig(socket_dir, upstream, grants_of(capabilities.ssh_agent),
                       known_hosts_files(ctx.env.get("HOME")))


def _non_empty_directory(path: Path) -> bool:
    try:
        with os.scandir(path) as entries:
            return any(True for _ in entries)
    except OSError:
        return False  # missing or unreadable: no host content, never a refusal


__all__ = ["RELAY_DIR", "kit_host_mounts", "kit_mount_targets", "own_made_mounts",
           "relay_binds", "relay_config"]
