"""The install cache's key: every input that shapes the committed image changes it, an env
value no hook declares does not; and which create steps must never be reused."""

from __future__ import annotations

import dataclasses

import pytest

from sbx.domain.kits.compose import Hook
from sbx.domain.sandbox.installcache import StepInputs, install_key, uncacheable_why
from sbx.domain.sandbox.lifecycle import KitFile, LifecyclePlan


def _hook(command: str, env: tuple[str, ...] = ("FLAVOUR",), stage: str = "install") -> Hook:
    return Hook(stage=stage, command=command, user=None, env=env,  # type: ignore[arg-type]
                background=False, description=None, config={}, kit="k", index=0, position=0)


BASE = StepInputs(
    sbx_version="1", base_image_id="sha256:aa", runtime=None, uid=1000, gid=1000,
    home="/home/sbx", workdir="/workspace", limits=("mem", 1),
    container_env={"PATH": "/bin", "FLAVOUR": "plain", "SBX_RUN_ID": "run-1"},
    boundary_env={},
    lifecycle=LifecyclePlan(install=(_hook("make"),), startup=(_hook("go", (), "startup"),),
                            files=(KitFile(kit="k", where="files[0]", path="/etc/a",
                                           content="a"),)))


@pytest.mark.parametrize("change", [
    {"sbx_version": "2"}, {"base_image_id": "sha256:bb"}, {"runtime": "runsc"}, {"uid": 1},
    {"home": "/root"}, {"workdir": "/w"}, {"limits": ("mem", 2)},
    {"container_env": {**BASE.container_env, "FLAVOUR": "spicy"}},
    {"container_env": {**BASE.container_env, "PATH": "/usr/bin"}},
    {"boundary_env": {"X": "1"}},
    {"lifecycle": dataclasses.replace(BASE.lifecycle, install=(_hook("make all"),))},
    {"lifecycle": dataclasses.replace(BASE.lifecycle, startup=())},
    {"lifecycle": dataclasses.replace(BASE.lifecycle, files=(
        KitFile(kit="k", where="files[0]", path="/etc/a", content="b"),))},
    {"lifecycle": dataclasses.replace(BASE.lifecycle, files=(
        KitFile(kit="k", where="files[0]", path="/etc/a", content="a", mode=0o600),))},
])
def test_every_input_of_the_image_changes_the_key(change: dict[str, object]) -> None:
    assert install_key(dataclasses.replace(BASE, **change)) != install_key(BASE)  # type: ignore[arg-type]


def test_a_value_no_hook_reads_leaves_the_key_so_the_next_run_hits() -> None:
    # SBX_RUN_ID differs on every run; no hook declares it, so it is not in the image.
    other = dataclasses.replace(BASE, container_env={**BASE.container_env, "SBX_RUN_ID": "r2"})
    assert install_key(other) == install_key(BASE)


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"networked": True}, "network"), ({"named": True}, "named"), ({"volumes": 1}, "volumes"),
    ({"host_binds": 1}, "host directories")])
def test_steps_whose_result_is_not_in_the_key_are_never_cached(kwargs: dict[str, object],
                                                               why: str) -> None:
    given = {"networked": False, "named": False, "volumes": 0, "host_binds": 0, **kwargs}
    assert why in (uncacheable_why(**given) or "")  # type: ignore[arg-type]
    assert uncacheable_why(networked=False, named=False, volumes=0, host_binds=0) is None
