"""The value model: resolved settings, each with the place it came from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from sbx.base.config.check import (
    config_schema,
    cross_field_message,
    source_label,
    strict_validator,
    value_message,
)
from sbx.base.config.defaults import CROSS_KEYS, DEFAULTS
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

T = TypeVar("T")


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A resolved setting and where it came from."""

    value: T
    source: str  # "default", "<path>:<line>", or "flag --timeout"


@dataclass(frozen=True)
class SandboxSettings:
    memory_bytes: Sourced[int]
    pids: Sourced[int]
    cpu_millis: Sourced[int]
    tmp_bytes: Sourced[int]
    workspace_bytes: Sourced[int]
    home_bytes: Sourced[int]
    timeout_ms: Sourced[int]
    user: Sourced[int]  # fallback uid when the image's USER is root/unset; gid = same number
    root_workspace: Sourced[str]  # "refuse" | "sandbox-user": a root-owned rw workspace
    detach_keys: Sourced[str]  # the keys that end a TTY session from the host
    # pass the sandbox's clipboard, title, hyperlink... sequences to the user's terminal
    terminal_passthrough: Sourced[bool]
    runtime: Sourced[str | None]  # the OCI runtime every container of a sandbox runs on
    # which workloads `sbx run` keeps as a sandbox per workspace: "agents" | "always" | "never"
    keep: Sourced[str]
    # --workspace-mode copy: the most file data a workspace may hold to be copied in
    workspace_copy_bytes: Sourced[int]
    # seconds a named sandbox may stay idle before its keeper stops it (sbx.domain.sandbox.idle)
    idle_stop: Sourced[int | None]


@dataclass(frozen=True)
class NetworkSettings:
    upstream_proxy: Sourced[str | None]
    upstream_ca_file: Sourced[str | None]
    proxy_bind_host: Sourced[str]  # "" = chosen automatically


@dataclass(frozen=True)
class MountSettings:
    allowed_roots: Sourced[tuple[str, ...]]  # empty = no allowed-roots restriction
    blocked: Sourced[tuple[str, ...]]


@dataclass(frozen=True)
class GcSettings:
    grace_seconds: Sourced[int]
    batch_size: Sourced[int]
    named_ttl: Sourced[int | None]  # None: gc never removes a named sandbox by itself
    image_idle_seconds: Sourced[int]  # cached images nobody used for this long are removed


@dataclass(frozen=True)
class EngineEntry:
    """One ``[engines]`` entry: an engine sbx may place sandboxes on, by the name it is given."""

    name: str
    host: str  # DOCKER_HOST form: ssh://[user@]host[:port], unix:///path, tcp://host[:port]
    source: str  # "<path>:<line>"


@dataclass(frozen=True)
class Config:
    """The resolved configuration; every value carries its :class:`Sourced` provenance."""

    path: Path
    exists: bool
    sandbox: SandboxSettings
    network: NetworkSettings
    mounts: MountSettings
    gc: GcSettings
    engines: tuple[EngineEntry, ...] = ()  # in file order; empty: the one engine of today

    def engine(self, name: str) -> EngineEntry | None:
        return next((e for e in self.engines if e.name == name), None)

    def with_sandbox_override(self, key: str, value: int, source: str) -> Config:
        """Return a copy with ``sandbox.<key>`` set from a flag (flags beat the config file).

        The value gets the same bounds as in the file and the cross-field rule is checked again
        on the effective values; a violation raises :class:`SbxError` with
        ``Reason.INVALID_ARGUMENT`` naming ``source`` (e.g. ``"flag --timeout"``).
        """
        names = [f.name for f in dataclasses.fields(SandboxSettings)
                 if f.name not in ("root_workspace", "detach_keys", "terminal_passthrough",
                                   "runtime", "keep", "workspace_copy_bytes",
                                   "idle_stop")]
        if key not in names:
            raise ValueError(f"unknown sandbox setting {key!r}; expected one of {names}")
        override = Sourced(value, source)
        sandbox = dataclasses.replace(self.sandbox, **{key: cast(Any, override)})
        dotted = f"sandbox.{key}"
        subschema = config_schema()["properties"]["sandbox"]["properties"][key]
        # A wrong type first: bounds on a value of the wrong type only repeat the point.
        errors = sorted(strict_validator(subschema).iter_errors(value),
                        key=lambda e: (e.validator != "type", str(e.validator)))
        if errors:
            message: str | None = value_message(errors[0], dotted, value)
        else:
            cross: dict[str, Sourced[int]] = {k: getattr(sandbox, k) for k in CROSS_KEYS}
            message = cross_field_message(
                {k: s.value for k, s in cross.items()},
                {k: source_label(s.source, override=k == key) for k, s in cross.items()},
            )
        if message is None:
            return dataclasses.replace(self, sandbox=sandbox)
        raise SbxError(
            Reason.INVALID_ARGUMENT,
            f"{source}: {dotted} = {value!r} is refused: {message}",
            hint=f"Pass a value that fits, or adjust the other [sandbox] settings in "
                 f"{self.path}.",
            details={"flag": source, "key": dotted, "value": value, "problem": message},
        )

    def provenance(self) -> list[tuple[str, object, str]]:
        """Return ``(dotted key, value, source)`` for every setting, in :data:`DEFAULTS` order."""
        rows: list[tuple[str, object, str]] = []
        for section in DEFAULTS:
            settings = getattr(self, section)
            for field in dataclasses.fields(settings):
                sourced: Sourced[object] = getattr(settings, field.name)
                rows.append((f"{section}.{field.name}", sourced.value, sourced.source))
        rows.extend((f"engines.{e.name}", e.host, e.source) for e in self.engines)
        return rows


__all__ = ["Config", "EngineEntry", "GcSettings", "MountSettings", "NetworkSettings",
           "SandboxSettings", "Sourced"]
