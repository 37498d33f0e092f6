"""``kind: set`` at run time (KIT-SPEC-V3 §1.2 form 4, §4.3): a set expands to its kits before
resolution, so the one resolver and composer judge the members as if each had been named.

Each ``kits[]`` entry is a registry reference that ``sbx pull`` pinned in the lock; its
``digest``, when given, must be the digest the lock pins (what was checked is what runs). Its
``args`` pin the member's create-phase args: a literal is fixed, a value that is itself
``${{ kit.args.x }}`` re-exports the set's arg ``x`` (the user's ``--arg x``, else the set's
default). The set's own declarations (capabilities, provides, args) join as one declaration-only
mixin, so they are one more contribution, ordered last among equals. A set naming a set is
refused (one level, no cycles).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.kits.args import ArgDecl, declarations
from sbx.domain.kits.descriptor import Descriptor
from sbx.domain.kits.localkit import LocalKit

_REEXPORT: Final = re.compile(r"^\$\{\{\s*kit\.args\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}$")
_ARG_REF: Final = re.compile(r"\$\{\{\s*kit\.args\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")
# What a set's own declarations keep when they join as a mixin: the content recipe goes.
_SET_ONLY: Final = frozenset({"kits", "build", "dockerfile"})
_OWN: Final = ("capabilities", "provides", "requires", "integrates", "conflicts", "args")


@dataclass(frozen=True)
class Member:
    """One kit of the expanded list and the args its set pins (name → value)."""

    kit: LocalKit
    pinned: Mapping[str, str] = field(default_factory=dict)
    set_reference: str | None = None  # the set that named it, for messages
    own_of_set: bool = False  # the set's own declarations: last among equals in the order


def expand_sets(kits: Sequence[LocalKit], supplied: Mapping[str, str],
                load: Callable[[str], LocalKit]) -> list[Member]:
    """Every kit as given, with each ``kind: set`` replaced by its members and its own
    declarations (see the module docstring); ``load`` loads a member reference."""
    out: list[Member] = []
    for kit in kits:
        if kit.descriptor.kind != "set":
            out.append(Member(kit))
            continue
        out.extend(_members(kit, supplied, load))
    return out


def _members(kit: LocalKit, supplied: Mapping[str, str],
             load: Callable[[str], LocalKit]) -> list[Member]:
    data = kit.descriptor.data
    own_args = declarations(data)
    members: list[Member] = []
    for index, entry in enumerate(data.get("kits") or []):
        if not isinstance(entry, Mapping):
            continue
        ref = _ARG_REF.sub(lambda m: _value(m.group(1), supplied, own_args) or m.group(0),
                          str(entry.get("ref", "")))
        member = load(ref)
        where = f"{kit.reference} kits[{index}] ({ref})"
        if member.descriptor.kind == "set":
            _refuse(Reason.KIT_INCOHERENT, f"{where} is itself a kind: set; a set lists "
                    "workload and mixin kits", kit)
        _check_digest(where, entry.get("digest"), member, kit)
        pinned: dict[str, str] = {}
        raw_args = entry.get("args")
        for name, value in (raw_args.items() if isinstance(raw_args, Mapping) else ()):
            text = str(value)
            match = _REEXPORT.match(text)
            if match is None:
                pinned[str(name)] = text
                continue
            exported = _value(match.group(1), supplied, own_args)
            if exported is not None:
                pinned[str(name)] = exported
            # Otherwise the member's own default (or its required-arg refusal) applies.
        members.append(Member(member, pinned, kit.reference))
    own = {k: v for k, v in data.items() if k not in _SET_ONLY}
    if any(own.get(k) for k in _OWN):
        own["kind"] = "mixin"
        members.append(Member(LocalKit(
            reference=kit.reference, directory=kit.directory, stem=kit.stem,
            descriptor=Descriptor(data=own, file=kit.descriptor.file), dockerfile_text=None),
            own_of_set=True))
    return members


def _value(name: str, supplied: Mapping[str, str], own: Mapping[str, ArgDecl]) -> str | None:
    """The set's arg ``name``: the user's ``--arg``, else the set's default."""
    if name in supplied:
        return supplied[name]
    decl = own.get(name)
    return None if decl is None or decl.default is None else str(decl.default)


def _check_digest(where: str, digest: Any, member: LocalKit, kit: LocalKit) -> None:
    if not isinstance(digest, str) or not digest:
        return
    locked = (member.image or "").rpartition("@")[2]
    if locked != digest:
        shown = locked or "no registry digest (not a pulled kit)"
        _refuse(Reason.KIT_SET_DIGEST, f"{where} pins {digest}, but the kit sbx has is "
                f"{shown}; a set runs exactly the kits it names", kit,
                hint=f"Pull the pinned kit: `sbx pull {member.reference.partition('@')[0]}"
                     f"@{digest}`, or update the set's digest.")


def _refuse(reason: Reason, message: str, kit: LocalKit, *, hint: str | None = None) -> None:
    raise SbxError(reason, message, hint=hint or REGISTRY[reason].fix,
                   details={"set": kit.reference})


def apply_pins(members: Sequence[Member], per_kit: Sequence[dict[str, str]],
               ) -> list[dict[str, str]]:
    """Each member's ``--arg`` values with its set's pins over them; a user value that
    contradicts a literal pin is refused rather than silently dropped."""
    out: list[dict[str, str]] = []
    for member, values in zip(members, per_kit, strict=True):
        for name, value in member.pinned.items():
            if name in values and values[name] != value:
                raise SbxError(
                    Reason.INVALID_ARGUMENT,
                    f"--arg {name}: {member.set_reference} pins it for "
                    f"{member.kit.reference}",
                    hint=f"Drop --arg {name}, or re-export it in the set as "
                         f"${{{{ kit.args.{name} }}}}.")
        out.append({**values, **member.pinned})
    return out


__all__ = ["Member", "apply_pins", "expand_sets"]
