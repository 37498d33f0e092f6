"""Which engine the environment names, read as the docker CLI reads it but without running it.

Order: ``DOCKER_HOST`` (with ``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH``); else the context
``DOCKER_CONTEXT`` names; else the ``currentContext`` of ``$DOCKER_CONFIG/config.json``
(``~/.docker``); else the local socket. A context other than ``default`` is read from its
metadata file (``contexts/meta/<sha256 of the name>/meta.json``) and its TLS files
(``contexts/tls/<sha256>/docker/``). A context that is named but cannot be read is refused,
never replaced by the local engine.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

DEFAULT_HOST: Final = "unix:///var/run/docker.sock"
# Set beside DOCKER_HOST when sbx points a command at one of its [engines]: messages name it.
ENGINE_NAME_ENV: Final = "SBX_ENGINE_NAME"
MAX_META_BYTES: Final = 1024 * 1024


@dataclass(frozen=True)
class TlsFiles:
    """The client's TLS material: the CA to verify the engine with, and a client pair."""

    ca: Path | None
    cert: Path | None
    key: Path | None
    verify: bool


@dataclass(frozen=True)
class EngineEndpoint:
    host: str  # DOCKER_HOST form: unix:///path, ssh://[user@]host[:port], tcp://host:port
    source: str  # where it came from, for messages: "DOCKER_HOST", "context NAME", "default"
    tls: TlsFiles | None = None

    @property
    def scheme(self) -> str:
        return self.host.partition("://")[0] if "://" in self.host else ""

    @property
    def address(self) -> str:
        return self.host.partition("://")[2]


def docker_config_dir(env: Mapping[str, str]) -> Path:
    configured = env.get("DOCKER_CONFIG")
    if configured:
        return Path(configured)
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".docker"


def resolve_endpoint(env: Mapping[str, str]) -> EngineEndpoint:
    """The engine ``env`` names (see the module's docstring for the order)."""
    host = env.get("DOCKER_HOST", "")
    if host:
        named = env.get(ENGINE_NAME_ENV)
        return EngineEndpoint(host, f"engine {named}" if named else "DOCKER_HOST", _env_tls(env))
    config_dir = docker_config_dir(env)
    name, source = env.get("DOCKER_CONTEXT", ""), "DOCKER_CONTEXT"
    if not name:
        name, source = _current_context(config_dir), f"{config_dir / 'config.json'}"
    if not name or name == "default":
        return EngineEndpoint(DEFAULT_HOST, "default")
    return _context(config_dir, name, source)


def _env_tls(env: Mapping[str, str]) -> TlsFiles | None:
    """DOCKER_TLS_VERIFY (any non-empty value, as docker reads it) with DOCKER_CERT_PATH."""
    if not env.get("DOCKER_TLS_VERIFY"):
        return None
    directory = Path(env.get("DOCKER_CERT_PATH") or docker_config_dir(env))
    ca, cert, key = (_present(directory / name) for name in ("ca.pem", "cert.pem", "key.pem"))
    return TlsFiles(ca, cert, key, verify=True)


def _present(path: Path) -> Path | None:
    return path if path.is_file() else None


def _current_context(config_dir: Path) -> str:
    path = config_dir / "config.json"
    try:
        data = json.loads(_read_small(path))
    except FileNotFoundError:
        return ""
    except (OSError, ValueError) as exc:
        raise _context_error(f"cannot read {path}: {exc}", "the docker config file") from None
    name = data.get("currentContext", "") if isinstance(data, dict) else ""
    return name if isinstance(name, str) else ""


def _context(config_dir: Path, name: str, source: str) -> EngineEndpoint:
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = config_dir / "contexts" / "meta" / digest / "meta.json"
    try:
        data = json.loads(_read_small(meta))
    except FileNotFoundError:
        raise _context_error(f"the docker context {name!r} (from {source}) does not exist "
                             f"({meta} is missing)", name) from None
    except (OSError, ValueError) as exc:
        raise _context_error(f"the docker context {name!r}: cannot read {meta}: {exc}",
                             name) from None
    endpoint = ((data.get("Endpoints") or {}).get("docker") or {}) if isinstance(data, dict) \
        else {}
    host = endpoint.get("Host") if isinstance(endpoint, dict) else None
    if not isinstance(host, str) or not host:
        raise _context_error(f"the docker context {name!r} names no docker endpoint ({meta})",
                             name)
    tls_dir = config_dir / "contexts" / "tls" / digest / "docker"
    ca, cert, key = (_present(tls_dir / f) for f in ("ca.pem", "cert.pem", "key.pem"))
    skip = bool(endpoint.get("SkipTLSVerify"))
    tls = TlsFiles(ca, cert, key, verify=not skip) if ca or cert or key or skip else None
    return EngineEndpoint(host, f"context {name}", tls)


def _read_small(path: Path) -> bytes:
    with path.open("rb") as handle:
        data = handle.read(MAX_META_BYTES + 1)
    if len(data) > MAX_META_BYTES:
        raise ValueError(f"larger than {MAX_META_BYTES} bytes")
    return data


def _context_error(message: str, name: str) -> SbxError:
    return SbxError(Reason.DOCKER_UNREACHABLE, message,
                    hint=f"List the contexts with `docker context ls`; or pick one with "
                         f"`export DOCKER_CONTEXT=NAME` (now {name!r}), or set DOCKER_HOST.")


@dataclass(frozen=True)
class SshTarget:
    user: str | None
    host: str
    port: int | None

    @property
    def login(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def command(self, *words: str) -> str:
        """The ssh command that does ``words`` on this host, to paste."""
        port = f"-p {self.port} " if self.port else ""
        return f"ssh {port}{self.login} {' '.join(words)}".rstrip()


def ssh_target(address: str) -> SshTarget:
    """``[user@]host[:port]`` of an ``ssh://`` host; ValueError for anything else (a path,
    a query, an option-like host)."""
    parsed = urllib.parse.urlsplit("ssh://" + address)
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment or parsed.password:
        raise ValueError("an ssh:// engine host is [user@]host[:port], nothing else")
    host = parsed.hostname or ""
    if not host or host.startswith("-"):
        raise ValueError("an ssh:// engine host needs a host name")
    try:
        port = parsed.port
    except ValueError as exc:
        raise ValueError(f"not a port: {exc}") from None
    user = urllib.parse.unquote(parsed.username) if parsed.username else None
    if user is not None and (not user or user.startswith("-")):
        raise ValueError("not a user name")
    return SshTarget(user, host, port)


def tcp_target(address: str, *, tls: bool) -> tuple[str, int]:
    """(host, port) of a ``tcp://`` host; docker's default ports (2376 with TLS, else 2375)."""
    parsed = urllib.parse.urlsplit("tcp://" + address)
    if parsed.path not in ("", "/") or parsed.query or not parsed.hostname:
        raise ValueError("a tcp:// engine host is host[:port]")
    return parsed.hostname, parsed.port or (2376 if tls else 2375)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["DEFAULT_HOST", "ENGINE_NAME_ENV", "EngineEndpoint", "SshTarget", "TlsFiles",
           "docker_config_dir", "is_loopback", "resolve_endpoint", "ssh_target", "tcp_target"]
