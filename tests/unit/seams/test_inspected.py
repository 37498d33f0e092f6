"""An inspected container's address on a network, as every transport reads it."""

from __future__ import annotations

from typing import Any

import pytest

from sbx.seams.inspected import network_address


def _attrs(entry: Any) -> dict[str, Any]:
    return {"NetworkSettings": {"Networks": {"sbx-net": entry}}}


def test_the_address_and_its_prefix() -> None:
    assert network_address(_attrs({"IPAddress": "172.25.0.2", "IPPrefixLen": 16}),
                           "sbx-net") == ("172.25.0.2", 16)


@pytest.mark.parametrize("attrs", [
    {}, {"NetworkSettings": None}, _attrs(None), _attrs({"IPAddress": "", "IPPrefixLen": 16}),
    _attrs({"IPAddress": "172.25.0.2"}), _attrs({"IPAddress": "172.25.0.2",
                                                 "IPPrefixLen": True}),
    {"NetworkSettings": {"Networks": {"other": {"IPAddress": "10.0.0.2", "IPPrefixLen": 8}}}},
])
def test_no_address_on_that_network_is_none(attrs: dict[str, Any]) -> None:
    assert network_address(attrs, "sbx-net") is None
