"""The mount policy (SPEC §6): which host paths may be bind-mounted into a sandbox, and where.

Pure decision logic. It reads the file system (``lstat``/``realpath``) to canonicalise paths but
never talks to Docker and never prints. Every refusal is a :class:`~sbx.base.errors.MountBlocked`
whose ``rule`` is one of :data:`RULES`.

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

Every blocked path is compared in both its lexical and its canonical form, so a home reached
through a symlink alias (``/home/u`` -> ``/data/home/u``) is protected under both names.
Comparisons are component-wise: ``/etcetera`` is not inside ``/etc``.

The canonical path returned by :func:`check_source` is the one that must be handed to Docker:
it is the path that was checked.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
import pwd
import stat
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbx.base.errors import ConfigError, MountBlocked, SbxError
from sbx.base.reasons import Reason

# --- rule names (scripts and `sbx explain` read these; never rename one) -------------------------

UNSAFE_CHARACTERS: Final = "unsafe_characters"
SOURCE_MISSING: Final = "source_missing"
DOCKER_SOCKET: Final = "docker_socket"
SYSTEM_PATH: Final = "system_path"
SBX_STATE: Final = "sbx_state"
CREDENTIAL_DIR: Final = "credential_dir"
CONFIGURED_BLOCK: Final = "configured_block"
PARENT_OF_BLOCKED: Final = "parent_of_blocked"
OUTSIDE_ALLOWED_ROOTS: Final = "outside_allowed_roots"
RELATIVE_TARGET: Final = "relative_target"
RESERVED_TARGET: Final = "reserved_target"
SOCKET: Final = "socket"
SPECIAL_FILE: Final = "special_file"
SOURCE_UNREADABLE: Final = "source_unreadable"
SOURCE_CHANGED: Final = "source_changed"
KIT_WRITABLE: Final = "kit_writable"  # a kit the run uses would be writable in it (kitpins)

RULES: Final[tuple[str, ...]] = (
    UNSAFE_CHARACTERS,
    DOCKER_SOCKET,
    SYSTEM_PATH,
    SBX_STATE,
    CREDENTIAL_DIR,
    CONFIGURED_BLOCK,
    PARENT_OF_BLOCKED,
    OUTSIDE_ALLOWED_ROOTS,
    SOURCE_MISSING,
    RELATIVE_TARGET,
    RESERVED_TARGET,
    SOCKET,
    SPECIAL_FILE,
    SOURCE_UNREADABLE,
    SOURCE_CHANGED,
    KIT_WRITABLE,
)

# --- what is blocked ------------------------------------------------------------------------------

# Docker parses --mount as one CSV record: a comma starts a new field; CR/LF end the record; NUL
# cannot cross the exec boundary at all. (PEERS A.1, `attempt_container.rs::safe_mount`.)
UNSAFE_PATH_CHARACTERS: Final[Mapping[str, str]] = {
    ",": "a comma",
    "\n": "a line feed",
    "\r": "a carriage return",
    "\0": "a NUL byte",
}

# Credential roots joined onto every home (OpenClaw's list, PEERS B.2). `.docker` is in the list
# for completeness but is matched first by the Docker family below.
CREDENTIAL_NAMES: Final[tuple[str, ...]] = (
    ".ssh", ".aws", ".docker", ".config", ".gnupg", ".netrc", ".npm", ".cargo",
    # Cluster, cloud and registry logins, token files, and the git settings a sandbox could
    # use to run code on the host (core.fsmonitor, credential helpers in ~/.gitconfig).
    ".kube", ".minikube", ".azure", ".oci", ".terraform.d", ".vault-token", ".git-credentials",
    ".gitconfig", ".pypirc", ".npmrc", ".yarnrc", ".yarnrc.yml", ".m2", ".gradle",
    ".composer", ".pgpass", ".my.cnf", ".s3cfg", ".boto", ".password-store",
    ".local/share/keyrings", ".mozilla", ".thunderbird", ".pki",
    ".bash_history", ".zsh_history",
)

# Whoever can reach a container engine's socket or state owns the host.
DOCKER_PATHS: Final[tuple[str, ...]] = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run/docker",
    "/run/docker",
    "/run/containerd",
    "/var/run/containerd",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/podman",
    "/var/run/podman",
    "/run/buildkit",
    "/var/run/buildkit",
    # The rest of the container and VM engine family: CRI-O, Kubernetes' k3s, libvirt, LXD,
    # incus, nerdctl/containerd's rootful state.
    "/run/crio",
    "/var/run/crio",
    "/var/lib/containers",
    "/run/k3s",
    "/var/lib/rancher",
    "/run/libvirt",
    "/var/run/libvirt",
    "/var/lib/libvirt",
    "/var/lib/lxd",
    "/var/snap/lxd",
    "/var/lib/incus",
    "/run/incus",
    "/var/run/incus",
    "/run/dockershim.sock",
    "/var/run/dockershim.sock",
)
# Rootless engines put their socket in each user's XDG_RUNTIME_DIR; the uid is not known here.
DOCKER_SOCKET_GLOBS: Final[tuple[str, ...]] = (
    "/run/user/*/docker.sock",
    "/var/run/user/*/docker.sock",
)
# A file with one of these names is an engine socket wherever it lives (e.g. a copy or a
# bind-mounted socket inside a project).
DOCKER_SOCKET_NAMES: Final[frozenset[str]] = frozenset({
    "docker.sock", "podman.sock", "containerd.sock", "crio.sock", "buildkitd.sock",
    "libvirt-sock", "incus.socket", "dockershim.sock",
})
# An sbx state home (secrets, run records) wherever a user's environment may have put one.
DEFAULT_STATE_HOME: Final = ".local/state/sbx"

# Exactly "/" (everything is inside it, so it cannot be a tree rule) plus trees blocked entirely.
SYSTEM_ROOT: Final = "/"
SYSTEM_TREES: Final[tuple[str, ...]] = ("/etc", "/proc", "/sys", "/dev", "/boot")

# Container paths no mount may take. Equal-only, except for the trees below where anything
# inside is refused too (kernel interfaces, and sbx's own runtime files).
RESERVED_TARGETS: Final[frozenset[str]] = frozenset({
    "/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/tmp",  # noqa: S108 - a container path sbx mounts its own tmpfs on, not a host temp file
    "/sbx", "/var/run", "/run", "/proc", "/sys", "/dev",
})
RESERVED_TARGET_TREES: Final[tuple[str, ...]] = ("/proc", "/sys", "/dev", "/sbx")

_HINTS: Final[Mapping[str, str]] = {
    UNSAFE_CHARACTERS: "Rename the path, or mount a directory whose path has no comma, line "
                       "break or NUL.",
    SOURCE_MISSING: "Create the directory first or correct the path; sbx does not let Docker "
                    "create it (Docker would create it on the host, owned by root).",
    DOCKER_SOCKET: "A sandbox never gets access to a container engine; run workloads that need "
                   "Docker outside sbx.",
    SYSTEM_PATH: "Mount a project directory instead; host system directories are never "
                 "mounted.",
    SBX_STATE: "sbx's state holds secrets and run records; mount a project directory instead.",
    CREDENTIAL_DIR: "Mount only the project directory the workload needs; credentials reach "
                    "the sandbox through `sbx secret set`, never through a mount.",
    CONFIGURED_BLOCK: "The path is blocked by `[mounts]` in the config file; mount another "
                      "directory or remove the entry there.",
    PARENT_OF_BLOCKED: "Mount a narrower directory that holds only what the workload needs.",
    OUTSIDE_ALLOWED_ROOTS: "Mount a directory inside one of the allowed roots, or add a root "
                           "to `[mounts]` in the config file.",
    RELATIVE_TARGET: "Give the container path as an absolute path without '..', e.g. /data.",
    RESERVED_TARGET: "Pick another container path, e.g. /mnt/NAME.",
    SOCKET: "A socket is a door to whatever listens on it; mount a directory without sockets "
            "(move the socket out, or mount a narrower directory).",
    SPECIAL_FILE: "Mount a directory or a regular file; devices and FIFOs are never mounted.",
    SOURCE_UNREADABLE: "sbx could not resolve the path to check it; mount a plain directory "
                       "that this user can read.",
    SOURCE_CHANGED: "The path changed between the check and the mount (a component became a "
                    "symbolic link); run again, and find out what is modifying it.",
    KIT_WRITABLE: "Keep the kit outside the writable mount, mount a directory that does not "
                  "hold it, or mount it read-only (--access ro, --mount SRC:DST:ro).",
}


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


@dataclass(frozen=True)
class MountPolicy:
    """What may be mounted on this host.

    ``docker_paths`` holds host-specific engine paths found in the environment (the rootless
    socket in ``XDG_RUNTIME_DIR``, a ``unix://`` ``DOCKER_HOST``, ``DOCKER_CONFIG``); the fixed
    socket family in :data:`DOCKER_PATHS` applies whether or not it is set.
    """

    homes: tuple[Path, ...]
    state_home: Path
    extra_blocked: tuple[Path, ...] = ()
    allowed_roots: tuple[Path, ...] = ()
    docker_paths: tuple[Path, ...] = ()
    # Other places an sbx state home may be: the XDG default while SBX_HOME points elsewhere,
    # and every home's default (another user's sbx secrets are as secret as ours).
    other_state_homes: tuple[Path, ...] = ()

    @classmethod
    def for_host(
        cls,
        env: Mapping[str, str],
        *,
        state_home: Path,
        extra_blocked: Sequence[str] = (),
        allowed_roots: Sequence[str] = (),
    ) -> MountPolicy:
        """Build the policy for this host.

        Homes are, in order: ``HOME`` from ``env``, then every account's home from the password
        database (so another user's, or root's, credentials are protected too). Homes that are
        relative or ``/`` are skipped: ``/`` as a home (systemd service accounts) would block the
        whole file system as a "parent" and is covered by the system rules anyway.
        """
        candidates = [env.get("HOME", "")] + [entry.pw_dir for entry in pwd.getpwall()]
        homes: list[Path] = []
        for candidate in candidates:
            if not posixpath.isabs(candidate):
                continue
            home = Path(_absolute(candidate))
            if str(home) != SYSTEM_ROOT and home not in homes:
                homes.append(home)
        state_homes = [home / DEFAULT_STATE_HOME for home in homes]
        xdg_state = env.get("XDG_STATE_HOME", "")
        if posixpath.isabs(xdg_state):
            state_homes.insert(0, Path(_absolute(xdg_state)) / "sbx")
        return cls(
            homes=tuple(homes),
            state_home=Path(_absolute(str(state_home))),
            other_state_homes=tuple(state_homes),
            extra_blocked=tuple(_config_path(p, env, "extra blocked path") for p in extra_blocked),
            allowed_roots=tuple(_config_path(p, env, "allowed root") for p in allowed_roots),
            docker_paths=_docker_paths_from_env(env),
        )


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
                           rule=SOURCE_MISSING, path=source, hint=_HINTS[SOURCE_MISSING])
    lexical = _absolute(source)
    blocked = _blocked_entries(policy)
    # The lexical form first: /proc/1/root/... is refused as /proc before anything under it is
    # read (resolving it could fail, or reach another root).
    _check_blocked(lexical, lexical, blocked)
    try:
        canonical = _canonical(lexical)
    except (OSError, ValueError) as exc:
        raise MountBlocked(
            f"mount source {lexical} cannot be resolved ({_os_reason(exc)}) "
            f"(rule {SOURCE_UNREADABLE})",
            rule=SOURCE_UNREADABLE, path=lexical, hint=_HINTS[SOURCE_UNREADABLE]) from exc
    if canonical != lexical:
        _check_blocked(lexical, canonical, blocked)

    if policy.allowed_roots:
        roots = _with_canonical(_absolute(str(root)) for root in policy.allowed_roots)
        if not any(_within(canonical, root) for root in roots):
            shown = ", ".join(str(root) for root in policy.allowed_roots)
            raise MountBlocked(
                f"{_subject(lexical, canonical, 'is not inside any allowed root')} ({shown}) "
                f"(rule {OUTSIDE_ALLOWED_ROOTS})",
                rule=OUTSIDE_ALLOWED_ROOTS, path=lexical, hint=_HINTS[OUTSIDE_ALLOWED_ROOTS],
            )

    try:
        status = os.stat(canonical)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise MountBlocked(
                f"{_subject(lexical, canonical, f'cannot be read ({_os_reason(exc)})')} "
                f"(rule {SOURCE_UNREADABLE})",
                rule=SOURCE_UNREADABLE, path=lexical, hint=_HINTS[SOURCE_UNREADABLE]) from exc
        raise MountBlocked(
            f"{_subject(lexical, canonical, 'does not exist')} (rule {SOURCE_MISSING})",
            rule=SOURCE_MISSING, path=lexical, hint=_HINTS[SOURCE_MISSING],
        ) from None
    except ValueError as exc:
        raise MountBlocked(
            f"mount source {lexical} cannot be read ({_os_reason(exc)}) "
            f"(rule {SOURCE_UNREADABLE})",
            rule=SOURCE_UNREADABLE, path=lexical, hint=_HINTS[SOURCE_UNREADABLE]) from exc
    check_file_type(lexical, canonical, status.st_mode)
    return Path(canonical)


def check_file_type(lexical: str, canonical: str, mode: int) -> None:
    """Only directories and regular files are mounted: a socket is a door to whatever listens
    on it (an engine, an agent, a desktop bus), and devices and FIFOs are not data."""
    if stat.S_ISSOCK(mode):
        raise MountBlocked(f"{_subject(lexical, canonical, 'is a socket')} (rule {SOCKET})",
                           rule=SOCKET, path=lexical, hint=_HINTS[SOCKET])
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise MountBlocked(
            f"{_subject(lexical, canonical, 'is not a directory or a regular file')} "
            f"(rule {SPECIAL_FILE})", rule=SPECIAL_FILE, path=lexical, hint=_HINTS[SPECIAL_FILE])


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
            rule=RELATIVE_TARGET, path=target, hint=_HINTS[RELATIVE_TARGET],
        )
    if ".." in target.split("/"):
        # normpath would fold it away, but a target that climbs is a typo or a trick; refuse it.
        raise MountBlocked(
            f"mount target {target} contains a '..' component (rule {RELATIVE_TARGET})",
            rule=RELATIVE_TARGET, path=target, hint=_HINTS[RELATIVE_TARGET],
        )
    normal = _collapse_root(posixpath.normpath(target))
    own = {_collapse_root(posixpath.normpath(t)) for t in reserved_targets}
    if (normal in RESERVED_TARGETS
            or any(_within(normal, tree) for tree in RESERVED_TARGET_TREES)
            or any(_within(normal, t) for t in own)):
        raise MountBlocked(
            f"mount target {normal} is reserved: sbx or the container's system needs that "
            f"path (rule {RESERVED_TARGET})",
            rule=RESERVED_TARGET, path=normal, hint=_HINTS[RESERVED_TARGET],
        )
    return normal


def check_mount(
    policy: MountPolicy, request: MountRequest, *, reserved_targets: Collection[str] = (),
) -> CheckedMount:
    """Check both ends of ``request``; the target first, since it needs no file system."""
    target = check_target(request.target, reserved_targets=reserved_targets)
    source = check_source(policy, request.source)
    return CheckedMount(source=source, target=target, read_only=request.read_only)


# --- path helpers ---------------------------------------------------------------------------------

def _collapse_root(path: str) -> str:
    # POSIX lets a leading "//" mean something implementation-defined, so normpath keeps it;
    # Linux treats it as "/", and so must we, or "//etc" would slip past "/etc".
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _absolute(path: str) -> str:
    """Absolute and lexically normalised (``..``, ``//``, trailing ``/``); no symlinks read."""
    return _collapse_root(os.path.abspath(path))


def _canonical(path: str) -> str:
    """Resolve symlinks through the deepest existing ancestor and re-append the missing tail.

    ``lexists`` (not ``exists``) stops at a dangling symlink, so realpath still follows it: a
    link to a not-yet-existing ``~/.ssh/new`` is judged by where it points.
    """
    head = path
    tail: list[str] = []
    while not os.path.lexists(head):
        parent = os.path.dirname(head)
        if parent == head:
            break
        tail.append(os.path.basename(head))
        head = parent
    return _absolute(os.path.join(os.path.realpath(head), *reversed(tail)))


def _within(path: str, root: str) -> bool:
    """Component-wise containment (``path`` equals ``root`` or lies below it)."""
    if root == SYSTEM_ROOT:
        return True
    return path == root or path.startswith(root + "/")


def _with_canonical(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for path in paths:
        for form in (path, _canonical(path)):
            if form not in out:
                out.append(form)
    return out


def _check_characters(what: str, path: str) -> None:
    for char, name in UNSAFE_PATH_CHARACTERS.items():
        if char in path:
            raise MountBlocked(
                f"mount {what} {path!r} contains {name}, which breaks Docker's --mount syntax "
                f"(rule {UNSAFE_CHARACTERS})",
                rule=UNSAFE_CHARACTERS, path=path, hint=_HINTS[UNSAFE_CHARACTERS],
            )


def _subject(lexical: str, checked: str, predicate: str) -> str:
    """``mount source X <predicate>``, naming the resolved path when symlinks changed it."""
    if checked == lexical:
        return f"mount source {lexical} {predicate}"
    return f"mount source {lexical} resolves to {checked}, which {predicate}"


# --- the blocked list -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Blocked:
    path: str    # absolute, normalised; lexical or canonical form
    rule: str
    label: str   # noun phrase naming the blocked thing, for messages
    tree: bool = True  # False: only the path itself is blocked (used for "/")


def _blocked_entries(policy: MountPolicy) -> list[_Blocked]:
    """Every concrete blocked path in both forms, in rule order (first match is reported).

    Built per check, not cached on the policy, so symlinks created after the policy was
    built are still seen.
    """
    entries: list[_Blocked] = []
    seen: set[str] = set()

    def add(path: str, rule: str, label: str, *, tree: bool = True) -> None:
        lexical = _absolute(path)
        forms: tuple[str, ...]
        try:
            forms = (lexical, _canonical(lexical))
        except (OSError, ValueError):
            forms = (lexical,)  # cannot be resolved: blocked under the name it has
        for form in forms:
            if form in seen:
                continue
            seen.add(form)
            shown = label if form == lexical else f"{label} (real path {form})"
            entries.append(_Blocked(form, rule, shown, tree))

    for fixed in DOCKER_PATHS:
        add(fixed, DOCKER_SOCKET, f"Docker engine path {fixed}")
    for found in policy.docker_paths:
        add(str(found), DOCKER_SOCKET, f"Docker engine path {found}")
    for home in policy.homes:
        add(str(home / ".docker"), DOCKER_SOCKET,
            f"Docker client directory ~/.docker of home {home}")
    add(SYSTEM_ROOT, SYSTEM_PATH, "the host's root directory /", tree=False)
    for tree in SYSTEM_TREES:
        add(tree, SYSTEM_PATH, f"system directory {tree}")
    add(str(policy.state_home), SBX_STATE,
        f"sbx's state home {policy.state_home}, which holds secrets")
    for other in policy.other_state_homes:
        add(str(other), SBX_STATE, f"an sbx state home {other}, which holds secrets")
    for home in policy.homes:
        for name in CREDENTIAL_NAMES:
            if name != ".docker":
                add(str(home / name), CREDENTIAL_DIR,
                    f"credential directory ~/{name} of home {home}")
    for extra in policy.extra_blocked:
        add(str(extra), CONFIGURED_BLOCK, f"{extra}, blocked in the config file")
    return entries


# Order in which a parent's blocked descendant is named: the most telling first.
_PARENT_ORDER: Final[tuple[str, ...]] = (
    CREDENTIAL_DIR, SBX_STATE, CONFIGURED_BLOCK, DOCKER_SOCKET, SYSTEM_PATH,
)


def _check_blocked(lexical: str, path: str, entries: Sequence[_Blocked]) -> None:
    """Raise if ``path`` (``lexical`` itself, or its canonical form) is, is inside, or contains
    a blocked path."""
    found = _direct_match(path, entries) or _parent_match(path, entries)
    if found is not None:
        rule, what, hint = found
        raise MountBlocked(f"{_subject(lexical, path, 'is blocked')}: {what} (rule {rule})",
                           rule=rule, path=lexical, hint=hint or _HINTS[rule])


# (rule, description for the message, hint or None for the rule's default hint)
_Match = tuple[str, str, str | None]


def _direct_match(path: str, entries: Sequence[_Blocked]) -> _Match | None:
    """The rule and description of the blocked path that ``path`` is or lies inside."""
    parts = path.split("/")
    # The engine family first, so ~/.docker is reported as docker_socket (module docstring).
    for entry in entries:
        if entry.rule == DOCKER_SOCKET and _within(path, entry.path):
            return entry.rule, _relation(path, entry), None
    for name in DOCKER_SOCKET_NAMES:
        if name in parts:
            return DOCKER_SOCKET, f"a container engine socket (any file named {name})", None
    for glob in DOCKER_SOCKET_GLOBS:
        if _glob_within(parts, glob.split("/")):
            return DOCKER_SOCKET, f"a rootless Docker socket ({glob})", None
    for entry in entries:
        if path == entry.path or (entry.tree and _within(path, entry.path)):
            return entry.rule, _relation(path, entry), None
    return None


def _parent_match(path: str, entries: Sequence[_Blocked]) -> _Match | None:
    """A blocked path that mounting ``path`` would expose, whether or not it exists."""
    for rule in _PARENT_ORDER:
        for entry in entries:
            if entry.rule == rule and entry.path != path and _within(entry.path, path):
                return (PARENT_OF_BLOCKED, f"it contains {entry.label}",
                        f"Mount a narrower directory that does not contain {entry.path}.")
    parts = path.split("/")
    for glob in DOCKER_SOCKET_GLOBS:
        glob_parts = glob.split("/")
        if len(parts) < len(glob_parts) and _glob_within(parts, glob_parts[: len(parts)]):
            return (PARENT_OF_BLOCKED, f"it may contain a rootless Docker socket ({glob})",
                    None)
    return None


def _relation(path: str, entry: _Blocked) -> str:
    return entry.label if path == entry.path else f"inside {entry.label}"


def _glob_within(parts: Sequence[str], glob_parts: Sequence[str]) -> bool:
    """Whether ``parts`` equals or lies below the path pattern ``glob_parts`` (per component)."""
    if len(parts) < len(glob_parts):
        return False
    return all(fnmatch.fnmatchcase(part, pattern)
               for part, pattern in zip(parts, glob_parts, strict=False))


# --- for_host helpers -----------------------------------------------------------------------------

def _expand_user(text: str, env: Mapping[str, str]) -> str:
    """``~`` and ``~user`` expansion from ``env`` and the password database (not os.environ)."""
    if not text.startswith("~"):
        return text
    name, sep, rest = text[1:].partition("/")
    if name:
        try:
            home = pwd.getpwnam(name).pw_dir
        except KeyError:
            return text
    else:
        home = env.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    return home + sep + rest if rest or sep else home


def _config_path(text: str, env: Mapping[str, str], what: str) -> Path:
    expanded = _expand_user(text, env)
    if not posixpath.isabs(expanded):
        problem = f"[mounts] {what} {text!r} is not an absolute path"
        raise ConfigError(problem, hint="Write it as an absolute path or start it with ~/.",
                          details={"problems": [problem]})
    return Path(_absolute(expanded))


def _docker_paths_from_env(env: Mapping[str, str]) -> tuple[Path, ...]:
    found: list[Path] = []
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if posixpath.isabs(runtime):
        found += [Path(runtime, "docker.sock"), Path(runtime, "docker"),
                  Path(runtime, "podman"), Path(runtime, "containerd")]
    docker_host = env.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://") and posixpath.isabs(docker_host[len("unix://"):]):
        found.append(Path(docker_host[len("unix://"):]))
    docker_config = env.get("DOCKER_CONFIG", "")
    if posixpath.isabs(docker_config):
        found.append(Path(docker_config))
    return tuple(Path(_absolute(str(p))) for p in found)


__all__ = [
    "MountRequest",
    "CheckedMount",
    "MountPolicy",
    "parse_mount_flag",
    "check_source",
    "check_target",
    "check_mount",
    "RESERVED_TARGETS",
    "RESERVED_TARGET_TREES",
    "RULES",
    "CREDENTIAL_NAMES",
    "DOCKER_PATHS",
    "DOCKER_SOCKET_GLOBS",
    "DOCKER_SOCKET_NAMES",
    "SYSTEM_TREES",
    "UNSAFE_PATH_CHARACTERS",
    "UNSAFE_CHARACTERS",
    "SOURCE_MISSING",
    "DOCKER_SOCKET",
    "SYSTEM_PATH",
    "SBX_STATE",
    "CREDENTIAL_DIR",
    "CONFIGURED_BLOCK",
    "PARENT_OF_BLOCKED",
    "OUTSIDE_ALLOWED_ROOTS",
    "RELATIVE_TARGET",
    "RESERVED_TARGET",
    "SOCKET",
    "SPECIAL_FILE",
    "SOURCE_UNREADABLE",
    "SOURCE_CHANGED",
    "KIT_WRITABLE",
    "check_file_type",
]
