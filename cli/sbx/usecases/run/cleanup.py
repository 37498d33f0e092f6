"""What a run created, and its removal: every object, on every path (success, failure,
timeout, Ctrl-C, engine error), in the order of their dependencies."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.domain.sandbox.sources import Staging
from sbx.seams import audit
from sbx.seams.engine import Driver
from sbx.seams.session.stream import AttachedStream
from sbx.usecases.context import AppContext
from sbx.usecases.run.plan import RunPlan
from sbx.usecases.run.rundir import audit_event, empty_but_volumes, release_owner

if TYPE_CHECKING:
    # Only runs with a network, ports or egress import these.
    from sbx.domain.egress.plan import ProxyProcess
    from sbx.seams.host.firewall import BridgeGuard
    from sbx.seams.ports import PortForwarder
    from sbx.usecases.keeper import KeptProxy
    from sbx.usecases.run.engineproxy import EngineProxy


@dataclass
class Created:
    """Everything this run asked the engine to create, so cleanup removes exactly that."""

    container: str | None = None
    image: str | None = None
    volumes: list[str] = field(default_factory=list)
    network: str | None = None
    guard: BridgeGuard | None = None
    forwarder: PortForwarder | None = None
    proxy: ProxyProcess | KeptProxy | EngineProxy | None = None
    port_keeper: KeptProxy | None = None  # a named sandbox's ports without egress (keeper)
    proxy_url: str | None = None  # the sandbox's HTTPS_PROXY (the browser observer's key)
    stream: AttachedStream | None = None
    staging: Staging | None = None
    sized: dict[str, str] = field(default_factory=dict)  # volume name -> its file system
    kept: bool = False  # a named sandbox that started: its objects outlive this run


def created_ids(created: Created, container_id: str) -> dict[str, Any]:
    """What a named sandbox owns, for its record."""
    return {"container_id": container_id, "network": created.network,
            "volumes": list(created.volumes), "image": created.image,
            "staging": list(created.staging.log) if created.staging is not None else []}


def cleanup(ctx: AppContext, plan: RunPlan, driver: Driver, created: Created,
             run_dir: Path) -> list[str]:
    """Remove what this run created; of a named sandbox that started, only this process's own
    handles (the rest is the sandbox's).

    The order is by dependency, not the mirror of creation: the port forwarder and the proxy
    stop first (nothing may leave or enter while the rest goes), then the container (it holds
    the image, the volumes and the network), the image, the volumes, the network; the bridge's
    firewall rules go last, so they outlive every object they protect
    (tests/unit/usecases/run/test_cleanup.py checks this order on a failure at every step). A step
    that fails, in any way, never stops the ones after it: its failure is returned."""
    errors: list[str] = []
    failed: dict[str, int] = {}

    def step(reason: str, undo: Callable[[], object]) -> bool:
        try:
            undo()
        except Exception as error:  # every failure is reported, and none stops the rest
            text = str(error) if isinstance(error, SbxError) else \
                f"{reason.removesuffix('_failed').replace('_', ' ')}: " \
                f"{type(error).__name__}: {error}"
            errors.append(text)
            failed[reason] = failed.get(reason, 0) + 1
            return False
        return True

    if created.stream is not None:
        step("stream_close_failed", created.stream.close)
    if created.forwarder is not None:
        step("forwarder_stop_failed", created.forwarder.stop)
    if created.kept:
        step("mount_release_failed", plan.host_mounts.close)
        release_owner(plan.run_id)  # the named sandbox owns itself from now on
        return errors
    if created.proxy is not None:
        step("proxy_stop_failed", created.proxy.stop)
    if created.port_keeper is not None:
        step("proxy_stop_failed", created.port_keeper.stop)
    if created.container is not None:
        container = created.container
        step("container_remove_failed", lambda: driver.remove_container(container))
    if created.image is not None:
        image = created.image
        step("image_remove_failed", lambda: driver.remove_image(image))
    for name in created.volumes:
        step("volume_remove_failed", functools.partial(driver.remove_volume, name))
    if created.network is not None:
        step("network_remove_failed", functools.partial(driver.remove_network, created.network))
    if not errors and plan.recreate:
        empty_but_volumes(run_dir)  # a failed recreation keeps HOME and the volumes
    elif not errors:
        shutil.rmtree(run_dir, ignore_errors=True)
    if created.staging is not None:
        staging = created.staging
        staging_errors: list[str] = []
        if step("staging_release_failed", lambda: staging_errors.extend(staging.release())) \
                and staging_errors:
            errors.extend(staging_errors)
            failed["staging_release_failed"] = len(staging_errors)
    step("mount_release_failed", plan.host_mounts.close)
    if created.guard is not None:
        guard = created.guard
        rule_errors: list[str] = []
        if step("firewall_rule_remove_failed", lambda: rule_errors.extend(guard.remove())) \
                and rule_errors:
            errors.extend(rule_errors)
            failed["firewall_rule_remove_failed"] = len(rule_errors)
    for reason, count in failed.items():
        audit_event(ctx, audit.CLEANUP_FAILED, plan.run_id, "warning",
               {"reason": reason, "count": count})
    release_owner(plan.run_id)
    return errors


__all__ = ["Created", "cleanup", "created_ids"]
