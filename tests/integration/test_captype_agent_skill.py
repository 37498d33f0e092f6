"""agent-skill@1 in a real sandbox: a skill bundled in the kit's image appears at every
agent-skills@1 destination under its name, beside the host store's skills (read-only, never
overwritten by a bundle of the same name); with no destination it is refused by its reason, or
skipped and recorded when optional; a source without SKILL.md fails before the workload."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

SKILL = "com.docker.sandbox/agent-skill@1"
DEST = "/home/agent/.claude/skills"
DOCKERFILE = ("FROM sbx-base/bookworm:1\n"
              "RUN mkdir -p /usr/share/bundled/review /usr/share/bundled/lint /usr/share/empty"
              " && echo '# bundled review' > /usr/share/bundled/review/SKILL.md"
              " && echo '# bundled lint' > /usr/share/bundled/lint/SKILL.md\n"
              "USER agent\nWORKDIR /workspace\n")
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]


def _kit(kit_factory: KitMaker, *, destination: bool = True, optional: bool = False,
         source: str = "/usr/share/bundled/lint", name: str = "bundler") -> Path:
    flag = "\n    optional: true" if optional else ""
    dest = (f"  - type: com.docker.sandbox/agent-skills@1\n    config: {{path: {DEST}}}\n"
            if destination else "")
    return kit_factory(name, DOCKERFILE, f"""capabilities:
{dest}  - type: {SKILL}
    config: {{path: /usr/share/bundled/review}}{flag}
  - type: {SKILL}
    config: {{path: {source}, name: house-lint}}{flag}
""")


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    store = tmp_path / "skills"
    (store / "review").mkdir(parents=True)
    (store / "review" / "SKILL.md").write_text("# host review\n")
    (store / "mine").mkdir()
    (store / "mine" / "SKILL.md").write_text("# host mine\n")
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "SBX_SKILLS": str(store)}


def test_bundles_appear_beside_the_host_store_which_wins_a_name(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    probe = (f"cat {DEST}/review/SKILL.md {DEST}/mine/SKILL.md {DEST}/house-lint/SKILL.md; "
             f"echo x > {DEST}/mine/SKILL.md 2>/dev/null && echo host=writable "
             "|| echo host=readonly")
    result = sbx_cli(["run", "--json", str(_kit(kit_factory)), "--", "sh", "-c", probe], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    lines = envelope["data"]["stdout"].splitlines()
    # The host's review is kept (a bundle never overwrites a same-name skill).
    assert lines == ["# host review", "# host mine", "# bundled lint", "host=readonly"]
    assert (Path(env["SBX_SKILLS"]) / "mine" / "SKILL.md").read_text() == "# host mine\n"


def test_without_a_store_the_bundles_alone_appear(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], tmp_path: Path) -> None:
    bare = {**env, "SBX_SKILLS": str(tmp_path / "no-store")}
    result = sbx_cli(["run", "--json", str(_kit(kit_factory)), "--", "sh", "-c",
                      f"ls {DEST}; cat {DEST}/review/SKILL.md"], env=bare)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    assert envelope["data"]["stdout"].splitlines() == ["house-lint", "review",
                                                       "# bundled review"]


def test_no_destination_refuses_by_reason_or_skips_when_optional(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    refused = sbx_cli(["run", str(_kit(kit_factory, destination=False)), "--", "echo", "ran"],
                      env=env)
    assert refused.exit_code == 125, refused.stderr
    assert "(skill_no_destination)" in refused.stderr and "ran" not in refused.stdout
    kit = _kit(kit_factory, destination=False, optional=True, name="optional")
    skipped = sbx_cli(["run", "--json", str(kit), "--", "echo", "ran"], env=env)
    envelope = skipped.envelope()
    assert envelope["status"] == "ok" and envelope["data"]["stdout"] == "ran\n", skipped.stderr
    records = [s for s in envelope["data"]["selection"]["skipped"] if s["type"] == SKILL]
    assert len(records) == 2 and "agent-skills@1" in records[0]["reason"]


def test_a_source_without_skill_md_stops_the_run_before_the_workload(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    result = sbx_cli(["run", str(_kit(kit_factory, source="/usr/share/empty")), "--", "echo",
                      "ran"], env=env)
    assert result.exit_code != 0 and "ran" not in result.stdout
    assert "has no SKILL.md" in result.stderr


def test_install_hooks_see_the_store_at_a_destination_that_takes_bundles(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    # Such a destination is a tmpfs of links made at start; the install step has the store
    # mounted there itself, read-only.
    kit = kit_factory("installer", DOCKERFILE, f"""capabilities:
  - type: com.docker.sandbox/agent-skills@1
    config: {{path: {DEST}}}
  - type: {SKILL}
    config: {{path: /usr/share/bundled/lint, name: house-lint}}
  - type: com.docker.sandbox/lifecycle@1
    config:
      install:
        - command: ["sh", "-c", "echo install-saw=$(cat {DEST}/mine/SKILL.md); touch {DEST}/x \
2>/dev/null && echo install-write=done || echo install-write=refused"]
""")
    result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c",
                      f"cat {DEST}/mine/SKILL.md {DEST}/house-lint/SKILL.md"], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    assert "install-saw=# host mine" in result.stderr
    assert "install-write=refused" in result.stderr
    assert envelope["data"]["stdout"].splitlines() == ["# host mine", "# bundled lint"]
    assert sorted(os.listdir(env["SBX_SKILLS"])) == ["mine", "review"]


@pytest.mark.parametrize("volume", ["{path: %s, tmpfs: true, size: 8MiB}", "{path: %s}"])
def test_a_volume_at_a_destination_keeps_its_mount_and_takes_the_skills(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], volume: str) -> None:
    tmpfs = "tmpfs" in volume
    bundle = f"  - type: {SKILL}\n    config: {{path: /usr/share/bundled/lint, name: house-lint}}\n"
    kit = kit_factory("volumed", DOCKERFILE, f"""capabilities:
  - type: com.docker.sandbox/volume@1
    config: {volume % DEST}
  - type: com.docker.sandbox/agent-skills@1
    config: {{path: {DEST}}}
{bundle if tmpfs else ""}""")
    probe = (f"grep ' {DEST} ' /proc/mounts | cut -d' ' -f3,4; cat {DEST}/mine/SKILL.md; "
             f"ls {DEST}")
    result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c", probe], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    lines = envelope["data"]["stdout"].splitlines()
    mounts = [line for line in lines if line.startswith(("tmpfs ", "ext4 ", "xfs ", "overlay "))
              or "," in line]
    assert len(mounts) == 1, lines  # one mount at the destination: the volume's
    if tmpfs:
        assert mounts[0].startswith("tmpfs ") and "size=8192k" in mounts[0], mounts
    assert "# host mine" in lines
    assert {"mine", "review"} <= set(lines)
    assert ("house-lint" in lines) is tmpfs


def test_a_host_mount_at_a_destination_takes_links_and_loses_removed_ones(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], tmp_path: Path) -> None:
    env = {**env, "SBX_HOST_MOUNTS": str(tmp_path / "host-mounts")}
    kit = kit_factory("hostmounted", DOCKERFILE, f"""capabilities:
  - type: com.docker.sandbox/host-mount@1
    config: {{path: {DEST}}}
  - type: com.docker.sandbox/agent-skills@1
    config: {{path: {DEST}}}
""")
    probe = f"touch {DEST}/own; ls {DEST}; cat {DEST}/mine/SKILL.md 2>/dev/null || echo mine=absent"

    def seen() -> list[str]:
        result = sbx_cli(["run", "--json", str(kit), "--", "sh", "-c", probe], env=env)
        envelope = result.envelope()
        assert envelope["status"] == "ok", (envelope, result.stderr)
        return list(envelope["data"]["stdout"].splitlines())

    assert seen() == ["mine", "own", "review", "# host mine"]
    assert sbx_cli(["skills", "rm", "mine"], env=env).exit_code == 0
    # The kit's own file stays in its host directory; the link to the removed skill goes.
    assert seen() == ["own", "review", "mine=absent"]
