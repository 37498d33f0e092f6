"""``runs/<id>/``: the record every run (and each of doctor's probes) keeps in the state home.

The record says what a run created, so ``sbx gc`` can remove what a crash left behind, and
``sbx explain`` and the keeper can find a run's container. This module names the record and
its places; :mod:`sbx.usecases.runstore` is the only writer of ``run.json``; gc reads it
defensively (:func:`sbx.usecases.gc.listing._read_record`) because a crash can leave it torn.
The owner lock (``owner.lock``), held for as long as the owning process lives, tells gc an
orphaned run from a live one: a pid can be reused, a lock cannot.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

RUNS_DIR: Final = "runs"
RUN_RECORD: Final = "run.json"
OWNER_LOCK: Final = "owner.lock"
LOGINS_DIR: Final = "oauth"  # OAuth logins made inside the sandbox, its own (0600)
MAX_RECORD_BYTES: Final = 1024 * 1024
RUN_ID: Final = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class RunRecord:
    """What ``run.json`` holds. Fields gc reads: pid, deadline, proxy_pid, name."""

    run_id: str
    deadline: int
    workload: str
    pid: int  # the owning process's
    kits: tuple[str, ...] = ()
    image: str | None = None
    run_image: str | None = None
    volumes: tuple[str, ...] = ()
    container_id: str | None = None
    proxy_pid: int | None = None
    name: str | None = None  # a named sandbox's: gc leaves it to `sbx rm`

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kits"], data["volumes"] = list(self.kits), list(self.volumes)
        return data


def run_dir(state_home: Path, run_id: str) -> Path:
    return state_home / RUNS_DIR / run_id


def login_dir(state_home: Path, run_id: str) -> Path:
    """Where the egress proxy keeps the OAuth logins made inside this run's sandbox."""
    return run_dir(state_home, run_id) / LOGINS_DIR


__all__ = ["LOGINS_DIR", "MAX_RECORD_BYTES", "OWNER_LOCK", "RUNS_DIR", "RUN_ID", "RUN_RECORD",
           "RunRecord", "login_dir", "run_dir"]
