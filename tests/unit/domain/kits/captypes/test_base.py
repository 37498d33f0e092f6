"""The capability type registry: every known type has one handler module, and a type sbx does
not provide says why in its own words wherever a refusal or a skip is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits import captypes
from sbx.domain.kits.selection import NOT_IMPLEMENTED, refuse_unsupported, select, why_not
from sbx.domain.kits.types import KNOWN_TYPES, USB_DEVICE
from sbx.domain.sandbox.capabilities import SUPPORTED

PACKAGE = Path(captypes.__file__).parent
REFUSED = sorted(t for t in KNOWN_TYPES if t not in SUPPORTED)


def test_every_known_type_has_exactly_one_handler() -> None:
    assert set(captypes.BY_TYPE) == set(KNOWN_TYPES)
    owners = [t for h in captypes.HANDLERS for t in h.types]
    assert len(owners) == len(set(owners))


def test_a_type_sbx_does_not_provide_says_why_and_a_provided_one_does_not() -> None:
    for handler in captypes.HANDLERS:
        if handler.implemented:
            assert handler.refusal == "", handler.types
        else:
            assert handler.refusal.strip(), handler.types


def test_the_handler_modules_stay_small() -> None:
    for module in PACKAGE.glob("*.py"):
        assert len(module.read_text(encoding="utf-8").splitlines()) <= 600, module.name


@pytest.mark.parametrize("ctype", REFUSED)
def test_a_skipped_type_is_recorded_with_its_reason(ctype: str) -> None:
    selection = select("kit", [{"type": ctype, "optional": True}], SUPPORTED)
    [record] = selection.skipped
    assert record.reason == why_not(ctype)
    assert record.reason.startswith(f"{NOT_IMPLEMENTED}: ")
    assert captypes.handler(ctype).refusal in record.reason


@pytest.mark.parametrize("ctype", REFUSED)
def test_a_required_type_refuses_naming_its_reason(ctype: str) -> None:
    selection = select("kit", [{"type": ctype}], SUPPORTED)
    with pytest.raises(SbxError) as caught:
        refuse_unsupported(selection)
    assert caught.value.reason is Reason.UNSUPPORTED_CAPABILITY
    assert caught.value.body == f"  - kit capabilities[0] ({ctype}): required, {why_not(ctype)}"


def test_an_unknown_type_keeps_the_plain_reason() -> None:
    assert why_not("com.example/x@1") == NOT_IMPLEMENTED


def test_usb_device_is_refused_for_the_reason_the_engine_gives() -> None:
    assert "no device passthrough" in why_not(USB_DEVICE)


def test_a_group_member_s_reason_is_its_type_s() -> None:
    mount = USB_DEVICE
    group = {"group": {"name": "g", "capabilities": [
        {"type": mount, "config": {"vendorId": "1234", "productId": "5678"}}]}}
    with pytest.raises(SbxError) as caught:
        refuse_unsupported(select("kit", [group], SUPPORTED))
    assert f"({mount}): required, {why_not(mount)}" in (caught.value.body or "")
