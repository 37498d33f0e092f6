"""agent-skills@1, decided by its handler: every selected path is a destination of the host
store, whatever mode the kit asks for (sbx's host setting is read-only)."""

from __future__ import annotations

from pathlib import Path

from sbx.base.paths import skills_home
from sbx.domain.kits.compose import Contribution, compose
from sbx.domain.sandbox.capabilities import SUPPORTED, plan_capabilities
from sbx.domain.sandbox.hardening import Limits

SKILLS = "com.docker.sandbox/agent-skills@1"
MIB = 1024 * 1024
LIMITS = Limits(memory_bytes=4096 * MIB, pids=128, cpu_millis=1000, tmp_bytes=256 * MIB,
                workspace_bytes=512 * MIB, home_bytes=512 * MIB)


def test_each_path_is_a_destination_and_modes_merge_to_one() -> None:
    assert SKILLS in SUPPORTED
    composition = compose([
        Contribution("a", [{"type": SKILLS, "config": {"path": "/s", "mode": "readwrite"}},
                           {"type": SKILLS, "config": {"path": "/t"}}]),
        Contribution("b", [{"type": SKILLS, "config": {"path": "/s"}}])])
    plan = plan_capabilities(composition, limits=LIMITS, allow_privileged=False,
                             workspace_target="/workspace", kits={})
    assert plan.skills_paths == ("/s", "/t")
    assert not plan.skipped


def test_where_the_store_is() -> None:
    assert skills_home({"SBX_SKILLS": "/x"}) == Path("/x")
    assert skills_home({"XDG_DATA_HOME": "/d"}) == Path("/d/sbx/skills")
    assert skills_home({"HOME": "/h"}) == Path("/h/.local/share/sbx/skills")
