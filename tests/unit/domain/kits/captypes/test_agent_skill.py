"""agent-skill@1, decided by its handler: a tmpfs and one linking step per destination, the
host store linked before the bundles, and no destination refused or skipped."""

from __future__ import annotations

from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.compose import Contribution, compose
from sbx.domain.kits.types import SKILLS_STAGING
from sbx.domain.sandbox.capabilities import SUPPORTED, CapabilityPlan, plan_capabilities
from sbx.domain.sandbox.hardening import Limits

SKILL = "com.docker.sandbox/agent-skill@1"
SKILLS = "com.docker.sandbox/agent-skills@1"
MIB = 1024 * 1024
LIMITS = Limits(memory_bytes=4096 * MIB, pids=128, cpu_millis=1000, tmp_bytes=256 * MIB,
                workspace_bytes=512 * MIB, home_bytes=512 * MIB)


def _plan(*entries: dict[str, Any]) -> CapabilityPlan:
    return plan_capabilities(compose([Contribution("kit", list(entries))]), limits=LIMITS,
                             allow_privileged=False, workspace_target="/workspace", kits={})


def _bundle(path: str, optional: bool = False, **extra: Any) -> dict[str, Any]:
    return {"type": SKILL, "config": {"path": path, **extra},
            **({"optional": True} if optional else {})}


def test_each_destination_gets_a_tmpfs_and_the_links_in_order() -> None:
    plan = _plan({"type": SKILLS, "config": {"path": "/d/one"}},
                 {"type": SKILLS, "config": {"path": "/d/two"}},
                 _bundle("/usr/share/s/review"), _bundle("/usr/share/s/x", name="lint"))
    assert SKILL in SUPPORTED
    assert plan.bundle_paths == ("/d/one", "/d/two")
    assert set(plan.tmpfs) >= {"/d/one", "/d/two"}
    (hook,) = [h for h in plan.lifecycle.startup if h.kit == "sbx"]
    script = str(hook.command)
    assert "[ -f /usr/share/s/review/SKILL.md ]" in script
    for dest in ("/d/one", "/d/two"):
        store = script.index(f'link "$s" {dest}/')
        assert store < script.index(f"link /usr/share/s/review {dest}/review")
        assert store < script.index(f"link /usr/share/s/x {dest}/lint")
    assert SKILLS_STAGING in script and "ln -s" in script


def test_a_destination_without_bundles_is_left_to_the_store_mount() -> None:
    plan = _plan({"type": SKILLS, "config": {"path": "/d/one"}})
    assert plan.bundle_paths == () and "/d/one" not in plan.tmpfs
    assert plan.skills_paths == ("/d/one",)


def test_no_destination_refuses_a_required_bundle_and_skips_an_optional_one() -> None:
    with pytest.raises(SbxError) as caught:
        _plan(_bundle("/usr/share/s/review"))
    assert caught.value.reason is Reason.SKILL_NO_DESTINATION
    skipped = _plan(_bundle("/usr/share/s/review", optional=True))
    assert [s.type for s in skipped.skipped] == [SKILL]
    assert not skipped.lifecycle.startup and not skipped.tmpfs


def test_quoting_keeps_a_strange_name_one_argument() -> None:
    plan = _plan({"type": SKILLS, "config": {"path": "/d/one"}},
                 _bundle("/usr/share/s/a", name="it's"))
    (hook,) = plan.lifecycle.startup
    assert "'/d/one/it'\"'\"'s'" in str(hook.command)


VOLUME = "com.docker.sandbox/volume@1"


def test_a_tmpfs_volume_at_a_destination_keeps_its_size_and_mode() -> None:
    plan = _plan({"type": VOLUME, "config": {"path": "/d/one", "tmpfs": True, "size": "8MiB",
                                             "mode": "0750"}},
                 {"type": SKILLS, "config": {"path": "/d/one"}},
                 {"type": SKILLS, "config": {"path": "/d/two"}},
                 _bundle("/usr/share/s/review"))
    assert plan.tmpfs["/d/one"] == (8 * MIB, 0o750)  # the volume's, not the links' tmpfs
    assert plan.tmpfs["/d/two"] == (1 * MIB, 0o755)
    assert plan.bundle_paths == ("/d/one", "/d/two")


@pytest.mark.parametrize("storage", [
    {"type": VOLUME, "config": {"path": "/d/one"}},
    {"type": VOLUME, "config": {"path": "/d/one/", "tmpfs": True}}])
def test_storage_at_a_destination_takes_the_store_as_links_without_bundles(
        storage: dict[str, Any]) -> None:
    plan = _plan(storage, {"type": SKILLS, "config": {"path": "/d/one"}})
    # No second mount at /d/one: the store goes to the staging mount and is linked in.
    assert plan.bundle_paths == ("/d/one",)
    assert all(size != MIB for size, _ in plan.tmpfs.values())  # no links tmpfs added
    (hook,) = [h for h in plan.lifecycle.startup if h.kit == "sbx"]
    script = str(hook.command)
    assert 'link "$s" /d/one/' in script
    assert f"{SKILLS_STAGING}/*) rm -f" in script  # links to removed skills go


def test_a_destination_without_storage_or_bundles_plans_no_links() -> None:
    plan = _plan({"type": SKILLS, "config": {"path": "/d/one"}},
                 {"type": VOLUME, "config": {"path": "/d/other", "tmpfs": True}})
    assert plan.bundle_paths == () and not [h for h in plan.lifecycle.startup if h.kit == "sbx"]


def test_the_planner_refuses_a_second_mount_at_one_path() -> None:
    from sbx.domain.sandbox.capabilities import _Planner

    planner = _Planner(limits=LIMITS, allow_privileged=False,
                                workspace_target="/workspace", volume_sizes_enforced=True,
                                kits={}, host_git_identity=lambda: None,
                                host_agent_missing=lambda: None)
    planner.add_volume("/d/one", None, None)
    with pytest.raises(SbxError) as caught:
        planner.add_tmpfs("/d/one/", MIB, None)
    assert caught.value.reason is Reason.KIT_INCOHERENT and "/d/one" in caught.value.message
