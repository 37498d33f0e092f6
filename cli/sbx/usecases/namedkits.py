"""A named sandbox follows its kits when it starts again, or says why not.

On each start of a stopped named sandbox its kits are read again (as ``sbx run`` reads them:
config, args, selection, resolution; no engine) and compared with what it runs with — its
proxy's own config (the network rules, the credentials injected) and what was recorded at its
creation (the permission surface, each kit's descriptor and image recipe):

- what the proxy holds applies at this start: the network rules (added and removed), and the
  injection of a credential it already has (its domains, header, format), or a credential the
  kits dropped. A widening (a new host, a removed deny, a new injection domain) is shown as the
  pull gate shows one (:func:`sbx.domain.kits.surface.diff_widenings`) and asked on a terminal,
  or approved with ``--accept``; else the start is refused (``permission_widened``) and nothing
  changes. Narrowing applies silently.
- what only a new container can take (a new credential's variable, storage, ports, the image
  recipe, privileged, …) is not applied: the start warns, naming the kits that changed and
  ``sbx run --name NAME --recreate WORKLOAD``, which makes a new container keeping HOME and
  the volumes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secrets import write_private_file
from sbx.domain.egress.policy import describe_rule
from sbx.domain.egress.proxyconfig import ProxyConfig, network_to_dict
from sbx.domain.egress.proxycreds import CredentialSpec
from sbx.domain.kits.compose import PHASES, Network, NetworkPhase
from sbx.domain.kits.surface import Surface, Widening, diff_widenings, format_widenings, surface
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord, kit_words
from sbx.seams import audit
from sbx.usecases import explain as core
from sbx.usecases.context import AppContext
from sbx.usecases.pipeline import WorkloadRequest, kit_argument, load
from sbx.usecases.sandboxstore import SandboxStore

if TYPE_CHECKING:
    from sbx.domain.egress.proxyconfig import ProxyConfig
    from sbx.domain.egress.proxycreds import CredentialSpec
    from sbx.domain.kits.compose import Composition, Network
    from sbx.domain.kits.kitset import KitSet
    from sbx.domain.kits.surface import Widening

Confirm = Callable[[str, Sequence[Any]], bool]  # (what, widenings) -> approved?
PROXY_CONFIG: Final = "proxy.json"
# Surface fields a running container cannot take without being made again.
_CONTAINER_FIELDS: Final = ("ssh_agent", "storage_paths", "host_mount_paths", "skills_paths",
                            "skills_write_paths", "ports", "usb", "privileged", "services")


@dataclass(frozen=True)
class KitsChange:
    applied: tuple[str, ...]  # what this start applies
    widenings: tuple[Widening, ...]
    unapplied: tuple[str, ...]  # what a new container would take
    kits: tuple[str, ...]  # the kits whose descriptor or recipe changed
    config: ProxyConfig | None  # the proxy config to write (None: unchanged)
    fingerprint: Mapping[str, Any]  # what to record as the kits' state now

    @property
    def empty(self) -> bool:
        return not (self.applied or self.widenings or self.unapplied)


def fingerprint(kit_set: KitSet, composition: Composition) -> dict[str, Any]:
    """What a creation records about its kits: each descriptor's and recipe's digest, the
    permission surface, the storage paths in order (a recreation keeps volumes by them)."""
    def digest(text: str | None) -> str | None:
        return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()

    kits = {}
    for loaded in kit_set.kits:
        local = loaded.local
        try:
            descriptor = local.descriptor_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            descriptor = json.dumps(local.descriptor.data, sort_keys=True, default=str)
        kits[kit_argument(loaded)] = {"descriptor": digest(descriptor),
                                      "recipe": digest(local.dockerfile_text)}
    return {"kits": kits, "surface": surface(composition).to_json(),
            "volume_paths": [v.path for v in composition.volumes],
            "workload": kit_argument(kit_set.workload),
            "mixins": [kit_argument(k) for k in kit_set.mixins]}


def compare(ctx: AppContext, record: SandboxRecord) -> KitsChange | None:
    """What changed in the kits since the sandbox was made (None: nothing to compare with —
    no record of them, or they cannot be read now, which the caller says)."""
    options = record.request.get("options") or {}
    workload, mixins = kit_words(record)
    loaded = load(ctx, WorkloadRequest(workload=workload, kits=mixins,
                                       args=tuple(options.get("args") or ()),
                                       allow_privileged=bool(options.get("allow_privileged"))))
    composition = core.static_composition(loaded.kit_set)
    now = fingerprint(loaded.kit_set, composition)
    before = record.request.get("kits_state")
    before = before if isinstance(before, Mapping) else {}
    changed = tuple(ref for ref, state in now["kits"].items()
                    if (before.get("kits") or {}).get(ref) != state) if before else ()
    applied: list[str] = []
    unapplied: list[str] = []
    widenings: list[Widening] = []
    config: ProxyConfig | None = None
    path = runrecord.run_dir(ctx.state_home, record.run_id) / PROXY_CONFIG
    if record.request.get("proxy"):
        running = ProxyConfig.load(path)
        config = _follow_proxy(running, composition, applied, unapplied, widenings)
    elif composition.network is not None:
        unapplied.append("its kits now declare a network policy; it was made without a network")
    if before.get("surface") is not None:
        recorded = Surface.from_json(before["surface"])
        current = Surface.from_json(now["surface"])
        for name in _CONTAINER_FIELDS:
            old, new = getattr(recorded, name), getattr(current, name)
            if old != new:
                unapplied.append(f"{name.replace('_', ' ')}: {_delta(old, new)}")
        if before.get("volume_paths") != now["volume_paths"] and "storage paths" not in " ".join(
                unapplied):
            unapplied.append("the order of its volumes")
        grown = [w for w in diff_widenings(recorded, current)
                 if w.category in ("credentials.install", "credentials.runtime")]
        unapplied.extend(f"a new credential {w.detail} ({w.category.split('.')[1]}): its "
                         "variable needs a new container" for w in grown)
    for ref in changed:
        if (before.get("kits") or {}).get(ref, {}).get("recipe") != now["kits"][ref]["recipe"]:
            unapplied.append(f"the image recipe of {ref}")
    return KitsChange(tuple(applied), tuple(widenings), tuple(dict.fromkeys(unapplied)),
                      changed, config, now)


def _delta(old: Any, new: Any) -> str:
    if isinstance(old, bool) or isinstance(new, bool):
        return f"{old} -> {new}"
    added, removed = sorted(set(new) - set(old)), sorted(set(old) - set(new))
    return ", ".join([*(f"+{a}" for a in added), *(f"-{r}" for r in removed)])


def _follow_proxy(running: ProxyConfig, composition: Composition, applied: list[str],
                  unapplied: list[str], widenings: list[Widening]) -> ProxyConfig | None:
    """The proxy config that follows the kits (None: nothing to change), noting what it
    changes, what it cannot, and the widenings among them."""
    network = composition.network
    if network is None:  # no policy any more: nothing allowed (the network stays)
        network = Network(2, NetworkPhase(), NetworkPhase(), False, ())
    if core.pending_rules(composition):
        unapplied.append("network rules that hold ${{ kit.env.* }} (known with the image)")
        network = running.network or network
    changed_network = running.network is None or \
        network_to_dict(network) != network_to_dict(running.network)
    if changed_network:
        old = _rule_texts(running.network)
        new = _rule_texts(network)
        applied.extend(f"network: +{r}" for r in sorted(new - old))
        applied.extend(f"network: -{r}" for r in sorted(old - new))
        widenings.extend(diff_widenings(_surface(running.network), _surface(network)))
    credentials, notes = _follow_credentials(running.credentials, composition)
    for kind, text in notes:
        (applied if kind == "applied" else unapplied).append(text)
        if kind == "widening":
            widenings.append(Widening("credentials.inject", text))
    changed_credentials = credentials != running.credentials
    if not changed_network and not changed_credentials:
        return None
    return replace(running, network=network, credentials=credentials)


def _follow_credentials(running: Sequence[CredentialSpec], composition: Composition,
                        ) -> tuple[tuple[CredentialSpec, ...], list[tuple[str, str]]]:
    notes: list[tuple[str, str]] = []
    current = {(c.service, c.phase): c for c in composition.credentials}
    kept: list[CredentialSpec] = []
    for spec in running:
        credential = current.get((spec.service, spec.phase))
        if credential is None:
            notes.append(("applied", f"credential {spec.service} ({spec.phase}): removed, no "
                                     "longer injected"))
            continue
        try:
            if spec.oauth is not None and spec.oauth.login_only:  # unbound: its logins only
                fresh = CredentialSpec.token_endpoint_only(credential) or spec
            else:
                fresh = CredentialSpec.from_credential(
                    credential, sentinel=spec.sentinel,
                    mode="oauth" if spec.oauth else "apikey")
        except SbxError as error:
            notes.append(("unapplied", f"credential {spec.service}: {error.message}"))
            kept.append(spec)
            continue
        if fresh.env != spec.env:
            notes.append(("unapplied", f"credential {spec.service}: its variable is now "
                                       f"{fresh.env or 'none'}"))
            kept.append(spec)
            continue
        if fresh != spec:
            notes.append(("applied", f"credential {spec.service} ({spec.phase}): injection "
                                     "changed"))
            old = {d.domain for d in spec.domains}
            notes.extend(("widening", f"{spec.service} -> {d.domain}")
                         for d in fresh.domains if d.domain not in old)
        kept.append(fresh)
    return tuple(kept), notes


def _rule_texts(network: Network | None) -> set[str]:
    if network is None:
        return set()
    return {describe_rule(r).split(": ", 1)[-1] + f" ({r.phase} {r.action})"
            for part in PHASES for r in (*network.phase(part).allow, *network.phase(part).deny)}


def _surface(network: Network | None) -> Any:
    if network is None:
        return Surface()
    return surface([{"type": network.type, "config": network.config()}])


def follow(ctx: AppContext, record: SandboxRecord, *, accept: bool, confirm: Confirm | None,
           on_notice: Callable[[str], None], on_warning: Callable[[str], None]) -> bool:
    """Apply what can be applied before the start, ask about widenings, warn about the rest;
    True when the kits are as the sandbox runs with (nothing applied, asked or warned)."""
    try:
        change = compare(ctx, record)
    except SbxError as error:
        on_warning(f"{record.name}: its kits cannot be read now ({error.message}); it starts "
                   "as it was made")
        return False
    if change is None:
        return False
    if change.empty and not change.kits:
        return True
    name = record.name
    if change.widenings:
        what = (f"{name}: its kits ({', '.join(change.kits) or record.workload}) now ask for "
                "more than it was started with")
        via = "--accept" if accept else None
        if via is None and confirm is not None and confirm(what, change.widenings):
            via = "terminal"
        details = {"name": name, "widenings": [str(w) for w in change.widenings]}
        if via is None:
            _audit(ctx, audit.KIT_WIDENING_REFUSED, record.run_id, {**details, "via": None})
            raise SbxError(
                Reason.PERMISSION_WIDENED, f"{what}; it was not started and nothing changed",
                body=format_widenings(change.widenings),
                hint=f"Review them, then start it on a terminal and confirm, or pass --accept "
                     f"(`sbx run --name {name} --accept {record.workload}`).",
                details=details)
        _audit(ctx, audit.KIT_WIDENING_ACCEPTED, record.run_id, {**details, "via": via})
    if change.config is not None:
        path = runrecord.run_dir(ctx.state_home, record.run_id) / PROXY_CONFIG
        write_private_file(path, change.config.to_json().encode("utf-8"))
    if change.applied:
        on_notice(f"{name}: applied its kits' changes at this start: "
                  + "; ".join(change.applied))
    if change.unapplied:
        on_warning(f"{name}: its kits changed in ways a running container cannot take, so it "
                   f"starts without them: {'; '.join(change.unapplied)}; `sbx run --name "
                   f"{name} --recreate {record.workload}` makes a new container keeping HOME "
                   "and its volumes")
    request = dict(record.request)
    if not change.unapplied:
        request["kits_state"] = dict(change.fingerprint)
    SandboxStore(ctx.state_home).save(replace(record, request=request))
    return False


def pending_notes(ctx: AppContext, name: str) -> tuple[str, ...]:
    """For ``sbx explain NAME``: what its kits changed that it does not run with yet."""
    store = SandboxStore(ctx.state_home)
    record = store.load(name)
    if record is None:
        return ()
    try:
        change = compare(ctx, record)
    except SbxError as error:
        return (f"its kits cannot be read now: {error.message}",)
    if change is None or change.empty:
        return ()
    notes = []
    if change.applied:
        notes.append("its kits changed; the next start applies: " + "; ".join(change.applied))
    if change.unapplied:
        notes.append(f"its kits changed; only `sbx run --name {name} --recreate "
                     f"{record.workload}` applies: " + "; ".join(change.unapplied))
    return tuple(notes)


def _audit(ctx: AppContext, event: str, run_id: str, details: dict[str, Any]) -> None:
    try:
        audit.record(ctx.state_home, event, run_id=run_id, severity="warning",
                     details=details)
    except OSError:
        return


def proxy_config_path(ctx: AppContext, record: SandboxRecord) -> Path:
    return runrecord.run_dir(ctx.state_home, record.run_id) / PROXY_CONFIG


__all__ = ["Confirm", "KitsChange", "compare", "fingerprint", "follow", "kit_words",
           "pending_notes", "proxy_config_path"]
