"""agent-skills@1 in a real sandbox: the host's skills store appears read-only at the kit's
path (before the install hooks, whatever mode the kit asks for), a missing or empty store
refuses nothing, and the hardened shape is untouched."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

DOCKERFILE = "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]
SKILLS = "/home/agent/.claude/skills"

PROBE = rf"""
cat {SKILLS}/review/SKILL.md 2>/dev/null || echo skill=absent
echo x > {SKILLS}/review/SKILL.md 2>/dev/null && echo write=done || echo write=refused
touch {SKILLS}/new 2>/dev/null && echo create=done || echo create=refused
touch /root-write 2>/dev/null && echo root=writable || echo root=readonly
echo "capeff=$(grep CapEff /proc/self/status | cut -f2)"
echo "nnp=$(grep NoNewPrivs /proc/self/status | cut -f2)"
"""


def _kit(kit_factory: KitMaker, mode: str = "readwrite") -> Path:
    return kit_factory("skillkit", DOCKERFILE, f"""capabilities:
  - type: com.docker.sandbox/agent-skills@1
    config:
      path: {SKILLS}
      mode: {mode}
  - type: com.docker.sandbox/lifecycle@1
    config:
      install:
        - command: ["sh", "-c", "echo install-saw; cat {SKILLS}/review/SKILL.md || true"]
""")


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "SBX_SKILLS": str(tmp_path / "skills")}


def _values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_host_store_is_read_only_at_the_kit_s_path(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    skill = Path(env["SBX_SKILLS"]) / "review"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("# review skill\n")
    result = sbx_cli(["run", "--json", str(_kit(kit_factory)), "--", "sh", "-c", PROBE],
                     env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    out = envelope["data"]["stdout"]
    seen = _values(out)
    assert "# review skill" in out
    # The kit asked for readwrite; sbx's host setting is read-only, and the narrower wins.
    assert seen["write"] == "refused" and seen["create"] == "refused"
    assert (skill / "SKILL.md").read_text() == "# review skill\n"
    assert not (skill.parent / "new").exists()
    assert "install-saw" in result.stderr and "# review skill" in result.stderr  # before hooks
    assert seen["root"] == "readonly"
    assert seen["capeff"] == "0000000000000000" and seen["nnp"] == "1"


@pytest.mark.parametrize("store", ["missing", "empty"])
def test_a_missing_or_empty_store_refuses_nothing(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str], store: str) -> None:
    if store == "empty":
        Path(env["SBX_SKILLS"]).mkdir()
    result = sbx_cli(["run", "--json", str(_kit(kit_factory, "readonly")), "--", "sh", "-c",
                      PROBE], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    assert _values(envelope["data"]["stdout"])["skill"] == "absent"
    assert not envelope["data"]["selection"]["skipped"]
