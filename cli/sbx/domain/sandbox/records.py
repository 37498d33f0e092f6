"""Named sandboxes' records: what a sandbox was created with, kept in the state home.

``<state>/sandboxes/<name>/sandbox.json`` holds the creation request (so a later ``sbx run
--name`` starts the sandbox exactly as it was created) and the ids of what it owns (container,
network, volumes, per-run image). Everything it owns also carries the label ``dev.sbx.name``,
so ``sbx ls``/``rm`` and ``gc`` can find it even when the record is gone.

A name is 2-63 characters, ``[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]``, unique per state home;
creating one takes an exclusive lock on the name (:class:`sbx.usecases.sandboxstore.SandboxStore`,
which keeps the records on disk), so two concurrent ``sbx run --name N`` create it exactly once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

SANDBOXES_DIR: Final = "sandboxes"
RECORD_FILE: Final = "sandbox.json"
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,61}[A-Za-z0-9]")
RECORD_VERSION: Final = 1
MAX_RECORD_BYTES: Final = 1024 * 1024


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        shown = name if len(name) <= 80 and name.isprintable() else repr(name[:80])
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{shown!s} is not a sandbox name: 2-63 letters, digits, '.' or '-', "
                       "starting and ending with a letter or digit",
                       hint="e.g. --name my-agent")
    return name


@dataclass
class SandboxRecord:
    """A named sandbox as created. ``request`` is the creation request (kits, args, workspace,
    mounts, user, limits...), replayed on every start; never a secret value."""

    name: str
    run_id: str
    created: float
    workload: str
    kits: list[str]
    workspace: str | None
    access: str
    request: dict[str, Any]
    container_id: str | None = None
    network: str | None = None
    volumes: list[str] = field(default_factory=list)
    image: str | None = None  # the per-sandbox image the create step committed
    home_volume: str | None = None
    tty: bool = True
    # The [engines] entry it was created on (None: the engine the environment names)
    engine: str | None = None
    engine_host: str | None = None
    version: int = RECORD_VERSION

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str, where: Path) -> SandboxRecord:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
                raise ValueError("not a version-1 record")
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (ValueError, TypeError, RecursionError) as exc:
            raise SbxError(Reason.STATE_CORRUPT, f"the record {where} cannot be read ({exc})",
                           hint="Remove the sandbox with `sbx rm -f NAME` (its objects are "
                                "found by label) and create it again.") from exc


def kit_words(record: SandboxRecord) -> tuple[str, tuple[str, ...]]:
    """The workload and mixins as they can be found from anywhere (absolute paths, registry
    references), as recorded at creation; else as they were given."""
    state = record.request.get("kits_state")
    if isinstance(state, Mapping) and isinstance(state.get("workload"), str) \
            and isinstance(state.get("mixins"), list):
        return state["workload"], tuple(str(m) for m in state["mixins"])
    return record.workload, tuple(record.kits)


def record_summary(record: SandboxRecord) -> Mapping[str, Any]:
    return {"name": record.name, "workload": record.workload, "kits": record.kits,
            "workspace": record.workspace, "created": record.created}


__all__ = ["NAME_PATTERN", "SandboxRecord", "check_name", "kit_words",
           "record_summary"]
