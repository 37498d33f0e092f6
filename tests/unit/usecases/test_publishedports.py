"""A sandbox's ports as one list for the one forwarder, and what a named sandbox's run
directory keeps of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.capabilities import CapabilityPlan
from sbx.domain.sandbox.hardening import Limits
from sbx.domain.sandbox.publish import parse_publishes
from sbx.seams.ports import KIT, PUBLISH, Binding, PublishedPort
from sbx.usecases import publishedports

LIMITS = Limits(memory_bytes=1 << 30, pids=256, cpu_millis=1000, tmp_bytes=1 << 20,
                workspace_bytes=1 << 20, home_bytes=1 << 20)


def test_kit_ports_then_the_published_ones_as_asked() -> None:
    plan = CapabilityPlan(limits=LIMITS, ports=(3000, 8080),
                          published=parse_publishes(["9000:8080", "[::1]::5000"]))
    assert publishedports.bindings_of(plan) == [
        Binding(3000, KIT), Binding(8080, KIT), Binding(8080, PUBLISH, "127.0.0.1", 9000),
        Binding(5000, PUBLISH, "::1", 0)]
    assert publishedports.bindings_of(CapabilityPlan(limits=LIMITS)) == []
    assert publishedports.bindings_of(None) == []


def test_the_run_directory_keeps_what_to_publish_and_what_is(tmp_path: Path) -> None:
    bindings = [Binding(8080, KIT), Binding(8080, PUBLISH, "127.0.0.1", 9000)]
    assert publishedports.read_wanted(tmp_path) is None
    publishedports.write_wanted(tmp_path, bindings, "sbx-net")
    assert publishedports.read_wanted(tmp_path) == ("sbx-net", bindings)
    live = [PublishedPort(8080, "tcp", "127.0.0.1", 41000, KIT),
            PublishedPort(8080, "tcp", "127.0.0.1", 9000, PUBLISH)]
    publishedports.write_published(tmp_path, live)
    assert publishedports.published_now(tmp_path) == live
    publishedports.forget_published(tmp_path)
    assert publishedports.published_now(tmp_path) == []


def test_a_damaged_list_is_state_corrupt(tmp_path: Path) -> None:
    (tmp_path / publishedports.WANTED).write_text(
        '{"network": "n", "bindings": [{"container": "8080"}]}', encoding="utf-8")
    with pytest.raises(SbxError) as caught:
        publishedports.read_wanted(tmp_path)
    assert caught.value.reason is Reason.STATE_CORRUPT


def test_the_notices_say_which_came_from_p() -> None:
    said: list[str] = []
    publishedports.announce([PublishedPort(8080, "tcp", "127.0.0.1", 41000, KIT),
                             PublishedPort(80, "tcp", "::1", 9000, PUBLISH)], said.append)
    assert said == ["port 8080/tcp is published on 127.0.0.1:41000",
                    "port 80/tcp (-p) is published on [::1]:9000"]
