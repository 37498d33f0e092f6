"""A ``kind: set`` expands to its members: digests checked, args pinned or re-exported, the
set's own declarations kept as one more contribution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.descriptor import Descriptor
from sbx.domain.kits.kitsets import apply_pins, expand_sets
from sbx.domain.kits.localkit import LocalKit

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


def kit(reference: str, data: dict[str, Any], image: str | None = None) -> LocalKit:
    return LocalKit(reference=reference, directory=Path("/k"), stem="k",
                    descriptor=Descriptor(data={"schemaVersion": "3", **data},
                                          file=f"/k/{reference}.yaml"),
                    dockerfile_text=None, image=image)


MEMBERS = {
    "reg.test/base:1": kit("reg.test/base:1", {"kind": "workload"}, f"reg.test/base@{DIGEST}"),
    "reg.test/tool:1": kit("reg.test/tool:1", {"kind": "mixin", "args": {"level": {}}},
                           f"reg.test/tool@{DIGEST}"),
}


def load(ref: str) -> LocalKit:
    return MEMBERS[ref]


def team(**extra: Any) -> LocalKit:
    return kit("./team", {"kind": "set", "kits": [
        {"ref": "${{ kit.args.registry }}/base:1", "digest": DIGEST},
        {"ref": "reg.test/tool:1", "args": {"level": "${{ kit.args.level }}"}}], **extra})


def test_a_set_expands_to_its_members_in_place() -> None:
    members = expand_sets([team(args={"registry": {"default": "reg.test"},
                                       "level": {"default": "2"}})], {}, load)
    assert [m.kit.reference for m in members] == ["reg.test/base:1", "reg.test/tool:1", "./team"]
    assert members[1].pinned == {"level": "2"}
    assert members[2].kit.descriptor.kind == "mixin"
    assert "kits" not in members[2].kit.descriptor.data
    assert [m.own_of_set for m in members] == [False, False, True]


def test_the_users_arg_reaches_a_reexported_member_arg() -> None:
    members = expand_sets([team(args={"registry": {"default": "reg.test"}, "level": {}})],
                          {"level": "7"}, load)
    assert members[1].pinned == {"level": "7"}


def test_a_set_with_no_declarations_of_its_own_adds_no_contribution() -> None:
    data = {"kind": "set", "kits": [{"ref": "reg.test/tool:1", "args": {"level": "3"}}]}
    members = expand_sets([kit("./plain", data)], {}, load)
    assert [m.kit.reference for m in members] == ["reg.test/tool:1"]
    assert members[0].pinned == {"level": "3"}


def test_a_digest_the_lock_does_not_pin_is_refused() -> None:
    data = {"kind": "set", "kits": [{"ref": "reg.test/base:1", "digest": OTHER}]}
    with pytest.raises(SbxError) as caught:
        expand_sets([kit("./pinned", data)], {}, load)
    assert caught.value.reason is Reason.KIT_SET_DIGEST
    assert OTHER in caught.value.message and DIGEST in caught.value.message


def test_a_set_naming_a_set_is_refused() -> None:
    MEMBERS["reg.test/inner:1"] = kit("reg.test/inner:1", {"kind": "set", "kits": []})
    data = {"kind": "set", "kits": [{"ref": "reg.test/inner:1"}]}
    with pytest.raises(SbxError) as caught:
        expand_sets([kit("./outer", data)], {}, load)
    assert caught.value.reason is Reason.KIT_INCOHERENT


def test_a_user_value_against_a_literal_pin_is_refused() -> None:
    data = {"kind": "set", "kits": [{"ref": "reg.test/tool:1", "args": {"level": "3"}}]}
    members = expand_sets([kit("./plain", data)], {}, load)
    assert apply_pins(members, [{"level": "3"}]) == [{"level": "3"}]
    with pytest.raises(SbxError) as caught:
        apply_pins(members, [{"level": "9"}])
    assert caught.value.reason is Reason.INVALID_ARGUMENT


def test_kits_that_are_not_sets_pass_through() -> None:
    plain = MEMBERS["reg.test/base:1"]
    assert [m.kit for m in expand_sets([plain], {}, load)] == [plain]
