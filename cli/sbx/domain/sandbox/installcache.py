"""The install cache: a one-shot run's committed create-step image, reused by the next run
whose create step would do exactly the same (``sbx-installed/<key>``).

The key is a digest of everything the committed image is made of: sbx's version, the base
image's id (a rebuild changes it), the runtime, the sandbox user, HOME, workdir and limits the
hooks ran with, every kit file (content, mode, owner), every install and startup hook as
composed (command, user, declared env names, where declared) with the *values* of the names
each declares, and the boundary environment. A kit arg or an edited hook changes the
composed hooks or files, and thereby the key.

Only a create step whose result is a pure function of those is cached; the others run as
before (:func:`uncacheable_why`): an install phase with network (what a hook fetched is in no
key, the image would keep that run's proxy address in its startup script, and credential
bindings are the proxy's, per run), volumes (a hook may write to them, or read what an earlier
run left), named sandboxes (their image is theirs for their life), kit host mounts and the SSH
agent relay (host content sbx does not digest). The workspace is never mounted in the create
step, so its contents are not an input.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from sbx.domain.kits.composed import Hook
from sbx.domain.sandbox.lifecycle import KitFile, LifecyclePlan

INSTALLED_REPOSITORY: Final = "sbx-installed/"
INSTALLED_LABEL: Final = "dev.sbx.install-key"
KEY_DIGITS: Final = 32
FORMAT: Final = 1  # bumped when the create step's way of making the image changes


@dataclasses.dataclass(frozen=True)
class StepInputs:
    """What goes into one create step's committed image (see the module docstring)."""
    sbx_version: str
    base_image_id: str
    runtime: str | None
    uid: int
    gid: int
    home: str | None
    workdir: str
    limits: object  # the create step's resource limits, keyed by their repr
    container_env: Mapping[str, str]
    boundary_env: Mapping[str, str]
    lifecycle: LifecyclePlan


def uncacheable_why(*, networked: bool, named: bool, volumes: int,
                    host_binds: int) -> str | None:
    """Why this create step's result must not be reused, or None when it may be."""
    if named:
        return "a named sandbox keeps its own image"
    if networked:
        return "its install phase has network"
    if volumes:
        return "it prepares volumes"
    if host_binds:
        return "it mounts host directories"
    return None


def _hook(hook: Hook, env: Mapping[str, str]) -> dict[str, Any]:
    command = hook.command if isinstance(hook.command, str) else list(hook.command)
    return {"stage": hook.stage, "command": command, "user": hook.user,
            "env": {name: env.get(name) for name in hook.env},
            "background": hook.background, "kit": hook.kit, "at": hook.declared_at,
            "index": hook.index, "position": hook.position}


def _file(kit_file: KitFile) -> dict[str, Any]:
    return {"path": kit_file.path, "content": kit_file.content, "mode": kit_file.mode,
            "overwrite": kit_file.overwrite, "owner": kit_file.owner_is_sandbox_user,
            "kit": kit_file.kit, "where": kit_file.where}


def install_key(inputs: StepInputs) -> str:
    """The digest naming the committed image of a create step with these inputs."""
    env = inputs.container_env
    document = {
        "format": FORMAT, "sbx": inputs.sbx_version, "base": inputs.base_image_id,
        "runtime": inputs.runtime, "uid": inputs.uid, "gid": inputs.gid,
        "home": inputs.home, "workdir": inputs.workdir,
        "limits": repr(inputs.limits), "path": env.get("PATH"),
        "boundary": dict(sorted(inputs.boundary_env.items())),
        "install": [_hook(h, env) for h in inputs.lifecycle.install],
        "startup": [_hook(h, env) for h in inputs.lifecycle.startup],
        "files": [_file(f) for f in inputs.lifecycle.files],
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_DIGITS]


def installed_tag(key: str) -> str:
    return f"{INSTALLED_REPOSITORY}{key}:1"


__all__ = ["INSTALLED_LABEL", "INSTALLED_REPOSITORY", "StepInputs", "install_key", "installed_tag",
           "uncacheable_why"]
