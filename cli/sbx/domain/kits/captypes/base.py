"""What every capability type handler is made of, and the shared vocabulary they use.

A handler (one module per type under :mod:`sbx.domain.kits.captypes`) owns its type end to
end: the config rules a schema cannot state and its arity keys (:mod:`sbx.domain.kits.rules`
drives them), how its entries merge across kits (:mod:`sbx.domain.kits.compose`), what it puts
on the permission surface and how it widens (:mod:`sbx.domain.kits.surface`), and what it asks
of the sandbox (:mod:`sbx.domain.sandbox.capabilities` supplies a :class:`SandboxPlanner`).

Handlers read decoded plain data of any shape: the schema pass reports shape errors, so a rule
skips what it cannot read rather than fail. Nothing here imports the composer: the surface (a
pull, a run of a locked kit) loads handlers without it; merge code builds the value model of
:mod:`sbx.domain.kits.composed`, which imports nothing of the kits package.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, Protocol, TypeVar

from sbx.domain.kits.composed import MergedRequest, canonical_config
from sbx.domain.kits.diagnostics import Finding, Parts, format_path
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.surfacetypes import Widening

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts, Origin
    from sbx.domain.kits.selectionrecord import SelectionRecord
    from sbx.domain.kits.surfacetypes import Surface, Widening

T = TypeVar("T")
NS: Final = "com.docker.sandbox/"
Phase = Literal["install", "runtime"]
PHASES: Final[tuple[Phase, Phase]] = ("install", "runtime")
TYPE_PATTERN: Final = re.compile(
    r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-z0-9]([a-z0-9-]*[a-z0-9])?@[1-9][0-9]*")


# -- small readers that never fail on a malformed document --------------------------------------

def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def strings(value: Any) -> list[str]:
    return [v for v in items(value) if isinstance(v, str)]


def str_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def mappings(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def deferred(value: Any) -> bool:
    """Whether a value (anywhere inside it) still carries a kit placeholder."""
    if isinstance(value, str):
        return contains_placeholder(value)
    if isinstance(value, Mapping):
        return any(deferred(k) or deferred(v) for k, v in value.items())
    if isinstance(value, list):
        return any(deferred(v) for v in value)
    return False


def literal_phases(value: Any) -> list[str]:
    """The literal phases of a credential/ssh-agent ``phase`` (scalar or list), deduplicated."""
    raw = value if isinstance(value, list) else [value]
    return list(dict.fromkeys(p for p in raw if isinstance(p, str) and p in PHASES))


def merge_phases(value: Any) -> list[Phase]:
    """A ``phase`` field (one phase or a list) as the distinct phases it names, in phase order."""
    raw = [value] if isinstance(value, str) else str_list(value)
    return [phase for phase in PHASES if phase in raw]


def phase_list(value: Any) -> list[str] | None:
    """``phase`` as the surface reads it; None when it does not decode."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def strip_port(host: str) -> str:
    return host.split(":", 1)[0]


def blank_command(command: Any) -> bool:
    if isinstance(command, list) and command:
        first = command[0]
        return isinstance(first, str) and not first.strip()
    return False


def literal_argv(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return None if contains_placeholder(value) else ["sh", "-c", value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and not deferred(value):
        return list(value)
    return None


def walk_strings(value: Any, parts: Parts) -> Iterator[tuple[Parts, str, bool]]:
    """(path, text, is_key) for every string value and mapping key in a document."""
    if isinstance(value, str):
        yield parts, value, False
    elif isinstance(value, Mapping):
        for key, child in value.items():
            if isinstance(key, str):
                yield (*parts, key), key, True
            yield from walk_strings(child, (*parts, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from walk_strings(child, (*parts, i))


def canonical_json(value: Any) -> str:
    """The rules' exact-duplicate key of a config."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def clean_path(path: str) -> str:
    """Lexically clean an absolute in-container path (``/a/./b//c/`` → ``/a/b/c``)."""
    if not path:
        return path
    cleaned = posixpath.normpath(path)
    # normpath keeps a leading "//" (POSIX allows it to mean something); paths here never do.
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


_SIZE: Final = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtpe]?)(i?)(b?)\s*$", re.IGNORECASE)
_UNITS: Final = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}


def size_bytes(size: str) -> int | None:
    """``512m``/``2g``/``1gib`` → bytes (powers of 1024); ``None`` when it is not a size."""
    match = _SIZE.match(size)
    if match is None:
        return None
    # Here, not at the top: a surface (a pull) loads this module and never reads a size.
    from decimal import Decimal, InvalidOperation

    try:
        number = Decimal(match.group(1))
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
        return None
    return int(number * (1024 ** _UNITS[match.group(2).lower()]))


# -- the rules' vocabulary ------------------------------------------------------------------------

@dataclass(frozen=True)
class CapabilityEntry:
    """One ordinary capability entry and where it sits."""

    path: Parts
    data: Mapping[str, Any]

    @property
    def type(self) -> str | None:
        ctype = string(self.data.get("type"))
        return ctype if ctype is not None and TYPE_PATTERN.fullmatch(ctype) else None

    @property
    def config(self) -> Mapping[str, Any]:
        return mapping(self.data.get("config"))

    @property
    def source_kit(self) -> str | None:
        """The kit a republished descriptor says this entry came from (``source.kit``)."""
        kit = mapping(self.data.get("source")).get("kit")
        return kit if isinstance(kit, str) and kit else None

    def at(self, *parts: str | int) -> Parts:
        return (*self.path, *parts)


@dataclass
class Out:
    found: list[Finding] = field(default_factory=list)

    def add(self, parts: Parts, message: str, *, on_key: bool = False) -> None:
        self.found.append(Finding(tuple(parts), message, on_key))


class Keys:
    """First declaration of each dedup key within a block."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], Parts] = {}

    def claim(self, space: str, key: str, path: Parts) -> Parts | None:
        previous = self.seen.get((space, key))
        if previous is None:
            self.seen[(space, key)] = path
        return previous


@dataclass(frozen=True)
class Block:
    """One declaration block (top-level entries, one group's members, or one source kit's
    entries of either) as the cross-entry rules see it."""

    entries: Sequence[CapabilityEntry]
    keys: Keys
    inject: bool  # whether inject-within-allow is judged here (groups defer it to selection)

    def first(self, ctype: str) -> CapabilityEntry | None:
        return next((e for e in self.entries if e.type == ctype), None)

    def of(self, *ctypes: str) -> list[CapabilityEntry]:
        return [e for e in self.entries if e.type in ctypes]


def show(parts: Parts) -> str:
    return format_path(parts)


# -- the composer's vocabulary --------------------------------------------------------------------

@dataclass
class Keyed:
    origin: Origin
    item: Mapping[str, Any]
    optional: bool
    origins: list[Origin]


def config_of(item: Mapping[str, Any]) -> dict[str, Any]:
    config = item.get("config")
    return dict(config) if isinstance(config, Mapping) else {}


def restated(held: Keyed, origin: Origin, optional: bool) -> None:
    held.origins.append(origin)
    # Optional says the asker degrades without it; one asker that does not degrade decides.
    held.optional = held.optional and optional


def merged(keyed: Keyed) -> MergedRequest:
    config = keyed.item.get("config")
    plain = dict(config) if isinstance(config, Mapping) and config else None
    return MergedRequest(str(keyed.item.get("type", "")), plain, keyed.optional,
                         tuple(keyed.origins))


class Merge:
    """The composer's running state: every problem so far, and each handler's own tables."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self._tables: dict[str, Any] = {}

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def table(self, name: str) -> dict[str, Keyed]:
        """A keyed table shared by every handler naming it (volume and host-mount share one
        storage key; the config-less types and unknown ones share the presence table)."""
        table: dict[str, Keyed] = self._tables.setdefault(name, {})
        return table

    def asks(self, name: str) -> list[Any]:
        """A list of raw asks a handler folds itself at :meth:`Handler.finish`."""
        asks: list[Any] = self._tables.setdefault(name, [])
        return asks

    def state(self, name: str, factory: Callable[[], T]) -> T:
        """A handler's own accumulator, made by ``factory`` on first use."""
        if name not in self._tables:
            self._tables[name] = factory()
        value: T = self._tables[name]
        return value

    def collapse(self, name: str, key: str, origin: Origin, item: Mapping[str, Any],
                 optional: bool) -> None:
        table = self.table(name)
        held = table.get(key)
        if held is None:
            table[key] = Keyed(origin, item, optional, [origin])
        else:
            restated(held, origin, optional)


PRESENCE: Final = "presence"  # the table of config-less and unknown requests
SOLE: Final = "sole"  # requests that describe the whole sandbox: one author each


def add_sole(merge: Merge, origin: Origin, ctype: str, label: str, item: Mapping[str, Any],
             optional: bool) -> None:
    """One author per sandbox-wide request; an identical restatement is the same request."""
    table = merge.table(SOLE)
    held = table.get(ctype)
    if held is None:
        table[ctype] = Keyed(origin, item, optional, [origin])
        return
    if canonical_config(held.item.get("config")) != canonical_config(item.get("config")):
        merge.problem(f"{held.origin} and {origin} both declare {label} with different "
                      "settings; it describes the whole sandbox, so it has one author")
        return
    restated(held, origin, optional)


def sole(merge: Merge, ctype: str) -> MergedRequest | None:
    held = merge.table(SOLE).get(ctype)
    return merged(held) if held is not None else None


# -- the planner's vocabulary ---------------------------------------------------------------------

class KitContent(Protocol):
    """Where a kit's own files are (sbx.domain.kits.local.LocalKit)."""

    @property
    def reference(self) -> str: ...
    @property
    def directory(self) -> Path: ...
    @property
    def stem(self) -> str: ...
    @property
    def image(self) -> str | None: ...


class Bounds(Protocol):
    """The limits a plan works within (sbx.domain.sandbox.hardening.Limits)."""

    @property
    def memory_bytes(self) -> int: ...
    @property
    def cpu_millis(self) -> int: ...
    @property
    def tmp_bytes(self) -> int: ...
    @property
    def workspace_bytes(self) -> int: ...
    @property
    def home_bytes(self) -> int: ...


class SandboxPlanner(Protocol):
    """What a handler may ask of the sandbox it is planned into (implemented by
    sbx.domain.sandbox.capabilities): every request is recorded there, in handler order."""

    @property
    def limits(self) -> Bounds: ...
    @property
    def allow_privileged(self) -> bool: ...
    @property
    def workspace_target(self) -> str: ...
    @property
    def volume_sizes_enforced(self) -> bool: ...
    @property
    def named(self) -> bool | None: ...
    @property
    def kits(self) -> Mapping[str, KitContent]: ...

    def set_limits(self, *, memory_bytes: int, cpu_millis: int) -> None: ...
    def set_privileged(self) -> None: ...
    def add_tmpfs(self, path: str, size: int, mode: int | None) -> None: ...
    def mount_at(self, path: str) -> bool: ...
    def add_volume(self, path: str, mode: int | None, size: int | None) -> None: ...
    def add_file(self, *, kit: str, where: str, path: str, content: str, mode: int | None,
                 overwrite: bool = True) -> None: ...
    def add_port(self, port: int) -> None: ...
    def add_env(self, name: str, value: str) -> None: ...
    def git_identity(self) -> tuple[str, str] | None: ...
    def ssh_agent_missing(self) -> str | None: ...
    def add_host_mount(self, path: str, mode: int | None, kit: str) -> None: ...
    def add_skills_destination(self, path: str) -> None: ...
    def add_bundle_destination(self, path: str) -> None: ...
    def add_ssh_agent(
        self, grants: Sequence[tuple[str, bool, tuple[str, ...], tuple[str, ...]]]) -> None: ...
    def add_kit_registry(self) -> None: ...
    def add_hooks(self, install: Sequence[Any], startup: Sequence[Any]) -> None: ...
    def skip(self, record: SelectionRecord) -> None: ...
    def note(self, text: str) -> None: ...


class Handler:
    """One capability type (or the versions of one, for network-policy). Every hook has a
    default that does nothing, so a type states only what it owns."""

    types: ClassVar[tuple[str, ...]] = ()
    singleton: ClassVar[bool] = False  # at most one entry per declaration block
    configless: ClassVar[bool] = False  # any config, even {} or null, is an error (schema)
    on_surface: ClassVar[bool] = True  # False: grants nothing across the boundary (NOT_SURFACE)
    implemented: ClassVar[bool] = False  # sbx provides it (selection admits it)
    refusal: ClassVar[str] = ""  # why sbx does not provide a type it knows (selection's reason)

    # -- rules (sbx.domain.kits.rules) --------------------------------------------------------

    def check_entry(self, entry: CapabilityEntry, kind: str | None, out: Out) -> None:
        """Rules that need no config (workload-only types)."""

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        """Rules over one entry's config (a mapping) that its schema cannot state."""

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        """Instance keys: claim each and report a second declaration of one."""

    def check_block(self, block: Block, out: Out) -> None:
        """Cross-entry rules this type owns within one declaration block."""

    # -- composition (sbx.domain.kits.compose) ------------------------------------------------

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        """One selected entry, in dependency order."""
        ctype = str(item.get("type", ""))
        # Config-less types key on the type alone (presence union); others on the whole
        # request, so an exact duplicate collapses and anything else is a second ask.
        key = ctype if self.configless else ctype + "\0" + canonical_config(item.get("config"))
        merge.collapse(PRESENCE, key, origin, item, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        """Fold what :meth:`add` collected into ``parts`` (Composition fields by name)."""

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        """This type's merged requests as (type, config, optional) descriptor entries."""
        return ()

    # -- surface and gate (sbx.domain.kits.surface) -------------------------------------------

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        """Add one entry's grants; False when it is not decodable (it then becomes a services
        digest, which cannot under-state the request)."""
        return False

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        """Every way ``candidate`` exceeds ``granted`` in this type's surface fields."""
        return iter(())

    # -- the sandbox (sbx.domain.sandbox.capabilities) ----------------------------------------

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        """What this type asks of the sandbox; raise ``SbxError`` to refuse."""


def missing(category: str, granted: Iterable[str], candidate: Iterable[str],
            ) -> Iterator[Widening]:
    """Entries of ``candidate`` not in ``granted``, as widenings of ``category``."""
    have = set(granted)
    for entry in candidate:
        if entry not in have:
            yield Widening(category, entry)


__all__ = [
    "NS", "PHASES", "PRESENCE", "SOLE", "TYPE_PATTERN", "Block", "Bounds", "CapabilityEntry",
    "Handler", "KitContent", "add_sole", "sole",
    "Keyed", "Keys", "Merge", "Out", "SandboxPlanner", "blank_command",
    "canonical_json", "clean_path", "config_of", "deferred", "items", "literal_argv",
    "literal_phases", "mapping", "mappings", "merge_phases", "merged", "missing", "opt_str",
    "phase_list", "restated", "show", "size_bytes", "str_list", "string", "strings",
    "strip_port", "walk_strings",
]
