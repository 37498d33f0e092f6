"""The shared fake engine's own contract: the failures, the call log and the state that other
unit tests rely on (tests/support/fakeengine.py)."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from tests.support.fakeengine import FakeEngine, image_info, tar_of


def test_a_failure_on_the_nth_call_only_and_the_call_is_logged_first() -> None:
    engine = FakeEngine()
    error = SbxError(Reason.CREATE_FAILED, "no")
    engine.fail("create_volume", error, nth=2)
    assert engine.create_volume("a", {}) == "a"
    with pytest.raises(SbxError) as raised:
        engine.create_volume("b", {})
    assert raised.value is error
    assert engine.create_volume("c", {}) == "c"
    assert engine.called("create_volume") == [("a",), ("b",), ("c",)]
    assert [v["Name"] for v in engine.volumes] == ["a", "c"]  # the failed one was not made
    assert engine.created == [("volume", "a"), ("volume", "c")]


def test_a_failure_for_one_key_and_on_every_call() -> None:
    engine = FakeEngine()
    engine.fail("remove_volume", SbxError(Reason.CLEANUP_FAILED, "busy"), key="b")
    engine.fail("info", SbxError(Reason.DOCKER_UNREACHABLE, "gone"))
    for name in ("a", "b"):
        engine.create_volume(name, {})
    assert engine.remove_volume("a")
    with pytest.raises(SbxError, match="busy"):
        engine.remove_volume("b")
    assert [v["Name"] for v in engine.volumes] == ["b"]
    for _ in range(2):
        with pytest.raises(SbxError, match="gone"):
            engine.info()
    with pytest.raises(AttributeError):
        engine.fail("no_such_method", SbxError(Reason.CREATE_FAILED, "x"))


def test_state_follows_the_calls() -> None:
    engine = FakeEngine()
    base = engine.add_image("k:1", size=10, filesystem=tar_of({"etc/passwd": b"root\n"}))
    assert engine.image("k:1") == engine.image(base.id) == base
    assert engine.local_images() == [("k:1", 10)]
    probe = engine.probe_image(base.id, files=["/etc/passwd", "/etc/shadow"], dirs=["/tmp"],
                               labels={})
    assert probe.files == {"/etc/passwd": b"root\n", "/etc/shadow": None}
    assert probe.modes == {"/tmp": 0o1777}
    network = engine.create_network("n", {"l": "1"}, bridge="br", internal=True)
    assert engine.list_owned({"l": "1"})[0].id == network
    assert engine.remove_network(network) and engine.networks == []
    committed = engine.commit("cid", "run:1", {}, base)
    assert engine.image("run:1") == committed != base
    assert engine.remove_image("run:1") and engine.image("run:1") is None
    assert engine.image(committed.id) is None
    assert engine.names() == ["image", "image", "local_images", "probe_image",
                              "create_network", "list_owned",
                              "remove_network", "commit", "image", "remove_image", "image",
                              "image"]


def test_a_fallback_image_answers_every_reference_and_sticky_objects_stay() -> None:
    engine = FakeEngine()
    engine.fallback_image = image_info("sha256:f", user="agent")
    found = engine.image("anything:1")
    assert found is not None and (found.id, found.tags, found.user) == (
        "sha256:f", ("anything:1",), "agent")
    engine.create_volume("v", {})
    engine.sticky.add("v")
    assert engine.remove_volume("v") and [v["Name"] for v in engine.volumes] == ["v"]
