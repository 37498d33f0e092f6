"""The create step of a run that needs one: kit files, profiles, the egress CA, the startup
script and install hooks, committed into the per-run image the sandbox runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sbx import __version__
from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.labels import own_labels
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
from sbx.domain.sandbox.imagecache import record_use
from sbx.domain.sandbox.imageprobe import probed
from sbx.domain.sandbox.installcache import (
    INSTALLED_LABEL,
    StepInputs,
    install_key,
    installed_tag,
    uncacheable_why,
)
from sbx.domain.sandbox.lifecycle import (
    CREATE_STEP_CAP_DROP,
    KEEPALIVE,
    CreateStep,
    KitFile,
    parse_accounts,
    run_create_step,
)
from sbx.domain.sandbox.templates import HOME_DIR
from sbx.seams.engine import Driver
from sbx.usecases.context import AppContext
from sbx.usecases.keeper import KeptProxy
from sbx.usecases.policylog import record_line, records_of_run
from sbx.usecases.run.kitmounts import relay_binds
from sbx.usecases.run.plan import RunPlan, volume_binds
from sbx.usecases.run.request import OutputSink

if TYPE_CHECKING:
    from sbx.usecases.run.engineproxy import EngineProxy


def create_step(ctx: AppContext, plan: RunPlan, driver: Driver, on_output: OutputSink,
                 boundary: Mapping[str, str],
                 proxy: ProxyProcess | KeptProxy | EngineProxy | None,
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
    relays = relay_binds(ctx, plan.run_id, capabilities, "install")
    # the sandbox's own limits (the flags' included: sbx.usecases.run.plan.assemble)
    limits = dataclasses.replace(capabilities.limits, **plan.facts.limits)
    spec = build_create_step_spec(
        image=plan.image.id, limits=limits,
        workdir=plan.workspace_target,
        labels=plan.labels, image_labels=plan.image.labels, keepalive=KEEPALIVE,
        cap_drop=CREATE_STEP_CAP_DROP,
        binds=[*volumes, *kit_mounts, *relays],
        runtime=plan.spec.runtime)
    lifecycle = capabilities.lifecycle
    if networked:
        assert plan.network is not None  # noqa: S101 - networked says so
        # Install hooks reach exactly the install phase's hosts, through the same proxy.
        spec = dataclasses.replace(spec, network_mode=plan.network)
        lifecycle = dataclasses.replace(
            lifecycle, files=(*lifecycle.files, *_trust_files(ctx, plan, read)))
    boundary_env = {**capabilities.env, **boundary}
    why_not = uncacheable_why(networked=networked, named=plan.name is not None,
                              volumes=len(capabilities.volumes),
                              host_binds=len(kit_mounts) + len(relays))
    key = None if why_not is not None else install_key(StepInputs(
        sbx_version=__version__, base_image_id=plan.image.id, runtime=plan.spec.runtime,
        uid=plan.user.uid, gid=plan.user.gid, home=plan.home, workdir=plan.workspace_target,
        limits=limits, container_env=plan.container_env,
        boundary_env=boundary_env, lifecycle=lifecycle))
    if key is not None and _reuse(ctx, driver, plan.run_image_tag, key, on_output):
        return
    # Install hooks' output is the kit author's, shown like a build's: on stderr.
    step = CreateStep(
        driver=driver, spec=spec, image_tag=plan.run_image_tag,
        # A cached image is no run's and no home's: labelled like a kit build, by its key
        # (the create step container's run labels, which a commit keeps, are set empty).
        image_labels=plan.labels if key is None else own_labels(
            {**plan.image.labels, **plan.labels},
            {INSTALLED_LABEL: key, label_keys.VERSION: __version__}),
        base=plan.image,
        uid=plan.user.uid, gid=plan.user.gid, container_env=plan.container_env,
        accounts=parse_accounts(passwd.decode("utf-8", "replace")),
        workdir=plan.workspace_target,
        on_output=lambda _stream, chunk: on_output("stderr", chunk),
        boundary_env=boundary_env, home=plan.home,
        seed_home=HOME_DIR if plan.from_template else None,
        after_install=(proxy.switch_to_runtime
                       if proxy is not None and plan.egress is not None
                       and plan.egress.initial_phase == "install" else None))
    if lifecycle.install and proxy is not None:
        proxy.wait_ready()  # install hooks go out through it
    try:
        committed = run_create_step(step, lifecycle,
                                    [(v.path, v.mode) for v in capabilities.volumes])
    except SbxError as error:
        if error.reason is Reason.HOOK_FAILED and plan.egress is not None:
            raise _after_refusal(ctx, plan, error) from error
        raise
    if key is not None:
        _keep(ctx, driver, committed.id, key)


def _reuse(ctx: AppContext, driver: Driver, run_tag: str, key: str,
           on_output: OutputSink) -> bool:
    """Tag the cached image of an identical earlier create step as this run's image; False
    when there is none (or gc removed it meanwhile): the create step then runs."""
    cached = driver.image(installed_tag(key))
    if cached is None:
        return False
    try:
        driver.tag_image(cached.id, run_tag)
        record_use(driver, ctx.home_hash, [cached])
    except SbxError:
        return False
    on_output("stderr", f"sbx: install hooks not run: reusing {installed_tag(key)}, made by "
                        "an earlier run from the same inputs\n".encode())
    return True


def _keep(ctx: AppContext, driver: Driver, image_id: str, key: str) -> None:
    """Name the committed image by its inputs, for the next run; a concurrent first run that
    tags its own (equal) image later wins, and this one goes with its run tag."""
    try:
        driver.tag_image(image_id, installed_tag(key))
        tagged = driver.image(installed_tag(key))
        if tagged is not None:
            record_use(driver, ctx.home_hash, [tagged])
    except SbxError:
        return  # the cache is a shortcut: this run has its image either way


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
