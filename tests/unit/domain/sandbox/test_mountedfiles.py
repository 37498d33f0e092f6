"""Kit files on start-up mounts are staged and copied in by a startup step (pure planning)."""

from __future__ import annotations

from sbx.domain.sandbox.capabilities import CapabilityPlan
from sbx.domain.sandbox.hardening import Limits
from sbx.domain.sandbox.lifecycle import KitFile, LifecyclePlan
from sbx.domain.sandbox.mountedfiles import STAGED_DIR, under, with_mounted_files

LIMITS = Limits(memory_bytes=1 << 30, pids=64, cpu_millis=1000, tmp_bytes=1 << 20,
                workspace_bytes=1 << 20, home_bytes=1 << 20)


def _plan(*files: KitFile) -> CapabilityPlan:
    return CapabilityPlan(limits=LIMITS, lifecycle=LifecyclePlan(files=files))


def _file(path: str, *, mode: int | None = None, overwrite: bool = True) -> KitFile:
    return KitFile(kit="k", where="capabilities[0].config.files[0]", path=path, content="x\n",
                   mode=mode, overwrite=overwrite)


def test_under_is_a_path_prefix_of_whole_components() -> None:
    assert under("/tmp/a", ["/tmp"]) and under("/tmp/a/../b", ["/tmp"])
    assert not under("/tmpfoo/a", ["/tmp"]) and not under("/tmp", ["/tmp"])
    assert not under("/tmp/../etc/x", ["/tmp"])  # normalised before the comparison
    assert under("/home/sbx/.config/x", ["/tmp", "/home/sbx/"])


def test_files_elsewhere_are_left_in_the_image() -> None:
    plan = _plan(_file("/etc/x"), _file("/opt/y"))
    assert with_mounted_files(plan, ["/tmp", "/home/sbx"]) is plan


def test_files_on_mounts_are_staged_and_copied_first() -> None:
    plan = _plan(_file("/etc/x"), _file("/tmp/a b", mode=0o600),
                 _file("/home/sbx/k", overwrite=False))
    moved = with_mounted_files(plan, ["/tmp", "/home/sbx"])
    paths = [f.path for f in moved.lifecycle.files]
    assert paths == ["/etc/x", f"{STAGED_DIR}/0", f"{STAGED_DIR}/1"]
    staged = moved.lifecycle.files[1]
    assert (staged.mode, staged.owner_is_sandbox_user, staged.content) == (0o644, False, "x\n")
    [hook] = moved.lifecycle.startup
    assert hook.kit == "sbx" and hook.user is None
    script = str(hook.command)
    assert "cat /.sbx/files/0 > '/tmp/a b' && chmod 600 '/tmp/a b'" in script
    # overwrite: false keeps what a persistent HOME already holds.
    assert "[ -e /home/sbx/k ] || { mkdir -p /home/sbx && cat /.sbx/files/1 > /home/sbx/k" \
        in script
