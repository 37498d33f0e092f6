"""What may be mounted on this host (:class:`MountPolicy`) and the blocked list built from it.

Every blocked path is compared in both its lexical and its canonical form, so a home reached
through a symlink alias (``/home/u`` -> ``/data/home/u``) is protected under both names.
Comparisons are component-wise: ``/etcetera`` is not inside ``/etc``.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbx.base.errors import ConfigError, MountBlocked
from sbx.domain.sandbox.mountrules import (
    CONFIGURED_BLOCK,
    CREDENTIAL_DIR,
    CREDENTIAL_NAMES,
    DEFAULT_STATE_HOME,
    DOCKER_PATHS,
    DOCKER_SOCKET,
    DOCKER_SOCKET_GLOBS,
    DOCKER_SOCKET_NAMES,
    HINTS,
    PARENT_OF_BLOCKED,
    SBX_STATE,
    SYSTEM_PATH,
    SYSTEM_ROOT,
    SYSTEM_TREES,
)
from sbx.seams.host import accounts, lookup


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
        candidates = [env.get("HOME", ""), *accounts.account_homes()]
        homes: list[Path] = []
        for candidate in candidates:
            if not posixpath.isabs(candidate):
                continue
            home = Path(absolute_path(candidate))
            if str(home) != SYSTEM_ROOT and home not in homes:
                homes.append(home)
        state_homes = [home / DEFAULT_STATE_HOME for home in homes]
        xdg_state = env.get("XDG_STATE_HOME", "")
        if posixpath.isabs(xdg_state):
            state_homes.insert(0, Path(absolute_path(xdg_state)) / "sbx")
        return cls(
            homes=tuple(homes),
            state_home=Path(absolute_path(str(state_home))),
            other_state_homes=tuple(state_homes),
            extra_blocked=tuple(_config_path(p, env, "extra blocked path") for p in extra_blocked),
            allowed_roots=tuple(_config_path(p, env, "allowed root") for p in allowed_roots),
            docker_paths=_docker_paths_from_env(env),
        )



# --- path helpers ---------------------------------------------------------------------------------

def collapse_root(path: str) -> str:
    # POSIX lets a leading "//" mean something implementation-defined, so normpath keeps it;
    # Linux treats it as "/", and so must we, or "//etc" would slip past "/etc".
    return "/" + path.lstrip("/") if path.startswith("//") else path


def absolute_path(path: str) -> str:
    """Absolute and lexically normalised (``..``, ``//``, trailing ``/``); no symlinks read."""
    return collapse_root(lookup.absolute_from_cwd(path))


def canonical_path(path: str, resolved: dict[str, str] | None = None) -> str:
    """Resolve symlinks through the deepest existing ancestor and re-append the missing tail.

    ``lexists`` (not ``exists``) stops at a dangling symlink, so realpath still follows it: a
    link to a not-yet-existing ``~/.ssh/new`` is judged by where it points. ``resolved``: the
    real paths of the ancestors looked up so far in one pass over many paths (the homes'
    credential names share them), each read from the file system once per pass.
    """
    head = path
    tail: list[str] = []
    while not (resolved is not None and head in resolved) and not lookup.lexists(head):
        parent = posixpath.dirname(head)
        if parent == head:
            break
        tail.append(posixpath.basename(head))
        head = parent
    if resolved is None:
        real = lookup.real_path(head)
    else:
        real = resolved.get(head) or resolved.setdefault(head, lookup.real_path(head))
    return absolute_path(posixpath.join(real, *reversed(tail)))


def within(path: str, root: str) -> bool:
    """Component-wise containment (``path`` equals ``root`` or lies below it)."""
    if root == SYSTEM_ROOT:
        return True
    return path == root or path.startswith(root + "/")


def with_canonical(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for path in paths:
        for form in (path, canonical_path(path)):
            if form not in out:
                out.append(form)
    return out


def subject(lexical: str, checked: str, predicate: str) -> str:
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


def blocked_entries(policy: MountPolicy) -> list[_Blocked]:
    """Every concrete blocked path in both forms, in rule order (first match is reported).

    Built per check, not cached on the policy, so symlinks created after the policy was
    built are still seen.
    """
    entries: list[_Blocked] = []
    seen: set[str] = set()
    resolved: dict[str, str] = {}

    def add(path: str, rule: str, label: str, *, tree: bool = True) -> None:
        lexical = absolute_path(path)
        forms: tuple[str, ...]
        try:
            forms = (lexical, canonical_path(lexical, resolved))
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


def check_blocked(lexical: str, path: str, entries: Sequence[_Blocked]) -> None:
    """Raise if ``path`` (``lexical`` itself, or its canonical form) is, is inside, or contains
    a blocked path."""
    found = _direct_match(path, entries) or _parent_match(path, entries)
    if found is not None:
        rule, what, hint = found
        raise MountBlocked(f"{subject(lexical, path, 'is blocked')}: {what} (rule {rule})",
                           rule=rule, path=lexical, hint=hint or HINTS[rule])


def check_inside_blocked(policy: MountPolicy, path: str) -> None:
    """Raise if ``path`` (lexically or resolved) is or is inside a blocked path: for what a
    copy out of a sandbox writes there (a parent of a blocked path exposes nothing by
    receiving one new entry, unlike a mount of it)."""
    lexical = absolute_path(path)
    entries = blocked_entries(policy)
    for form in dict.fromkeys((lexical, canonical_path(lexical))):
        found = _direct_match(form, entries)
        if found is not None:
            rule, what, hint = found
            raise MountBlocked(f"{subject(lexical, form, 'is blocked')}: {what} (rule {rule})",
                               rule=rule, path=lexical, hint=hint or HINTS[rule])


# (rule, description for the message, hint or None for the rule's default hint)
_Match = tuple[str, str, str | None]


def _direct_match(path: str, entries: Sequence[_Blocked]) -> _Match | None:
    """The rule and description of the blocked path that ``path`` is or lies inside."""
    parts = path.split("/")
    # The engine family first, so ~/.docker is reported as docker_socket (module docstring).
    for entry in entries:
        if entry.rule == DOCKER_SOCKET and within(path, entry.path):
            return entry.rule, _relation(path, entry), None
    for name in DOCKER_SOCKET_NAMES:
        if name in parts:
            return DOCKER_SOCKET, f"a container engine socket (any file named {name})", None
    for glob in DOCKER_SOCKET_GLOBS:
        if _glob_within(parts, glob.split("/")):
            return DOCKER_SOCKET, f"a rootless Docker socket ({glob})", None
    for entry in entries:
        if path == entry.path or (entry.tree and within(path, entry.path)):
            return entry.rule, _relation(path, entry), None
    return None


def _parent_match(path: str, entries: Sequence[_Blocked]) -> _Match | None:
    """A blocked path that mounting ``path`` would expose, whether or not it exists."""
    for rule in _PARENT_ORDER:
        for entry in entries:
            if entry.rule == rule and entry.path != path and within(entry.path, path):
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
        found = accounts.home_of_user(name)
        if found is None:
            return text
        home = found
    else:
        home = env.get("HOME") or accounts.own_home()
    return home + sep + rest if rest or sep else home


def _config_path(text: str, env: Mapping[str, str], what: str) -> Path:
    expanded = _expand_user(text, env)
    if not posixpath.isabs(expanded):
        problem = f"[mounts] {what} {text!r} is not an absolute path"
        raise ConfigError(problem, hint="Write it as an absolute path or start it with ~/.",
                          details={"problems": [problem]})
    return Path(absolute_path(expanded))


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
    return tuple(Path(absolute_path(str(p))) for p in found)
