"""Where a --clone sandbox's git runs for `sbx diff` and `sbx fetch`: the sandbox itself while
it runs; when it is stopped, a short-lived helper that mounts its clone volume read-only.

A helper, not a brief start of the sandbox: a start runs the workload, and its network needs
the egress proxy and host firewall that only `sbx start` sets up, whereas the helper runs git
and nothing else, in sbx's hardened shape (read-only root, no capability, no network, the
configured limits, the sandbox's image, user and runtime) on a volume it cannot write. The
sandbox's container is never touched, so it is left stopped. What git runs there (the clone's
config is the sandbox's) stays inside that boundary; the host only reads the bytes it prints.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Final

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.hardening import Limits, build_spec, hardening_violations
from sbx.domain.sandbox.records import SandboxRecord
from sbx.seams.containerspec import BindMount
from sbx.usecases import runstore
from sbx.usecases.context import AppContext

HELPER_LIFETIME_S: Final = 900  # the helper's keepalive ends on its own after this
KEEPALIVE: Final = ("/bin/sh", "-c", "trap 'exit 0' TERM INT; i=0; "
                    f"while [ $i -lt {HELPER_LIFETIME_S} ]; do sleep 1; i=$((i+1)); done")


@contextmanager
def git_container(ctx: AppContext, record: SandboxRecord) -> Iterator[str]:
    """The id of the container to run git on ``record``'s clone in: its own while it runs,
    else a helper removed on the way out."""
    container_id = str(record.container_id or "")
    state = ctx.driver.container_state(container_id) if container_id else None
    if state == "running":
        yield container_id
        return
    volume = record.request.get("workspace_volume")
    clone = record.request.get("clone") or {}
    if not volume or not isinstance(clone, dict):
        raise SbxError(Reason.NOT_A_CLONE, f"{record.name} is stopped and its clone is gone: "
                       "an earlier sbx kept the clone in memory, which a stop empties",
                       hint=f"sbx rm -f {record.name}; then create it again with --clone "
                            "(its clone now lives on a volume and survives a stop)")
    if state is None:
        raise SbxError(Reason.START_FAILED, f"{record.name}'s container is gone",
                       hint=f"sbx rm -f {record.name}")
    image = ctx.driver.sandbox_files(container_id).image
    yield from _helper(ctx, record, image, str(volume), str(clone.get("path") or "/workspace"))


def _helper(ctx: AppContext, record: SandboxRecord, image: str, volume: str,
            target: str) -> Iterator[str]:
    uid, _, gid = str(record.request.get("user") or "").partition(":")
    if not uid.isdigit() or not gid.isdigit():
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name}'s record has no user")
    limits = Limits.from_sandbox(ctx.load_config().sandbox)
    run_id = uuid.uuid4().hex
    deadline = math.ceil(time.time() + HELPER_LIFETIME_S)
    labels = label_keys.object_labels(home_hash=ctx.home_hash, run_id=run_id,
                                      deadline=deadline, kits=[],
                                      role=label_keys.ROLE_HELPER)
    runtime = record.request.get("runtime")
    found = ctx.driver.image(image)
    if found is None:
        raise SbxError(Reason.IMAGE_MISSING, f"{record.name}'s image {image[:19]} is gone",
                       hint=f"sbx run --name {record.name} --recreate")
    spec = build_spec(image=image, uid=int(uid), gid=int(gid), limits=limits,
                      workspace_target=target,
                      workspace_bind=BindMount(volume, target, read_only=True, volume=True),
                      extra_binds=(), command=(), entrypoint=KEEPALIVE, env={},
                      home=str(record.home_volume or "/tmp/home"), labels=labels,  # noqa: S108
                      image_labels=found.labels, runtime=str(runtime) if runtime else None)
    violations = hardening_violations(spec, limits)
    if violations:  # pragma: no cover - build_spec cannot produce these; a guard against drift
        raise SbxError(Reason.CREATE_FAILED, "refusing an unhardened helper: "
                       + "; ".join(violations))
    # Its run directory, owner lock held, lets `sbx gc` remove it should sbx be killed.
    run_dir, owner = runstore.create(ctx.state_home, runrecord.RunRecord(
        run_id=run_id, deadline=deadline, workload=record.workload, pid=os.getpid(),
        image=image),
        owner_lock=True)
    helper: str | None = None
    try:
        helper = ctx.driver.create(spec)
        runstore.update(run_dir, container_id=helper)
        ctx.driver.start(helper)
        yield helper
    finally:
        removed = helper is None
        if helper is not None:
            with suppress(SbxError):
                removed = ctx.driver.remove_container(helper) or True
        if removed:
            shutil.rmtree(run_dir, ignore_errors=True)
        if owner is not None:
            os.close(owner)


__all__ = ["git_container"]
