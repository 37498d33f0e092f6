"""The plan cache: the second and later runs of the same request skip decoding and planning.

A full ``sbx run`` decodes the config (schema validation), decodes, validates, resolves and
composes the kits, builds or finds their image and plans the capabilities. For the same request
all of that comes out the same, so a one-shot run whose plan needs nothing beyond a container
(no egress proxy, network, create step, volume, credential or name: :func:`cacheable`) stores
what planning decided (its :class:`~sbx.usecases.run.recipe.Recipe`, the planner's input), and
the next identical request runs the same planner from it.

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
(:mod:`sbx.usecases.run.fromcache`). An entry is read only when it is this user's own
file in this user's own state home (:mod:`sbx.seams.owned`, ``state_unsafe`` otherwise).

Kits are cached only when every kit was read from a directory named by a path (none came from
a registry through the kit lock, none by a bundled short name, which a directory of that name
would later shadow). A word on the command line loads the directory it names whenever that
exists (sbx.domain.kits.kitset), so an unchanged digest of that directory means the same resolution;
a directory that is gone is a miss. The image is run by its id, which the cached path asks the
engine for every time. What must be checked on every run is not cached: see
:mod:`sbx.usecases.run.fromcache`.

A missing, stale, unreadable or corrupt entry is a miss (the full path runs and writes a new
one); only an entry or home that is not this user's own raises (``state_unsafe``).
**A named sandbox's start** has no plan to cache (its container exists; the record, the
admission and the kits' follow-up decide each start): only the request the parser made is
kept (:func:`remember_start`), so the same command line skips the parser and runs the same
entry as `sbx run` (:func:`sbx.usecases.run.entry.run`). That entry depends on the command
line alone, which is the key.

``SBX_PLAN_CACHE=0`` turns the cache off.

This module is imported on the cached path: it must stay light (no config, kit, YAML, schema or
docker imports).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx import __version__
from sbx.base import paths
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.strictjson import (
    as_bool,
    as_int,
    as_number,
    as_opt_bool,
    as_opt_str,
    as_opt_strs,
    as_str,
    as_strs,
)
from sbx.domain.kits.sessions import SessionAsk
from sbx.seams import owned
from sbx.usecases.codeprint import code_fingerprint
from sbx.usecases.run.recipe import Recipe
from sbx.usecases.run.request import RunRequest

if TYPE_CHECKING:
    from sbx.seams.session.mode import HostStreams
    from sbx.usecases.context import AppContext
    from sbx.usecases.run.plan import RunPlan

FORMAT: Final = 5
SWITCH_ENV: Final = "SBX_PLAN_CACHE"  # "0": never read or write the plan cache
# Shell bookkeeping that changes between identical commands and never reaches a plan.
VOLATILE_ENV: Final = frozenset({"_", "OLDPWD", "SHLVL"})
MAX_ENTRIES: Final = 64  # plan files kept per state home (the oldest go first)
MAX_KIT_FILES: Final = 2000  # a kit tree larger than this is not cached (hashing it would
MAX_KIT_BYTES: Final = 32 * 1024 * 1024  # cost more than planning)
CHUNK: Final = 1024 * 1024
MAX_ENTRY_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True)
class Hit:
    request: RunRequest
    recipe: Recipe | None  # None: the request of a named sandbox's start (no plan to cache)
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


def config_dependency(env: Mapping[str, str]) -> list[str | None]:
    """The config file as a plan depends on it: its path, where it leads, its bytes' digest."""
    path = paths.config_path(env)
    return [str(path), os.path.realpath(path), file_digest(path)]


# -- store and look up ---------------------------------------------------------------------------


def cache_dir(state_home: Path) -> Path:
    return state_home / "cache" / "plans"


def cacheable(plan: RunPlan) -> bool:
    """Plans that need nothing but an unprivileged container: everything else takes the full
    path (privilege and consent are decided afresh on every run, never read from a file)."""
    capabilities, composition, kit_set = plan.capabilities, plan.composition, plan.kit_set
    return (capabilities is not None and composition is not None and kit_set is not None
            and plan.name is None and plan.egress is None and not plan.spec.privileged
            and not capabilities.privileged
            and plan.network is None and plan.run_image_tag is None and not plan.volume_names
            and plan.workspace_volume is None
            and not composition.credentials and not capabilities.ports
            and not capabilities.published
            and not capabilities.volumes and not capabilities.host_mounts
            and not capabilities.skills_paths
            and all(k.local.image is None and not k.local.bundled for k in kit_set.kits))


def remember_start(ctx: AppContext, request: RunRequest) -> None:
    """Store the request of a run that started (or attached) an existing named sandbox: the
    next identical command line skips the parser and runs the same entry
    (sbx.usecases.run.entry.run), which reads the record and admits the sandbox afresh.
    Nothing the start decided is stored."""
    if ctx.argv is None or not enabled(ctx.env):
        return
    store(state_home=ctx.state_home, env=ctx.env, cwd=ctx.cwd, argv=ctx.argv,
          passthrough=ctx.passthrough, streams=ctx.streams, request=request, recipe=None,
          kit_dirs=[], verbose=ctx.verbose, traceback=ctx.traceback)


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
          recipe: Recipe | None, kit_dirs: Sequence[Path], verbose: int = 0,
          traceback: bool = False) -> bool:
    """Write the entry for this request; False when it could not be (or a kit directory is
    too large to be worth hashing). Without a recipe only the request is kept: it depends on
    the command line alone (the key), not on the config or any kit."""
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
            "deps": {"config": config_dependency(env) if recipe is not None else None,
                     "kits": kits},
            "request": _request_json(request),
            "verbose": verbose, "traceback": traceback,
            "recipe": recipe.to_json() if recipe is not None else None,
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
        if entry["recipe"] is None:  # a named sandbox's start: the parsed request only
            return Hit(_request_from_json(entry["request"], streams), None,
                       as_int(entry["verbose"]), as_bool(entry["traceback"]))
        deps = entry["deps"]
        if list(deps["config"]) != config_dependency(env):
            return None
        for directory, tree in deps["kits"]:
            if tree_digest(Path(directory)) != tree:
                return None
        request = _request_from_json(entry["request"], streams)
        recipe = Recipe.from_json(entry["recipe"])
        return Hit(request, recipe, as_int(entry["verbose"]), as_bool(entry["traceback"]))
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
    session = request.session
    data["session"] = None if session is None else [session.verb, session.value]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def _request_from_json(data: Mapping[str, Any], streams: HostStreams) -> RunRequest:
    known = {f.name for f in dataclasses.fields(RunRequest)} - {"host"}
    if set(data) != known:
        raise ValueError("request fields")
    timeout = data["timeout_s"]
    return RunRequest(
        workload=as_str(data["workload"]), workspace=as_opt_str(data["workspace"]),
        access=as_opt_str(data["access"]), mounts=tuple(as_strs(data["mounts"])),
        timeout_s=None if timeout is None else as_number(timeout),
        command=as_opt_strs(data["command"]), capture_output=as_bool(data["capture_output"]),
        kits=tuple(as_strs(data["kits"])), args=tuple(as_strs(data["args"])),
        allow_privileged=as_bool(data["allow_privileged"]),
        interactive=as_opt_bool(data["interactive"]), tty=as_opt_bool(data["tty"]),
        env=tuple(as_strs(data["env"])), env_files=tuple(as_strs(data["env_files"])),
        user=as_opt_str(data["user"]), detach_keys=as_opt_str(data["detach_keys"]),
        trust_workspace=as_bool(data["trust_workspace"]), name=as_opt_str(data["name"]),
        detach=as_bool(data["detach"]), accept=as_bool(data["accept"]),
        terminal_passthrough=as_bool(data["terminal_passthrough"]),
        recreate=as_bool(data["recreate"]), keep=as_opt_bool(data["keep"]),
        memory_bytes=_opt_int(data["memory_bytes"]), cpu_millis=_opt_int(data["cpu_millis"]),
        pids=_opt_int(data["pids"]), runtime=as_opt_str(data["runtime"]), host=streams,
        session=_session(data["session"]), clone=as_bool(data["clone"]),
        clone_volume=as_bool(data["clone_volume"]),
        idle_stop_s=None if data["idle_stop_s"] is None else as_number(data["idle_stop_s"]),
        publish=tuple(as_strs(data["publish"])), workspace_mode=as_str(data["workspace_mode"]),
        template=as_opt_str(data["template"]), engine=as_opt_str(data["engine"]))


def _session(value: object) -> SessionAsk | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("request session")
    return SessionAsk(as_str(value[0]), as_opt_str(value[1]))


def _opt_int(value: object) -> int | None:
    return None if value is None else as_int(value)


__all__ = ["FORMAT", "SWITCH_ENV", "VOLATILE_ENV", "Hit", "cacheable",
           "config_dependency", "file_digest", "forget", "lookup", "remember", "remember_start",
           "request_key", "store", "tree_digest"]
