"""The egress checks on an engine of another host, where a networked run's proxy runs as a
container beside the sandbox (sbx.usecases.run.engineproxy): whether sbx's runtime image is
there, and a probe on a network like a sandbox's that nothing of that host answers."""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from typing import Final

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress import proxycontainer
from sbx.seams.containerspec import ContainerSpec
from sbx.usecases.doctor.model import DoctorState, Status, Verdict
from sbx.usecases.runtimeimage import cached_tag

PROBE_KIT: Final = "doctor-host-services"
PROBE_WAIT_S: Final = 20.0
PROBE_PORT: Final = 9  # discard: what answers is the host itself (a reset), or nothing
# A reset means the engine's host holds the gateway address; silence means it holds none.
PROBE: Final = """
import socket, sys
probe = socket.socket()
probe.settimeout(4)
try:
    probe.connect((sys.argv[1], int(sys.argv[2])))
    print("answers connected")
except ConnectionRefusedError:
    print("answers refused")
except OSError as error:
    print("silent", type(error).__name__)
"""


def proxy_beside_engine(state: DoctorState) -> Verdict:
    driver = state.ctx.driver
    where = driver.location().host
    tag = cached_tag(state.ctx.state_home, driver)
    if tag is None:
        return Verdict(Status.OK, f"a networked run's proxy runs beside the engine at {where}; "
                       "the first one builds sbx's runtime image there (about 75 MB, once per "
                       "install, nothing pulled)", data={"engine": where, "image": None})
    return Verdict(Status.OK, f"a networked run's proxy runs beside the engine at {where}, "
                   f"from {tag}", data={"engine": where, "image": tag})


def host_services_beside_engine(state: DoctorState) -> Verdict:
    """A container on a network made as a sandbox's tries the network's gateway address:
    a reset or a connection means that host's services are reachable from sandboxes."""
    ctx = state.ctx
    driver = ctx.driver
    where = driver.location().host
    tag = cached_tag(ctx.state_home, driver)
    if tag is None:
        return Verdict(Status.OK, f"closed on {where} by design: each sandbox's network gives "
                       "that host no address (not probed: the runtime image the probe runs "
                       "is built by the first networked run)", data={"closed": True,
                                                                     "probed": False})
    run_id = uuid.uuid4().hex
    labels = label_keys.object_labels(
        home_hash=ctx.home_hash, run_id=run_id, kits=[PROBE_KIT], role=label_keys.ROLE_HELPER,
        deadline=math.ceil(time.time() + PROBE_WAIT_S + 60))
    network: str | None = None
    container: str | None = None
    try:
        network = driver.create_network(f"sbx-{run_id[:16]}", labels, bridge=None,
                                        internal=True, host_address=False)
        gateway = driver.network_gateway(network)
        spec = ContainerSpec(
            image=tag, user=proxycontainer.PROGRAM_USER, working_dir="/",
            command=("-c", PROBE, gateway, str(PROBE_PORT)), entrypoint=None, env={},
            labels=labels, memory_bytes=64 * 1024 * 1024, memory_swap_bytes=64 * 1024 * 1024,
            pids_limit=16, nano_cpus=500_000_000, tmpfs={}, network_mode=network)
        container = driver.create(spec)
        driver.start(container)
        if driver.wait(container, PROBE_WAIT_S) is None:
            raise SbxError(Reason.DOCKER_UNREACHABLE,
                           f"the host-services probe on {where} did not finish")
        said = b"".join(chunk for stream, chunk in driver.output(container, follow=False)
                        if stream == "stdout").decode("utf-8", "replace").split()
    finally:
        # Labelled with a deadline: `sbx gc` removes whatever cannot be removed now.
        with contextlib.suppress(SbxError):
            if container is not None:
                driver.remove_container(container)
        with contextlib.suppress(SbxError):
            if network is not None:
                driver.remove_network(network)
    data = {"closed": said[:1] == ["silent"], "probed": True, "gateway": gateway,
            "answer": " ".join(said)}
    if said[:1] == ["silent"]:
        return Verdict(Status.OK, f"closed on {where}: a probe on a network like a sandbox's "
                       f"found nothing of that host at its gateway {gateway}", data=data)
    return Verdict(Status.WARN, f"the engine's host at {where} answers on a sandbox network's "
                   f"gateway {gateway} ({' '.join(said) or 'no answer from the probe'}): its "
                   "services may be reachable from sandboxes", Reason.HOST_SERVICES_EXPOSED,
                   "Use an engine whose bridge driver honours "
                   "com.docker.network.bridge.inhibit_ipv4 (Docker 20.10 or newer), or bind "
                   "that host's services to 127.0.0.1.", data)


__all__ = ["host_services_beside_engine", "proxy_beside_engine"]
