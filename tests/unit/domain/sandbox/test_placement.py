"""Placement: the least-loaded engine that answered, by the scarcer of CPU and memory left."""

from __future__ import annotations

from sbx.domain.sandbox.placement import EngineLoad, place

GiB = 1024 ** 3


def test_the_engine_with_more_room_left_wins() -> None:
    loads = [EngineLoad("busy", 2000, 8 * GiB, 1000, 4 * GiB), EngineLoad("idle", 2000, 8 * GiB)]
    assert place(loads, cpu_millis=1000, memory_bytes=GiB) == "idle"


def test_the_scarcer_resource_decides() -> None:
    # "cpu" has CPUs to spare but almost no memory; "mem" the other way round, less so.
    loads = [EngineLoad("cpu", 16000, 8 * GiB, 0, 7 * GiB),
             EngineLoad("mem", 4000, 64 * GiB, 2000, 0)]
    assert place(loads, cpu_millis=1000, memory_bytes=GiB) == "mem"


def test_an_engine_where_it_does_not_fit_comes_after_one_where_it_does() -> None:
    loads = [EngineLoad("full", 64000, 256 * GiB, 63500, 0), EngineLoad("small", 2000, 4 * GiB)]
    assert place(loads, cpu_millis=1000, memory_bytes=GiB) == "small"


def test_ties_keep_the_configured_order_and_nothing_answered_is_none() -> None:
    same = [EngineLoad("a", 2000, 4 * GiB), EngineLoad("b", 2000, 4 * GiB)]
    assert place(same, cpu_millis=1000, memory_bytes=GiB) == "a"
    assert place(list(reversed(same)), cpu_millis=1000, memory_bytes=GiB) == "b"
    assert place([], cpu_millis=1000, memory_bytes=GiB) is None


def test_an_engine_that_says_nothing_of_its_size_comes_last() -> None:
    loads = [EngineLoad("mute", 0, 0), EngineLoad("told", 2000, 4 * GiB, 1500, 3 * GiB)]
    assert place(loads, cpu_millis=1000, memory_bytes=GiB) == "told"
