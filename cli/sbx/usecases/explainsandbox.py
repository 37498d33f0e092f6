"""`sbx explain WORKLOAD` and `sbx kit inspect`: the effective sandbox, every value with where it
came from and what changes it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.base.config import DEFAULT_SOURCE, Config
from sbx.domain.credentials.oauth import (
    OAuthConfig,
    credential_mode,
    has_api_key,
    passthrough_refusal,
)
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.egress.policy import describe_rule, rule_dict, rule_where
from sbx.domain.kits.compose import PHASES, Composition, Rule
from sbx.domain.kits.kitset import KitSet
from sbx.domain.kits.selection import SelectionRecord
from sbx.usecases.explain import explain_prefix, pending_rules, static_composition
from sbx.usecases.kitgate import permission_states
from sbx.usecases.pipeline import explain_command

if TYPE_CHECKING:
    from sbx.domain.sandbox.images import SandboxUser
    from sbx.usecases.kitgate import PermissionState
    from sbx.usecases.pipeline import WorkloadPlan


@dataclass(frozen=True)
class Item:
    """One described thing: what it is, where it came from, and what changes it."""

    name: str
    value: str
    source: str
    change: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source,
                "change": self.change, **self.extra}


@dataclass(frozen=True)
class SandboxExplanation:
    kits: tuple[Item, ...]
    selected: tuple[Item, ...]
    skipped: tuple[Item, ...]
    hardening: tuple[Item, ...]
    network: Mapping[str, tuple[Item, ...]]
    credentials: tuple[Item, ...]
    storage: tuple[Item, ...]
    pending: tuple[Rule, ...]
    explain: str
    permissions: tuple[PermissionState, ...] = ()  # what each kit asks for, and was approved

    def as_dict(self) -> dict[str, Any]:
        return {
            "permissions": [p.as_dict() for p in self.permissions],
            "kits": [i.as_dict() for i in self.kits],
            "capabilities": {"selected": [i.as_dict() for i in self.selected],
                             "skipped": [i.as_dict() for i in self.skipped]},
            "hardening": [i.as_dict() for i in self.hardening],
            "network": {p: [i.as_dict() for i in items] for p, items in self.network.items()},
            "credentials": [i.as_dict() for i in self.credentials],
            "storage": [i.as_dict() for i in self.storage],
            "pending_env": [rule_dict(r) for r in self.pending],
            "explain": self.explain,
        }


_FLAGS: Final = {"sandbox.timeout_ms": "--timeout SECONDS"}


def config_item(key: str, value: object, source: str, config: Config) -> Item:
    """One setting as explain and `sbx config show` print it: value, source, what changes it."""
    section, _, name = key.partition(".")
    change = f"[{section}] {name} in {config.path}"
    if key in _FLAGS:
        change += f", or {_FLAGS[key]}"
    shown = source if source != DEFAULT_SOURCE else "default"
    # ``raw`` keeps the typed value: the renderer spells it for people (4 GiB, none), --json
    # readers get the number itself.
    return Item(key, repr(value) if isinstance(value, str) else str(value), shown, change,
                {"raw": list(value) if isinstance(value, tuple) else value})


def _version(data: Mapping[str, Any]) -> str:
    provides = data.get("provides") or []
    if provides and isinstance(provides[0], str) and "@" in provides[0]:
        return str(provides[0]).rpartition("@")[2]
    return str(data.get("version") or "-")


def explain_sandbox(kit_set: KitSet, config: Config, *, bound: Mapping[str, bool],
                    oauth: Mapping[str, bool] | None = None) -> SandboxExplanation:
    """The static description (no engine, for ``sbx kit inspect``). ``bound`` maps each
    credential service to whether a secret is stored, ``oauth`` to whether OAuth tokens are
    (never a value). Each credential shows the mode ``sbx run`` would bind it in
    (:func:`sbx.domain.credentials.oauth.credential_mode`): ``bound (oauth)``, ``bound`` (the API
    key), or ``not
    bound`` with the command that binds it."""
    composition = static_composition(kit_set)
    hardening = tuple(config_item(key, value, source, config)
                      for key, value, source in config.provenance())
    return _sandbox(kit_set, composition, hardening=hardening,
                    credentials=tuple(_credential_item(c, bound, oauth or {})
                                      for c in composition.credentials),
                    later_skips=(), explain=explain_prefix(kit_set))


def explain_plan(planned: WorkloadPlan, user: SandboxUser | None, *,
                 state_home: Path | None = None, cwd: Path | None = None) -> SandboxExplanation:
    """The sandbox ``sbx run`` would start for the plan: its effective composition, the
    limits after the kits' ``resources@1``, the image and the user, the credentials as bound
    (``user`` None: it needs the image's accounts, which only ``sbx run`` reads); with the
    state home, each kit's permissions against what was approved (sbx.usecases.kitgate)."""
    config = planned.config
    capabilities = planned.capabilities
    limits = capabilities.limits
    kit_limits = {"sandbox.memory_bytes": limits.memory_bytes,
                  "sandbox.cpu_millis": limits.cpu_millis}
    hardening: list[Item] = []
    for key, value, source in config.provenance():
        item = config_item(key, value, source, config)
        if key in kit_limits and kit_limits[key] != value:
            item = Item(key, str(kit_limits[key]), "a kit's resources@1 request",
                        f"edit the kit's resources@1 request (bound: {item.value} from "
                        f"{item.source})")
        hardening.append(item)
    image_source = "locked registry kit" if planned.kit_set.workload.local.image else (
        "cached build" if not planned.image_built else "built now")
    hardening.append(Item("image", planned.image_tag, image_source,
                          "edit the kits' dockerfiles (rebuilt when their content changes)"))
    if user is not None:
        hardening.append(Item("user", f"{user.uid}:{user.gid}", user.source,
                              "--user UID:GID, a workspace's owner, or [sandbox] user"))
    else:
        hardening.append(Item("user", "resolved by sbx run",
                              f"image USER {planned.image.user}",
                              "--user UID:GID, a workspace's owner, or [sandbox] user"))
    hardening.append(Item("privileged", str(capabilities.privileged).lower(),
                          "privileged@1 with --allow-privileged" if capabilities.privileged
                          else "default", "a kit's privileged@1 and --allow-privileged"))
    modes = dict(planned.egress.modes) if planned.egress is not None else {}
    credentials = tuple(_credential_item(
        c, {s: m == "apikey" for s, m in modes.items()},
        {s: m == "oauth" for s, m in modes.items()}) for c in planned.composition.credentials)
    explanation = _sandbox(planned.kit_set, planned.composition, hardening=tuple(hardening),
                           credentials=credentials,
                           later_skips=(*capabilities.skipped,
                                        *(planned.egress.skipped if planned.egress else ())),
                           explain=explain_command(planned.loaded))
    if state_home is None or cwd is None:
        return explanation
    return dataclasses.replace(explanation, permissions=permission_states(
        state_home, planned.kit_set, planned.effective, cwd))


def _sandbox(kit_set: KitSet, composition: Composition, *, hardening: tuple[Item, ...],
             credentials: tuple[Item, ...], later_skips: Sequence[SelectionRecord],
             explain: str) -> SandboxExplanation:
    kits = tuple(
        Item(k.reference, k.local.descriptor.kind, str(k.local.directory),
             "--kit MIXIN adds a mixin; the order comes from the kits' requirements",
             {"kind": k.local.descriptor.kind, "version": _version(k.local.descriptor.data),
              "descriptor": k.local.descriptor.file})
        for k in kit_set.kits)
    dropped = {(r.kit, r.path) for r in later_skips}
    selected = tuple(Item(f"{r.kit} {r.path}", r.type, r.kit, "edit the kit's capabilities",
                          {"kit": r.kit, "path": r.path, "type": r.type})
                     for k in kit_set.kits for r in k.selection.selected_records
                     if (r.kit, r.path) not in dropped)
    skipped = tuple(Item(f"{r.kit} {r.path}", r.type, r.kit,
                         "an optional capability this sbx does not provide is skipped; "
                         "it cannot be turned on here",
                         {"kit": r.kit, "path": r.path, "type": r.type, "reason": r.reason})
                    for r in (*(r for k in kit_set.kits for r in k.selection.skipped),
                              *later_skips))
    network: dict[str, tuple[Item, ...]] = {}
    for phase in PHASES:
        rules: tuple[Rule, ...] = ()
        if composition.network is not None:
            part = composition.network.phase(phase)
            rules = (*part.allow, *part.deny)
        network[phase] = tuple(
            Item(describe_rule(r), r.action, rule_where(r),
                 f"edit {rule_where(r)}, or do not compose {r.kit}", {"rule": rule_dict(r)})
            for r in rules)
    storage = tuple(
        Item(v.path, "tmpfs" if v.tmpfs else "volume", str(v.origins[0]) if v.origins else "-",
             "edit the kit's volume@1 capability", {"size": v.size})
        for v in composition.volumes)
    return SandboxExplanation(kits, selected, skipped, hardening, network, credentials, storage,
                              pending_rules(composition), explain)


def _credential_item(credential: Any, bound: Mapping[str, bool],
                     oauth: Mapping[str, bool]) -> Item:
    service = credential.service
    mode = credential_mode(service, credential.config, api_key=bool(bound.get(service)),
                           oauth=bool(oauth.get(service)))
    declared = OAuthConfig.from_credential(service, credential.config)
    refused = passthrough_refusal(credential) is not None
    if mode is not None:
        value, change = ("bound (oauth)" if mode == "oauth" else "bound"), \
            f"sbx secret rm {service}"
    elif refused:
        value, change = "refused (oauth.passthrough)", "drop passthrough: true from the kit"
    else:
        value = "not bound"
        change = f"sbx secret login {service}" if declared is not None and not has_api_key(
            credential.config) else f"sbx secret set {service}" + (
            f" or sbx secret login {service}" if declared is not None else "")
    return Item(service, value,
                f"{credential.kit} {credential.declared_at or f'capabilities[{credential.index}]'}",
                change, {"service": service, "phase": credential.phase,
                         "bound": mode is not None, "mode": mode,
                         "optional": credential.optional, "kit": credential.kit})


def stored_credentials(kit_set: KitSet, state_home: Path,
                       ) -> tuple[dict[str, bool], dict[str, bool]]:
    """Per credential service: whether a secret is stored, and whether OAuth tokens are."""
    secrets, tokens = SecretStore(state_home), OAuthStore(state_home)
    services = credential_services(kit_set)
    return {s: secrets.has(s) for s in services}, {s: tokens.has(s) for s in services}


def credential_services(kit_set: KitSet) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.service for c in static_composition(kit_set).credentials))
