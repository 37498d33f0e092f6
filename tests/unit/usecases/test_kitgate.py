"""The permission gate of local kits (sbx.usecases.kitgate, sbx.domain.kits.approvals): what a
kit asks for now against what was approved at its last run, decided by the pull gate's own
comparison; no engine."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.approvals import approvals_path, covered, read_approvals
from sbx.domain.kits.kitset import load_kit_set
from sbx.domain.kits.lock import LockDecision
from sbx.domain.kits.surface import Surface, Widening
from sbx.domain.sandbox.capabilities import SUPPORTED
from sbx.seams import audit
from sbx.usecases.kitgate import (
    KitSurface,
    accept_command,
    approve,
    judge,
    kit_surfaces,
    permission_states,
)
from tests.support.kits import api_key_credential, capabilities, network_policy, write_kit

A = Surface(network_runtime_allow=("a.example.com",))
AB = Surface(network_runtime_allow=("a.example.com", "b.example.com"))


def kit(surface: Surface, path: str = "/kits/agent") -> KitSurface:
    return KitSurface("./agent", path, path, surface)


def gate(home: Path, surface: Surface, *, accept: bool = False, confirm: Any = None,
         notes: list[str] | None = None) -> Sequence[Any]:
    return approve(home, [kit(surface)], accept=accept, confirm=confirm,
                   command="sbx run --accept ./agent .", run_id="r" * 32,
                   on_notice=(notes if notes is not None else []).append)


def events(home: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in audit.read_log(home).events if e.get("event_type") == kind]


def test_a_first_run_is_recorded_and_shown_once(tmp_path: Path) -> None:
    notes: list[str] = []
    [verdict] = gate(tmp_path, AB, notes=notes)
    assert verdict.result.decision is LockDecision.NEW
    assert read_approvals(tmp_path).get("/kits/agent").permissions == AB  # type: ignore[union-attr]
    assert len(notes) == 1 and "+ network.runtime.allow: b.example.com" in notes[0]
    [again] = gate(tmp_path, AB, notes=notes)
    assert again.result.decision is LockDecision.UNCHANGED and len(notes) == 1


def test_a_kit_that_asks_for_nothing_is_recorded_silently(tmp_path: Path) -> None:
    notes: list[str] = []
    gate(tmp_path, Surface(), notes=notes)
    assert notes == []
    assert read_approvals(tmp_path).get("/kits/agent") is not None


def test_a_widening_is_refused_without_approval_and_nothing_is_recorded(tmp_path: Path) -> None:
    gate(tmp_path, A)
    before = approvals_path(tmp_path).read_bytes()
    with pytest.raises(SbxError) as refused:
        gate(tmp_path, AB)
    error = refused.value
    assert error.reason is Reason.PERMISSION_WIDENED
    assert "+ network.runtime.allow: b.example.com" in (error.body or "")
    assert error.hint is not None and error.hint.endswith("sbx run --accept ./agent .")
    assert error.details["problems"] == [{"category": "network.runtime.allow",
                                          "detail": "b.example.com"}]
    assert approvals_path(tmp_path).read_bytes() == before
    [event] = events(tmp_path, audit.KIT_WIDENING_REFUSED)
    assert event["details"]["path"] == "/kits/agent" and event["details"]["local"] is True
    assert event["run_id"] == "r" * 32


def test_a_widening_is_approved_by_accept_or_on_the_terminal(tmp_path: Path) -> None:
    gate(tmp_path, A)
    [by_flag] = gate(tmp_path, AB, accept=True)
    assert (by_flag.result.decision, by_flag.result.via) == (LockDecision.ACCEPTED,
                                                             "accept-flag")
    assert read_approvals(tmp_path).get("/kits/agent").permissions == AB  # type: ignore[union-attr]
    wider = Surface(network_runtime_allow=("a.example.com", "b.example.com", "c.example.com"))
    asked: list[tuple[str, list[str]]] = []

    def yes(reference: str, widenings: Sequence[Widening]) -> bool:
        asked.append((reference, [str(w) for w in widenings]))
        return True

    [by_terminal] = gate(tmp_path, wider, confirm=yes)
    assert by_terminal.result.via == "terminal"
    assert asked == [("./agent", ["network.runtime.allow: c.example.com"])]
    with pytest.raises(SbxError):
        gate(tmp_path, Surface(network_runtime_allow=("d.example.com",)),
             confirm=lambda _r, _w: False)
    vias = [e["details"]["via"] for e in events(tmp_path, audit.KIT_WIDENING_ACCEPTED)]
    assert vias == ["accept-flag", "terminal"]


def test_a_narrowing_is_recorded_and_going_back_is_a_widening(tmp_path: Path) -> None:
    gate(tmp_path, AB)
    [narrowed] = gate(tmp_path, A)
    assert narrowed.result.decision is LockDecision.WITHIN
    assert read_approvals(tmp_path).get("/kits/agent").via == "narrowed"  # type: ignore[union-attr]
    with pytest.raises(SbxError):
        gate(tmp_path, AB)


def test_moving_a_credential_to_another_allowed_host_is_a_widening(tmp_path: Path) -> None:
    def descriptor(domain: str) -> str:
        return capabilities(network_policy(runtime=["api.example.com", "other.example.com"]),
                            api_key_credential("demo", "TOKEN", domain))

    write_kit(tmp_path, "agent", descriptor("api.example.com"))
    loaded = load_kit_set("./agent", [], [], cwd=tmp_path, cache_dir=tmp_path / "cache",
                          supported=SUPPORTED)
    surfaces = kit_surfaces(loaded, {}, tmp_path)
    approve(tmp_path, surfaces, accept=False, confirm=None, command="x", run_id=None,
            on_notice=lambda _t: None)
    (tmp_path / "agent" / "agent.yaml").write_text(
        (tmp_path / "agent" / "agent.yaml").read_text().replace(
            "api.example.com\", \"header", "other.example.com\", \"header"))
    moved = load_kit_set("./agent", [], [], cwd=tmp_path, cache_dir=tmp_path / "cache",
                         supported=SUPPORTED)
    [verdict] = judge(tmp_path, kit_surfaces(moved, {}, tmp_path))
    assert verdict.pending
    assert [str(w) for w in verdict.result.widenings] == [
        "credentials.destinations: demo runtime inject other.example.com header authorization"]


def test_the_record_is_found_by_the_name_the_kit_was_given(tmp_path: Path) -> None:
    # A symbolic link re-pointed at another kit is still the same name: it is compared with
    # what was approved under that name, not taken for a first run.
    write_kit(tmp_path, "one", capabilities(network_policy(runtime=["a.example.com"])))
    write_kit(tmp_path, "two", capabilities(network_policy(runtime=["evil.example.com"])))
    os.symlink(tmp_path / "one", tmp_path / "agent")

    def surfaces() -> tuple[KitSurface, ...]:
        loaded = load_kit_set("./agent", [], [], cwd=tmp_path, cache_dir=tmp_path / "c",
                              supported=SUPPORTED)
        return kit_surfaces(loaded, {}, tmp_path)

    approve(tmp_path, surfaces(), accept=False, confirm=None, command="x", run_id=None,
            on_notice=lambda _t: None)
    (tmp_path / "agent").unlink()
    os.symlink(tmp_path / "two", tmp_path / "agent")
    [verdict] = judge(tmp_path, surfaces())
    assert verdict.kit.path == str(tmp_path / "agent")
    assert verdict.kit.descriptor == str(tmp_path / "two" / "two.yaml")
    assert verdict.pending


def test_another_spelling_of_a_recorded_kit_is_judged_against_its_record(
        tmp_path: Path) -> None:
    write_kit(tmp_path, "agent", capabilities(network_policy(runtime=["a.example.com"])))

    def surfaces(reference: str) -> tuple[KitSurface, ...]:
        loaded = load_kit_set(reference, [], [], cwd=tmp_path, cache_dir=tmp_path / "c",
                              supported=SUPPORTED)
        return kit_surfaces(loaded, {}, tmp_path)

    approve(tmp_path, surfaces("./agent"), accept=False, confirm=None, command="x",
            run_id=None, on_notice=lambda _t: None)
    descriptor = tmp_path / "agent" / "agent.yaml"
    descriptor.write_text(descriptor.read_text().replace('"a.example.com"',
                                                         '"a.example.com", "b.example.com"'))
    os.symlink(tmp_path / "agent", tmp_path / "alias")
    for spelling in ("./agent/agent.yaml", "./alias", str(tmp_path / "agent") + "/"):
        [verdict] = judge(tmp_path, surfaces(spelling))
        assert verdict.pending, spelling  # not a first run


def test_a_damaged_record_is_refused_never_read_as_empty(tmp_path: Path) -> None:
    approvals_path(tmp_path).write_text('{"version": 1, "kits": [{"path": 3}]}')
    with pytest.raises(SbxError) as damaged:
        gate(tmp_path, A)
    assert damaged.value.reason is Reason.STATE_CORRUPT
    with pytest.raises(SbxError):
        covered(tmp_path, [("/kits/agent", "/kits/agent/agent.yaml", A)])


def test_a_cached_plan_is_covered_only_while_the_record_covers_it(tmp_path: Path) -> None:
    here = ("/kits/agent", "/kits/agent/agent.yaml")
    assert covered(tmp_path, [(*here, Surface())])  # nothing asked, nothing to check
    assert not covered(tmp_path, [(*here, A)])  # no record: the full plan records it
    gate(tmp_path, AB)
    assert covered(tmp_path, [(*here, A)])
    gate(tmp_path, A)  # narrowed
    assert not covered(tmp_path, [(*here, AB)])


@pytest.mark.parametrize(("argv", "passthrough", "expected"), [
    (("run", "./agent", "."), None, "sbx run --accept ./agent ."),
    (("--verbose", "run", "./my agent", "."), ("sh", "-c", "echo hi"),
     "sbx --verbose run --accept './my agent' . -- sh -c 'echo hi'"),
    (("run", "--accept", "./agent"), None, "sbx run --accept ./agent"),
    (None, None, "sbx run --accept ..."),
])
def test_the_accept_command_is_the_same_command_with_accept(
        argv: tuple[str, ...] | None, passthrough: tuple[str, ...] | None,
        expected: str) -> None:
    assert accept_command(argv, passthrough) == expected


def test_explain_states_follow_the_gate(tmp_path: Path) -> None:
    write_kit(tmp_path, "agent", capabilities(network_policy(runtime=["a.example.com"])))

    def states() -> list[dict[str, Any]]:
        loaded = load_kit_set("./agent", [], [], cwd=tmp_path, cache_dir=tmp_path / "c",
                              supported=SUPPORTED)
        return [s.as_dict() for s in permission_states(tmp_path, loaded, {}, tmp_path)]

    [first] = states()
    assert (first["status"], first["recorded"]) == ("first-run", None)
    loaded = load_kit_set("./agent", [], [], cwd=tmp_path, cache_dir=tmp_path / "c",
                          supported=SUPPORTED)
    approve(tmp_path, kit_surfaces(loaded, {}, tmp_path), accept=False, confirm=None,
            command="x", run_id=None, on_notice=lambda _t: None)
    assert states()[0]["status"] == "approved"
    descriptor = tmp_path / "agent" / "agent.yaml"
    descriptor.write_text(descriptor.read_text().replace('"a.example.com"',
                                                         '"a.example.com", "b.example.com"'))
    [widened] = states()
    assert widened["status"] == "widened"
    assert widened["widenings"] == [{"category": "network.runtime.allow",
                                     "detail": "b.example.com"}]
    assert json.loads(approvals_path(tmp_path).read_text())["kits"][0]["permissions"] == {
        "networkRuntimeAllow": ["a.example.com"],
        "networkRuntimeHTTPAllow": ["ANY a.example.com/**"]}  # explain records nothing
