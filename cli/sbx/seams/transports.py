"""Where the engine is opened: one class per transport, chosen once from ``DOCKER_HOST``.

A transport is an entry in :data:`TRANSPORTS` (a ``DOCKER_HOST`` scheme → an opener); a host
whose scheme has none goes to :class:`~sbx.seams.driver.SdkEngine`, which speaks what the
docker SDK speaks (tcp, tcp+TLS, ssh). Adding a transport is a class and an entry here.
``SBX_ENGINE_SOCKET=0`` sends a local engine's calls through the SDK too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from sbx.seams.driver import SdkEngine

DEFAULT_HOST: Final = "unix:///var/run/docker.sock"
SOCKET_SWITCH_ENV: Final = "SBX_ENGINE_SOCKET"  # "0": every engine call through the SDK

Credentials = Callable[[str], Mapping[str, str] | None]
Opener = Callable[[Mapping[str, str], str, Credentials], SdkEngine | None]


def _unix(env: Mapping[str, str], address: str, credentials: Credentials) -> SdkEngine | None:
    """sbx's own client on a local unix socket (None for an empty path: the SDK's answer)."""
    if not address or env.get(SOCKET_SWITCH_ENV) == "0":
        return None
    from sbx.seams.enginesocket import SocketEngine

    return SocketEngine(env, address, credentials)


TRANSPORTS: Final[Mapping[str, Opener]] = {"unix": _unix}


def open_engine(env: Mapping[str, str]) -> SdkEngine:
    """The engine ``env`` names (``DOCKER_HOST``, else the local socket), in the class of its
    transport."""
    host = env.get("DOCKER_HOST") or DEFAULT_HOST
    scheme, separator, address = host.partition("://")

    def credentials(registry: str) -> Mapping[str, str] | None:
        from sbx.seams.registry_auth import resolve

        found = resolve(registry, env)
        return None if found is None else found.auth_config()

    opener = TRANSPORTS.get(scheme) if separator else None
    engine = opener(env, address, credentials) if opener is not None else None
    return engine if engine is not None else SdkEngine(env, credentials)


__all__ = ["DEFAULT_HOST", "SOCKET_SWITCH_ENV", "TRANSPORTS", "open_engine"]
