"""What a start may mount and pass: one decision for every way into a sandbox.

A one-shot run, the creation of a named sandbox, its later starts, ``sbx attach`` and
``sbx exec`` all come through :func:`admit`, so a check the first start makes is made by every
one of them: each host path through the mount policy (:func:`sbx.domain.sandbox.mounts.
check_source`) and opened without following a link (what was checked is what is mounted),
each mounted directory scanned for sockets (a socket created while a named sandbox was stopped,
an ssh ControlMaster say, is refused at its next start like at its first), what git and other
host tools execute in every writable directory pinned read-only with a baseline for the check
after the run (:func:`sbx.domain.sandbox.workspace_trust.protect`), and the kit files and
config file under them pinned read-only (:func:`sbx.domain.sandbox.kitpins.kit_pins`) — at
creation; later starts re-open the recorded pins —
the ``-e``/``--env-file`` variables by the same rules (a credential's sentinel variable is not
the user's to set, in ``exec`` as in ``run``), and the user (never uid or gid 0).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.envflags import parse_env
from sbx.domain.sandbox.identity import WorkspaceOwner
from sbx.domain.sandbox.images import SandboxUser
from sbx.domain.sandbox.kitpins import KitFiles, kit_pins
from sbx.domain.sandbox.mountpolicy import MountPolicy
from sbx.domain.sandbox.mountrules import SOCKET
from sbx.domain.sandbox.mounts import check_source
from sbx.domain.sandbox.sources import (
    SOCKET_SCAN_ENTRIES,
    SOCKET_SCAN_SECONDS,
    OpenedSource,
    Pin,
    open_checked,
    sockets_inside,
)
from sbx.domain.sandbox.workspace_trust import Baseline, protect


@dataclass
class HostMounts:
    """Every host path a run mounts, opened: the workspace first, then ``--mount``s, then the
    workspace-trust pins. Owned by the run, closed when it ends."""

    pins: list[Pin] = field(default_factory=list)
    workspace: OpenedSource | None = None
    notes: list[str] = field(default_factory=list)  # warnings for the user
    # what each writable directory held before the run, for the check after it
    baselines: list[Baseline] = field(default_factory=list)

    def close(self) -> None:
        for pin in self.pins:
            pin.source.close()


@dataclass(frozen=True)
class HostPath:
    """A host path a start mounts. ``judged`` is False only for a pin below the workspace
    (its ``.git/config``, say), which the policy judged together with the workspace."""

    path: str
    target: str
    read_only: bool
    judged: bool = True


@dataclass(frozen=True)
class StartRequest:
    """What a start asks for. With ``workspace``, ``paths[0]`` is the workspace (it must be a
    directory); with ``protect`` (a first start), every writable directory is protected
    (pinned unless ``trust``, and given a baseline), and ``kits``' files and ``config_file``
    below one are pinned read-only."""

    paths: tuple[HostPath, ...] = ()
    workspace: bool = False
    protect: bool = False
    trust: bool = False
    kits: tuple[KitFiles, ...] = ()
    config_file: Path | None = None
    env: tuple[str, ...] = ()
    env_files: tuple[str, ...] = ()
    credential_names: frozenset[str] = frozenset()


@dataclass
class Admission:
    """What a start was allowed: the opened host paths (closed by the caller when the start
    is over), the workload's variables and the user."""

    mounts: HostMounts
    env: dict[str, str]
    user: SandboxUser
    owner: WorkspaceOwner | None
    user_notes: tuple[str, ...] = ()

    def close(self) -> None:
        self.mounts.close()


# (the user, warnings about the choice), or None: the caller must plan again.
UserChoice = Callable[[WorkspaceOwner | None], tuple[SandboxUser, tuple[str, ...]] | None]


def admit(start: StartRequest, policy: MountPolicy, *, host_env: Mapping[str, str], cwd: Path,
          user: UserChoice) -> Admission | None:
    """Decide a start; raise the refusal (``mount_blocked``, ``invalid_argument``,
    ``root_user``...) of the first thing it may not have, or return None when ``user`` says
    the start must be planned again. Nothing is left open on either way out."""
    mounts = open_host_paths(start, policy, env=host_env)
    try:
        workspace = mounts.workspace
        owner = WorkspaceOwner.of_opened(workspace) if workspace is not None else None
        chosen = user(owner)
        if chosen is None:
            mounts.close()
            return None
        sandbox_user, notes = chosen
        refuse_root(sandbox_user)
        variables = parse_env(start.env, start.env_files, host_env=host_env, cwd=cwd,
                              credential_names=start.credential_names)
    except BaseException:
        mounts.close()
        raise
    return Admission(mounts=mounts, env=variables, user=sandbox_user, owner=owner,
                     user_notes=notes)


def open_host_paths(start: StartRequest, policy: MountPolicy, *,
                    env: Mapping[str, str]) -> HostMounts:
    """Judge, open and scan every host path of ``start``; the workspace first."""
    mounts = HostMounts()
    try:
        for index, host in enumerate(start.paths):
            path = str(check_source(policy, host.path)) if host.judged else host.path
            source = open_checked(path)
            mounts.pins.append(Pin(source, host.target, host.read_only))
            if index == 0 and start.workspace:
                mounts.workspace = source
                if not source.is_dir:
                    raise SbxError(Reason.INVALID_ARGUMENT,
                                   f"workspace {host.path} is not a directory")
        for pin, host in zip(list(mounts.pins), start.paths, strict=True):
            if host.judged:  # a pin below the workspace was scanned with it
                refuse_sockets(pin.source, mounts.notes)
        if start.protect:
            primary = list(mounts.pins)  # the workspace and the --mounts
            for pin in primary:
                if not pin.read_only and pin.source.is_dir:
                    protection = protect(pin.source, pin.target, trust=start.trust, env=env)
                    mounts.pins += protection.pins
                    mounts.notes += protection.notes
                    mounts.baselines.append(protection.baseline)
            if start.kits or start.config_file is not None:
                files = [str(start.config_file)] if start.config_file is not None else []
                mounts.pins += kit_pins(start.kits, [p for p in primary if not p.read_only],
                                        files)
    except BaseException:
        mounts.close()
        raise
    return mounts


def refuse_sockets(source: OpenedSource, notes: list[str]) -> None:
    """No socket below a mounted directory: each is a door to whatever listens on it."""
    found, complete = sockets_inside(source)
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise MountBlocked(
            f"mount source {source.path} contains sockets: {shown} (rule {SOCKET})",
            rule=SOCKET, path=source.path,
            hint="Move the sockets out of the directory (or stop what listens there), or mount "
                 "a narrower directory.")
    if not complete:
        notes.append(f"{source.path} is too large to check for sockets in full "
                     f"(stopped after {SOCKET_SCAN_ENTRIES} entries or "
                     f"{SOCKET_SCAN_SECONDS:g} s); sockets deeper down were not looked for")


def refuse_root(user: SandboxUser) -> None:
    if user.uid == 0 or user.gid == 0:
        raise SbxError(Reason.ROOT_USER,
                       f"the sandbox would run as {user.uid}:{user.gid} ({user.source})",
                       hint="Pass --user with a non-zero uid and gid.")


def recorded_user(text: str, source: str) -> SandboxUser:
    """The ``uid:gid`` a sandbox was created with (its record), refused when it is not one."""
    uid, sep, gid = text.partition(":")
    if not sep or not uid.isdigit() or not gid.isdigit():
        raise SbxError(Reason.STATE_CORRUPT, f"{source} names no user ({text!r})",
                       hint="Remove the sandbox (`sbx rm -f NAME`) and create it again.")
    return SandboxUser(int(uid), int(gid), source)


def recorded_paths(pins: Sequence[Mapping[str, object]],
                   workspace: str | None) -> tuple[HostPath, ...]:
    """The host paths a named sandbox was created with, as its record lists them: the
    workspace (when it has one) first, then the ``--mount``s, then the pins below the
    workspace, which the policy judges with it."""
    paths = []
    for index, pin in enumerate(pins):
        path = str(pin["path"])
        below = index > 0 and _inside(path, workspace)
        paths.append(HostPath(path, str(pin["target"]), bool(pin["read_only"]),
                              judged=not below))
    return tuple(paths)


def sentinel_names(exports: Mapping[str, str], names: Collection[str],
                   prefixes: Sequence[str]) -> frozenset[str]:
    """The variables a sandbox holds a credential sentinel in: the kits' own ``apiKey``
    names, and any variable whose value is a sentinel."""
    return frozenset(names) | frozenset(
        name for name, value in exports.items() if value.startswith(tuple(prefixes)))


def _inside(path: str, workspace: str | None) -> bool:
    return workspace is not None and (path == workspace or path.startswith(workspace + "/"))


__all__ = ["Admission", "HostMounts", "HostPath", "StartRequest", "UserChoice", "admit",
           "open_host_paths", "recorded_paths", "recorded_user", "refuse_root", "refuse_sockets",
           "sentinel_names"]
