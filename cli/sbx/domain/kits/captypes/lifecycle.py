"""``lifecycle@1``: install and startup hooks, files written before the workload, and the
argv tail of an interactive launch.

Hooks and files concatenate across kits in dependency order; one file path has one author and
the interactive tail has one author. Not on the surface (it runs on the entrypoint's own trust
plane). Planned as files and hooks for the create step and the startup wrapper
(sbx.domain.sandbox.lifecycle).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    CapabilityEntry,
    Handler,
    Merge,
    Out,
    blank_command,
    clean_path,
    items,
    mapping,
    mappings,
    opt_str,
    str_list,
)
from sbx.domain.kits.composed import FileWrite, Hook, Lifecycle
from sbx.domain.kits.types import LIFECYCLE

if TYPE_CHECKING:
    from sbx.domain.kits.captypes.base import SandboxPlanner
    from sbx.domain.kits.composed import ComposedParts, FileWrite, Hook, Lifecycle, Origin


class LifecycleType(Handler):
    types = (LIFECYCLE,)
    singleton = True
    on_surface = False
    implemented = True

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        if not any(items(config.get(k)) for k in ("install", "startup", "files", "interactive")):
            out.add(entry.at("config"), "lifecycle declares no hooks, no files and no "
                                        "interactive tail; drop the entry instead")
        for hook_kind in ("install", "startup"):
            for j, hook in enumerate(items(config.get(hook_kind))):
                command = mapping(hook).get("command")
                if blank_command(command):
                    out.add(entry.at("config", hook_kind, j, "command"), "must name a command")

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        merge.asks("lifecycle").append((origin, config, optional))

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["lifecycle"] = _merged(merge, merge.asks("lifecycle"))

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        if composition.lifecycle is not None:
            yield LIFECYCLE, composition.lifecycle.config(), composition.lifecycle.optional

    def plan(self, composition: ComposedParts, planner: SandboxPlanner) -> None:
        lifecycle = composition.lifecycle
        if lifecycle is None:
            return
        planner.add_hooks(lifecycle.install, lifecycle.startup)
        for f in lifecycle.files:
            # declared_at is the declaration path; index counts selected entries only.
            planner.add_file(kit=f.kit,
                             where=f"{f.declared_at or f'capabilities[{f.index}]'}"
                                   f".config.files[{f.position}]",
                             path=f.path, content=f.content,
                             mode=int(f.mode, 8) if f.mode else None, overwrite=f.overwrite)


def _merged(merge: Merge, asks: list[tuple[Origin, Mapping[str, Any], bool]],
            ) -> Lifecycle | None:
    if not asks:
        return None
    install: list[Hook] = []
    startup: list[Hook] = []
    files: list[FileWrite] = []
    written: dict[str, Origin] = {}
    interactive: tuple[str, ...] | None = None
    interactive_origin: Origin | None = None
    for origin, cfg, _optional in asks:
        install.extend(_hooks("install", cfg, origin))
        startup.extend(_hooks("startup", cfg, origin))
        for position, spec in enumerate(mappings(cfg.get("files"))):
            path = clean_path(str(spec.get("path", "")))
            if path in written:
                merge.problem(f"{written[path]} and {origin} both write {path}; one file has "
                              "one author")
                continue
            written[path] = origin
            files.append(FileWrite(
                path, str(spec.get("content", "")), opt_str(spec.get("mode")),
                spec.get("overwrite", True) is not False, opt_str(spec.get("description")),
                dict(spec), origin.kit, origin.index, position, origin.path))
        tail = cfg.get("interactive")
        if isinstance(tail, list) and tail:  # an empty tail states nothing and is dropped
            if interactive_origin is not None:
                merge.problem(f"{interactive_origin} and {origin} both declare a lifecycle "
                              "interactive tail; it replaces the launch command's arguments, "
                              "so it has one author")
                continue
            interactive = tuple(str(arg) for arg in tail)
            interactive_origin = origin
    return Lifecycle(tuple(install), tuple(startup), tuple(files), interactive,
                     interactive_origin, all(o for *_, o in asks),
                     tuple(origin for origin, *_ in asks))


def _hooks(stage: Any, cfg: Mapping[str, Any], origin: Origin) -> list[Hook]:
    hooks: list[Hook] = []
    for position, hook in enumerate(mappings(cfg.get(stage))):
        command = hook.get("command")
        cmd: str | tuple[str, ...] = (tuple(str(a) for a in command)
                                      if isinstance(command, list) else str(command or ""))
        hooks.append(Hook(stage, cmd, opt_str(hook.get("user")),
                          tuple(str_list(hook.get("env"))), hook.get("background") is True,
                          opt_str(hook.get("description")), dict(hook), origin.kit,
                          origin.index, position, origin.path))
    return hooks


HANDLER: Final = LifecycleType()

__all__ = ["HANDLER", "LifecycleType"]
