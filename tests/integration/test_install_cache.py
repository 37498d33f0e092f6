"""The install cache against the real engine: a second one-shot run of the same kit reuses the
committed post-install image (the install hook writes a fresh random id into the image, so a
re-run would show a new one), each key input invalidates it, concurrent first runs both work
and leave one entry, and gc's decisions about the entry (``--dry-run``: the engine is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbx.base.paths import home_hash
from sbx.domain.sandbox.imagecache import use_tag
from sbx.seams.driver import SdkEngine
from tests.support.sbxproc import SBX, run_sbx

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

HOOK = "cat /proc/sys/kernel/random/uuid > /etc/installed-id; echo install-hook-ran"


def _descriptor(hook: str = HOOK) -> str:
    return f"""
        args:
          flavour: {{default: "plain", pattern: '^[a-z]+$'}}
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files:
                - {{path: /etc/flavour, content: "${{{{ kit.args.flavour }}}}"}}
              install:
                - command: {json.dumps(hook)}
        """


def _env(home: Path, config: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(home), "SBX_CONFIG": str(config), "NO_COLOR": "1"}


def _run(env: dict[str, str], kit: Path, *args: str) -> tuple[str, str]:
    """``(installed id, stderr)`` of a one-shot run."""
    result = run_sbx(["run", str(kit), *args, "--", "cat", "/etc/installed-id"], env=env,
                     timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode().strip(), result.stderr.decode()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text("[gc]\nimage_idle_seconds = 0\n", encoding="utf-8")
    return path


def _cache_images(engine: SdkEngine, nonce: str,
                  key_label: str = "dev.sbx.install-key") -> dict[str, str]:
    """image id → install key of the cached installs of this test's base (its nonce label,
    which the commit keeps): the engine is shared with other tests and benches."""
    out = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter",
                          "reference=sbx-installed/*", "--filter", f"label=test.nonce={nonce}"],
                         capture_output=True, text=True,
                         timeout=30, check=True).stdout.split()
    found: dict[str, str] = {}
    for ident in out:
        info = engine.image(ident)
        if info is not None:
            found[ident] = info.labels.get(key_label, "")
    return found


def test_second_run_reuses_the_install_and_each_input_invalidates_it(
        kit_factory: Callable[..., Path], engine: SdkEngine, state_home: Path,
        config: Path) -> None:
    nonce = uuid.uuid4().hex
    kit = kit_factory("instcache", f"FROM {BUSYBOX}\nLABEL test.nonce={nonce}\n",
                      _descriptor())
    env = _env(state_home, config)
    before = set(_cache_images(engine, nonce))
    first, first_err = _run(env, kit)
    assert "install-hook-ran" in first_err
    made = set(_cache_images(engine, nonce)) - before
    assert len(made) == 1, made
    image_id = made.pop()
    tags = set((engine.image(image_id) or pytest.fail("gone")).tags)
    assert use_tag(home_hash(state_home), image_id) in tags
    assert not any(tag.startswith("sbx-run/") for tag in tags), tags  # the run's tag went

    second, second_err = _run(env, kit)
    assert second == first  # the hook did not run again: its random id is the first's
    assert "install-hook-ran" not in second_err
    assert "reusing sbx-installed/" in second_err

    # A kit arg, an edited hook, a rebuilt base image: each makes a new install.
    by_arg, err = _run(env, kit, "--arg", "flavour=spicy")
    assert by_arg != first and "install-hook-ran" in err
    descriptor = kit / "instcache.yaml"
    original = descriptor.read_text(encoding="utf-8")
    descriptor.write_text(original.replace("echo install-hook-ran",
                                           "echo install-hook-ran; true"), encoding="utf-8")
    by_hook, err = _run(env, kit)
    assert by_hook not in (first, by_arg) and "install-hook-ran" in err
    descriptor.write_text(original, encoding="utf-8")
    recipe = kit / "instcache.dockerfile"
    recipe.write_text(recipe.read_text(encoding="utf-8") + "LABEL test.rebuilt=1\n",
                      encoding="utf-8")
    by_base, err = _run(env, kit)
    assert by_base not in (first, by_arg, by_hook) and "install-hook-ran" in err
    # The first inputs again: the first install, still cached.
    recipe.write_text(f"FROM {BUSYBOX}\nLABEL test.nonce={nonce}\n", encoding="utf-8")
    again, err = _run(env, kit)
    assert again == first and "install-hook-ran" not in err

    # The cached image is listed by df and judged by gc as a cached image, never as a run's.
    df = json.loads(run_sbx(["df", "--json"], env=env).stdout)
    listed = {u["id"] for u in df.get("data", df)["images"]}
    assert image_id in listed
    gc = json.loads(run_sbx(["gc", "--dry-run", "--json"], env=env).stdout)
    plan: dict[str, Any] = gc.get("data", gc)
    verdicts = [(verdict, item["why"]) for verdict in ("removed", "kept")
                for item in plan[verdict] if item["id"] == image_id]
    assert verdicts == [("removed", "unused")], verdicts
    _remove_cached(engine, state_home, set(_cache_images(engine, nonce)) - before)


def test_gc_keeps_a_cached_install_a_running_sandbox_uses(
        kit_factory: Callable[..., Path], engine: SdkEngine, state_home: Path,
        config: Path) -> None:
    nonce = uuid.uuid4().hex
    kit = kit_factory("instuse", f"FROM {BUSYBOX}\nLABEL test.nonce={nonce}\n", _descriptor())
    env = _env(state_home, config)
    before = set(_cache_images(engine, nonce))
    _run(env, kit)
    (image_id,) = set(_cache_images(engine, nonce)) - before
    running = subprocess.Popen(  # a reusing run that stays up until the test says
        [str(SBX), "run", str(kit), "--", "sh", "-c", "echo up; sleep 60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert running.stdout is not None
        assert running.stdout.readline().strip() == b"up"
        gc = json.loads(run_sbx(["gc", "--dry-run", "--json"], env=env).stdout)
        plan: dict[str, Any] = gc.get("data", gc)
        whys = [item["why"] for item in plan["kept"] if item["id"] == image_id]
        assert whys == ["in_use"], (whys, plan)
        assert not [i for i in plan["removed"] if i["id"] == image_id]
    finally:
        running.terminate()
        running.communicate(timeout=60)
    _remove_cached(engine, state_home, {image_id})


def test_concurrent_first_runs_both_succeed_and_leave_one_entry(
        kit_factory: Callable[..., Path], engine: SdkEngine, state_home: Path,
        config: Path) -> None:
    nonce = uuid.uuid4().hex
    kit = kit_factory("instrace", f"FROM {BUSYBOX}\nLABEL test.nonce={nonce}\n", _descriptor())
    env = _env(state_home, config)
    run_sbx(["run", str(kit), "--arg", "flavour=warm", "--", "true"], env=env, timeout=180)
    before = set(_cache_images(engine, nonce))
    runs = [subprocess.Popen([str(SBX), "run", str(kit), "--", "cat", "/etc/installed-id"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)]
    outs = [run.communicate(timeout=180) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outs
    ids = {out.decode().strip() for out, _ in outs}
    third, err = _run(env, kit)
    assert third in ids and "install-hook-ran" not in err
    new = set(_cache_images(engine, nonce)) - before
    keys = {_cache_images(engine, nonce)[i] for i in new}
    assert len(keys) == 1, keys  # one entry for the one key
    assert len(new) == 1, new  # the loser's image went with its run tag
    _remove_cached(engine, state_home, set(_cache_images(engine, nonce)) - before | new)


def _remove_cached(engine: SdkEngine, state_home: Path, images: set[str]) -> None:
    """This test's cached installs (shared engine: only those it made)."""
    del state_home
    for ident in images:
        engine.remove_image(ident)
