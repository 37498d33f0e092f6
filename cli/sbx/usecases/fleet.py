"""A fleet of engines: which engine a command speaks to when ``[engines]`` names several.

A command is pointed at an engine by a context whose environment names it (``DOCKER_HOST``,
with :data:`ENGINE_NAME_ENV` so messages and the sandbox's record name the entry): everything
below, the transports included, stays the one-engine path. sbx chooses among the entries only
when the environment names no engine itself: ``DOCKER_HOST`` or ``DOCKER_CONTEXT`` set means
that engine, as today (``--engine NAME`` still picks an entry). A named sandbox lives on the
engine it was created on, recorded with it; a record without one is on the environment's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from sbx.base import labels as label_keys
from sbx.base.config import EngineEntry
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.placement import EngineLoad, place
from sbx.domain.sandbox.records import NAME_PATTERN, SandboxRecord
from sbx.seams.enginehost import ENGINE_NAME_ENV
from sbx.usecases.context import AppContext
from sbx.usecases.run.request import RunRequest
from sbx.usecases.sandboxstore import SandboxStore

# Every sbx sandbox container, whichever state home ran it, holds its engine's room.
SANDBOXES: dict[str, str] = {label_keys.MANAGED: "true", label_keys.ROLE: label_keys.ROLE_SANDBOX}


def configured(ctx: AppContext) -> tuple[EngineEntry, ...]:
    return ctx.load_config().engines


def chooses(ctx: AppContext) -> bool:
    """sbx picks the engine (placement, ls and gc across all): entries exist and the
    environment names no engine itself."""
    return not (ctx.env.get("DOCKER_HOST") or ctx.env.get("DOCKER_CONTEXT")) \
        and bool(configured(ctx))


def on_engine(ctx: AppContext, name: str, host: str) -> AppContext:
    """``ctx`` pointed at the engine ``host``, known as ``name``."""
    if ctx.env.get(ENGINE_NAME_ENV) == name and ctx.env.get("DOCKER_HOST") == host:
        return ctx
    env = {k: v for k, v in ctx.env.items() if k != "DOCKER_CONTEXT"}
    return dataclasses.replace(ctx, env={**env, "DOCKER_HOST": host, ENGINE_NAME_ENV: name})


def on_entry(ctx: AppContext, entry: EngineEntry) -> AppContext:
    return on_engine(ctx, entry.name, entry.host)


def named(ctx: AppContext, name: str) -> EngineEntry:
    """The entry ``--engine NAME`` picks; an unknown name is refused with the known ones."""
    entries = configured(ctx)
    entry = next((e for e in entries if e.name == name), None)
    if entry is not None:
        return entry
    known = ", ".join(e.name for e in entries) or "none"
    config = ctx.load_config().path
    raise SbxError(Reason.ENGINE_UNKNOWN,
                   f"--engine {name}: no such engine in [engines] of {config} "
                   f"(configured: {known})",
                   hint=f"Use one of: {known}; or add `{name} = \"ssh://USER@HOST\"` under "
                        f"[engines] in {config}.",
                   details={"engine": name, "configured": [e.name for e in entries]})


def current(ctx: AppContext) -> tuple[str | None, str | None]:
    """(entry name, host) of the engine ``ctx`` speaks to, for a new sandbox's record."""
    name = ctx.env.get(ENGINE_NAME_ENV)
    return (name, ctx.env.get("DOCKER_HOST")) if name else (None, None)


def for_record(ctx: AppContext, record: SandboxRecord) -> AppContext:
    """``ctx`` on the engine ``record`` was created on (its entry's host now, else the host
    recorded); a record of no entry: the environment's engine."""
    if record.engine is None:
        return ctx
    entry = next((e for e in configured(ctx) if e.name == record.engine), None)
    host = entry.host if entry is not None else record.engine_host
    return ctx if host is None else on_engine(ctx, record.engine, host)


def for_sandbox(ctx: AppContext, word: str) -> AppContext:
    """``ctx`` on the engine of the named sandbox ``word`` names (its name or run id); as it
    is for anything else (the command then says what the word names)."""
    store = SandboxStore(ctx.state_home)
    record = store.load(word) if NAME_PATTERN.fullmatch(word) else None
    if record is None and len(word) >= 12:
        for other in store.names():
            found = store.load(other)
            if found is not None and found.run_id.startswith(word):
                record = found
                break
    return ctx if record is None else for_record(ctx, record)


def for_new(ctx: AppContext, request: RunRequest) -> AppContext:
    """Where a run goes: an existing named sandbox's own engine; else ``--engine``; else,
    when sbx chooses, the least-loaded reachable entry; else ``ctx`` as it is."""
    record = SandboxStore(ctx.state_home).load(request.name) \
        if request.name is not None and NAME_PATTERN.fullmatch(request.name) else None
    if record is not None and record.container_id is not None:
        if request.engine is not None and request.engine != (record.engine or ""):
            raise SbxError(Reason.ENGINE_UNKNOWN,
                           f"--engine {request.engine}: {record.name} lives on "
                           f"{record.engine or 'the environment engine'}, where it was created",
                           hint=f"Leave --engine out: `sbx run --name {record.name}` reaches it.")
        return for_record(ctx, record)
    if request.engine is not None:
        return on_entry(ctx, named(ctx, request.engine))
    if not chooses(ctx):
        return ctx
    config = ctx.load_config()
    cpu = request.cpu_millis if request.cpu_millis is not None \
        else config.sandbox.cpu_millis.value
    memory = request.memory_bytes if request.memory_bytes is not None \
        else config.sandbox.memory_bytes.value
    return on_entry(ctx, placed(ctx, config.engines, cpu_millis=cpu, memory_bytes=memory))


@dataclass(frozen=True)
class Survey:
    """Every entry's load, or why it did not answer."""

    loads: list[EngineLoad]
    unreachable: dict[str, SbxError]


def survey(ctx: AppContext, entries: Sequence[EngineEntry]) -> Survey:
    loads: list[EngineLoad] = []
    unreachable: dict[str, SbxError] = {}
    for entry in entries:
        driver = on_entry(ctx, entry).driver
        try:
            info = driver.info()
            held = driver.reservations(SANDBOXES)
        except SbxError as error:
            unreachable[entry.name] = error
            continue
        loads.append(EngineLoad(entry.name, info.cpus * 1000, info.memory_bytes,
                                sum(r.cpu_millis for r in held),
                                sum(r.memory_bytes for r in held)))
    return Survey(loads, unreachable)


def placed(ctx: AppContext, entries: Sequence[EngineEntry], *, cpu_millis: int,
           memory_bytes: int) -> EngineEntry:
    """The entry a new sandbox goes to; refused when none answered."""
    found = survey(ctx, entries)
    name = place(found.loads, cpu_millis=cpu_millis, memory_bytes=memory_bytes)
    if name is None:
        why = "; ".join(f"{n}: {e.message}" for n, e in found.unreachable.items())
        raise SbxError(Reason.DOCKER_UNREACHABLE,
                       f"no engine of [engines] answered ({why})",
                       hint="Check each engine (`docker -H HOST info`), or pick one that "
                            "works with --engine NAME.",
                       details={"unreachable": sorted(found.unreachable)})
    return next(e for e in entries if e.name == name)


def every_engine(ctx: AppContext) -> list[tuple[str | None, AppContext]]:
    """(entry name, context) for each engine a listing covers: every entry when sbx chooses,
    else the environment's (name None); and the engine of every recorded sandbox."""
    found: list[tuple[str | None, AppContext]] = [(e.name, on_entry(ctx, e))
                                                   for e in configured(ctx)] \
        if chooses(ctx) else [(None, ctx)]
    names = {name for name, _ in found}
    store = SandboxStore(ctx.state_home)
    for other in store.names():
        record = store.load(other)
        if record is None:
            continue
        if record.engine is None and None not in names:
            found.append((None, ctx))
            names.add(None)
        elif record.engine is not None and record.engine not in names:
            found.append((record.engine, for_record(ctx, record)))
            names.add(record.engine)
    return found


@dataclass(frozen=True)
class Daemon:
    """The engines of a listing that reach one daemon: the first one's name and context, the
    later names that reach it too, and why its /info did not answer (None: it did)."""

    name: str | None
    ctx: AppContext
    aliases: tuple[str | None, ...] = ()
    error: SbxError | None = None


def distinct(engines: Sequence[tuple[str | None, AppContext]]) -> list[Daemon]:
    """``engines`` by the daemon each reaches (its /info ID, with its host name and data root:
    see EngineInfo), in order: two entries naming one daemon (``unix:///var/run/docker.sock``
    and the default) would list its containers twice. One whose /info fails or gives no ID
    stands alone."""
    found: list[Daemon] = []
    first: dict[tuple[str, str, str], int] = {}  # daemon -> its index in found
    for name, on in engines:
        try:
            info = on.driver.info()
        except SbxError as error:
            found.append(Daemon(name, on, error=error))
            continue
        ident = (info.engine_id, info.host_name, info.data_root)
        if ident in first:
            kept = found[first[ident]]
            found[first[ident]] = dataclasses.replace(kept, aliases=(*kept.aliases, name))
            continue
        if info.engine_id:
            first[ident] = len(found)
        found.append(Daemon(name, on))
    return found


__all__ = ["SANDBOXES", "Daemon", "Survey", "chooses", "configured", "current", "distinct",
           "every_engine", "for_new", "for_record", "for_sandbox", "named", "on_engine",
           "on_entry", "placed", "survey"]
