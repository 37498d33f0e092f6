"""The mount policy (SPEC §6): which host paths may be bind-mounted into a sandbox, and where.

Pure decision logic. It looks at the file system (``lstat``/``realpath``/``stat``, through
:mod:`sbx.seams.host.lookup`) to canonicalise paths but never talks to Docker and never prints.
Every refusal is a :class:`~sbx.base.errors.MountBlocked` whose ``rule`` is one of
:data:`RULES`.

Source checks, in this order (the first failing one is reported):

1. ``unsafe_characters`` - ``,``, CR, LF or NUL in the path.
2. The blocked-path rules on the *lexical* absolute path (``abspath``, no symlinks resolved):
   ``docker_socket``, ``system_path``, ``sbx_state``, ``credential_dir``, ``configured_block``,
   then ``parent_of_blocked``.
3. The same rules again on the *canonical* path (symlinks resolved through the deepest existing
   ancestor), so a workspace symlink pointing at ``~/.ssh`` or ``/etc`` is caught.
4. ``outside_allowed_roots`` on the canonical path, when allowed roots are configured.
5. ``source_missing``. It comes last on purpose: a blocked path is reported as blocked whether
   or not it exists, so the user learns the real reason.

``~/.docker`` is reported as ``docker_socket`` (not ``credential_dir``): the socket family is
checked first because the directory holds Docker contexts and rootless sockets, i.e. engine
access, not just registry credentials.

The policy itself and the blocked list it makes are in :mod:`sbx.domain.sandbox.mountpolicy`,
the rule names and blocked paths in :mod:`sbx.domain.sandbox.mountrules`.

The canonical path returned by :func:`check_source` is the one that must be handed to Docker:
it is the path that was checked.
"""


from __future__ import annotations

import errno
import posixpath
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.mountpolicy import (
    MountPolicy,
    absolute_path,
    blocked_entries,
    canonical_path,
    check_blocked,
    collapse_root,
    subject,
    with_canonical,
    within,
)
from sbx.domain.sandbox.mountrules import (
    HINTS,
    OUTSIDE_ALLOWED_ROOTS,
    RELATIVE_TARGET,
    RESERVED_TARGET,
    RESERVED_TARGET_TREES,
    RESERVED_TARGETS,
    SOCKET,
    SOURCE_MISSING,
    SOURCE_UNREADABLE,
    SPECIAL_FILE,
    UNSAFE_CHARACTERS,
    UNSAFE_PATH_CHARACTERS,
)
from sbx.seams.host import lookup

# --- value objects --------------------------------------------------------------------------------

@dataclass(frozen=True)
class MountRequest:
    """A mount as the user asked for it (``--mount SRC:DST[:ro|rw]`` or the workspace)."""

    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class CheckedMount:
    """A mount that passed the policy; ``source`` is the canonical path that was checked."""

    source: Path
    target: str
    read_only: bool


# --- public checks --------------------------------------------------------------------------------

def parse_mount_flag(text: str) -> MountRequest:
    """Parse ``SRC:DST``, ``SRC:DST:ro`` or ``SRC:DST:rw`` (read-write by default).

    Only the shape is checked here; the paths are judged by :func:`check_mount`.
    """
    parts = text.split(":")
    mode = "rw"
    if len(parts) == 3:
        mode = parts.pop()
    if len(parts) != 2 or not parts[0] or not parts[1] or mode not in ("ro", "rw"):
        raise SbxError(
            Reason.INVALID_ARGUMENT,
            f"--mount {text!r} is not of the form SRC:DST, SRC:DST:ro or SRC:DST:rw",
            hint="Write --mount /host/dir:/container/dir, optionally ending in :ro "
                 "(read-only) or :rw (read-write, the default); paths may not contain ':'.",
            details={"value": text},
        )
    return MountRequest(source=parts[0], target=parts[1], read_only=mode == "ro")


def check_source(policy: MountPolicy, source: str) -> Path:
    """Return the canonical host path of ``source``, or raise :class:`MountBlocked`."""
    _check_characters("source", source)
    if not source:
        # abspath("") is the current directory: an empty source must not silently mount it.
        raise MountBlocked("mount source is empty (rule source_missing)",
                           rule=SOURCE_MISSING, path=source, hint=HINTS[SOURCE_MISSING])
    lexical = absolute_path(source)
    blocked = blocked_entries(policy)
    # The lexical form first: /proc/1/root/... is refused as /proc before anything under it is
    # read (resolving it could fail, or reach another root).
    check_blocked(lexical, lexical, blocked)
    try:
        canonical = canonical_path(lexical)
    except (OSError, ValueError) as exc:
        raise MountBlocked(
            f"mount source {lexical} cannot be resolved ({_os_reason(exc)}) "
            f"(rule {SOURCE_UNREADABLE})",
            rule=SOURCE_UNREADABLE, path=lexical, hint=HINTS[SOURCE_UNREADABLE]) from exc
    if canonical != lexical:
        check_blocked(lexical, canonical, blocked)

    if policy.allowed_roots:
        roots = with_canonical(absolute_path(str(root)) for root in policy.allowed_roots)
        if not any(within(canonical, root) for root in roots):
            shown = ", ".join(str(root) for root in policy.allowed_roots)
            raise MountBlocked(
                f"{subject(lexical, canonical, 'is not inside any allowed root')} ({shown}) "
                f"(rule {OUTSIDE_ALLOWED_ROOTS})",
                rule=OUTSIDE_ALLOWED_ROOTS, path=lexical, hint=HINTS[OUTSIDE_ALLOWED_ROOTS],
            )

    try:
        status = lookup.status(canonical)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise MountBlocked(
                f"{subject(lexical, canonical, f'cannot be read ({_os_reason(exc)})')} "
                f"(rule {SOURCE_UNREADABLE})",
                rule=SOURCE_UNREADABLE, path=lexical, hint=HINTS[SOURCE_UNREADABLE]) from exc
        raise MountBlocked(
            f"{subject(lexical, canonical, 'does not exist')} (rule {SOURCE_MISSING})",
            rule=SOURCE_MISSING, path=lexical, hint=HINTS[SOURCE_MISSING],
        ) from None
    except ValueError as exc:
        raise MountBlocked(
            f"mount source {lexical} cannot be read ({_os_reason(exc)}) "
            f"(rule {SOURCE_UNREADABLE})",
            rule=SOURCE_UNREADABLE, path=lexical, hint=HINTS[SOURCE_UNREADABLE]) from exc
    check_file_type(lexical, canonical, status.st_mode)
    return Path(canonical)


def check_file_type(lexical: str, canonical: str, mode: int) -> None:
    """Only directories and regular files are mounted: a socket is a door to whatever listens
    on it (an engine, an agent, a desktop bus), and devices and FIFOs are not data."""
    if stat.S_ISSOCK(mode):
        raise MountBlocked(f"{subject(lexical, canonical, 'is a socket')} (rule {SOCKET})",
                           rule=SOCKET, path=lexical, hint=HINTS[SOCKET])
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise MountBlocked(
            f"{subject(lexical, canonical, 'is not a directory or a regular file')} "
            f"(rule {SPECIAL_FILE})", rule=SPECIAL_FILE, path=lexical, hint=HINTS[SPECIAL_FILE])


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def check_target(target: str, *, reserved_targets: Collection[str] = ()) -> str:
    """Return ``target`` normalised, or raise :class:`MountBlocked`.

    ``reserved_targets`` are container paths sbx itself mounts for this run (the workspace
    target, for instance): a mount may take neither them nor anything inside them.
    """
    _check_characters("target", target)
    if not target.startswith("/"):
        raise MountBlocked(
            f"mount target {target!r} is not an absolute container path (rule {RELATIVE_TARGET})",
            rule=RELATIVE_TARGET, path=target, hint=HINTS[RELATIVE_TARGET],
        )
    if ".." in target.split("/"):
        # normpath would fold it away, but a target that climbs is a typo or a trick; refuse it.
        raise MountBlocked(
            f"mount target {target} contains a '..' component (rule {RELATIVE_TARGET})",
            rule=RELATIVE_TARGET, path=target, hint=HINTS[RELATIVE_TARGET],
        )
    normal = collapse_root(posixpath.normpath(target))
    own = {collapse_root(posixpath.normpath(t)) for t in reserved_targets}
    if (normal in RESERVED_TARGETS
            or any(within(normal, tree) for tree in RESERVED_TARGET_TREES)
            or any(within(normal, t) for t in own)):
        raise MountBlocked(
            f"mount target {normal} is reserved: sbx or the container's system needs that "
            f"path (rule {RESERVED_TARGET})",
            rule=RESERVED_TARGET, path=normal, hint=HINTS[RESERVED_TARGET],
        )
    return normal


def check_mount(
    policy: MountPolicy, request: MountRequest, *, reserved_targets: Collection[str] = (),
) -> CheckedMount:
    """Check both ends of ``request``; the target first, since it needs no file system."""
    target = check_target(request.target, reserved_targets=reserved_targets)
    source = check_source(policy, request.source)
    return CheckedMount(source=source, target=target, read_only=request.read_only)


def _check_characters(what: str, path: str) -> None:
    for char, name in UNSAFE_PATH_CHARACTERS.items():
        if char in path:
            raise MountBlocked(
                f"mount {what} {path!r} contains {name}, which breaks Docker's --mount syntax "
                f"(rule {UNSAFE_CHARACTERS})",
                rule=UNSAFE_CHARACTERS, path=path, hint=HINTS[UNSAFE_CHARACTERS],
            )



__all__ = [
    "MountRequest",
    "CheckedMount",
    "parse_mount_flag",
    "check_source",
    "check_target",
    "check_mount",
    "check_file_type",
]
