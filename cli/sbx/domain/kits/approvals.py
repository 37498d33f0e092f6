"""What the user approved each local kit to ask for: ``<state>/kits.approved.json``.

``{"version": 1, "kits": [{"path", "descriptor", "permissions", "approved", "via"}]}``, one
entry per local kit, keyed by the kit **as it was named** on the command line: the absolute
path with ``..`` folded but symbolic links left alone (:func:`kit_identity`), so re-pointing a
link the kit is named through still finds the record and is compared against it. ``descriptor``
is the real path of the descriptor file that name led to the last time: another name of the
same file is judged against that record too, never taken for a first run. ``permissions`` is
the permission surface of the kit's effective descriptor at its last approved run — the same
projection and the same comparison as the kit lock of pulled kits
(:func:`sbx.domain.kits.lock.decide`).

Written atomically like the lock, under a lock of its own so two runs recording at once do
not lose an entry; a damaged file is ``state_corrupt`` and never read as empty (that would
forget every approval, and the next widening would be recorded as a first run).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.surface import Surface, diff_widenings
from sbx.seams.locks import name_lock
from sbx.seams.statefile import read_state, write_atomic

if TYPE_CHECKING:
    from sbx.domain.kits.localkit import LocalKit

APPROVALS_FILE: Final = "kits.approved.json"
APPROVALS_VERSION: Final = 1
VIA: Final = frozenset({"first-run", "terminal", "accept-flag", "narrowed"})


def approvals_path(state_home: Path) -> Path:
    return state_home / APPROVALS_FILE


def kit_identity(kit: LocalKit, cwd: Path) -> str:
    """The record key of a local kit: what the user named (a directory, or a descriptor
    file), absolute, with ``.``/``..`` folded lexically and no link resolved. A bundled kit
    named by its short name is keyed by its own directory: the word is no path, and a
    directory of that name made later here must not inherit what was approved for it."""
    if kit.bundled:
        return str(kit.directory)
    return posixpath.normpath(posixpath.join(cwd, kit.reference))


@dataclass(frozen=True)
class KitApproval:
    path: str  # the kit as named (kit_identity)
    descriptor: str  # the real path of the descriptor file the name led to
    permissions: Surface
    approved: float  # unix seconds
    via: str  # one of VIA

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "descriptor": self.descriptor,
                "permissions": self.permissions.to_json(), "approved": self.approved,
                "via": self.via}

    @classmethod
    def from_json(cls, data: Any) -> KitApproval:
        if not isinstance(data, Mapping):
            raise ValueError("an approval is a JSON object")
        path, descriptor, via = data.get("path"), data.get("descriptor"), data.get("via")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError("approval field path must be an absolute path")
        if not isinstance(descriptor, str):
            raise ValueError("approval field descriptor must be a string")
        if via not in VIA:
            raise ValueError(f"approval field via must be one of {', '.join(sorted(VIA))}")
        approved = data.get("approved")
        if isinstance(approved, bool) or not isinstance(approved, int | float):
            raise ValueError("approval field approved must be a number")
        return cls(path, descriptor, Surface.from_json(data.get("permissions") or {}),
                   float(approved), str(via))


@dataclass(frozen=True)
class Approvals:
    kits: tuple[KitApproval, ...] = ()

    def get(self, path: str) -> KitApproval | None:
        return next((k for k in self.kits if k.path == path), None)

    def granted(self, path: str, descriptor: str) -> KitApproval | None:
        """The approval a kit is judged against: the one recorded under its name, else the
        latest one of the same descriptor file under another name (``./agent`` and
        ``./agent/agent.yaml``, or a link to it), so a new spelling is not a first run."""
        exact = self.get(path)
        if exact is not None:
            return exact
        same = [k for k in self.kits if k.descriptor == descriptor]
        return max(same, key=lambda k: k.approved) if same else None

    def with_entry(self, entry: KitApproval) -> Approvals:
        previous = self.get(entry.path)
        if previous is None:
            return replace(self, kits=(*self.kits, entry))
        return replace(self, kits=tuple(entry if k is previous else k for k in self.kits))

    def to_json(self) -> dict[str, Any]:
        return {"version": APPROVALS_VERSION, "kits": [k.to_json() for k in self.kits]}

    @classmethod
    def from_json(cls, data: Any) -> Approvals:
        if not isinstance(data, Mapping):
            raise ValueError("the approvals file is a JSON object")
        if data.get("version") != APPROVALS_VERSION:
            raise ValueError(f"unsupported approvals version {data.get('version')!r}")
        kits = data.get("kits", [])
        if not isinstance(kits, list):
            raise ValueError("the approvals' kits is a list")
        return cls(tuple(KitApproval.from_json(k) for k in kits))


def read_approvals(state_home: Path) -> Approvals:
    path = approvals_path(state_home)
    return read_state(path, Approvals.from_json, Approvals(), what="the kit approvals",
                      fix=f"Move {path} aside (keep it to inspect): every local kit's next run "
                          "is then recorded as its first.")


@contextmanager
def updating(state_home: Path) -> Iterator[list[Approvals]]:
    """Read, let the caller replace ``box[0]``, and write back atomically if it changed; one
    writer at a time per state home."""
    with name_lock(state_home / "locks", APPROVALS_FILE):
        current = read_approvals(state_home)
        box = [current]
        yield box
        if box[0] != current:
            write_atomic(approvals_path(state_home),
                         _encode(box[0]))


def _encode(approvals: Approvals) -> bytes:
    import json

    return (json.dumps(approvals.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")


def covered(state_home: Path, kits: Sequence[tuple[str, str, Surface]]) -> bool:
    """Whether each kit's approval (path, descriptor) still covers its surface: the check a run
    from a cached plan makes again (False: the full plan runs the gate, which asks or
    refuses)."""
    if all(permissions.is_empty() for _path, _descriptor, permissions in kits):
        return True  # asks for nothing: nothing to approve, whatever is recorded
    approvals = read_approvals(state_home)
    for path, descriptor, permissions in kits:
        previous = approvals.granted(path, descriptor)
        if previous is None or diff_widenings(previous.permissions, permissions):
            return False
    return True


def approval(path: str, descriptor: str, permissions: Surface, via: str) -> KitApproval:
    return KitApproval(path, descriptor, permissions, time.time(), via)


__all__ = ["APPROVALS_FILE", "Approvals", "KitApproval", "approval", "approvals_path", "covered",
           "kit_identity", "read_approvals", "updating"]
