"""Capability selection (KIT-SPEC-V3 §1.7, §7.3): what runs, what is skipped, what refuses.

A required capability whose type sbx does not implement refuses the kit by the type's name
(``unsupported_capability``); an optional one is skipped and recorded. Groups are atomic: a group
is selected only when every member is supported; an optional group is otherwise skipped whole and
a required group refuses naming the rejected members. Nothing is applied before selection ends.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sbx.errors import SbxError
from sbx.reasons import Reason


@dataclass(frozen=True)
class SelectionRecord:
    kit: str
    path: str  # e.g. capabilities[1] or capabilities[2].group
    type: str  # capability type, or "group" for a group
    reason: str = ""
    members: tuple[str, ...] = ()  # member paths, for groups
    rejected: tuple[str, ...] = ()  # member paths that could not be provided

    def as_dict(self) -> dict[str, Any]:
        return {"kit": self.kit, "path": self.path, "type": self.type, "reason": self.reason,
                "members": list(self.members), "rejected": list(self.rejected)}


@dataclass(frozen=True)
class Selection:
    selected: tuple[Mapping[str, Any], ...]  # flattened capability entries, in declaration order
    selected_records: tuple[SelectionRecord, ...]
    skipped: tuple[SelectionRecord, ...]
    refused: tuple[SelectionRecord, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {"selected": [r.as_dict() for r in self.selected_records],
                "skipped": [r.as_dict() for r in self.skipped]}


NOT_IMPLEMENTED = "not implemented by this sbx"


def select(kit: str, capabilities: Sequence[Mapping[str, Any]],
           supported: Collection[str]) -> Selection:
    """Select the capability entries of one kit against the set of supported types."""
    selected: list[Mapping[str, Any]] = []
    selected_records: list[SelectionRecord] = []
    skipped: list[SelectionRecord] = []
    refused: list[SelectionRecord] = []
    for index, item in enumerate(capabilities):
        path = f"capabilities[{index}]"
        if "group" in item:
            group: Mapping[str, Any] = item["group"]
            members: list[Mapping[str, Any]] = list(group.get("capabilities") or [])
            member_paths = tuple(f"{path}.group.capabilities[{j}]" for j in range(len(members)))
            rejected = tuple(p for p, m in zip(member_paths, members, strict=True)
                             if str(m.get("type")) not in supported)
            record = SelectionRecord(kit, f"{path}.group", "group",
                                     NOT_IMPLEMENTED if rejected else "",
                                     members=member_paths, rejected=rejected)
            if not rejected:
                selected.extend(members)
                selected_records.append(record)
            elif group.get("optional") is True:
                skipped.append(record)
            else:
                refused.append(record)
            continue
        ctype = str(item.get("type"))
        record = SelectionRecord(kit, path, ctype)
        if ctype in supported:
            selected.append(item)
            selected_records.append(record)
        elif item.get("optional") is True:
            skipped.append(SelectionRecord(kit, path, ctype, NOT_IMPLEMENTED))
        else:
            refused.append(SelectionRecord(kit, path, ctype, NOT_IMPLEMENTED))
    return Selection(tuple(selected), tuple(selected_records), tuple(skipped), tuple(refused))


def refuse_unsupported(selection: Selection,
                       member_types: Mapping[str, str] | None = None) -> None:
    """Raise ``unsupported_capability`` naming every refused type, or do nothing."""
    if not selection.refused:
        return
    lines: list[str] = []
    types: list[str] = []
    for record in selection.refused:
        if record.type == "group":
            for member in record.rejected:
                mtype = (member_types or {}).get(member, "?")
                types.append(mtype)
                lines.append(f"{record.kit} {member} ({mtype}): required, {NOT_IMPLEMENTED}")
        else:
            types.append(record.type)
            lines.append(f"{record.kit} {record.path} ({record.type}): required, "
                         f"{NOT_IMPLEMENTED}")
    names = ", ".join(sorted(set(types)))
    raise SbxError(
        Reason.UNSUPPORTED_CAPABILITY,
        f"refused: the kit requires capabilities this sbx does not implement: {names}",
        hint="Mark them `optional: true` if the kit can do without them.",
        details={"refused": [r.as_dict() for r in selection.refused]},
        body="\n".join(f"  - {line}" for line in lines),
    )


def member_types(capabilities: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Map each group member path to its type (for refusal messages)."""
    out: dict[str, str] = {}
    for index, item in enumerate(capabilities):
        if "group" in item:
            for j, member in enumerate(item["group"].get("capabilities") or []):
                out[f"capabilities[{index}].group.capabilities[{j}]"] = str(member.get("type"))
    return out


__all__ = ["NOT_IMPLEMENTED", "Selection", "SelectionRecord", "member_types",
           "refuse_unsupported", "select"]
