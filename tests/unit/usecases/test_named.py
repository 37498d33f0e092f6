"""Named sandboxes' pure parts: names and which options a later run may repeat (their records
on disk: test_sandboxstore)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.records import SandboxRecord, check_name
from sbx.usecases.namedrecord import CREATION_OPTIONS, creation_options
from sbx.usecases.run.request import RunRequest


@pytest.mark.parametrize("name", ["ab", "a1", "my-agent", "A.b-9", "x" * 63])
def test_good_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["a", "-ab", "ab-", ".ab", "a b", "a/b", "x" * 64, "", "é9",
                                  "ab\n"])
def test_bad_names(name: str) -> None:
    with pytest.raises(SbxError) as caught:
        check_name(name)
    assert caught.value.reason is Reason.INVALID_ARGUMENT


def record(name: str = "box") -> SandboxRecord:
    return SandboxRecord(name=name, run_id="a" * 32, created=1.0, workload="./k", kits=[],
                         workspace=None, access="none", request={"options": {}},
                         container_id="c" * 64)


def test_creation_options_keep_a_digest_of_variables_never_their_values() -> None:
    options = creation_options(RunRequest(workload="./k", kits=("./gh",), env=("TOKEN=s3cr3t",),
                                          timeout_s=90.0))
    assert options["kits"] == ["./gh"] and options["timeout_s"] == 90.0
    assert "s3cr3t" not in repr(options) and len(options["env"]) == 64
    assert creation_options(RunRequest(workload="./k")) == {}
    assert set(CREATION_OPTIONS) <= set(RunRequest.__dataclass_fields__)


class _Kept:
    port = 45001


def _network_again_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, recorded: int,
                        euid: int, stopped: list[str]) -> list[str]:
    """A start's network step with the keeper and the engine stood in: the keeper got port
    45001; the sandbox's environment names ``recorded``."""
    import os
    from types import SimpleNamespace
    from typing import Any, cast

    from sbx.seams.host import firewall
    from sbx.usecases import keeper
    from sbx.usecases.named import start as named_start

    warnings: list[str] = []
    monkeypatch.setattr(keeper, "restart_kept_proxy", lambda *_a, **_k: _Kept())
    monkeypatch.setattr(keeper, "recorded_port", lambda _run_dir: recorded)
    monkeypatch.setattr(keeper, "stop_keeper", lambda _d, run_id: stopped.append(run_id))
    monkeypatch.setattr(firewall, "iptables_binary", lambda: "/nonexistent/iptables")
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    box = record()
    box.network = "n" * 64
    box.request = {"bridge": "br-test0", "proxy": True, "credentials": {}}
    ctx = SimpleNamespace(state_home=tmp_path, env={},
                          driver=SimpleNamespace(network_gateway=lambda _n: "172.30.0.1"))
    named_start._network_again(cast(Any, ctx), box, warnings.append)
    return warnings


def test_a_taken_proxy_port_without_the_firewall_refuses_the_start_with_the_way_out(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stopped: list[str] = []
    with pytest.raises(SbxError) as caught:
        _network_again_with(monkeypatch, tmp_path, recorded=41000, euid=1000, stopped=stopped)
    assert stopped == ["a" * 32]  # its keeper (and proxy on the other port) is stopped again
    error = caught.value
    assert error.reason is Reason.PROXY_FAILED
    assert "port 41000 on 172.30.0.1" in error.message and "taken" in error.message
    assert "sport = :41000" in str(error.hint) and "sbx rm box" in str(error.hint)


def test_the_recorded_port_free_again_starts_with_the_usual_warning_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stopped: list[str] = []
    warnings = _network_again_with(monkeypatch, tmp_path, recorded=45001, euid=1000,
                                   stopped=stopped)
    assert stopped == [] and len(warnings) == 1 and "not running as root" in warnings[0]
