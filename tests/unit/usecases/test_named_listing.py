"""Which sandbox a word names: a name, else a run id (full or at least the 12 characters `sbx
ls --all` shows) of a named sandbox, else of a running one-shot run, which only `stop` takes."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases.context import AppContext
from sbx.usecases.named.listing import OneShotRun, find_sandbox, load_named, pick
from sbx.usecases.sandboxstore import SandboxStore
from tests.support.fakeengine import FakeEngine

NAMED_RUN = "ab" * 16
ONE_SHOT_RUN = "ac" * 16


def test_pick_by_full_id_and_by_a_prefix_of_twelve_or_more() -> None:
    named = {NAMED_RUN: "dev"}
    runs = {ONE_SHOT_RUN: "c1"}
    assert pick(NAMED_RUN, named, runs) == "dev"
    assert pick(NAMED_RUN[:12], named, runs) == "dev"
    assert pick(ONE_SHOT_RUN[:20], named, runs) == OneShotRun(ONE_SHOT_RUN, "c1")
    assert pick(NAMED_RUN[:11], named, runs) is None  # shorter than `ls --all` shows
    assert pick("dev", named, runs) is None
    assert pick(NAMED_RUN.upper(), named, runs) is None  # ids are lower-case hex


def test_pick_refuses_a_prefix_of_two_ids() -> None:
    with pytest.raises(SbxError) as raised:
        pick("ab" * 6, {"ab" * 16: "one", "ab" * 6 + "cd" * 10: "two"}, {})
    assert raised.value.reason is Reason.INVALID_ARGUMENT and "more than one" in str(
        raised.value)


def test_a_named_sandbox_s_own_run_is_never_a_one_shot_run() -> None:
    assert pick(NAMED_RUN[:12], {NAMED_RUN: "dev"}, {NAMED_RUN: "c0"}) == "dev"


def _ctx(tmp_path: Path, engine: FakeEngine) -> AppContext:
    env = {**os.environ, "SBX_HOME": str(tmp_path / "state"), "SBX_CONFIG": os.devnull}
    return AppContext(env=env, cwd=tmp_path, driver_factory=lambda _env: engine,
                      renderer=Renderer(io.StringIO(), io.StringIO(), as_json=False))


def _setup(tmp_path: Path) -> AppContext:
    engine = FakeEngine()
    ctx = _ctx(tmp_path, engine)
    SandboxStore(ctx.state_home).save(SandboxRecord(
        name="dev", run_id=NAMED_RUN, created=1.0, workload="./k", kits=[], workspace=None,
        access="none", request={"options": {}}, container_id="c" * 64))
    engine.containers.append({"Id": "d" * 64, "State": "running", "Labels": {
        **labels.home_selector(ctx.home_hash), labels.RUN: ONE_SHOT_RUN,
        labels.ROLE: labels.ROLE_SANDBOX}})
    return ctx


def test_names_and_run_ids_find_the_named_sandbox(tmp_path: Path) -> None:
    ctx = _setup(tmp_path)
    for word in ("dev", NAMED_RUN, NAMED_RUN[:12]):
        found = load_named(ctx, word)
        assert found.name == "dev", word


def test_a_one_shot_run_s_id_is_refused_with_the_stop_it_takes(tmp_path: Path) -> None:
    ctx = _setup(tmp_path)
    assert find_sandbox(ctx, ONE_SHOT_RUN[:12]) == OneShotRun(ONE_SHOT_RUN, "d" * 64)
    with pytest.raises(SbxError) as raised:
        load_named(ctx, ONE_SHOT_RUN[:12], command="sbx exec")
    error = raised.value
    assert error.reason is Reason.INVALID_ARGUMENT and "sbx exec" in error.message
    assert f"sbx stop {ONE_SHOT_RUN[:12]}" in (error.hint or "")


@pytest.mark.parametrize("word", ["nope", "ae" * 16])
def test_a_word_naming_nothing_is_no_sandbox(tmp_path: Path, word: str) -> None:
    with pytest.raises(SbxError) as raised:
        load_named(_setup(tmp_path), word)
    assert "no sandbox named" in raised.value.message


def test_a_word_that_is_no_name_and_no_id_says_what_names_are(tmp_path: Path) -> None:
    with pytest.raises(SbxError) as raised:
        load_named(_setup(tmp_path), "a b")
    assert "is not a sandbox name" in raised.value.message
