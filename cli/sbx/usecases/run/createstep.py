"""The create step of a run that needs one: kit files, profiles, the egress CA, the startup
script and install hooks, committed into the per-run image the sandbox runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress.ca import CertificateAuthority
from sbx.domain.egress.plan import (
    CA_BUNDLE,
    CA_FILE,
    SYSTEM_BUNDLES,
    ProxyProcess,
    trust_bundle,
    upstream_certificates,
)
from sbx.domain.sandbox.hardening import BindMount, build_create_step_spec
from sbx.domain.sandbox.imageprobe import probed
from sbx.domain.sandbox.lifecycle import (
    CREATE_STEP_CAP_DROP,
    KEEPALIVE,
    CreateStep,
    KitFile,
    parse_accounts,
    run_create_step,
)
from sbx.seams.engine import Driver
from sbx.usecases.context import AppContext
from sbx.usecases.keeper import KeptProxy
from sbx.usecases.policylog import record_line, records_of_run
from sbx.usecases.run.kitmounts import relay_binds
from sbx.usecases.run.plan import RunPlan, volume_binds
from sbx.usecases.run.request import OutputSink


def create_step(ctx: AppContext, plan: RunPlan, driver: Driver, on_output: OutputSink,
                 boundary: Mapping[str, str], proxy: ProxyProcess | KeptProxy | None,
                 created_sized: Mapping[str, str],
                 kit_mounts: Sequence[BindMount] = ()) -> None:
    """Kit files, profiles, CA, startup script and install hooks → the per-run image."""
    assert plan.run_image_tag is not None  # noqa: S101 - guarded by the caller
    capabilities = plan.full()[3]
    networked = plan.egress is not None and plan.network is not None
    # The image's accounts and, with egress, its CA bundles: one probe, then cached per image.
    read = probed(driver, plan.image,
                  files=("/etc/passwd", *(SYSTEM_BUNDLES if networked else ())),
                  cache_dir=ctx.state_home / "cache" / "images", helper_labels=plan.labels).files
    passwd = read.get("/etc/passwd") or b""
    volumes = volume_binds(plan.volume_names, capabilities.volumes, created_sized)
    spec = build_create_step_spec(
        # the sandbox's own limits (the flags' included: sbx.usecases.run.plan.assemble)
        image=plan.image.id,
        limits=dataclasses.replace(capabilities.limits, **plan.facts.limits),
        workdir=plan.workspace_target,
        labels=plan.labels, image_labels=plan.image.labels, keepalive=KEEPALIVE,
        cap_drop=CREATE_STEP_CAP_DROP,
        binds=[*volumes, *kit_mounts, *relay_binds(ctx, plan.run_id, capabilities, "install")],
        runtime=plan.spec.runtime)
    lifecycle = capabilities.lifecycle
    if networked:
        assert plan.network is not None  # noqa: S101 - networked says so
        # Install hooks reach exactly the install phase's hosts, through the same proxy.
        spec = dataclasses.replace(spec, network_mode=plan.network)
        lifecycle = dataclasses.replace(
            lifecycle, files=(*lifecycle.files, *_trust_files(ctx, plan, read)))
    # Install hooks' output is the kit author's, shown like a build's: on stderr.
    step = CreateStep(
        driver=driver, spec=spec, image_tag=plan.run_image_tag, image_labels=plan.labels,
        base=plan.image,
        uid=plan.user.uid, gid=plan.user.gid, container_env=plan.container_env,
        accounts=parse_accounts(passwd.decode("utf-8", "replace")),
        workdir=plan.workspace_target,
        on_output=lambda _stream, chunk: on_output("stderr", chunk),
        boundary_env={**capabilities.env, **boundary}, home=plan.home,
        after_install=(proxy.switch_to_runtime
                       if proxy is not None and plan.egress is not None
                       and plan.egress.initial_phase == "install" else None))
    try:
        run_create_step(step, lifecycle, [(v.path, v.mode) for v in capabilities.volumes])
    except SbxError as error:
        if error.reason is Reason.HOOK_FAILED and plan.egress is not None:
            raise _after_refusal(ctx, plan, error) from error
        raise


def _after_refusal(ctx: AppContext, plan: RunPlan, error: SbxError) -> SbxError:
    """A hook that failed after its egress was refused names the refusal first (what, the
    rule, the fix): the kit's command was likely fine and the policy (or the network) not."""
    refused = records_of_run(ctx.state_home, plan.run_id, phase="install")
    if not refused:
        return error
    last = refused[-1]
    what = record_line(last).split(" ", 2)[2]  # without the time and the sandbox
    fix = last.get("fix") if isinstance(last.get("fix"), str) else None
    more = f" (and {len(refused) - 1} more refusal(s))" if len(refused) > 1 else ""
    hint = (f"Paste `{fix}` to allow it (reviewed: it shows the widening), then run again; "
            if fix else f"`sbx explain {last.get('code')}` says what to do; ")
    hint += f"`sbx explain {plan.run_id}` lists every refusal of this run."
    return SbxError(
        Reason.HOOK_FAILED,
        f"{error.message}, after sbx refused its request: {what}{more}",
        hint=hint, details={**error.details, "refusals": refused[-5:], "fix": fix})


def _trust_files(ctx: AppContext, plan: RunPlan,
                 image_files: Mapping[str, bytes | None]) -> list[KitFile]:
    """sbx's CA (and an upstream proxy's, ``[network] upstream_ca_file``: a TLS-intercepting
    corporate proxy signs the hosts sbx tunnels), a bundle of the image's CAs plus those, and
    that bundle in the image's own system location, so clients that ignore SSL_CERT_FILE
    trust intercepted TLS too."""
    ca_pem = CertificateAuthority.load_or_create(ctx.state_home).certificate_pem()
    upstream = plan.full()[1].network.upstream_ca_file.value
    if upstream:
        ca_pem = ca_pem.rstrip(b"\n") + b"\n" + upstream_certificates(Path(upstream))
    system_path, system = next(
        ((p, data) for p in SYSTEM_BUNDLES if (data := image_files.get(p)) is not None),
        (SYSTEM_BUNDLES[0], None))
    bundle = trust_bundle(ca_pem, system).decode("utf-8")
    files = [KitFile(kit="sbx", where="egress CA", path=CA_FILE, content=ca_pem.decode(),
                     mode=0o644, owner_is_sandbox_user=False),
             KitFile(kit="sbx", where="egress CA", path=CA_BUNDLE, content=bundle, mode=0o644,
                     owner_is_sandbox_user=False),
             KitFile(kit="sbx", where="egress CA", path=system_path, content=bundle,
                     mode=0o644, owner_is_sandbox_user=False)]
    return files


__all__ = ["create_step"]
