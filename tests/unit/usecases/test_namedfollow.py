"""A named sandbox's start skips its kits' follow-up only when everything the follow-up reads
is as it was when one found nothing (sbx.usecases.namedfollow); any change, and any follow-up
that found something, runs the full comparison again."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases import namedfollow, namedkits
from sbx.usecases.context import AppContext
from sbx.usecases.explain import static_composition
from sbx.usecases.pipeline import WorkloadRequest, load
from sbx.usecases.sandboxstore import SandboxStore
from tests.support.kits import capabilities, network_policy, write_kit


def _ctx(tmp_path: Path, **env: str) -> AppContext:
    full = {**os.environ, "SBX_HOME": str(tmp_path / "state"), "SBX_CONFIG": os.devnull, **env}
    return AppContext(env=full, cwd=tmp_path, renderer=Renderer(io.StringIO(), io.StringIO(),
                                                                as_json=False))


def _made(ctx: AppContext, kit: Path) -> SandboxRecord:
    """A named sandbox as its creation records it: the record, and its proxy's config."""
    kit_set = load(ctx, WorkloadRequest(workload=str(kit))).kit_set
    composition = static_composition(kit_set)
    record = SandboxRecord(
        name="dev", run_id="f" * 32, created=1.0, workload=str(kit), kits=[], workspace=None,
        access="none", container_id="c" * 64,
        request={"options": {}, "proxy": True,
                 "kits_state": namedkits.fingerprint(kit_set, composition)})
    SandboxStore(ctx.state_home).save(record)
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    run_dir.mkdir(parents=True)
    ProxyConfig(run_id=record.run_id, state_home=ctx.state_home,
                audit_log=ctx.state_home / "audit.jsonl", network=composition.network,
                credentials=()).write(run_dir / "proxy.json")
    return record


@pytest.fixture
def followed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the sandboxes whose kits were really compared."""
    calls: list[str] = []
    real = namedkits.follow

    def counting(ctx: AppContext, record: SandboxRecord, **kwargs: Any) -> bool:
        calls.append(record.name)
        return real(ctx, record, **kwargs)

    monkeypatch.setattr(namedkits, "follow", counting)
    return calls


def _follow(ctx: AppContext, record: SandboxRecord) -> list[str]:
    warnings: list[str] = []
    namedfollow.follow(ctx, SandboxStore(ctx.state_home).load(record.name) or record,
                       accept=False, confirm=None, on_notice=warnings.append,
                       on_warning=warnings.append)
    return warnings


def test_unchanged_kits_are_compared_once(tmp_path: Path, followed: list[str]) -> None:
    ctx = _ctx(tmp_path)
    record = _made(ctx, write_kit(tmp_path / "kits", "k"))
    assert _follow(ctx, record) == [] and _follow(ctx, record) == []
    assert followed == ["dev"]
    assert (runrecord.run_dir(ctx.state_home, record.run_id) / namedfollow.FOLLOWED).exists()


def test_a_widened_kit_after_a_skip_is_still_refused(tmp_path: Path,
                                                      followed: list[str]) -> None:
    """A kit that asks for more after a quiet start is compared (its bytes changed) and its
    widening refused as before, at every start: a refusal is never remembered as quiet."""
    ctx = _ctx(tmp_path)
    kit = write_kit(tmp_path / "kits", "k", capabilities(network_policy(runtime=["a.example"])))
    record = _made(ctx, kit)
    assert _follow(ctx, record) == []
    descriptor = kit / "k.yaml"
    descriptor.write_text(descriptor.read_text().replace('["a.example"]',
                                                         '["a.example", "b.example"]'))
    for _ in range(2):
        with pytest.raises(SbxError) as refused:
            _follow(ctx, record)
        assert refused.value.reason is Reason.PERMISSION_WIDENED
    assert followed == ["dev", "dev", "dev"]


def test_what_the_follow_up_reads_is_in_the_digest(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("", encoding="utf-8")
    ctx = _ctx(tmp_path, SBX_CONFIG=str(config))
    kit = write_kit(tmp_path / "kits", "k")
    record = _made(ctx, kit)
    before = namedfollow.inputs_digest(ctx, record)
    assert before is not None and before == namedfollow.inputs_digest(ctx, record)
    config.write_text("[sandbox]\n", encoding="utf-8")
    after_config = namedfollow.inputs_digest(ctx, record)
    (kit / "notes.txt").write_text("any file of the kit", encoding="utf-8")
    after_kit = namedfollow.inputs_digest(ctx, record)
    proxy = runrecord.run_dir(ctx.state_home, record.run_id) / "proxy.json"
    proxy.write_text(proxy.read_text() + " ")
    after_proxy = namedfollow.inputs_digest(ctx, record)
    other = SandboxRecord(**{**record.__dict__, "request": {**record.request, "options": {
        "args": ["A=1"]}}})
    assert len({before, after_config, after_kit, after_proxy,
                namedfollow.inputs_digest(ctx, other)}) == 5


def test_kits_not_named_by_a_directory_are_always_followed(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    record = _made(ctx, write_kit(tmp_path / "kits", "k"))
    for word in ("claude", "registry.example/kits/k:1", "kits/k"):
        state = {**record.request["kits_state"], "workload": word}
        named = SandboxRecord(**{**record.__dict__,
                                 "request": {**record.request, "kits_state": state}})
        assert namedfollow.inputs_digest(ctx, named) is None
