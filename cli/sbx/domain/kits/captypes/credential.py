"""``credential@1``: a secret the proxy presents on the sandbox's behalf, per (service, phase).

The value never enters the sandbox (sbx.domain.egress injects it; sbx.domain.sandbox.binding
binds it from the store). This module owns the descriptor side: at least a name or inject rules,
OAuth credential-file placeholders, one declaration per (service, phase) in a block, every
inject domain inside the same phase's allow list; merged per listed phase, one owner each; on
the surface the service per phase and where it is presented (sbx.domain.kits.destinations).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import (
    Block,
    CapabilityEntry,
    Handler,
    Keys,
    Merge,
    Out,
    deferred,
    items,
    literal_phases,
    mapping,
    merge_phases,
    missing,
    phase_list,
    show,
    string,
    strip_port,
    walk_strings,
)
from sbx.domain.kits.captypes.network_policy import allow_hosts
from sbx.domain.kits.composed import Credential
from sbx.domain.kits.destinations import credential_destinations
from sbx.domain.kits.diagnostics import Parts
from sbx.domain.kits.placeholders import contains_placeholder
from sbx.domain.kits.types import CREDENTIAL, NETWORK_V1, NETWORK_V2

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts, Credential, Origin
    from sbx.domain.kits.surfacetypes import Surface, Widening

# AccountId and IdToken are sbx's own (not in KIT-SPEC-V3): who the login is of, which some
# agents read beside the token (Codex's tokens.account_id and id_token claims): the account
# identifier, and the login's id_token with its signature removed. Neither is a credential.
CREDENTIAL_PLACEHOLDERS: Final = frozenset({"AccessToken", "RefreshToken", "ExpiresAt", "Scopes",
                                            "PrimaryApiKey", "AccountId", "IdToken"})
_TEMPLATE: Final = re.compile(r"\{\{\s*\.([A-Za-z0-9_]+)\s*\}\}")


class CredentialType(Handler):
    types = (CREDENTIAL,)
    implemented = True

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        api_key = config.get("apiKey")
        if isinstance(api_key, Mapping):
            name = api_key.get("name")
            inject = items(api_key.get("inject"))
            if not (isinstance(name, str) and name) and not inject:
                out.add(entry.at("config", "apiKey"), "apiKey needs a name, inject rules, or "
                                                      "both")
        credential_file = mapping(mapping(config.get("oauth")).get("credentialFile"))
        structure = credential_file.get("structure")
        at = entry.at("config", "oauth", "credentialFile", "structure")
        # An omitted structure is valid (sbx writes an empty document); only a stated one can
        # hold nulls TOML cannot represent.
        if credential_file.get("format") == "toml" and "structure" in credential_file:
            for parts in _nulls(structure, at):
                out.add(parts, "is null, which TOML cannot represent")
        for parts, text, is_key in walk_strings(structure, at):
            if is_key:
                continue
            for match in _TEMPLATE.finditer(text):
                if match.group(1) not in CREDENTIAL_PLACEHOLDERS:
                    known = ", ".join(f"{{{{.{p}}}}}" for p in sorted(CREDENTIAL_PLACEHOLDERS))
                    out.add(parts, f"unknown placeholder {match.group(0)}; known: {known}")

    def claim(self, entry: CapabilityEntry, keys: Keys, out: Out) -> None:
        config = entry.config
        service = string(config.get("service"))
        if service and not contains_placeholder(service):
            for phase in literal_phases(config.get("phase")):
                previous = keys.claim("credential", f"{service}\0{phase}", entry.path)
                if previous is not None:
                    out.add(entry.at("config", "service"), f"credential for service "
                                                           f"{service!r} phase {phase!r} "
                                                           f"already declared at "
                                                           f"{show(previous)}")

    def check_block(self, block: Block, out: Out) -> None:
        v1 = block.keys.seen.get(("singleton", NETWORK_V1))
        v2 = block.keys.seen.get(("singleton", NETWORK_V2))
        if block.inject and (v1 is None or v2 is None):
            _inject_within_allow(block, out)

    # -- composition -------------------------------------------------------------------------

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        held_by: dict[tuple[str, str], Credential] = merge.state("credentials", dict)
        service = str(config.get("service", ""))
        for phase in merge_phases(config.get("phase")):
            held = held_by.get((service, phase))
            if held is not None:
                merge.problem(f"{held.kit} {held.declared_at} and {origin} both declare "
                              f"credential ({service}, {phase}); one credential has one owner")
                continue
            held_by[(service, phase)] = Credential(
                service, phase, {**config, "phase": phase}, optional,
                origin.kit, origin.index, origin.path)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["credentials"] = tuple(merge.state("credentials", dict).values())

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for credential in composition.credentials:
            yield CREDENTIAL, credential.config, credential.optional

    # -- surface -----------------------------------------------------------------------------

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        if not isinstance(config, Mapping):
            return False
        service, phases = config.get("service"), phase_list(config.get("phase"))
        if not isinstance(service, str) or phases is None:
            return False
        destinations = credential_destinations(service, phases, config)
        if destinations is None:
            return False
        lists["credential_destinations"].extend(destinations)
        for phase in phases:
            lists[f"credentials_{'install' if phase == 'install' else 'runtime'}"].append(service)
        return True

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("credentials.install", granted.credentials_install,
                           candidate.credentials_install)
        yield from missing("credentials.runtime", granted.credentials_runtime,
                           candidate.credentials_runtime)
        yield from missing("credentials.destinations", granted.credential_destinations,
                           candidate.credential_destinations)


def _nulls(value: Any, parts: Parts) -> Iterator[Parts]:
    if value is None:
        yield parts
    elif isinstance(value, Mapping):
        for key, child in value.items():
            yield from _nulls(child, (*parts, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _nulls(child, (*parts, i))


def _inject_within_allow(block: Block, out: Out) -> None:
    policies = block.of(NETWORK_V1, NETWORK_V2)
    if len(policies) > 1 or any(deferred(p.data.get("config")) for p in policies):
        return  # ambiguous or parameterized: judged on the effective descriptor
    policy = policies[0].config if policies else {}
    for entry in block.entries:
        if entry.type != CREDENTIAL or deferred(entry.data.get("config")):
            continue
        injects = items(mapping(entry.config.get("apiKey")).get("inject"))
        service = entry.config.get("service")
        for phase in literal_phases(entry.config.get("phase")):
            allowed = allow_hosts(policy, phase)
            if allowed is None or "*" in allowed or "**" in allowed:
                continue
            for j, inject in enumerate(injects):
                domain = string(mapping(inject).get("domain"))
                if domain and strip_port(domain) not in allowed:
                    out.add(entry.at("config", "apiKey", "inject", j, "domain"),
                            f"credential {service!r}: inject domain {domain!r} is not in the "
                            f"network policy's {phase} allow list")


HANDLER: Final = CredentialType()

__all__ = ["CREDENTIAL_PLACEHOLDERS", "HANDLER", "CredentialType"]
