"""The plan cache: the second and later runs of the same request skip decoding and planning.

A full ``sbx run`` decodes the config (schema validation), decodes, validates, resolves and
composes the kits, builds or finds their image and plans the capabilities. For the same request
all of that comes out the same, so a one-shot run whose plan needs nothing beyond a container
(no egress proxy, network, create step, volume, credential or name: :func:`cacheable`) stores
what planning decided — a :class:`Recipe` — and the next identical request runs from it.

**The key** is in two parts, both checked on every lookup:

1. the request: ``sbx``'s own code (version and a fingerprint of its modules), the words on the
   command line (before and after ``--``), the working directory, the whole environment but for
   a few shell bookkeeping variables (:data:`VOLATILE_ENV`), the effective uid, and whether
   stdin/stdout are terminals. It names the entry's file.
2. the content everything was derived from, stored in the entry and recomputed: the config
   file's bytes (or its absence), and every file of every kit directory (names, modes, bytes;
   a symlink by its resolved path and the bytes it leads to, never by its link text).

**What an entry never holds.** Privilege and the consent to it: a plan that needs
``privileged@1`` is never cached, and a cached plan always runs unprivileged without consent.
The hardened shape is built again by :func:`sbx.domain.sandbox.hardening.build_spec` and
checked; the mount policy, ``-e``/``--env-file`` and the workspace owner are decided again
(:func:`sbx.usecases.run.prepare_cached`). An entry is read only when it is this user's own
file in this user's own state home (:mod:`sbx.seams.owned`, ``state_unsafe`` otherwise).

Kits are cached only when every kit was read from a directory (none came from a registry
through the kit lock). A word on the command line loads the directory it names whenever that
exists (sbx.domain.kits.kitset), so an unchanged digest of that directory means the same resolution;
a directory that is gone is a miss. The image is run by its id, which the cached path asks the
engine for every time. What must be checked on every run is not cached: see
:func:`sbx.usecases.run.prepare_cached`.

A missing, stale, unreadable or corrupt entry is a miss (the full path runs and writes a new
one); only an entry or home that is not this user's own raises (``state_unsafe``).
``SBX_PLAN_CACHE=0`` turns the cache off.

This module is imported on the cached path: it must stay light (no config, kit, YAML, schema or
docker imports).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx import __version__
from sbx.base import paths
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import owned

if TYPE_CHECKING:
    from sbx.domain.kits.kitset import KitSet
    from sbx.seams.engine import ImageInfo
    from sbx.seams.session.mode import HostStreams
    from sbx.usecases.context import AppContext
    from sbx.usecases.pipeline import WorkloadPlan
    from sbx.usecases.run import RunPlan, RunRequest

FORMAT: Final = 2
SWITCH_ENV: Final = "SBX_PLAN_CACHE"  # "0": never read or write the plan cache
# Shell bookkeeping that changes between identical commands and never reaches a plan.
VOLATILE_ENV: Final = frozenset({"_", "OLDPWD", "SHLVL"})
MAX_ENTRIES: Final = 64  # plan files kept per state home (the oldest go first)
MAX_KIT_FILES: Final = 2000  # a kit tree larger than this is not cached (hashing it would
MAX_KIT_BYTES: Final = 32 * 1024 * 1024  # cost more than planning)
CHUNK: Final = 1024 * 1024
MAX_ENTRY_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True)
class PlanFacts:
    """What a run reports about its kits, computed by the full plan and cached with it."""

    workload: str = ""
    kits: tuple[str, ...] = ()
    selection: Mapping[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"selected": [], "skipped": []})
    limits: Mapping[str, int] = field(default_factory=dict)
    privileged: bool = False  # never True for a cached plan (see the module docstring)


@dataclass(frozen=True)
class Recipe:
    """What planning decided for a cacheable request: enough to build the container spec
    again with this run's own id, labels, host mounts and environment."""

    image: ImageInfo  # the image the sandbox runs (after mount points were prepared)
    image_tag: str
    images_used: tuple[str, ...]  # image ids, checked to exist and marked for gc
    uid: int
    gid: int
    user_source: str
    user_warnings: tuple[str, ...]
    owner: tuple[int, int, int] | None  # the workspace's uid, gid, mode the user was chosen by
    timeout_s: float
    limits: Mapping[str, int]
    workspace_target: str
    command: tuple[str, ...] | None
    entrypoint: tuple[str, ...] | None
    exports: Mapping[str, str]
    home: str
    tmpfs: Mapping[str, tuple[int, int | None]]  # path -> (size, mode)
    detach_keys: str
    explain_command: str
    notes: tuple[str, ...]
    blocked: tuple[str, ...]  # [mounts] blocked
    allowed_roots: tuple[str, ...]  # [mounts] allowed_roots
    facts: PlanFacts
    # Each local kit's surface (sbx.usecases.kitgate.KitSurface), checked against its recorded
    # approval on every cached run; and its host files (sbx.domain.sandbox.kitpins.KitFiles),
    # pinned read-only again under a writable mount.
    kit_surfaces: tuple[Mapping[str, Any], ...] = ()
    kit_files: tuple[Mapping[str, Any], ...] = ()
    terminal_passthrough: bool = False  # the flag or [sandbox] terminal_passthrough

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["facts"]["privileged"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recipe:
        """Raises KeyError, TypeError or ValueError on anything malformed."""
        from sbx.seams.engine import ImageInfo

        image = dict(data["image"])
        facts = dict(data["facts"])
        recipe = cls(
            image=ImageInfo(
                id=_str(image["id"]), tags=tuple(_strs(image["tags"])),
                user=_str(image["user"]), workdir=_str(image["workdir"]),
                entrypoint=_opt_strs(image["entrypoint"]), cmd=_opt_strs(image["cmd"]),
                env=tuple(_strs(image["env"])), labels=_str_map(image["labels"])),
            image_tag=_str(data["image_tag"]),
            images_used=tuple(_strs(data["images_used"])),
            uid=_int(data["uid"]), gid=_int(data["gid"]),
            user_source=_str(data["user_source"]),
            user_warnings=tuple(_strs(data["user_warnings"])),
            owner=(None if data["owner"] is None
                   else (_int(data["owner"][0]), _int(data["owner"][1]),
                         _int(data["owner"][2]))),
            timeout_s=_number(data["timeout_s"]),
            limits={_str(k): _int(v) for k, v in dict(data["limits"]).items()},
            workspace_target=_str(data["workspace_target"]),
            command=_opt_strs(data["command"]), entrypoint=_opt_strs(data["entrypoint"]),
            exports=_str_map(data["exports"]), home=_str(data["home"]),
            tmpfs={_str(k): (_int(v[0]), None if v[1] is None else _int(v[1]))
                   for k, v in dict(data["tmpfs"]).items() if len(v) == 2},
            detach_keys=_str(data["detach_keys"]),
            terminal_passthrough=_bool(data["terminal_passthrough"]),
            explain_command=_str(data["explain_command"]), notes=tuple(_strs(data["notes"])),
            blocked=tuple(_strs(data["blocked"])),
            allowed_roots=tuple(_strs(data["allowed_roots"])),
            facts=PlanFacts(
                workload=_str(facts["workload"]), kits=tuple(_strs(facts["kits"])),
                selection={_str(k): [dict(r) for r in v]
                           for k, v in dict(facts["selection"]).items()},
                limits={_str(k): _int(v) for k, v in dict(facts["limits"]).items()}),
            kit_surfaces=tuple(_kit_surface(k) for k in _list(data["kit_surfaces"])),
            kit_files=tuple(_kit_files(k) for k in _list(data["kit_files"])))
        if recipe.uid <= 0 or recipe.gid <= 0:
            raise ValueError("user")
        if len(recipe.tmpfs) != len(data["tmpfs"]):
            raise ValueError("tmpfs")
        from sbx.domain.sandbox.hardening import Limits

        if set(recipe.limits) != {f.name for f in dataclasses.fields(Limits)} \
                or not all(v > 0 for v in recipe.limits.values()):
            raise ValueError("limits")
        if not math.isfinite(recipe.timeout_s) or recipe.timeout_s <= 0:
            raise ValueError("timeout_s")
        from sbx.seams.session.escape import parse_detach_keys

        parse_detach_keys(recipe.detach_keys)  # ValueError when it does not parse
        return recipe


@dataclass(frozen=True)
class Hit:
    request: RunRequest
    recipe: Recipe
    verbose: int
    traceback: bool


# -- the key -----------------------------------------------------------------------------------


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(SWITCH_ENV, "1") != "0"


def request_key(env: Mapping[str, str], cwd: Path, argv: Sequence[str],
                passthrough: Sequence[str] | None, streams: HostStreams) -> str:
    """Part 1 of the key: everything a request is made of before any file is read."""
    material = {
        "format": FORMAT, "sbx": __version__, "code": code_fingerprint(),
        "argv": list(argv), "passthrough": None if passthrough is None else list(passthrough),
        "cwd": str(cwd), "euid": os.geteuid(),
        "env": sorted((k, v) for k, v in env.items() if k not in VOLATILE_ENV),
        "streams": [streams.stdin_fd is not None, streams.stdin_is_terminal,
                    streams.stdout_is_terminal],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8",
                                                                      "surrogatepass")).hexdigest()


_CODE: list[str] = []


def code_fingerprint() -> str:
    """sbx's own modules (names, sizes, modification times): an edited checkout of the same
    version does not reuse plans an older planner made."""
    if _CODE:
        return _CODE[0]
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                info = os.stat(os.path.join(directory, name))
                digest.update(f"{directory}/{name}:{info.st_size}:{info.st_mtime_ns}\n".encode(
                    "utf-8", "surrogatepass"))
    _CODE.append(digest.hexdigest())
    return _CODE[0]


def file_digest(path: Path) -> str | None:
    """The SHA-256 of the bytes ``path`` leads to (symlinks followed), or None when that is not
    a regular file (a FIFO is not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def tree_digest(directory: Path) -> str | None:
    """A digest of a kit directory: its real path, every entry's relative name, type and mode,
    every file's bytes. A symlink stands for what it resolves to (its real path, and that
    file's bytes or that directory's tree), never for its link text: the loader follows it,
    so a changed target must change the digest. None when it cannot be read in full or is
    too large."""
    digest = hashlib.sha256()
    count = 0
    total = 0
    root = os.path.realpath(directory)
    digest.update(f"{root}\n".encode("utf-8", "surrogatepass"))
    seen = {root}
    pending = [directory]
    try:
        while pending:
            current = pending.pop()
            entries = sorted(os.scandir(current), key=lambda e: e.name)
            for entry in entries:
                count += 1
                if count > MAX_KIT_FILES:
                    return None
                relative = os.path.relpath(entry.path, directory)
                real = os.path.realpath(entry.path)
                try:
                    info = os.stat(entry.path)
                except OSError:  # a dangling link: what the loader would find is nothing
                    digest.update(f"{relative}\0dangling\0{real}\n".encode(
                        "utf-8", "surrogatepass"))
                    continue
                via = f"\0->{real}" if entry.is_symlink() else ""
                digest.update(f"{relative}{via}\0{info.st_mode:o}\0".encode(
                    "utf-8", "surrogatepass"))
                if stat.S_ISDIR(info.st_mode):
                    if real not in seen:  # a link back up the tree is hashed once
                        seen.add(real)
                        pending.append(Path(entry.path))
                elif stat.S_ISREG(info.st_mode):
                    total += info.st_size
                    if total > MAX_KIT_BYTES:
                        return None
                    content = file_digest(Path(entry.path))
                    if content is None:
                        return None
                    digest.update(content.encode())
                digest.update(b"\n")
    except OSError:
        return None
    return digest.hexdigest()


def _config_dependency(env: Mapping[str, str]) -> list[str | None]:
    path = paths.config_path(env)
    return [str(path), os.path.realpath(path), file_digest(path)]


# -- store and look up ---------------------------------------------------------------------------


def cache_dir(state_home: Path) -> Path:
    return state_home / "cache" / "plans"


def cacheable(planned: WorkloadPlan, plan: RunPlan, kit_set: KitSet) -> bool:
    """Plans that need nothing but an unprivileged container: everything else takes the full
    path (privilege and consent are decided afresh on every run, never read from a file)."""
    return (plan.name is None and plan.egress is None and not plan.spec.privileged
            and not planned.capabilities.privileged
            and plan.network is None and plan.run_image_tag is None and not plan.volume_names
            and not planned.composition.credentials and not planned.capabilities.ports
            and not planned.capabilities.volumes and not planned.capabilities.host_mounts
            and not planned.capabilities.skills_paths
            and all(k.local.image is None for k in kit_set.kits))


def remember(ctx: AppContext, request: RunRequest, plan: RunPlan, recipe: Recipe, *,
             cacheable: bool) -> None:
    """Store the recipe for this request (or drop a stale one when the plan is not
    cacheable). Best effort: a cache that cannot be written only costs time."""
    if ctx.argv is None or not enabled(ctx.env):
        return
    if not cacheable or plan.kit_set is None:
        forget(ctx.env, ctx.cwd, ctx.argv, ctx.passthrough, ctx.streams)
        return
    store(state_home=ctx.state_home, env=ctx.env, cwd=ctx.cwd, argv=ctx.argv,
          passthrough=ctx.passthrough, streams=ctx.streams, request=request, recipe=recipe,
          kit_dirs=[kit.local.directory for kit in plan.kit_set.kits], verbose=ctx.verbose,
          traceback=ctx.traceback)


def store(*, state_home: Path, env: Mapping[str, str], cwd: Path, argv: Sequence[str],
          passthrough: Sequence[str] | None, streams: HostStreams, request: RunRequest,
          recipe: Recipe, kit_dirs: Sequence[Path], verbose: int = 0,
          traceback: bool = False) -> bool:
    """Write the entry for this request; False when it could not be (or a kit directory is
    too large to be worth hashing)."""
    try:
        key = request_key(env, cwd, argv, passthrough, streams)
        kits = []
        for directory in kit_dirs:
            tree = tree_digest(directory)
            if tree is None:
                return False
            kits.append([str(directory), tree])
        entry = {
            "format": FORMAT, "key": key,
            "deps": {"config": _config_dependency(env), "kits": kits},
            "request": _request_json(request),
            "verbose": verbose, "traceback": traceback,
            "recipe": recipe.to_json(),
        }
        directory = owned.ensure_directory(cache_dir(state_home))
        owned.write_file(directory / f"{key}.json", json.dumps(entry).encode("utf-8"),
                         durable=False)
        _evict(directory)
    except SbxError as error:
        if error.reason is Reason.STATE_UNSAFE:
            raise
        return False
    except (OSError, ValueError, TypeError):
        return False
    return True


def _evict(directory: Path) -> None:
    entries = [e for e in os.scandir(directory) if e.name.endswith(".json")]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat().st_mtime_ns)
    for entry in entries[:len(entries) - MAX_ENTRIES]:
        with contextlib.suppress(OSError):
            os.unlink(entry.path)


def lookup(env: Mapping[str, str], cwd: Path, argv: Sequence[str],
           passthrough: Sequence[str] | None, streams: HostStreams) -> Hit | None:
    """The cached plan for exactly this request, if its every input is unchanged."""
    if not enabled(env):
        return None
    try:
        key = request_key(env, cwd, argv, passthrough, streams)
        home = paths.state_home(env)
        owned.check_home(home, paths.state_home_source(env))
        raw = owned.read_bytes(cache_dir(home) / f"{key}.json", max_bytes=MAX_ENTRY_BYTES)
        if raw is None:
            return None
        entry = json.loads(raw)
        if entry.get("format") != FORMAT or entry.get("key") != key:
            return None
        deps = entry["deps"]
        if list(deps["config"]) != _config_dependency(env):
            return None
        for directory, tree in deps["kits"]:
            if tree_digest(Path(directory)) != tree:
                return None
        request = _request_from_json(entry["request"], streams)
        recipe = Recipe.from_json(entry["recipe"])
        return Hit(request, recipe, _int(entry["verbose"]), _bool(entry["traceback"]))
    except SbxError as error:
        if error.reason is Reason.STATE_UNSAFE:
            raise  # someone else's entry or home: refused, never a quiet miss
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError):
        return None  # corrupt or unreadable: the full path plans (and rewrites it)


def forget(env: Mapping[str, str], cwd: Path, argv: Sequence[str],
           passthrough: Sequence[str] | None, streams: HostStreams) -> None:
    with contextlib.suppress(OSError, SbxError):
        key = request_key(env, cwd, argv, passthrough, streams)
        (cache_dir(paths.state_home(env)) / f"{key}.json").unlink()


def _request_json(request: RunRequest) -> dict[str, Any]:
    data = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)
            if f.name != "host"}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def _request_from_json(data: Mapping[str, Any], streams: HostStreams) -> RunRequest:
    from sbx.usecases.run import RunRequest

    known = {f.name for f in dataclasses.fields(RunRequest)} - {"host"}
    if set(data) != known:
        raise ValueError("request fields")
    timeout = data["timeout_s"]
    return RunRequest(
        workload=_str(data["workload"]), workspace=_opt_str(data["workspace"]),
        access=_opt_str(data["access"]), mounts=tuple(_strs(data["mounts"])),
        timeout_s=None if timeout is None else _number(timeout),
        command=_opt_strs(data["command"]), capture_output=_bool(data["capture_output"]),
        kits=tuple(_strs(data["kits"])), args=tuple(_strs(data["args"])),
        allow_privileged=_bool(data["allow_privileged"]),
        interactive=_opt_bool(data["interactive"]), tty=_opt_bool(data["tty"]),
        env=tuple(_strs(data["env"])), env_files=tuple(_strs(data["env_files"])),
        user=_opt_str(data["user"]), detach_keys=_opt_str(data["detach_keys"]),
        trust_workspace=_bool(data["trust_workspace"]), name=_opt_str(data["name"]),
        detach=_bool(data["detach"]), accept=_bool(data["accept"]),
        terminal_passthrough=_bool(data["terminal_passthrough"]), host=streams)


# -- strict JSON readers -------------------------------------------------------------------------


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("expected a list")
    return value


def _kit_surface(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("permissions"), dict):
        raise TypeError("expected a kit surface")
    for key in ("reference", "path", "descriptor"):
        _str(value.get(key))
    return value


def _kit_files(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("expected kit files")
    _str(value.get("named"))
    _str(value.get("directory"))
    _strs(value.get("files"))
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("expected an integer")
    return value


def _number(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError("expected a number")
    return float(value)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected a boolean")
    return value


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _opt_bool(value: object) -> bool | None:
    return None if value is None else _bool(value)


def _strs(value: object) -> list[str]:
    if not isinstance(value, list):
        raise TypeError("expected a list")
    return [_str(v) for v in value]


def _opt_strs(value: object) -> tuple[str, ...] | None:
    return None if value is None else tuple(_strs(value))


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    return {_str(k): _str(v) for k, v in value.items()}


__all__ = ["FORMAT", "SWITCH_ENV", "Hit", "PlanFacts", "Recipe", "cacheable", "code_fingerprint",
           "file_digest", "forget", "lookup", "remember", "request_key", "store", "tree_digest"]
