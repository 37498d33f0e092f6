"""The image probe against a real engine: a first run in a fresh state home creates one helper
container, of the image id, that answers both the accounts and the mount points; a later full
plan of the same image id creates none; an image rebuilt with other content (a new id under the
same kit) is probed again."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from tests.support.sbxproc import run_sbx

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

EVENT_LOG_LAG_S = 1.0  # the engine writes its event log asynchronously


def _creates(home: Path, since: float, until: float) -> list[dict[str, str]]:
    """The attributes (labels, image, name) of each container created for ``home`` meanwhile."""
    filters = [a for key, value in labels.home_selector(home_hash(home)).items()
               for a in ("--filter", f"label={key}={value}")]
    listed = subprocess.run(
        ["docker", "events", "--since", f"{since:.3f}", "--until", f"{until:.3f}",
         "--filter", "type=container", "--filter", "event=create", *filters,
         "--format", "{{json .Actor.Attributes}}"],
        capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]


def _run(kit: Path, env: dict[str, str]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    started = time.time()
    result = run_sbx(["run", "--json", str(kit), "--", "true"], env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    time.sleep(EVENT_LOG_LAG_S)
    envelope = json.loads(result.stdout.strip().splitlines()[-1])
    return envelope["data"], _creates(Path(env["SBX_HOME"]), started, time.time())


def _roles(created: list[dict[str, str]]) -> list[str]:
    return sorted(c.get(labels.ROLE, "?") for c in created)


def _image_id(tag: str) -> str:
    return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()


def test_a_first_run_probes_once_per_image_id(kit_factory: Callable[..., Path],
                                              state_home: Path) -> None:
    nonces = [uuid.uuid4().hex, uuid.uuid4().hex]
    recipe = "FROM {}\nLABEL test.nonce={}\nUSER agent\nWORKDIR /workspace\nCMD [\"true\"]\n"
    kit = kit_factory("probekit", recipe.format(BUSYBOX, nonces[0]))
    builder = state_home.parent / "builder-state"
    try:
        # The image is built beforehand, from another home: the first run finds only it.
        _run(kit, {**os.environ, "SBX_HOME": str(builder), "SBX_CONFIG": os.devnull})
        env = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}
        data, created = _run(kit, env)
        image_id = _image_id(str(data["image"]))
        assert _roles(created) == ["helper", "sandbox"], created
        (probe,) = [c for c in created if c[labels.ROLE] == "helper"]
        assert probe["image"] == image_id  # by id: what was read is what the sandbox runs
        # The one probe answered the accounts (USER agent's uid) and the mount points.
        entry = json.loads((state_home / "cache" / "images"
                            / f"{image_id.replace(':', '-')}.json").read_text("utf-8"))
        assert "/etc/passwd" in entry["files"]
        assert "/etc/group" not in entry["files"]  # USER agent names no group
        assert {"/tmp", "/home/sbx"} <= set(entry["modes"])

        # The full plan again, same image id: the cached answer, no probe.
        _, again = _run(kit, {**env, "SBX_PLAN_CACHE": "0"})
        assert _roles(again) == ["sandbox"], again

        # Rebuilt with other content: a new id under the same kit, so it is probed again.
        (kit / "probekit.dockerfile").write_text(recipe.format(BUSYBOX, nonces[1]), "utf-8")
        data, rebuilt = _run(kit, {**env, "SBX_PLAN_CACHE": "0"})
        new_id = _image_id(str(data["image"]))
        assert new_id != image_id
        assert [c["image"] for c in rebuilt if c.get(labels.ROLE) == "helper"] == [new_id]
    finally:
        for nonce in nonces:
            found = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter",
                                    f"label=test.nonce={nonce}"], capture_output=True, text=True,
                                   timeout=30, check=False).stdout.split()
            if found:
                subprocess.run(["docker", "rmi", "-f", *found], capture_output=True, timeout=60,
                               check=False)
