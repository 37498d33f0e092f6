"""Who the sandbox runs as, against a real engine, and the directories it may write.

The sandbox user is the workspace's owner when that owner is not root (so what the agent
creates belongs to the user on the host), ``--user`` overrides it, and a read-write workspace the
chosen user cannot write is refused (``workspace_unwritable``) — unless the workspace is
root-owned and ``[sandbox] root_workspace = "sandbox-user"`` says to run anyway. Whatever the
image, /tmp is a 1777 tmpfs and HOME a size-capped tmpfs owned by the sandbox user.

The first test runs sbx itself as the unprivileged host user ``sbx-tester`` (uid 4321), the way
a developer runs it; the others run as root, as CI does, and give directories to other uids.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import Finished, run_sbx

from .conftest import BUSYBOX, TESTER_UID, reachable_by_others

pytestmark = pytest.mark.docker

TMP_0755_DOCKERFILE = (f"FROM {BUSYBOX}\nUSER root\nRUN chmod 0755 /tmp\nUSER agent\n"
                       "WORKDIR /workspace\nCMD [\"true\"]\n")
# No /tmp at all: only busybox and the account files, on an empty base (classic builder).
NO_TMP_DOCKERFILE = (f"FROM scratch\nCOPY --from={BUSYBOX} /bin /bin\n"
                     f"COPY --from={BUSYBOX} /etc/passwd /etc/group /etc/\n"
                     "USER agent\nWORKDIR /workspace\nCMD [\"true\"]\n")
STARTUP_HOOK = """
    capabilities:
      - type: com.docker.sandbox/lifecycle@1
        config:
          startup:
            - command: echo from-hook > /tmp/x
    """
PROBE_TMP = 'stat -c %a /tmp && touch /tmp/probe && echo tmp-writable && id -u'


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "config.toml").touch()  # SBX_CONFIG must name a file; empty means defaults
    return {**os.environ, "SBX_HOME": str(state_home),
            "SBX_CONFIG": str(tmp_path / "config.toml")}


def _config(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.toml").write_text(text, encoding="utf-8")


def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving directories to other uids needs root")


def _directory(path: Path, uid: int, mode: int = 0o755) -> Path:
    path.mkdir(parents=True)
    os.chown(path, uid, uid)
    path.chmod(mode)
    return path


def _ok(result: Finished) -> str:
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def _owner(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_uid, stat.st_gid


# -- 1. sbx run by a non-root host user ----------------------------------------------------------


def test_non_root_user_runs_as_itself_and_owns_what_the_agent_creates(
        tester_sbx: list[str], busybox_kit: Path, state_home: Path, tmp_path: Path) -> None:
    # The tester must reach the kit, the config path and its own directories under tmp_path.
    reachable_by_others(tmp_path)
    base = _directory(tmp_path / "tester", TESTER_UID)
    home = _directory(base / "home", TESTER_UID, 0o700)
    _directory(state_home, TESTER_UID, 0o700)
    project = _directory(base / "project", TESTER_UID)
    notes = project / "notes.txt"
    notes.write_text("original\n", encoding="utf-8")
    os.chown(notes, TESTER_UID, TESTER_UID)
    env = {**os.environ, "HOME": str(home), "SBX_HOME": str(state_home),
           "SBX_CONFIG": os.devnull}
    script = ("set -e; echo created > created.txt; mkdir subdir; echo inner > subdir/inner.txt; "
              "echo edited >> notes.txt; id -u; id -g; echo \"$HOME\"; touch \"$HOME/probe\"; "
              "stat -c '%u:%g %a' \"$HOME\"; stat -c %a /tmp; touch /tmp/probe")
    out = _ok(run_sbx(["run", str(busybox_kit), str(project), "--", "sh", "-c", script],
                      env=env, prefix=tester_sbx, cwd=base, timeout=180))
    assert out.splitlines() == ["4321", "4321", "/home/sbx", "4321:4321 700", "1777"]
    for path in (project / "created.txt", project / "subdir", project / "subdir" / "inner.txt",
                 notes):
        assert _owner(path) == (TESTER_UID, TESTER_UID), path
    assert notes.read_text(encoding="utf-8") == "original\nedited\n"
    assert (project / "subdir" / "inner.txt").read_text(encoding="utf-8") == "inner\n"


# -- 2. --user, --access ro, root-owned workspaces ------------------------------------------------


def test_user_flag_that_cannot_write_the_workspace_is_refused(busybox_kit: Path,
                                                              env: dict[str, str],
                                                              tmp_path: Path) -> None:
    _root_only()
    project = _directory(tmp_path / "project", TESTER_UID)
    refused = run_sbx(["run", "--user", "5000:5000", str(busybox_kit), str(project), "--",
                       "touch", "never"], env=env)
    assert refused.returncode == 125, refused.stderr
    assert b"(workspace_unwritable)" in refused.stderr
    assert not (project / "never").exists()
    # --user naming the owner works (the gid defaults to the uid).
    out = _ok(run_sbx(["run", "--user", str(TESTER_UID), str(busybox_kit), str(project), "--",
                       "sh", "-c", "echo hi > made.txt && id -u && id -g"], env=env))
    assert out.splitlines() == ["4321", "4321"]
    assert _owner(project / "made.txt") == (TESTER_UID, TESTER_UID)


def test_root_owned_workspace_read_only_refused_or_as_configured(busybox_kit: Path,
                                                                  env: dict[str, str],
                                                                  tmp_path: Path) -> None:
    _root_only()
    project = _directory(tmp_path / "rootproject", 0)
    (project / "seed.txt").write_text("seed\n", encoding="utf-8")
    # Read-only: runs as the image's user, reads, cannot write.
    out = _ok(run_sbx(["run", "--access", "ro", str(busybox_kit), str(project), "--", "sh", "-c",
                       "cat seed.txt; if touch new 2>/dev/null; then echo WROTE; "
                       "else echo DENIED; fi; id -u"], env=env))
    assert out.splitlines() == ["seed", "DENIED", "1000"]
    assert sorted(p.name for p in project.iterdir()) == ["seed.txt"]
    # Read-write (the default) is refused ...
    refused = run_sbx(["run", str(busybox_kit), str(project), "--", "true"], env=env)
    assert refused.returncode == 125, refused.stderr
    assert b"(workspace_unwritable)" in refused.stderr
    # ... unless the config says to run as the sandbox user anyway, which warns.
    _config(tmp_path, '[sandbox]\nroot_workspace = "sandbox-user"\n')
    allowed = run_sbx(["run", str(busybox_kit), str(project), "--", "sh", "-c",
                       "cat seed.txt; id -u"], env=env)
    assert _ok(allowed).splitlines() == ["seed", "1000"]
    assert b"warning" in allowed.stderr and b"root_workspace" in allowed.stderr, allowed.stderr


# -- 3. /tmp and HOME ---------------------------------------------------------------------------


def _image_tmp_mode(engine: SdkEngine, state_home: Path, image: str) -> int | None:
    helper = labels.object_labels(home_hash=home_hash(state_home), run_id=uuid.uuid4().hex,
                                  deadline=int(time.time()) + 600, kits=[],
                                  role=labels.ROLE_HELPER)
    return engine.probe_image(image, files=(), dirs=["/tmp"], labels=helper).modes["/tmp"]


@pytest.mark.parametrize(("name", "dockerfile", "image_tmp"), [
    ("tmp0755", TMP_0755_DOCKERFILE, 0o755),
    ("notmp", NO_TMP_DOCKERFILE, None),
], ids=["image-tmp-0755", "image-without-tmp"])
def test_tmp_is_1777_and_writable_whatever_the_image_has(
        name: str, dockerfile: str, image_tmp: int | None, kit_factory: Callable[..., Path],
        env: dict[str, str], engine: SdkEngine, state_home: Path) -> None:
    kit = kit_factory(name, dockerfile)
    for _attempt in range(2):  # the second run reuses what the first prepared
        result = run_sbx(["run", "--json", str(kit), "--", "sh", "-c", PROBE_TMP], env=env,
                         timeout=300)
        assert result.returncode == 0, result.stdout
        data = json.loads(result.stdout)["data"]
        assert data["stdout"].splitlines() == ["1777", "tmp-writable", "1000"]
    # The premise: the kit's own image really has that /tmp.
    assert _image_tmp_mode(engine, state_home, data["image"]) == image_tmp


@pytest.mark.parametrize(("name", "dockerfile"), [
    ("hookbb", f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"true\"]\n"),
    ("hook0755", TMP_0755_DOCKERFILE),
], ids=["image-tmp-1777", "image-tmp-0755"])
def test_startup_hook_can_write_tmp(name: str, dockerfile: str,
                                    kit_factory: Callable[..., Path],
                                    env: dict[str, str]) -> None:
    kit = kit_factory(name, dockerfile, STARTUP_HOOK)
    out = _ok(run_sbx(["run", str(kit), "--", "sh", "-c", "cat /tmp/x; stat -c %a /tmp; id -u"],
                      env=env, timeout=300))
    assert out.splitlines() == ["from-hook", "1777", "1000"]


def test_home_is_the_sandbox_users_and_size_capped(busybox_kit: Path, env: dict[str, str],
                                                   tmp_path: Path) -> None:
    _config(tmp_path, "[sandbox]\nhome_bytes = 1048576\n")
    script = ('stat -c "%u:%g %a" "$HOME"; '
              'dd if=/dev/zero of="$HOME/small" bs=1024 count=512 2>/dev/null && echo small-ok; '
              'if dd if=/dev/zero of="$HOME/big" bs=1024 count=2048 2>/dev/null; '
              'then echo big-ok; else echo big-refused; fi')
    for user, owner in ((None, "1000:1000"), ("2345:2346", "2345:2346")):
        flags = ["--user", user] if user else []
        out = _ok(run_sbx(["run", *flags, str(busybox_kit), "--", "sh", "-c", script], env=env))
        assert out.splitlines() == [f"{owner} 700", "small-ok", "big-refused"], user
