"""The kit lock file (atomic write, round trip, damage) and the upgrade gate's decisions."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.kits.lock import (
    VERDICTS_DIR,
    Lock,
    LockDecision,
    LockEntry,
    gate,
    load_locked_kit,
    lock_path,
    parse_published,
    published_cache_key,
    published_surface,
    read_lock,
    write_lock,
)
from sbx.domain.kits.surface import Surface, Widening
from sbx.seams import audit
from sbx.usecases.context import AppContext
from sbx.usecases.pull import PullResult
from sbx.views import kit as kit_view
from tests.support.fakeengine import FakeEngine

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def entry(reference: str = "127.0.0.1:5000/kits/a:1", digest: str = D1,
          allow: tuple[str, ...] = ("a.example.com",)) -> LockEntry:
    return LockEntry(reference, digest, f"127.0.0.1:5000/kits/a@{digest}", "workload",
                     Surface(network_runtime_allow=allow))


def test_missing_lock_is_empty(tmp_path: Path) -> None:
    assert read_lock(tmp_path / "kits.lock.json") == Lock()


def test_round_trip_and_format(tmp_path: Path) -> None:
    path = lock_path(tmp_path / "state")
    lock = Lock().with_entry(entry()).with_entry(entry("127.0.0.1:5000/kits/b:1", D2, ()))
    write_lock(path, lock)
    assert read_lock(path) == lock
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["version"] == 1
    assert [k["reference"] for k in data["kits"]] == ["127.0.0.1:5000/kits/a:1",
                                                      "127.0.0.1:5000/kits/b:1"]
    assert data["kits"][0] == {
        "reference": "127.0.0.1:5000/kits/a:1", "digest": D1,
        "image": f"127.0.0.1:5000/kits/a@{D1}", "kind": "workload", "args": {},
        "permissions": {"networkRuntimeAllow": ["a.example.com"]}}
    assert data["kits"][1]["permissions"] == {}
    assert path.stat().st_mode & 0o777 == 0o600


def test_with_entry_replaces_in_place(tmp_path: Path) -> None:
    lock = Lock().with_entry(entry()).with_entry(entry("x.io/b:1", D2))
    moved = lock.with_entry(entry(digest=D2))
    assert [k.reference for k in moved.kits] == [k.reference for k in lock.kits]
    found = moved.get("127.0.0.1:5000/kits/a:1")
    assert found is not None and found.digest == D2


def test_write_is_atomic_and_leaves_no_temp_on_failure(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = lock_path(tmp_path)
    write_lock(path, Lock().with_entry(entry()))
    before = path.read_bytes()

    def broken(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(SbxError, match="disk full") as caught:  # a reason, never a crash
        write_lock(path, Lock().with_entry(entry(digest=D2)))
    assert caught.value.reason is Reason.STATE_UNWRITABLE
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kits.lock.json"]


@pytest.mark.parametrize("text", [
    "{not json", "[]", '{"version": 2, "kits": []}', '{"version": 1, "kits": {}}',
    '{"version": 1, "kits": [{"reference": "r"}]}',
    '{"version": 1, "kits": [{"reference": "r", "digest": "d", "image": "i", "kind": "k", '
    '"permissions": {"privileged": "yes"}}]}',
])
def test_damaged_lock_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kits.lock.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SbxError) as caught:
        read_lock(path)
    assert caught.value.reason is Reason.STATE_CORRUPT


def never(_widenings: Sequence[Widening]) -> bool:
    raise AssertionError("must not ask")


def test_gate_new_unchanged_and_within() -> None:
    candidate = Surface(network_runtime_allow=("a.example.com",))
    assert gate(None, D1, Surface(), accept=False, confirm=never).decision is LockDecision.NEW
    assert gate(entry(), D1, candidate, accept=False, confirm=never).decision \
        is LockDecision.UNCHANGED
    narrowed = gate(entry(), D2, Surface(), accept=False, confirm=never)
    assert narrowed.decision is LockDecision.WITHIN and narrowed.allowed
    assert narrowed.widenings == ()


def test_first_pull_of_a_kit_with_permissions_needs_approval() -> None:
    candidate = Surface(network_runtime_allow=("a.example.com",), credentials_runtime=("gh",))
    refused = gate(None, D1, candidate, accept=False, confirm=None)
    assert refused.decision is LockDecision.REFUSED and not refused.allowed
    assert [str(w) for w in refused.widenings] == [
        "network.runtime.allow: a.example.com", "credentials.runtime: gh"]
    by_flag = gate(None, D1, candidate, accept=True, confirm=never)
    assert (by_flag.decision, by_flag.via) == (LockDecision.NEW, "accept-flag")
    shown: list[list[str]] = []

    def yes(widenings: Sequence[Widening]) -> bool:
        shown.append([str(w) for w in widenings])
        return True

    by_terminal = gate(None, D1, candidate, accept=False, confirm=yes)
    assert (by_terminal.decision, by_terminal.via) == (LockDecision.NEW, "terminal")
    assert shown == [[str(w) for w in refused.widenings]]
    assert gate(None, D1, candidate, accept=False, confirm=lambda _w: False).decision \
        is LockDecision.REFUSED


def test_gate_widening_refused_without_consent() -> None:
    candidate = Surface(network_runtime_allow=("a.example.com", "b.example.com"))
    result = gate(entry(), D2, candidate, accept=False, confirm=None)
    assert result.decision is LockDecision.REFUSED and not result.allowed
    assert [str(w) for w in result.widenings] == ["network.runtime.allow: b.example.com"]


def test_gate_widening_accepted_by_flag_or_terminal() -> None:
    candidate = Surface(network_runtime_allow=("a.example.com",), privileged=True)
    by_flag = gate(entry(), D2, candidate, accept=True, confirm=never)
    assert by_flag.decision is LockDecision.ACCEPTED and by_flag.via == "accept-flag"
    asked: list[Sequence[Widening]] = []

    def yes(widenings: Sequence[Widening]) -> bool:
        asked.append(widenings)
        return True

    by_terminal = gate(entry(), D2, candidate, accept=False, confirm=yes)
    assert by_terminal.decision is LockDecision.ACCEPTED and by_terminal.via == "terminal"
    assert [w.category for w in asked[0]] == ["privileged"]
    declined = gate(entry(), D2, candidate, accept=False, confirm=lambda _w: False)
    assert declined.decision is LockDecision.REFUSED


# --- sbx pull's gate with a fake registry and a fake engine --------------------------------


@contextmanager
def no_progress(_title: str) -> Iterator[Callable[[str], None]]:
    yield lambda _line: None


REF = "127.0.0.1:5000/kits/a:1"


def published(*hosts: str) -> str:
    return json.dumps({"schemaVersion": "3", "kind": "workload", "capabilities": [
        {"type": "com.docker.sandbox/network-policy@1",
         "config": {"runtime": {"allow": list(hosts)}}}]})


def pull_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digest: str, descriptor: str,
              present: Sequence[str] = (), **kwargs: Any) -> tuple[FakeEngine, PullResult]:
    from sbx.seams import registry
    from sbx.usecases import pull as pull_module

    def fetch(ref: registry.Reference, **_kwargs: Any) -> registry.KitManifest:
        return registry.KitManifest(ref, digest, registry.DOCKER_MANIFEST,
                                    {registry.DESCRIPTOR_ANNOTATION: descriptor})

    monkeypatch.setattr(pull_module, "fetch_kit_manifest", fetch)
    engine = FakeEngine()
    for ref in present:
        engine.add_image(ref, image_id="sha256:" + "8" * 64)
    renderer = Renderer(io.StringIO(), io.StringIO(), as_json=False, env={})
    ctx = AppContext(env={"SBX_HOME": str(tmp_path / "state")}, cwd=tmp_path,
                     renderer=renderer, driver_factory=lambda _env: engine)
    result = pull_module.pull(ctx, [REF], progress=no_progress, on_notice=lambda _t: None,
                              **{"accept": False, "confirm": None, **kwargs})
    return engine, result


def test_pull_asks_on_a_terminal_and_audits_the_answer(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    engine, _ = pull_with(tmp_path, monkeypatch, D1, published("a.example.com"), accept=True)
    assert engine.called("pull_image") == [(f"127.0.0.1:5000/kits/a@{D1}",)]
    asked: list[tuple[str, list[str], bool]] = []

    def decline(reference: str, widenings: Sequence[Widening], first: bool) -> bool:
        asked.append((reference, [str(w) for w in widenings], first))
        return False

    before = lock_path(state).read_bytes()
    with pytest.raises(SbxError) as caught:
        pull_with(tmp_path, monkeypatch, D2, published("a.example.com", "b.example.com"),
                  confirm=decline)
    assert caught.value.reason is Reason.PERMISSION_WIDENED
    assert "  + network.runtime.allow: b.example.com" in (caught.value.body or "")
    assert asked == [(REF, ["network.runtime.allow: b.example.com"], False)]
    assert lock_path(state).read_bytes() == before

    engine, result = pull_with(tmp_path, monkeypatch, D2,
                               published("a.example.com", "b.example.com"),
                               confirm=lambda _r, _w, _f: True)
    assert engine.called("pull_image") == [(f"127.0.0.1:5000/kits/a@{D2}",)]
    assert result.items[0].gate is not None
    assert result.items[0].gate.decision is LockDecision.ACCEPTED
    kinds = [(e["event_type"], e["details"].get("via")) for e in audit.read_events(state)]
    assert (audit.KIT_WIDENING_REFUSED, None) in kinds
    assert (audit.KIT_WIDENING_ACCEPTED, "terminal") in kinds
    assert read_lock(lock_path(state)).kits[0].digest == D2
    locked = load_locked_kit(REF, state)
    assert locked is not None and locked.image == f"127.0.0.1:5000/kits/a@{D2}"
    assert locked.descriptor.kind == "workload"


def published_credential(domain: str) -> str:
    """A kit allowed to reach two hosts, with its credential injected at ``domain``."""
    return json.dumps({"schemaVersion": "3", "kind": "workload", "capabilities": [
        {"type": "com.docker.sandbox/network-policy@1",
         "config": {"runtime": {"allow": ["api.example.com", "other.example.com"]}}},
        {"type": "com.docker.sandbox/credential@1",
         "config": {"service": "demo", "phase": "runtime", "apiKey": {
             "name": "TOKEN", "proxyManaged": True,
             "inject": [{"domain": domain, "header": "Authorization"}]}}}]})


def test_pull_refuses_a_credential_moved_to_another_allowed_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    pull_with(tmp_path, monkeypatch, D1, published_credential("api.example.com"), accept=True)
    before = lock_path(state).read_bytes()
    with pytest.raises(SbxError) as caught:
        pull_with(tmp_path, monkeypatch, D2, published_credential("other.example.com"))
    assert caught.value.reason is Reason.PERMISSION_WIDENED
    assert caught.value.body == ("  + credentials.destinations: demo runtime inject "
                                 "other.example.com header authorization")
    assert lock_path(state).read_bytes() == before


def test_the_locked_digest_is_unchanged_whatever_a_newer_sbx_projects(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A lock written before credential destinations were projected: re-pulling the very
    # digest that was approved asks nothing (it is that descriptor), and records the new field.
    state = tmp_path / "state"
    pull_with(tmp_path, monkeypatch, D1, published_credential("api.example.com"), accept=True)
    data = json.loads(lock_path(state).read_text())
    del data["kits"][0]["permissions"]["credentialDestinations"]
    lock_path(state).write_text(json.dumps(data))
    _, result = pull_with(tmp_path, monkeypatch, D1, published_credential("api.example.com"))
    assert result.items[0].gate is not None
    assert result.items[0].gate.decision is LockDecision.UNCHANGED
    assert read_lock(lock_path(state)).kits[0].permissions.credential_destinations == (
        "demo runtime inject api.example.com header authorization",)


def test_invalid_published_descriptor_is_invalid_kit(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SbxError) as caught:
        pull_with(tmp_path, monkeypatch, D1, '{"schemaVersion": "3", "kind": "nope"}')
    assert caught.value.reason is Reason.INVALID_KIT
    assert not lock_path(tmp_path / "state").exists()


def test_terminal_prompt_lists_widenings(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    renderer = Renderer(io.StringIO(), err, as_json=False, env={})
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert kit_view.confirm_widenings(renderer, REF, [Widening("ports", "8080/tcp")])
    assert "  + ports: 8080/tcp" in err.getvalue()
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    assert not kit_view.confirm_widenings(renderer, REF, [Widening("ports", "8080/tcp")])


def test_pull_of_an_image_already_held_by_digest_fetches_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = f"127.0.0.1:5000/kits/a@{D1}"
    engine, result = pull_with(tmp_path, monkeypatch, D1, published("a.example.com"),
                               present=[pinned], accept=True)
    assert engine.called("pull_image") == []  # the engine holds repo@digest: that image
    assert result.items[0].image_id == "sha256:" + "8" * 64
    assert engine.called("tag_image") == [("sha256:" + "8" * 64, REF)]
    assert read_lock(lock_path(tmp_path / "state")).kits[0].digest == D1
    engine, _ = pull_with(tmp_path, monkeypatch, D2, published("a.example.com"),
                          present=[pinned], accept=True)
    assert engine.called("pull_image") == [(f"127.0.0.1:5000/kits/a@{D2}",)]  # another digest


@pytest.mark.parametrize(("written", "says"), [
    ("./missing-kit", "is a path, and no directory exists there"),
    (".", "is a local path"), ("~/missing-kit", "is a path"), ("/", "is a local path"),
])
def test_a_path_is_refused_as_a_path_before_any_registry_call(
        tmp_path: Path, written: str, says: str) -> None:
    from sbx.usecases import pull as pull_module

    renderer = Renderer(io.StringIO(), io.StringIO(), as_json=False, env={})
    ctx = AppContext(env={"SBX_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)},
                     cwd=tmp_path, renderer=renderer,
                     driver_factory=lambda _env: FakeEngine())
    with pytest.raises(SbxError) as caught:
        pull_module.pull(ctx, [written], accept=True, confirm=None, progress=no_progress,
                         on_notice=lambda _t: None)
    assert caught.value.reason is Reason.INVALID_ARGUMENT and says in caught.value.message


# --- the cached verdict on published descriptors ---------------------------------------------


def verdicts(state: Path) -> list[Path]:
    directory = state.joinpath(*VERDICTS_DIR)
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def test_published_verdict_is_reused_for_the_same_text_and_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sbx.domain.kits import lock as lock_module

    state = tmp_path / "state"
    text = published("a.example.com")
    first = parse_published(text, "ref", state)
    assert [p.name for p in verdicts(state)] == [f"{published_cache_key(text)}.json"]
    calls: list[str] = []
    from sbx.domain.kits.descriptor import parse_descriptor_text as real

    def counting(text: str, file: str, **kwargs: Any) -> Any:
        calls.append(file)
        return real(text, file, **kwargs)

    monkeypatch.setattr(lock_module, "parse_descriptor_text", counting)
    again = parse_published(text, "ref again", state)
    assert calls == [] and again.data == first.data and again.file == "ref again"
    # Other text, or the same text under other rules, is validated afresh.
    parse_published(published("b.example.com"), "other", state)
    monkeypatch.setattr(lock_module, "validation_fingerprint", lambda: "other rules")
    parse_published(text, "new rules", state)
    assert calls == ["other", "new rules"]
    assert len(verdicts(state)) == 3  # one per (rules, text)


def test_published_verdict_never_caches_a_failure_and_survives_damage(tmp_path: Path) -> None:
    state = tmp_path / "state"
    bad = '{"schemaVersion": "3", "kind": "nope"}'
    for _ in range(2):
        with pytest.raises(SbxError) as caught:
            parse_published(bad, "bad", state)
        assert caught.value.reason is Reason.INVALID_KIT
    assert verdicts(state) == []
    text = published("a.example.com")
    expected = parse_published(text, "ref", state).data
    (entry_file,) = verdicts(state)
    for damage in ("{not json", "[]", '{"no": "kind"}'):
        entry_file.write_text(damage, encoding="utf-8")
        assert parse_published(text, "ref", state).data == expected
        assert json.loads(entry_file.read_text(encoding="utf-8")) == expected  # rewritten


def test_published_key_is_apart_from_the_authored_one() -> None:
    from sbx.domain.kits.schema import validation_fingerprint

    text = published("a.example.com")
    authored = hashlib.sha256(f"sbx-descriptor-v3\0{validation_fingerprint()}\0{text}"
                              .encode()).hexdigest()
    assert published_cache_key(text) != authored
    assert published_cache_key(text) != published_cache_key(text + " ")


@pytest.mark.parametrize(("data", "paths"), [
    ({"schemaVersion": "3", "kind": "mixin", "provides": ["gh@1.0.0"]}, []),
    ({"schemaVersion": "3", "kind": "mixin", "version": "2.0", "provides": ["gh"]}, []),
    ({"schemaVersion": "3", "kind": "mixin", "provides": ["gh"]}, ["provides[0]"]),
    ({"schemaVersion": "3", "kind": "set", "kits": [{"ref": "r/x:1"}]}, ["kind"]),
    ({"schemaVersion": "3", "kind": "mixin", "provides": ["gh@${{ kit.args.v }}"],
      "args": {"v": {"default": "1", "buildArg": "V"}}}, ["provides[0]"]),
    ({"schemaVersion": "3", "kind": "mixin", "displayName": "x ${{ kit.args.team }}",
      "args": {"team": {"default": "a"}}}, []),  # create-phase args are expanded at create
])
def test_published_form_rules(data: dict[str, object], paths: list[str]) -> None:
    from sbx.usecases.pull import published_form_problems

    assert [path for path, _ in published_form_problems(data)] == paths


def test_published_surface_is_computed_once_per_text_and_never_for_a_failure(
        tmp_path: Path) -> None:
    calls: list[str] = []
    asked = Surface(network_runtime_allow=("a.example.com",))

    def compute() -> tuple[str, Surface]:
        calls.append("computed")
        return "workload", asked

    home = tmp_path / "state"
    assert published_surface("text one", home, compute) == ("workload", asked)
    assert published_surface("text one", home, compute) == ("workload", asked)
    assert calls == ["computed"]  # the second read is the cached entry
    assert published_surface("text two", home, compute) == ("workload", asked)
    assert calls == ["computed", "computed"]  # another text is another key

    def failing() -> tuple[str, Surface]:
        raise SbxError(Reason.INVALID_KIT, "bad")

    for _ in range(2):  # a failure is reported every time, never cached
        with pytest.raises(SbxError):
            published_surface("text three", home, failing)
    entries = sorted(p for p in home.joinpath("cache", "descriptors").iterdir()
                     if p.name.startswith("surface-"))
    assert len(entries) == 2
    for entry in entries:  # a damaged entry is a miss, computed again
        entry.write_text('{"kind": "workload", "surface": {"networkRuntimeAllow": "not a list"}}')
    assert published_surface("text one", home, compute) == ("workload", asked)
    assert calls == ["computed"] * 3
