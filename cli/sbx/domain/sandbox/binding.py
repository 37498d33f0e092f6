"""Which credentials a run binds, and in which mode: one rule for run, explain and doctor.

A credential is bound only when the composition has a network policy (without one the sandbox
has no network, so nothing could carry it). ``resolve_values`` is for ``sbx run`` alone: it
reads keyring, host-variable and host-command secrets once, for the proxy's owner pipe.
``sbx explain`` and ``sbx doctor`` never read a value (nor run a host command); a source that
is set counts as available, as it does for the file store.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.credentials.secrets import SecretStore, resolve_for_run
from sbx.domain.egress.plan import EgressPlan, plan_egress
from sbx.domain.kits.compose import Composition
from sbx.domain.sandbox.capabilities import CapabilityPlan


def bind_credentials(composition: Composition, capabilities: CapabilityPlan, *,
                     state_home: Path, env: Mapping[str, str],
                     resolve_values: bool) -> EgressPlan | None:
    """The egress plan (None without a network policy); raises ``credential_unbound`` for a
    required credential with nothing to bind."""
    relay_phases = tuple(grant[0] for grant in capabilities.ssh_agent)
    if composition.network is None and not relay_phases and not capabilities.kit_registry:
        return None
    store = SecretStore(state_home)
    provided: Mapping[str, str] = {}
    if resolve_values:
        # Resolved here, once, before anything starts; the values reach the proxy over its
        # owner pipe only (never disk, output or audit).
        secrets = resolve_for_run(store, composition.credentials, env)
        available: Mapping[str, bool] = secrets.available
        provided = secrets.provided
    else:
        available = {c.service: store.has(c.service) for c in composition.credentials}
    tokens = OAuthStore(state_home)
    oauth = {c.service: tokens.has(c.service) for c in composition.credentials
             if "oauth" in c.config}
    return plan_egress(composition, has_install_hooks=bool(capabilities.lifecycle.install),
                       secret_available=available, provided=provided, oauth_available=oauth,
                       ssh_agent_phases=relay_phases, kit_registry=capabilities.kit_registry)


__all__ = ["bind_credentials"]
