"""`sbx ls` and the lookups of a named sandbox by its record and its labels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord, SandboxStore, check_name
from sbx.usecases.context import AppContext

if TYPE_CHECKING:
    from sbx.seams.engine import OwnedObject
@dataclass(frozen=True)
class SandboxStatus:
    name: str
    workload: str
    kits: list[str]
    status: str
    workspace: str | None
    created: float
    home_bounded: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "workload": self.workload, "kits": self.kits,
                "status": self.status, "workspace": self.workspace,
                "created": round(self.created, 3), "home_bounded": self.home_bounded}


def list_sandboxes(ctx: AppContext, *, include_runs: bool) -> list[SandboxStatus]:
    store = SandboxStore(ctx.state_home)
    owned = ctx.driver.list_owned(label_keys.home_selector(ctx.home_hash))
    states = {o.id: o.state for o in owned if o.kind == "container"}
    found = []
    sandboxes: dict[str, str] = {}  # container id -> the name sbx recorded for it
    for name in store.names():
        record = store.load(name)
        if record is None:
            continue
        sandboxes[record.container_id or ""] = record.name
        state = states.get(record.container_id or "", "missing")
        found.append(SandboxStatus(record.name, record.workload, record.kits, state,
                                   record.workspace, record.created,
                                   bool(record.request.get("home_bounded"))))
    if include_runs:
        for obj in owned:
            # A dev.sbx.name label counts only on the container sbx recorded under it (an
            # image's own label is shadowed empty, and proves nothing either way).
            label = label_keys.value(obj.labels, label_keys.NAME)
            if obj.kind != "container" or (label is not None and sandboxes.get(obj.id) == label) \
                    or obj.labels.get(label_keys.ROLE) != label_keys.ROLE_SANDBOX:
                continue
            found.append(SandboxStatus(f"(run {obj.labels.get(label_keys.RUN, '')[:12]})",
                                       obj.labels.get(label_keys.KITS, "").split(",")[0],
                                       obj.labels.get(label_keys.KITS, "").split(",")[1:],
                                       obj.state, None, 0.0, True))
    return found


def load_named(ctx: AppContext, name: str) -> SandboxRecord:
    record = SandboxStore(ctx.state_home).load(check_name(name))
    if record is None or record.container_id is None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name}",
                       hint="`sbx ls` lists them; `sbx run --name NAME WORKLOAD` creates one.")
    return record


def owned_objects(ctx: AppContext, name: str, *, recorded_only: bool = False) -> list[OwnedObject]:
    """This home's objects labelled as sandbox ``name``'s; with ``recorded_only``, only those
    whose run sbx recorded as creating ``name`` (a half-made sandbox), not whatever carries
    the label."""
    found = ctx.driver.list_owned({**label_keys.home_selector(ctx.home_hash),
                                   label_keys.NAME: name})
    if not recorded_only:
        return found
    return [o for o in found if _recorded_name(ctx, o.labels.get(label_keys.RUN, "")) == name]


def _recorded_name(ctx: AppContext, run_id: str) -> str | None:
    if not runrecord.RUN_ID.fullmatch(run_id):
        return None
    record = runrecord.read(runrecord.run_dir(ctx.state_home, run_id))
    name = record.get("name") if record is not None else None
    return name if isinstance(name, str) else None
