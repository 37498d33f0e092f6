"""A run's network: the per-run internal network, the egress proxy on its gateway, and the
bridge's firewall rules (only the proxy's own address and port are open to the sandbox)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.egress import kitregistry, requestlog
from sbx.domain.egress import plan as egress_plan
from sbx.domain.egress.plan import ProxyProcess, credential_env, proxy_env
from sbx.domain.egress.policystore import rules_path
from sbx.domain.egress.proxyauth import new_token
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.proxycreds import CredentialSpec
from sbx.domain.sandbox import runrecord
from sbx.seams.engine import Driver
from sbx.seams.host import firewall
from sbx.seams.signals import deferred_interrupts
from sbx.usecases import publishedports, runstore
from sbx.usecases.context import AppContext
from sbx.usecases.keeper import KeptProxy, start_kept_proxy, start_port_keeper
from sbx.usecases.run.cleanup import Created
from sbx.usecases.run.engineproxy import EngineProxy, start_engine_proxy
from sbx.usecases.run.kitmounts import relay_config
from sbx.usecases.run.plan import RunPlan
from sbx.usecases.runtimeimage import runtime_image
from sbx.usecases.sandboxstore import SandboxStore


def setup_network(ctx: AppContext, plan: RunPlan, driver: Driver, created: Created,
                   run_dir: Path, on_warning: Callable[[str], None]) -> dict[str, str]:
    """The per-run internal network, the egress proxy, and the bridge's firewall rules.

    Returns the boundary environment (proxy, CA, credential sentinels) for the sandbox."""
    if plan.network is None or plan.bridge is None:
        return {}
    publishedports.check_host_ports(plan.capabilities)  # port_taken before anything is made
    if not driver.location().local:
        return _beside_the_engine(ctx, plan, driver, created, run_dir)
    with deferred_interrupts():  # created and recorded together (sbx.seams.signals)
        created.network = driver.create_network(plan.network, plan.labels, bridge=plan.bridge,
                                                internal=True)
    boundary: dict[str, str] = {}
    gateway: str | None = None
    bindings = publishedports.bindings_of(plan.capabilities)
    if plan.name is not None and bindings:
        # A named sandbox's keeper forwards its ports (read before it is ready).
        publishedports.write_wanted(run_dir, bindings, plan.network)
    if plan.egress is not None:
        gateway = driver.network_gateway(created.network)
        with deferred_interrupts():
            created.proxy, boundary = _start_egress(ctx, plan, gateway, plan.bridge, run_dir)
            created.proxy_url = boundary.get("HTTPS_PROXY")
    elif plan.name is not None and bindings:
        with deferred_interrupts():
            created.port_keeper = start_port_keeper(run_dir, plan.run_id)
    # Only the proxy's own address and port are open to the bridge.
    created.guard = firewall.BridgeGuard(plan.bridge, plan.run_id, allow_tcp_ports=(
        (created.proxy.port,) if created.proxy is not None else ()), proxy_address=gateway)
    gap = created.guard.install()  # create_failed when iptables refuses (fail closed)
    if gap:
        on_warning(gap)
    return boundary


def _beside_the_engine(ctx: AppContext, plan: RunPlan, driver: Driver, created: Created,
                       run_dir: Path) -> dict[str, str]:
    """An engine on another host: the sandbox's internal network gives that host no address
    (its services stay closed without firewall rules there), and the egress proxy runs as a
    container beside the sandbox (sbx.usecases.run.engineproxy)."""
    assert plan.network is not None  # noqa: S101 - guarded by the caller
    with deferred_interrupts():
        created.network = driver.create_network(plan.network, plan.labels, bridge=None,
                                                internal=True, host_address=False)
    if plan.egress is None:
        return {}
    config, specs = _proxy_config(ctx, plan, listen_host="127.0.0.1", peer_network=None,
                                  run_dir=run_dir)
    store = SecretStore(ctx.state_home)
    secrets = dict(plan.egress.provided)
    for service in plan.egress.bound:
        if plan.egress.modes.get(service) == "apikey" and service not in secrets:
            value = store.get(service)
            if value is not None:
                secrets[service] = value
    image = runtime_image(ctx.state_home, driver)
    proxy = EngineProxy(driver, plan.run_id, client_token=new_token())
    created.proxy = proxy
    start_engine_proxy(proxy, config, state_home=ctx.state_home, home_hash=ctx.home_hash,
                       image=image,
                       network=plan.network, run_labels=plan.labels,
                       runtime=plan.spec.runtime, secrets=secrets, run_dir=run_dir,
                       request_log=config.request_log)
    boundary = {**proxy_env(proxy.address, proxy.port, proxy.client_token),
                **credential_env(specs)}
    created.proxy_url = boundary.get("HTTPS_PROXY")
    return boundary


def _start_egress(ctx: AppContext, plan: RunPlan, gateway: str, bridge: str,
                  run_dir: Path) -> tuple[ProxyProcess | KeptProxy, dict[str, str]]:
    """Start this run's egress proxy on the network's gateway; the sandbox's boundary env.

    Only the sandbox may use it: the proxy URL carries a fresh per-run token (handed to the
    proxy over its owner pipe, never written anywhere), and the proxy accepts clients only
    from inside the run's network."""
    assert plan.egress is not None  # noqa: S101 - guarded by the caller
    config, specs = _proxy_config(ctx, plan, listen_host=gateway,
                                  peer_network=_sandbox_network(bridge, gateway),
                                  run_dir=run_dir)
    token = new_token()
    proxy: ProxyProcess | KeptProxy
    if plan.name is not None:
        # A named sandbox's proxy outlives this process: a detached keeper owns it, with
        # the token kept (0600) for its later starts (sbx.usecases.keeper).
        proxy = start_kept_proxy(config.to_json(), run_dir, plan.run_id, token,
                                 secrets=plan.egress.provided)
    else:
        proxy = egress_plan.start_proxy(config.to_json(), run_dir, plan.run_id, client_token=token,
                            secrets=plan.egress.provided)
    runstore.update(run_dir, proxy_pid=proxy.pid)  # gc stops an orphan by it
    return proxy, {**proxy_env(gateway, proxy.port, token), **credential_env(specs)}


def _proxy_config(ctx: AppContext, plan: RunPlan, *, listen_host: str,
                  peer_network: str | None, run_dir: Path,
                  ) -> tuple[ProxyConfig, tuple[CredentialSpec, ...]]:
    """The run's proxy config as this host would run it, and its credentials' specs."""
    assert plan.egress is not None  # noqa: S101 - guarded by the callers
    kit_set, plan_config, composition, capabilities = plan.full()
    specs = tuple(CredentialSpec.from_credential(c, mode=plan.egress.modes.get(c.service,
                                                                              "apikey"))
                  for c in composition.credentials if c.service in plan.egress.bound)
    # An unbound credential's token endpoint is still answered by the proxy (logins inside
    # the sandbox are rewritten there too).
    specs += tuple(s for c in composition.credentials if c.service not in plan.egress.bound
                   if (s := CredentialSpec.token_endpoint_only(c)) is not None)
    network_settings = plan_config.network
    ca_file = network_settings.upstream_ca_file.value
    config = ProxyConfig(
        run_id=plan.run_id, state_home=ctx.state_home,
        audit_log=ctx.state_home / "audit.jsonl", network=composition.network,
        phase=plan.egress.initial_phase,  # type: ignore[arg-type]
        credentials=specs, listen_host=listen_host, listen_port=0,
        upstream_proxy=network_settings.upstream_proxy.value,
        upstream_ca_file=Path(ca_file) if ca_file else None,
        explain_command=plan.explain_command, phase_file=run_dir / "proxy.phase",
        peer_network=peer_network, login_dir=run_dir / runrecord.LOGINS_DIR,
        sandbox=plan.name, request_log=_request_log(ctx, plan.run_id),
        user_policy=rules_path(ctx.state_home),
        kit_files={k.reference: str(k.local.descriptor_file.absolute())
                   for k in kit_set.kits if k.local.image is None},
        ssh_agent=relay_config(ctx, run_dir, capabilities),
        kit_registry=(ctx.state_home / kitregistry.STORE_DIR
                      if capabilities.kit_registry else None))
    return config, specs


def _request_log(ctx: AppContext, run_id: str) -> Path:
    """This run's request log (``requests/<run id>/``), after dropping the logs of old
    one-shot runs beyond the kept number (named sandboxes' logs stay with them)."""
    root = ctx.state_home / requestlog.LOG_DIR
    store = SandboxStore(ctx.state_home)
    named: list[str] = []
    try:
        for name in store.names():
            record = store.load(name)
            if record is not None:
                named.append(record.run_id)
    except SbxError:
        named = []  # a record that cannot be read: whose log is whose is unknown, keep all
    else:
        requestlog.prune(root, protected=[*named, run_id])
    return requestlog.log_path(root / run_id)


def _sandbox_network(bridge: str, gateway: str) -> str:
    """The run network's address range (from its bridge), where the proxy's only client lives;
    the proxy does not start without it (fail closed)."""
    network = firewall.bridge_network(bridge)
    if network is None or ipaddress.ip_address(gateway) not in ipaddress.ip_network(network):
        raise SbxError(Reason.PROXY_FAILED,
                       f"cannot read the address range of the sandbox network's bridge {bridge}"
                       f" (gateway {gateway}); the egress proxy would not know its only client",
                       hint="sbx's egress needs a Linux host with the engine's bridge networks.")
    return network


__all__ = ["setup_network"]
