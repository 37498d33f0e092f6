"""What planning decided for a request that holds for every run of it (a :class:`Recipe`),
and its JSON form, which the plan cache (sbx.usecases.plancache) stores.

Every run's container spec is assembled from a recipe (sbx.usecases.run.plan): a full plan makes
one from the kits, a cached run reads the one the full plan made. What depends on the moment
(the run's id, labels and deadline, the admitted host paths and variables, the session) is never
part of it, nor is privilege or the consent to it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sbx.base.strictjson import (
    as_bool,
    as_int,
    as_list,
    as_number,
    as_opt_str,
    as_opt_strs,
    as_str,
    as_str_map,
    as_strs,
)
from sbx.domain.sandbox.hardening import Limits
from sbx.domain.sandbox.limitflags import CONFIG_KEYS
from sbx.domain.sandbox.runtimes import RuntimeChoice
from sbx.seams.engine import ImageInfo
from sbx.seams.session.escape import parse_detach_keys


@dataclass(frozen=True)
class PlanFacts:
    """What a run reports about its kits, computed by the full plan and cached with it."""

    workload: str = ""
    kits: tuple[str, ...] = ()
    selection: Mapping[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"selected": [], "skipped": []})
    limits: Mapping[str, int] = field(default_factory=dict)
    privileged: bool = False  # never stored: a cached plan is never privileged


@dataclass(frozen=True)
class Recipe:
    """What planning decided that holds for every run of the same request: the planner's
    input (sbx.usecases.run.plan.assemble) on every run, fully planned or from the cache."""

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
    env: Mapping[str, str]  # the kits' exports and the capabilities' variables
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
    # The config's [sandbox] memory_bytes, cpu_millis, pids: what --memory, --cpus, --pids
    # may ask for at most (sbx.domain.sandbox.limitflags), on every run of this recipe.
    bounds: Mapping[str, int] = field(default_factory=dict)
    # The OCI runtime (--runtime or [sandbox] runtime) and where it was asked: checked against
    # the engine on every run, cached or not (sbx.domain.sandbox.runtimes); None: the default.
    runtime: str | None = None
    runtime_source: str = ""

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["facts"]["privileged"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recipe:
        """Raises KeyError, TypeError or ValueError on anything malformed."""
        image = dict(data["image"])
        facts = dict(data["facts"])
        recipe = cls(
            image=ImageInfo(
                id=as_str(image["id"]), tags=tuple(as_strs(image["tags"])),
                user=as_str(image["user"]), workdir=as_str(image["workdir"]),
                entrypoint=as_opt_strs(image["entrypoint"]), cmd=as_opt_strs(image["cmd"]),
                env=tuple(as_strs(image["env"])), labels=as_str_map(image["labels"])),
            image_tag=as_str(data["image_tag"]),
            images_used=tuple(as_strs(data["images_used"])),
            uid=as_int(data["uid"]), gid=as_int(data["gid"]),
            user_source=as_str(data["user_source"]),
            user_warnings=tuple(as_strs(data["user_warnings"])),
            owner=(None if data["owner"] is None
                   else (as_int(data["owner"][0]), as_int(data["owner"][1]),
                         as_int(data["owner"][2]))),
            timeout_s=as_number(data["timeout_s"]),
            limits={as_str(k): as_int(v) for k, v in dict(data["limits"]).items()},
            workspace_target=as_str(data["workspace_target"]),
            command=as_opt_strs(data["command"]), entrypoint=as_opt_strs(data["entrypoint"]),
            env=as_str_map(data["env"]), home=as_str(data["home"]),
            tmpfs={as_str(k): (as_int(v[0]), None if v[1] is None else as_int(v[1]))
                   for k, v in dict(data["tmpfs"]).items() if len(v) == 2},
            detach_keys=as_str(data["detach_keys"]),
            terminal_passthrough=as_bool(data["terminal_passthrough"]),
            runtime=as_opt_str(data["runtime"]), runtime_source=as_str(data["runtime_source"]),
            explain_command=as_str(data["explain_command"]), notes=tuple(as_strs(data["notes"])),
            blocked=tuple(as_strs(data["blocked"])),
            allowed_roots=tuple(as_strs(data["allowed_roots"])),
            facts=PlanFacts(
                workload=as_str(facts["workload"]), kits=tuple(as_strs(facts["kits"])),
                selection={as_str(k): [dict(r) for r in v]
                           for k, v in dict(facts["selection"]).items()},
                limits={as_str(k): as_int(v) for k, v in dict(facts["limits"]).items()}),
            kit_surfaces=tuple(kit_surface(k) for k in as_list(data["kit_surfaces"])),
            kit_files=tuple(kit_files_json(k) for k in as_list(data["kit_files"])),
            bounds={as_str(k): as_int(v) for k, v in dict(data["bounds"]).items()})
        if recipe.uid <= 0 or recipe.gid <= 0:
            raise ValueError("user")
        if len(recipe.tmpfs) != len(data["tmpfs"]):
            raise ValueError("tmpfs")
        if set(recipe.limits) != {f.name for f in dataclasses.fields(Limits)} \
                or not all(v > 0 for v in recipe.limits.values()):
            raise ValueError("limits")
        if set(recipe.bounds) != set(CONFIG_KEYS) or not all(v > 0 for v in recipe.bounds.values()):
            raise ValueError("bounds")
        if not math.isfinite(recipe.timeout_s) or recipe.timeout_s <= 0:
            raise ValueError("timeout_s")
        parse_detach_keys(recipe.detach_keys)  # ValueError when it does not parse
        return recipe

    @property
    def runtime_choice(self) -> RuntimeChoice | None:
        if self.runtime is None:
            return None
        return RuntimeChoice(self.runtime, self.runtime_source)


def kit_surface(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("permissions"), dict):
        raise TypeError("expected a kit surface")
    for key in ("reference", "path", "descriptor"):
        as_str(value.get(key))
    return value


def kit_files_json(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("expected kit files")
    as_str(value.get("named"))
    as_str(value.get("directory"))
    as_strs(value.get("files"))
    return value


__all__ = ["PlanFacts", "Recipe", "kit_files_json", "kit_surface"]
