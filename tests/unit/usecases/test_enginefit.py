"""A run on an engine of another host is refused when it needs this machine (a bound workspace,
host paths, sized volumes, published ports, the parts of egress only this machine serves), and
goes ahead when it needs none of it (a one-shot run's egress: its proxy runs beside the engine)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.engine import EngineLocation
from sbx.usecases.enginefit import local_needs, refuse_local_only

FAR = EngineLocation("ssh://me@box", local=False)
HERE = EngineLocation("unix:///var/run/docker.sock", local=True)


def _plan(**fields: Any) -> Any:
    base: dict[str, Any] = {"workspace_host": None, "host_mounts": SimpleNamespace(pins=[]),
                            "capabilities": _caps(), "egress": None, "name": None,
                            "network": None, "facts": SimpleNamespace(workload="./kit")}
    return SimpleNamespace(**{**base, **fields})


def _caps(**fields: Any) -> Any:
    return SimpleNamespace(**{"volumes": (), "ssh_agent": (), "kit_registry": False,
                              "ports": (), "published": (), **fields})


def _egress(**modes: str) -> Any:
    return SimpleNamespace(modes=modes)


def _pin(path: str) -> Any:
    return SimpleNamespace(source=SimpleNamespace(path=path))


def test_an_offline_run_without_host_paths_runs_anywhere() -> None:
    refuse_local_only(FAR, _plan())
    assert local_needs(_plan()) == []


@pytest.mark.parametrize(("fields", "said"), [
    ({"workspace_host": "/src/p", "host_mounts": SimpleNamespace(
        pins=[_pin("/src/p"), _pin("/src/p/.git")])}, "the workspace /src/p"),
    ({"host_mounts": SimpleNamespace(pins=[_pin("/data")])}, "host paths (/data)"),
    ({"capabilities": _caps(volumes=(SimpleNamespace(path="/cache", size=1),))},
     "sized volumes (/cache)"),
    ({"egress": _egress(), "network": "n", "name": "dev"}, "named sandbox's egress"),
    ({"egress": _egress(gh="apikey", claude="oauth"), "network": "n"},
     "OAuth credentials (claude)"),
    ({"egress": _egress(), "network": "n", "capabilities": _caps(ssh_agent=(("g",),))},
     "SSH agent relay"),
    ({"egress": _egress(), "network": "n", "capabilities": _caps(kit_registry=True)},
     "kit registry"),
    ({"network": "n", "capabilities": _caps(ports=(8080,))}, "published ports"),
])
def test_what_needs_this_machine_is_refused_on_a_far_engine(fields: dict[str, Any],
                                                            said: str) -> None:
    plan = _plan(**fields)
    refuse_local_only(HERE, plan)  # the local engine: fine
    with pytest.raises(SbxError) as raised:
        refuse_local_only(FAR, plan)
    assert raised.value.reason is Reason.ENGINE_NOT_LOCAL
    assert said in raised.value.message and "ssh://me@box" in raised.value.message
    assert "--workspace-mode copy" in (raised.value.hint or "")
    assert len(local_needs(plan)) == 1  # the workspace's own pins are not listed twice


def test_a_one_shot_runs_egress_runs_beside_any_engine() -> None:
    plan = _plan(egress=_egress(gh="apikey"), network="n")
    refuse_local_only(FAR, plan)
    assert local_needs(plan) == []


def _planned(**fields: Any) -> Any:
    capabilities = {"host_mounts": (), "volumes": (), "ports": (), "ssh_agent": (),
                    "kit_registry": False, **fields.pop("caps", {})}
    return SimpleNamespace(capabilities=SimpleNamespace(**capabilities),
                           **{"egress": None, **fields})


@pytest.mark.parametrize(("planned", "said"), [
    (_planned(egress=_egress(claude="oauth")), "OAuth credentials"),
    (_planned(caps={"kit_registry": True}), "kit registry"),
    (_planned(caps={"ports": (8080,)}), "published ports"),
    (_planned(caps={"host_mounts": (SimpleNamespace(path="/data"),)}), "host-mount@1 at /data"),
    (_planned(caps={"volumes": (SimpleNamespace(path="/cache", size=1),)}), "sized volumes"),
])
def test_explain_predicts_what_a_run_would_need_of_this_machine(planned: Any, said: str) -> None:
    from sbx.usecases.enginefit import not_local, planned_needs

    needs = planned_needs(planned)
    assert len(needs) == 1 and said in needs[0]
    assert not_local(HERE, needs) is None
    refused = not_local(FAR, needs)
    assert refused is not None and refused.reason is Reason.ENGINE_NOT_LOCAL
    assert "ssh://me@box" in refused.message


def test_an_offline_plan_needs_nothing_of_this_machine() -> None:
    from sbx.usecases.enginefit import not_local, planned_needs

    planned = _planned(caps={"volumes": (SimpleNamespace(path="/v", size=None),)})
    assert planned_needs(planned) == [] and not_local(FAR, []) is None


def test_a_bound_workspace_alone_gets_the_copy_as_a_pastable_fix() -> None:
    plan = _plan(workspace_host="/src/my project",
                 host_mounts=SimpleNamespace(pins=[_pin("/src/my project")]))
    with pytest.raises(SbxError) as raised:
        refuse_local_only(FAR, plan)
    assert "`sbx run ./kit '/src/my project' --workspace-mode copy`" in (raised.value.hint or "")


def test_a_copied_workspace_needs_nothing_of_this_machine() -> None:
    """A copy travels through the engine: the plan holds no bound workspace."""
    plan = _plan(workspace_copy="/src/p", workspace_volume="sbx-x-ws")
    refuse_local_only(FAR, plan)
    assert local_needs(plan) == []
