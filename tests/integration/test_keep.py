"""Kept sandboxes on a real engine: `sbx run --keep KIT .` (and `[sandbox] keep = "always"`)
creates the sandbox of that kit and workspace once and re-enters it after, with HOME kept and
the install hook run once (counted by a line it writes into the image, with a token of its
own); a second directory of the same name gets its own sandbox; `--rm` leaves nothing behind;
`--rm --name` is refused; `sbx run --name N` without the workload re-enters N; `sbx create`
makes the kept sandbox without attaching."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import Finished, run_sbx

from .conftest import BUSYBOX, make_kit, owned, user_owned

pytestmark = pytest.mark.docker

PROBE = ('echo "installs=$(wc -l < /etc/installs) token=$(cat /etc/installs)"; '
         'if [ -f "$HOME/mark" ]; then echo "home=$(cat "$HOME/mark")"; '
         'else echo kept > "$HOME/mark"; echo home=new; fi')


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kits"), "agent",
                    f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\n"
                    f"CMD [\"sh\", \"-c\", {json.dumps(PROBE)}]\n", """
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              install:
                - command: cat /proc/sys/kernel/random/uuid >> /etc/installs
        """)


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "NO_COLOR": "1"}


def project(root: Path) -> Path:
    root.mkdir(parents=True)
    return user_owned(root)


def sbx(env: dict[str, str], *args: str, cwd: Path) -> Finished:
    return run_sbx(list(args), env=env, timeout=300, cwd=cwd)


def ls(env: dict[str, str], cwd: Path) -> dict[str, dict[str, Any]]:
    done = sbx(env, "ls", "--all", "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return {s["name"]: s for s in envelope["data"]["sandboxes"]}


def probe(done: Finished) -> dict[str, str]:
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return dict(line.split("=", 1) for line in done.stdout.decode().split()
                if "=" in line)


def test_keep_creates_once_and_re_enters_with_home_and_one_install(
        kit: Path, env: dict[str, str], cleanup: list[str], tmp_path: Path) -> None:
    workspace = project(tmp_path / "a" / "myproject")
    cleanup.append("agent-myproject")
    first = sbx(env, "run", "--keep", str(kit), ".", cwd=workspace)
    seen = probe(first)
    assert "kept as agent-myproject; `sbx rm agent-myproject` removes it" \
        in first.stderr.decode()
    assert seen["installs"] == "1" and seen["home"] == "new"
    assert ls(env, workspace)["agent-myproject"]["workspace"] == str(workspace)

    again = sbx(env, "run", "--keep", str(kit), ".", cwd=workspace)
    reentered = probe(again)
    # the same image (the install hook's own token, still one line) and the same HOME
    assert reentered == {**seen, "home": "kept"}
    assert "kept as" not in again.stderr.decode()
    # the same directory spelt otherwise, and `run --name` without the workload: re-entered
    parent = tmp_path / "a"
    assert probe(sbx(env, "run", "--keep", str(kit), "myproject", cwd=parent))["home"] == "kept"
    assert probe(sbx(env, "run", "--name", "agent-myproject", cwd=tmp_path)) \
        == {**seen, "home": "kept"}

    # a directory of the same name elsewhere: its own sandbox, the name with a short hash
    other = project(tmp_path / "b" / "myproject")
    third = sbx(env, "run", "--keep", str(kit), str(other), cwd=tmp_path)
    [hashed] = [n for n in ls(env, tmp_path) if n != "agent-myproject"]
    cleanup.append(hashed)
    assert hashed.startswith("agent-myproject-") and len(hashed) == len("agent-myproject-") + 6
    assert f"kept as {hashed}" in third.stderr.decode()
    fresh = probe(third)
    assert fresh["home"] == "new" and fresh["token"] != seen["token"]
    # the first workspace still finds its own
    assert probe(sbx(env, "run", "--keep", str(kit), ".", cwd=workspace))["home"] == "kept"

    assert sbx(env, "rm", "-f", "agent-myproject", hashed, cwd=tmp_path).returncode == 0
    assert ls(env, tmp_path) == {}


def test_config_always_keeps_kit_paths_and_rm_leaves_nothing(
        kit: Path, state_home: Path, cleanup: list[str], tmp_path: Path,
        engine: SdkEngine) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sandbox]\nkeep = "always"\n', encoding="utf-8")
    env = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
           "NO_COLOR": "1"}
    workspace = project(tmp_path / "work")

    once = sbx(env, "run", "--rm", str(kit), ".", cwd=workspace)
    assert probe(once)["home"] == "new"
    assert "kept as" not in once.stderr.decode()
    assert ls(env, workspace) == {}
    assert owned(engine, state_home) == []

    for words in (["run"], ["run", "--name", "nothing-here"]):
        missing = sbx(env, *words, cwd=workspace)
        assert missing.returncode != 0 and "invalid_argument" in missing.stderr.decode()
        assert "sbx run" in missing.stderr.decode()
    refused = sbx(env, "run", "--rm", "--name", "x1", str(kit), ".", cwd=workspace)
    assert refused.returncode != 0
    assert "--rm contradicts --name" in refused.stderr.decode()
    assert "invalid_argument" in refused.stderr.decode()

    cleanup.append("agent-work")
    kept = sbx(env, "run", str(kit), ".", cwd=workspace)
    assert probe(kept)["home"] == "new"
    assert "kept as agent-work" in kept.stderr.decode()
    assert probe(sbx(env, "run", str(kit), ".", cwd=workspace))["home"] == "kept"
    assert sbx(env, "rm", "-f", "agent-work", cwd=workspace).returncode == 0


def test_create_makes_the_kept_sandbox_without_attaching(
        kit: Path, env: dict[str, str], cleanup: list[str], tmp_path: Path) -> None:
    workspace = project(tmp_path / "proj")
    cleanup.append("agent-proj")
    made = sbx(env, "create", str(kit), ".", cwd=workspace)
    assert made.returncode == 0, made.stderr.decode(errors="replace")
    assert made.stdout.decode().strip() == "agent-proj"
    assert "installs=" not in made.stdout.decode()  # not attached: its output is not here
    again = sbx(env, "create", str(kit), ".", cwd=workspace)
    assert again.returncode != 0 and "agent-proj exists already" in again.stderr.decode()
    bare = sbx(env, "create", str(kit), cwd=workspace)
    assert bare.returncode != 0 and "sbx create needs a WORKSPACE or --name" \
        in bare.stderr.decode()
    deadline = time.monotonic() + 60  # its short workload ends by itself
    while ls(env, workspace)["agent-proj"]["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    # `sbx run` of the same kit and workspace enters this one: its first start wrote HOME
    assert probe(sbx(env, "run", "--keep", str(kit), ".", cwd=workspace))["home"] == "kept"
    assert sbx(env, "rm", "-f", "agent-proj", cwd=workspace).returncode == 0
