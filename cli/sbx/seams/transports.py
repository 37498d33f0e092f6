"""Where the engine is opened: one connector per kind of host, chosen once.

The engine the environment names (:func:`sbx.seams.enginehost.resolve_endpoint`: DOCKER_HOST,
DOCKER_CONTEXT, docker's current context, else the local socket) is reached through the
connector of its scheme in :data:`TRANSPORTS`, and spoken to by one client class,
:class:`~sbx.seams.enginesocket.SocketEngine` (its own HTTP/1.1 for the hot path, the SDK over
the same connector for the rest). Adding a transport is a connector and an entry here.
``SBX_ENGINE_SOCKET=0`` sends a local engine's calls through the SDK's own transport instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from sbx.base.deferred import deferred
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import registry_auth
from sbx.seams.connectors import Connector, SshConnector, TcpConnector, UnixConnector, ssh_share_dir
from sbx.seams.driver import SdkEngine
from sbx.seams.enginehost import (
    DEFAULT_HOST,
    EngineEndpoint,
    is_loopback,
    resolve_endpoint,
    ssh_target,
    tcp_target,
)
from sbx.seams.enginesocket import SocketEngine

if TYPE_CHECKING:
    from sbx.seams import tlsrelay
else:  # imported on first use: ssl for a TLS engine, docker's credential files for a pull
    tlsrelay = deferred("sbx.seams.tlsrelay")

SOCKET_SWITCH_ENV: Final = "SBX_ENGINE_SOCKET"  # "0": a local engine's calls through the SDK
PLAIN_TCP_ENV: Final = "SBX_ENGINE_PLAIN_TCP"  # "allow": plain tcp to a host not this one

Credentials = Callable[[str], Mapping[str, str] | None]
Opener = Callable[[Mapping[str, str], EngineEndpoint], Connector]


def _unix(env: Mapping[str, str], endpoint: EngineEndpoint) -> Connector:
    return UnixConnector(endpoint.address)


def _ssh(env: Mapping[str, str], endpoint: EngineEndpoint) -> Connector:
    try:
        target = ssh_target(endpoint.address)
    except ValueError as exc:
        raise _bad_host(endpoint, str(exc)) from None
    return SshConnector(target, share_dir=ssh_share_dir(env))


def _tcp(env: Mapping[str, str], endpoint: EngineEndpoint) -> Connector:
    tls = endpoint.tls
    try:
        host, port = tcp_target(endpoint.address, tls=tls is not None)
    except ValueError as exc:
        raise _bad_host(endpoint, str(exc)) from None
    local = is_loopback(host)
    if tls is not None:
        if not tls.verify:
            raise SbxError(
                Reason.ENGINE_PLAIN_TCP,
                f"{endpoint.source} names {endpoint.host} with TLS verification skipped: "
                "anyone on the path could pose as the engine",
                hint="Give the context the engine's CA (`docker context update NAME --docker "
                     "host=...,ca=CA.pem,cert=CERT.pem,key=KEY.pem`), or use ssh://.")
        try:
            return tlsrelay.TlsConnector(host, port, tls, local=local)
        except (OSError, ValueError) as exc:
            raise SbxError(Reason.DOCKER_UNREACHABLE,
                           f"cannot use the TLS files for {endpoint.host}: {exc}",
                           hint="Point DOCKER_CERT_PATH at a directory with ca.pem, cert.pem "
                                "and key.pem (`ls \"$DOCKER_CERT_PATH\"`).") from None
    if not local and env.get(PLAIN_TCP_ENV) != "allow":
        raise SbxError(
            Reason.ENGINE_PLAIN_TCP,
            f"{endpoint.source} names {endpoint.host}: plain tcp to another host, unencrypted "
            "and unauthenticated (whoever reaches that port owns the engine, and anyone on "
            "the path sees and changes every call)",
            hint="Use TLS (`export DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=DIR`), or "
                 f"ssh://USER@{host}; to accept the risk: `export {PLAIN_TCP_ENV}=allow`.")
    return TcpConnector(host, port, local=local)


TRANSPORTS: Final[Mapping[str, Opener]] = {"unix": _unix, "ssh": _ssh, "tcp": _tcp}


def _bad_host(endpoint: EngineEndpoint, why: str) -> SbxError:
    return SbxError(Reason.DOCKER_UNREACHABLE,
                    f"{endpoint.source} names {endpoint.host!r}, which sbx cannot use: {why}",
                    hint="Use unix:///PATH, ssh://[USER@]HOST[:PORT] or tcp://HOST:PORT "
                         "(`unset DOCKER_HOST` for the local engine).")


def open_engine(env: Mapping[str, str]) -> SdkEngine:
    """The engine ``env`` names, behind the connector of its transport."""
    endpoint = resolve_endpoint(env)

    def credentials(registry: str) -> Mapping[str, str] | None:
        found = registry_auth.resolve(registry, env)
        return None if found is None else found.auth_config()

    if endpoint.scheme == "unix" and (not endpoint.address or env.get(SOCKET_SWITCH_ENV) == "0"):
        named = {**env, "DOCKER_HOST": endpoint.host} if endpoint.address else env
        return SdkEngine(named, credentials)
    opener = TRANSPORTS.get(endpoint.scheme)
    if opener is None:
        raise _bad_host(endpoint, f"no transport for {endpoint.scheme or 'it'}")
    return SocketEngine(env, opener(env, endpoint), credentials)


__all__ = ["DEFAULT_HOST", "PLAIN_TCP_ENV", "SOCKET_SWITCH_ENV", "TRANSPORTS", "open_engine"]
