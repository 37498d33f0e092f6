"""A named sandbox following its kits, without an engine: the comparison with what its proxy
runs with and what was recorded at its creation (widening asked or refused, narrowing applied,
the rest named with --recreate), and the request a recreation makes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.proxycreds import CredentialSpec
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases import namedkits, recreate
from sbx.usecases.context import AppContext
from sbx.usecases.explain import static_composition
from sbx.usecases.pipeline import WorkloadRequest, load
from sbx.usecases.run.request import RunRequest
from sbx.usecases.sandboxstore import SandboxStore
from tests.support.kits import api_key_credential, capabilities, network_policy, write_kit


def _ctx(tmp_path: Path) -> AppContext:
    env = {**os.environ, "SBX_HOME": str(tmp_path / "state"), "SBX_CONFIG": os.devnull}
    return AppContext(env=env, cwd=tmp_path, renderer=Renderer(io.StringIO(), io.StringIO(),
                                                               as_json=False))


def _made(ctx: AppContext, kit: Path, name: str = "dev") -> SandboxRecord:
    """A named sandbox as a creation records it: its record and its proxy's config."""
    kit_set = load(ctx, WorkloadRequest(workload=str(kit))).kit_set
    composition = static_composition(kit_set)
    record = SandboxRecord(
        name=name, run_id="e" * 32, created=1.0, workload=str(kit), kits=[], workspace=None,
        access="none", container_id="c" * 64,
        request={"options": {}, "proxy": True,
                 "kits_state": namedkits.fingerprint(kit_set, composition)})
    SandboxStore(ctx.state_home).save(record)
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    run_dir.mkdir(parents=True)
    ProxyConfig(run_id=record.run_id, state_home=ctx.state_home,
                audit_log=ctx.state_home / "audit.jsonl", network=composition.network,
                credentials=tuple(CredentialSpec.from_credential(c)
                                  for c in composition.credentials)
                ).write(run_dir / "proxy.json")
    return record


def _follow(ctx: AppContext, record: SandboxRecord, **kwargs: Any) -> tuple[list[str], list[str]]:
    notices: list[str] = []
    warnings: list[str] = []
    namedkits.follow(ctx, SandboxStore(ctx.state_home).load(record.name) or record,
                     on_notice=notices.append, on_warning=warnings.append,
                     **{"accept": False, "confirm": None, **kwargs})
    return notices, warnings


def _hosts(ctx: AppContext, record: SandboxRecord) -> list[str]:
    config = ProxyConfig.load(runrecord.run_dir(ctx.state_home, record.run_id) / "proxy.json")
    assert config.network is not None
    return sorted(r.host for r in config.network.runtime.allow)


def test_unchanged_kits_change_nothing(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    kit = write_kit(tmp_path / "kits", "k", capabilities(network_policy(runtime=["a.example"])))
    record = _made(ctx, kit)
    change = namedkits.compare(ctx, record)
    assert change is not None and change.empty and change.kits == ()
    assert _follow(ctx, record) == ([], [])


def test_a_widening_is_refused_without_approval_and_applied_with_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    kit = write_kit(tmp_path / "kits", "k", capabilities(network_policy(runtime=["a.example"])))
    record = _made(ctx, kit)
    descriptor = kit / "k.yaml"
    descriptor.write_text(descriptor.read_text().replace('["a.example"]',
                                                         '["a.example", "b.example"]'))
    with pytest.raises(SbxError) as refused:
        _follow(ctx, record)
    assert refused.value.reason is Reason.PERMISSION_WIDENED
    assert "+ network.runtime.allow: b.example" in (refused.value.body or "")
    assert _hosts(ctx, record) == ["a.example"]  # nothing changed
    asked: list[str] = []

    def decline(what: str, _widenings: Any) -> bool:
        asked.append(what)
        return False

    with pytest.raises(SbxError):
        _follow(ctx, record, confirm=decline)
    assert asked and "dev: its kits" in asked[0]
    notices, warnings = _follow(ctx, record, confirm=lambda _what, _ws: True)
    assert _hosts(ctx, record) == ["a.example", "b.example"] and warnings == []
    assert "network: +b.example" in notices[0]
    events = [json.loads(line)["event_type"] for line in
              (ctx.state_home / "audit.jsonl").read_text().splitlines()]
    assert events == ["kit_widening_refused", "kit_widening_refused", "kit_widening_accepted"]
    assert _follow(ctx, record) == ([], [])  # recorded: the next start is quiet


def test_a_narrowing_applies_and_what_needs_a_container_is_named(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    kit = write_kit(tmp_path / "kits", "k", capabilities(
        network_policy(runtime=["a.example", "b.example"]),
        api_key_credential("svc", "SVC_TOKEN", "a.example")))
    record = _made(ctx, kit)
    descriptor = kit / "k.yaml"
    descriptor.write_text(descriptor.read_text().replace('["a.example", "b.example"]',
                                                         '["a.example"]')
                          + '  - type: com.docker.sandbox/port@1\n    config: {"container": 80}\n'
                          + "  - type: com.docker.sandbox/volume@1\n    config: {path: /data}\n")
    notices, warnings = _follow(ctx, record)
    assert _hosts(ctx, record) == ["a.example"]
    assert "network: -b.example" in notices[0]
    assert "ports: +80/tcp" in warnings[0] and "storage paths: +/data" in warnings[0]
    assert f"sbx run --name dev --recreate {kit}" in warnings[0]
    assert namedkits.pending_notes(ctx, "dev")  # still not taken: explain says so
    # A credential the kits dropped is no longer injected.
    descriptor.write_text(descriptor.read_text().split("  - type: com.docker.sandbox/credential@1")
                          [0])
    notices, _ = _follow(ctx, record)
    assert any("credential svc (runtime): removed" in n for n in notices)


def test_a_recreation_repeats_the_recorded_options_but_not_variables(tmp_path: Path) -> None:
    record = SandboxRecord(
        name="dev", run_id="f" * 32, created=1.0, workload="./k", kits=["./m"],
        workspace="/home/me/project", access="ro", container_id=None,
        request={"options": {"args": ["a=1"], "timeout_s": 60.0, "kits": ["./m"]},
                 "kits_state": {"workload": "/abs/k", "mixins": ["/abs/m"]}})
    again = recreate.creation_request(RunRequest(workload="./k", name="dev", recreate=True),
                                      record)
    assert (again.workload, again.kits, again.args, again.timeout_s) == (
        "/abs/k", ("/abs/m",), ("a=1",), 60.0)
    assert (again.workspace, again.access) == ("/home/me/project", "ro")
    given = recreate.creation_request(RunRequest(workload="./k", name="dev", recreate=True,
                                                 args=("a=2",)), record)
    assert given.args == ("a=2",)
    secret = SandboxRecord(**{**record.__dict__, "request": {
        "options": {"env": "digest"}, "kits_state": record.request["kits_state"]}})
    with pytest.raises(SbxError) as refused:
        recreate.creation_request(RunRequest(workload="./k", name="dev", recreate=True), secret)
    assert refused.value.reason is Reason.INVALID_ARGUMENT and "--env" in refused.value.message
