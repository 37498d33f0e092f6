"""The runtime a sandbox asks for (``--runtime`` over ``[sandbox] runtime``) and the refusal of
one the engine has not registered: never a silent run on the engine's default."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.config import Config, load_config_file
from sbx.base.errors import SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.domain.sandbox.runtimes import RuntimeChoice, check_runtime, choose_runtime
from sbx.seams.engine import EngineInfo

ENGINE = EngineInfo("20.10", "1.41", "linux", "1", "cgroupfs", False, (),
                    ("crun", "io.containerd.runc.v2", "runc"), "runc")


def _config(tmp_path: Path, text: str = "") -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return load_config_file(path)


def test_no_runtime_asked_means_the_engines_default(tmp_path: Path) -> None:
    assert choose_runtime(None, _config(tmp_path)) is None
    check_runtime(EngineInfo("20.10", "1.41", "linux", "1", "cgroupfs", False, ()), None)


def test_the_flag_beats_the_config_and_each_names_its_source(tmp_path: Path) -> None:
    config = _config(tmp_path, '[sandbox]\nruntime = "runsc"\n')
    assert choose_runtime(None, config) == RuntimeChoice(
        "runsc", f"[sandbox] runtime ({tmp_path / 'config.toml'}:2)")
    assert choose_runtime("crun", config) == RuntimeChoice("crun", "--runtime")


@pytest.mark.parametrize("flag", ["", "-x", "run c", "a/b", "x" * 129, "crun;id"])
def test_a_flag_is_held_to_the_config_files_rule(tmp_path: Path, flag: str) -> None:
    with pytest.raises(SbxError) as caught:
        choose_runtime(flag, _config(tmp_path))
    assert caught.value.reason is Reason.INVALID_ARGUMENT
    assert caught.value.message.startswith("--runtime ")


def test_a_runtime_the_engine_has_passes() -> None:
    check_runtime(ENGINE, RuntimeChoice("crun", "--runtime"))
    check_runtime(ENGINE, RuntimeChoice("runc", "--runtime"))  # its default, asked for by name


def test_a_missing_runtime_from_the_flag_is_refused_with_what_the_engine_has() -> None:
    with pytest.raises(SbxError) as caught:
        check_runtime(ENGINE, RuntimeChoice("runsc", "--runtime"))
    error = caught.value
    assert error.reason is Reason.RUNTIME_MISSING
    assert error.reason.exit_status is ExitStatus.REFUSED
    assert "--runtime asks for the OCI runtime 'runsc'" in error.message
    assert "crun, io.containerd.runc.v2, runc; default runc" in error.message
    assert error.hint is not None
    assert "`dockerd --add-runtime runsc=$(command -v runsc)`" in error.hint
    assert "`--runtime runc`" in error.hint  # one it has, to paste instead
    assert error.details["engine_runtimes"] == ["crun", "io.containerd.runc.v2", "runc"]


def test_a_missing_runtime_from_the_config_names_the_line_to_remove(tmp_path: Path) -> None:
    choice = choose_runtime(None, _config(tmp_path, '\n[sandbox]\nruntime = "kata"\n'))
    with pytest.raises(SbxError) as caught:
        check_runtime(ENGINE, choice)
    assert caught.value.hint is not None
    assert f"remove `runtime` at {tmp_path / 'config.toml'}:3" in caught.value.hint


def test_a_named_sandbox_is_told_how_to_make_it_again() -> None:
    with pytest.raises(SbxError) as caught:
        check_runtime(ENGINE, RuntimeChoice("runsc", "the named sandbox dev", named="dev"))
    assert "the named sandbox dev asks for" in caught.value.message
    assert caught.value.hint is not None
    assert "`sbx run --name dev --recreate --runtime runc`" in caught.value.hint


def test_an_engine_that_lists_no_runtimes_refuses_any_asked_for() -> None:
    bare = EngineInfo("20.10", "1.41", "linux", "1", "cgroupfs", False, ())
    with pytest.raises(SbxError) as caught:
        check_runtime(bare, RuntimeChoice("runc", "--runtime"))
    assert "(it has: none listed)" in caught.value.message
    assert caught.value.hint is not None and "or run on one it has" not in caught.value.hint
