"""``kind: set`` on a real engine and registry: a local set names two pushed and pulled kits,
pins one member's arg through its own, adds a declaration of its own, and runs as if the
members had been named; a digest the lock does not pin refuses before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.seams.driver import SdkEngine
from tests.support.kits import write_kit

from .conftest import BUSYBOX
from .registry import Registry, registry
from .test_pull import remove_local

pytestmark = pytest.mark.docker
__all__ = ["registry"]  # the fixture, re-exported for pytest

SBX = str(Path(sys.executable).with_name("sbx"))
BASE = f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"true\"]\n"
TOOL = f"FROM {BUSYBOX}\nRUN mkdir -p /opt/tool && echo tool-layer > /opt/tool/mark\n"


def sbx(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, check=False)


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture
def pushed(env: dict[str, str], tmp_path: Path, registry: Registry, engine: SdkEngine,
           ) -> Iterator[dict[str, str]]:
    """The base workload and the tool mixin, pushed and pulled: reference → digest."""
    kits = {
        registry.ref("kits/base", "1"): write_kit(tmp_path / "src", "base", "", BASE),
        registry.ref("kits/tool", "1"): write_kit(
            tmp_path / "src", "tool", "args:\n  greeting:\n    default: unset\n"
                                      "    env: TOOL_GREETING\n" + _hook("tool"), TOOL,
            kind="mixin"),
    }
    digests: dict[str, str] = {}
    for ref, kit in kits.items():
        done = sbx(env, "kit", "push", "--json", str(kit), ref)
        assert done.returncode == 0, done.stderr
        digests[ref] = json.loads(done.stdout)["data"]["digest"]
    pulled = sbx(env, "pull", "--accept", *kits)
    assert pulled.returncode == 0, pulled.stderr
    yield digests
    remove_local(registry)


def _hook(who: str) -> str:
    return ("capabilities:\n  - type: com.docker.sandbox/lifecycle@1\n    config:\n"
            f"      startup:\n        - command: echo {who} >> /tmp/hook-order\n")


def team(root: Path, base: str, base_digest: str, tool: str) -> Path:
    return write_kit(root, "team", f"""\
        args:
          greeting:
            default: from-the-set
        kits:
          - ref: {base}
            digest: "{base_digest}"
          - ref: {tool}
            args:
              greeting: ${{{{ kit.args.greeting }}}}
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files:
                - path: /home/agent/set-note
                  content: written-by-the-set
              startup:
                - command: echo set >> /tmp/hook-order
        """, kind="set")


def test_a_set_runs_its_members_with_its_args_and_its_own_declarations(
        env: dict[str, str], tmp_path: Path, pushed: dict[str, str]) -> None:
    base, tool = sorted(pushed)
    kit = team(tmp_path / "sets", base, pushed[base], tool)
    script = "cat /opt/tool/mark /home/agent/set-note; echo; echo $TOOL_GREETING"
    done = sbx(env, "run", str(kit), "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tool-layer", "written-by-the-set", "from-the-set"]
    # The set's own declarations compose after its members, although its path sorts first.
    assert kit.as_posix() < tool
    order = sbx(env, "run", str(kit), "--", "cat", "/tmp/hook-order")
    assert order.returncode == 0 and order.stdout.split() == ["tool", "set"], order.stderr
    # The user's value for the set's arg reaches the member through the re-export.
    again = sbx(env, "run", "--arg", "greeting=from-the-user", str(kit), "--", "sh", "-c",
                "echo $TOOL_GREETING")
    assert again.returncode == 0 and again.stdout == "from-the-user\n", again.stderr


def test_a_digest_the_lock_does_not_pin_is_refused_before_anything_runs(
        env: dict[str, str], tmp_path: Path, pushed: dict[str, str]) -> None:
    base, tool = sorted(pushed)
    wrong = "sha256:" + "0" * 64
    kit = team(tmp_path / "sets", base, wrong, tool)
    done = sbx(env, "run", str(kit), "--", "echo", "ran")
    assert done.returncode == 125, done.stderr
    assert "(kit_set_digest)" in done.stderr and wrong in done.stderr
    assert pushed[base] in done.stderr and "ran" not in done.stdout
