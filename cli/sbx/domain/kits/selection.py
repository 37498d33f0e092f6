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

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits import captypes
from sbx.domain.kits.selectionrecord import SelectionRecord


@dataclass(frozen=True)
class Selection:
    selected: tuple[Mapping[str, Any], ...]  # flattened capability entries, in declaration order
    selected_records: tuple[SelectionRecord, ...]
    skipped: tuple[SelectionRecord, ...]
    refused: tuple[SelectionRecord, ...] = field(default=())
    selected_paths: tuple[str, ...] = ()  # declaration path of each selected entry

    def as_dict(self) -> dict[str, Any]:
        return {"selected": [r.as_dict() for r in self.selected_records],
                "skipped": [r.as_dict() for r in self.skipped]}


NOT_IMPLEMENTED = "not implemented by this sbx"


def why_not(ctype: str) -> str:
    """The reason a type is not provided: its handler's own words when sbx knows the type."""
    refusal = captypes.handler(ctype).refusal
    return f"{NOT_IMPLEMENTED}: {refusal}" if refusal else NOT_IMPLEMENTED


def select(kit: str, capabilities: Sequence[Mapping[str, Any]],
           supported: Collection[str]) -> Selection:
    """Select the capability entries of one kit against the set of supported types."""
    selected: list[Mapping[str, Any]] = []
    paths: list[str] = []
    selected_records: list[SelectionRecord] = []
    skipped: list[SelectionRecord] = []
    refused: list[SelectionRecord] = []
    for index, item in enumerate(capabilities):
        path = f"capabilities[{index}]"
        if "group" in item:
            group: Mapping[str, Any] = item["group"]
            members: list[Mapping[str, Any]] = list(group.get("capabilities") or [])
            member_paths = tuple(f"{path}.group.capabilities[{j}]" for j in range(len(members)))
            unsupported = [(p, str(m.get("type"))) for p, m in
                           zip(member_paths, members, strict=True)
                           if str(m.get("type")) not in supported]
            rejected = tuple(p for p, _ in unsupported)
            record = SelectionRecord(kit, f"{path}.group", "group",
                                     NOT_IMPLEMENTED if rejected else "",
                                     members=member_paths, rejected=rejected,
                                     rejected_types=tuple(t for _, t in unsupported))
            if not rejected:
                selected.extend(members)
                paths.extend(member_paths)
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
            paths.append(path)
            selected_records.append(record)
        elif item.get("optional") is True:
            skipped.append(SelectionRecord(kit, path, ctype, why_not(ctype)))
        else:
            refused.append(SelectionRecord(kit, path, ctype, why_not(ctype)))
    return Selection(tuple(selected), tuple(selected_records), tuple(skipped), tuple(refused),
                     tuple(paths))


def refuse_unsupported(selection: Selection | Sequence[Selection]) -> None:
    """Raise ``unsupported_capability`` naming every refused type (of every kit), or return."""
    selections = [selection] if isinstance(selection, Selection) else list(selection)
    refused = [record for s in selections for record in s.refused]
    if not refused:
        return
    lines: list[str] = []
    types: list[str] = []
    for record in refused:
        if record.type == "group":
            for member, mtype in zip(record.rejected, record.rejected_types, strict=True):
                types.append(mtype)
                lines.append(f"{record.kit} {member} ({mtype}): required, "
                             f"{why_not(mtype)}")
        else:
            types.append(record.type)
            lines.append(f"{record.kit} {record.path} ({record.type}): required, "
                         f"{why_not(record.type)}")
    names = ", ".join(sorted(set(types)))
    raise SbxError(
        Reason.UNSUPPORTED_CAPABILITY,
        f"refused: the kit requires capabilities this sbx does not implement: {names}",
        hint="Mark them `optional: true` if the kit can do without them.",
        details={"refused": [r.as_dict() for r in refused]},
        body="\n".join(f"  - {line}" for line in lines),
    )


__all__ = ["NOT_IMPLEMENTED", "Selection", "SelectionRecord", "refuse_unsupported", "select",
           "why_not"]
