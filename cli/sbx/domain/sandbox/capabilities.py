"""What the selected capabilities do to a sandbox: limits, storage, files, hooks, profiles.

Each type's handler (sbx.domain.kits.captypes) says what it asks of the sandbox; the planner
here records those requests within the hardened shape and the configured limits, in the
handlers' plan order, into one :class:`CapabilityPlan`. Network policy and credentials are
enforced at the egress proxy (sbx.domain.egress) and bound by sbx.domain.sandbox.binding.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits import captypes
from sbx.domain.kits.captypes.agent_context import (
    DEFAULT_PROFILE,
    GUIDANCE,
    context_body,
    kit_index,
)
from sbx.domain.kits.captypes.volume import DEFAULT_TMPFS_BYTES
from sbx.domain.kits.compose import Composition
from sbx.domain.kits.localkit import LocalKit
from sbx.domain.kits.selection import SelectionRecord
from sbx.domain.sandbox.hardening import Limits
from sbx.domain.sandbox.lifecycle import KitFile, LifecyclePlan
from sbx.domain.sandbox.publish import PublishSpec

# The capability types this sbx implements; every other type is refused by name when required
# and skipped-and-recorded when optional.
SUPPORTED: Final[frozenset[str]] = captypes.SUPPORTED
DEFAULT_VOLUME_TMPFS_BYTES: Final = DEFAULT_TMPFS_BYTES
# The profile's parts, as tests and the README know them (sbx.domain.kits.captypes.agent_context).
_context_body = context_body
_kit_index = kit_index


@dataclass(frozen=True)
class NamedVolume:
    path: str
    mode: int | None
    size: int | None  # a size-capped file system of its own (sbx.usecases.sized_volumes) when set


@dataclass(frozen=True)
class PlannedHostMount:
    path: str  # in the sandbox
    mode: int | None  # applied when the directory is made
    kit: str  # the declaring kit's identity (the storage key, with the path)


@dataclass(frozen=True)
class CapabilityPlan:
    limits: Limits
    privileged: bool = False
    tmpfs: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)  # path → size,mode
    volumes: tuple[NamedVolume, ...] = ()
    lifecycle: LifecyclePlan = field(default_factory=LifecyclePlan)
    ports: tuple[int, ...] = ()  # TCP container ports to publish on 127.0.0.1
    env: Mapping[str, str] = field(default_factory=dict)  # the sandbox's, hooks' included
    port_names: Mapping[int, str] = field(default_factory=dict)  # port@1 `name`s, by port
    published: tuple[PublishSpec, ...] = ()  # -p/--publish (sbx.domain.sandbox.publish)
    # ssh-agent@1 per phase: (phase, unrestricted, SSHSIG namespaces a bounded grant signs,
    # the login destinations it allows)
    ssh_agent: tuple[tuple[str, bool, tuple[str, ...], tuple[str, ...]], ...] = ()
    kit_registry: bool = False  # kit-registry@1: the proxy answers the kit registry
    host_mounts: tuple[PlannedHostMount, ...] = ()
    skills_paths: tuple[str, ...] = ()  # agent-skills@1: where the host's store is shown
    # agent-skill@1 destinations: there the store is linked from SKILLS_STAGING, not mounted
    bundle_paths: tuple[str, ...] = ()
    skipped: tuple[SelectionRecord, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def needs_create_step(self) -> bool:
        return self.lifecycle.needs_create_step or bool(self.volumes)


@dataclass
class _Planner:
    """The sandbox side of :class:`sbx.domain.kits.captypes.base.SandboxPlanner`."""

    limits: Limits
    allow_privileged: bool
    workspace_target: str
    volume_sizes_enforced: bool
    kits: Mapping[str, LocalKit]
    host_git_identity: Callable[[], tuple[str, str] | None]
    host_agent_missing: Callable[[], str | None]
    named: bool | None = None
    privileged: bool = False
    tmpfs: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    volumes: list[NamedVolume] = field(default_factory=list)
    files: list[KitFile] = field(default_factory=list)
    install: tuple[Any, ...] = ()
    startup: tuple[Any, ...] = ()
    ports: list[int] = field(default_factory=list)
    skipped: list[SelectionRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ssh_agent: tuple[tuple[str, bool, tuple[str, ...], tuple[str, ...]], ...] = ()
    kit_registry: bool = False
    host_mounts: list[PlannedHostMount] = field(default_factory=list)
    skills_paths: list[str] = field(default_factory=list)
    bundle_paths: list[str] = field(default_factory=list)

    def set_limits(self, *, memory_bytes: int, cpu_millis: int) -> None:
        self.limits = dataclasses.replace(self.limits, memory_bytes=memory_bytes,
                                          cpu_millis=cpu_millis)

    def set_privileged(self) -> None:
        self.privileged = True

    def add_tmpfs(self, path: str, size: int, mode: int | None) -> None:
        # One path holds one mount: a second one planned there would silently replace the
        # first (its size, mode and memory budget), so it is refused by name instead.
        if self.mount_at(path):
            raise SbxError(Reason.KIT_INCOHERENT,
                           f"two capabilities of the selected kits mount at {path}",
                           hint=REGISTRY[Reason.KIT_INCOHERENT].fix, details={"path": path})
        self.tmpfs[path] = (size, mode)

    def mount_at(self, path: str) -> bool:
        """Whether a kit's tmpfs, volume@1 or host-mount@1 is already planned at ``path``."""
        clean = posixpath.normpath(path)
        return any(posixpath.normpath(p) == clean for p in (
            *self.tmpfs, *(v.path for v in self.volumes), *(m.path for m in self.host_mounts)))

    def add_volume(self, path: str, mode: int | None, size: int | None) -> None:
        self.volumes.append(NamedVolume(path, mode, size))

    def add_file(self, *, kit: str, where: str, path: str, content: str, mode: int | None,
                 overwrite: bool = True) -> None:
        self.files.append(KitFile(kit=kit, where=where, path=path, content=content, mode=mode,
                                  overwrite=overwrite))

    def add_port(self, port: int) -> None:
        self.ports.append(port)

    def add_hooks(self, install: Sequence[Any], startup: Sequence[Any]) -> None:
        self.install = (*self.install, *install)
        self.startup = (*self.startup, *startup)

    def add_env(self, name: str, value: str) -> None:
        self.env[name] = value

    def git_identity(self) -> tuple[str, str] | None:
        return self.host_git_identity()

    def add_host_mount(self, path: str, mode: int | None, kit: str) -> None:
        self.host_mounts.append(PlannedHostMount(path, mode, kit))

    def add_skills_destination(self, path: str) -> None:
        self.skills_paths.append(path)

    def add_bundle_destination(self, path: str) -> None:
        if path not in self.bundle_paths:
            self.bundle_paths.append(path)

    def ssh_agent_missing(self) -> str | None:
        return self.host_agent_missing()

    def add_ssh_agent(
            self, grants: Sequence[tuple[str, bool, tuple[str, ...], tuple[str, ...]]]) -> None:
        self.ssh_agent = tuple(grants)

    def add_kit_registry(self) -> None:
        self.kit_registry = True

    def skip(self, record: SelectionRecord) -> None:
        self.skipped.append(record)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def plan(self) -> CapabilityPlan:
        return CapabilityPlan(
            limits=self.limits, privileged=self.privileged, tmpfs=dict(self.tmpfs),
            volumes=tuple(self.volumes),
            lifecycle=LifecyclePlan(install=self.install, startup=self.startup,
                                    files=tuple(self.files)),
            ports=tuple(sorted(set(self.ports))), skipped=tuple(self.skipped),
            notes=tuple(self.notes), env=dict(self.env), ssh_agent=self.ssh_agent,
            kit_registry=self.kit_registry,
            host_mounts=tuple(self.host_mounts), skills_paths=tuple(self.skills_paths),
            bundle_paths=tuple(self.bundle_paths))


def plan_capabilities(composition: Composition, *, limits: Limits, allow_privileged: bool,
                      workspace_target: str, kits: Mapping[str, LocalKit],
                      volume_sizes_enforced: bool = False,
                      git_identity: Callable[[], tuple[str, str] | None] = lambda: None,
                      ssh_agent_missing: Callable[[], str | None] = lambda: "no host agent",
                      named: bool | None = None) -> CapabilityPlan:
    """``volume_sizes_enforced``: whether sbx can give a sized ``volume@1`` a file system of
    that size (it needs root); when it cannot, such a volume is refused (skipped if optional)
    rather than left unbounded. ``git_identity`` reads the host's (only when a kit asks);
    ``ssh_agent_missing`` says why the host has no SSH agent to relay (None: it has one);
    ``named``: whether the sandbox outlives its session (None: not known, nothing is run)."""
    planner = _Planner(limits=limits, allow_privileged=allow_privileged,
                       workspace_target=workspace_target,
                       volume_sizes_enforced=volume_sizes_enforced, kits=kits,
                       host_git_identity=git_identity, host_agent_missing=ssh_agent_missing,
                       named=named)
    for handler in captypes.PLAN_ORDER:
        handler.plan(composition, planner)
    plan = planner.plan()
    return dataclasses.replace(plan, port_names={
        p.container: p.name for p in composition.ports if p.name and p.container in plan.ports})


__all__ = ["DEFAULT_PROFILE", "GUIDANCE", "SUPPORTED", "CapabilityPlan", "NamedVolume",
           "PlannedHostMount",
           "plan_capabilities"]
