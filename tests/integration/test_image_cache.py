"""The image cache against the real engine: each run marks the cached images it uses with its
home's tag, gc's decisions about them (read with ``--dry-run``: a real pass would also collect
other tests' idle images on this shared engine), and the engine-side removal semantics gc
relies on (an untag never deletes an image a container uses or another tag holds)."""

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
from tests.support.sbxproc import run_sbx

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker


def _env(home: Path, config: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(home), "SBX_CONFIG": str(config), "NO_COLOR": "1"}


def _kit_image(engine: SdkEngine, nonce: str) -> str:
    listed = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter",
                             f"label=test.nonce={nonce}", "--filter", "reference=sbx-kit/*"],
                            capture_output=True, text=True, timeout=30, check=True).stdout.split()
    assert len(listed) == 1, listed
    return listed[0]


def _tags(engine: SdkEngine, image_id: str) -> set[str]:
    found = engine.image(image_id)
    return set(found.tags) if found is not None else set()


def _gc_plan(env: dict[str, str]) -> dict[str, Any]:
    result = run_sbx(["gc", "--dry-run", "--json"], env=env)
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    data: dict[str, Any] = envelope.get("data", envelope)
    return data


def _decision(plan: dict[str, Any], image_id: str) -> tuple[str, str, str]:
    for verdict in ("removed", "kept"):
        for item in plan[verdict]:
            if item["kind"] == "cached_image" and item["id"] == image_id:
                return verdict, item["why"], item["detail"]
    pytest.fail(f"gc said nothing about {image_id[:19]}: {plan}")


def test_runs_mark_what_they_use_and_gc_takes_only_its_homes_mark(
        kit_factory: Callable[..., Path], tmp_path: Path, engine: SdkEngine,
        state_home: Path) -> None:
    nonce = uuid.uuid4().hex
    kit = kit_factory("cachekit", f"FROM {BUSYBOX}\nLABEL test.nonce={nonce}\nUSER agent\n")
    idle_now = tmp_path / "idle-now.toml"
    idle_now.write_text("[gc]\nimage_idle_seconds = 0\n", encoding="utf-8")
    other_home = tmp_path / "other-state"
    try:
        first = run_sbx(["run", str(kit), "--", "true"], env=_env(state_home, idle_now))
        assert first.returncode == 0, first.stderr
        image_id = _kit_image(engine, nonce)
        mine = use_tag(home_hash(state_home), image_id)
        assert mine in _tags(engine, image_id)

        # Marked by this home alone and idle: gc would remove the mark and the cache tags.
        verdict, why, detail = _decision(_gc_plan(_env(state_home, idle_now)), image_id)
        assert (verdict, why) == ("removed", "unused"), detail
        assert mine in detail and "sbx-kit/cachekit:" in detail
        # The default idle time (a day) keeps an image used a moment ago.
        verdict, why, _ = _decision(_gc_plan(_env(state_home, Path(os.devnull))), image_id)
        assert (verdict, why) == ("kept", "recently_used")
        assert mine in _tags(engine, image_id), "a dry run changed the engine"

        # Another home uses it too: this home's gc would take only its own mark.
        second = run_sbx(["run", str(kit), "--", "true"], env=_env(other_home, idle_now))
        assert second.returncode == 0, second.stderr
        theirs = use_tag(home_hash(other_home), image_id)
        assert {mine, theirs} <= _tags(engine, image_id)
        verdict, why, detail = _decision(_gc_plan(_env(state_home, idle_now)), image_id)
        assert (verdict, why) == ("removed", "used_by_another_home")
        assert mine in detail and theirs not in detail.split("removes", 1)[1]
    finally:
        subprocess.run(["docker", "rmi", "-f", *_refs(engine, nonce)], capture_output=True,
                       timeout=60, check=False)


def test_gc_never_takes_an_image_another_home_built_and_no_home_marks(
        kit_factory: Callable[..., Path], tmp_path: Path, engine: SdkEngine,
        state_home: Path) -> None:
    """A home marks what it builds at once, even when its run then fails; an image no home
    marks is left to its builder (or `docker rmi`), never taken by another home's gc."""
    nonce = uuid.uuid4().hex
    kit = kit_factory("builtkit", f"FROM {BUSYBOX}\nLABEL test.nonce={nonce}\nUSER agent\n")
    idle_now = tmp_path / "idle-now.toml"
    idle_now.write_text("[gc]\nimage_idle_seconds = 0\n", encoding="utf-8")
    builder = tmp_path / "builder-state"
    try:
        # Refused after the build (HOME is the boundary's): the build is marked anyway.
        failed = run_sbx(["run", "-e", "HOME=/x", str(kit), "--", "true"],
                         env=_env(builder, idle_now))
        assert failed.returncode == 2 and b"building" in failed.stderr
        assert b"(invalid_argument)" in failed.stderr
        image_id = _kit_image(engine, nonce)
        builders_mark = use_tag(home_hash(builder), image_id)
        assert builders_mark in _tags(engine, image_id)

        # Another home, which ran sandboxes but never built nor used this image, keeps it.
        other = run_sbx(["run", "--access", "none", str(kit), "--", "true"],
                        env=_env(state_home, Path(os.devnull)))
        assert other.returncode == 0, other.stderr
        engine.untag_image(use_tag(home_hash(state_home), image_id))
        verdict, why, _ = _decision(_gc_plan(_env(state_home, idle_now)), image_id)
        assert (verdict, why) == ("kept", "not_this_home")
        # The same once no home marks it at all.
        engine.untag_image(builders_mark)
        verdict, why, _ = _decision(_gc_plan(_env(state_home, idle_now)), image_id)
        assert (verdict, why) == ("kept", "not_this_home")
        real = run_sbx(["gc", "--json"], env=_env(state_home, idle_now))
        assert real.returncode == 0, real.stderr
        assert engine.image(image_id) is not None
    finally:
        subprocess.run(["docker", "rmi", "-f", *_refs(engine, nonce)], capture_output=True,
                       timeout=60, check=False)


def _refs(engine: SdkEngine, nonce: str) -> list[str]:
    listed = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter",
                             f"label=test.nonce={nonce}"],
                            capture_output=True, text=True, timeout=30, check=False)
    return sorted(set(listed.stdout.split()))


def test_an_untag_never_deletes_an_image_in_use_or_held_by_another_tag(
        engine: SdkEngine) -> None:
    nonce = uuid.uuid4().hex[:12]
    image = engine.image(BUSYBOX)
    assert image is not None
    cache_tag, mark = f"sbx-kit/untag-{nonce}:1", f"sbx-use/{nonce}:1"
    container: str | None = None
    try:
        # A child of its own (so removing it can really delete something), two tags.
        built = subprocess.run(["docker", "build", "-q", "-t", cache_tag, "--label",
                                f"test.nonce={nonce}", "-"],
                               input=f"FROM {BUSYBOX}\nLABEL test.nonce={nonce}\n",
                               capture_output=True, text=True, timeout=120, check=True)
        image_id = built.stdout.strip()
        engine.tag_image(image_id, mark)
        assert engine.untag_image(mark) is True  # another tag holds it: only untagged
        assert _tags(engine, image_id) == {cache_tag}
        created = subprocess.run(["docker", "create", image_id, "true"], capture_output=True,
                                 text=True, timeout=60, check=True)
        container = created.stdout.strip()
        assert engine.untag_image(cache_tag) is False  # a container uses it: refused
        assert engine.image(image_id) is not None
        subprocess.run(["docker", "rm", container], capture_output=True, timeout=60, check=True)
        container = None
        assert engine.untag_image(cache_tag) is True  # the last tag: the image goes
        assert engine.image(image_id) is None
        assert engine.untag_image(cache_tag) is True  # already gone: nothing to do
        # The plain base image is no cached image: gc's listing never offers it.
        assert all(c.id != image.id for c in engine.cached_images(["sbx-kit/"]))
    finally:
        if container is not None:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60,
                           check=False)
        subprocess.run(["docker", "rmi", "-f", cache_tag, mark], capture_output=True,
                       timeout=60, check=False)


def test_cached_images_reports_when_each_was_last_tagged(engine: SdkEngine) -> None:
    nonce = uuid.uuid4().hex[:12]
    tag = f"sbx-prep/lasttag-{nonce}:1"
    image = engine.image(BUSYBOX)
    assert image is not None
    try:
        engine.tag_image(image.id, tag)
        [found] = [c for c in engine.cached_images(["sbx-prep/"]) if tag in c.tags]
        assert found.id == image.id
        assert found.last_tagged is not None
        before = found.last_tagged
        engine.tag_image(image.id, tag)  # a later use moves the time on
        [again] = [c for c in engine.cached_images(["sbx-prep/"]) if tag in c.tags]
        assert again.last_tagged is not None and again.last_tagged >= before
    finally:
        subprocess.run(["docker", "rmi", tag], capture_output=True, timeout=60, check=False)
