"""Registry credentials from the user's Docker configuration, resolved as the docker CLI does.

``$DOCKER_CONFIG/config.json``, else ``$HOME/.docker/config.json``; for a registry host:
``credHelpers[host]`` (run ``docker-credential-<helper> get``), else ``credsStore`` (the same),
else ``auths[host]`` (``auth`` = base64 ``user:password``, or ``username``/``password``;
``identitytoken`` is a refresh token). The environment is injected, never read globally.

Secrets are never logged or printed: errors name the host and the helper, never a value, and
:class:`Credentials` hides its fields from ``repr``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.errors import SbxError
from sbx.reasons import Reason

HELPER_TIMEOUT_S: Final = 30.0
MAX_CONFIG_BYTES: Final = 1024 * 1024
# What the docker CLI stores Docker Hub credentials under.
_HUB_KEYS: Final = ("https://index.docker.io/v1/", "index.docker.io", "docker.io")


@dataclass(frozen=True)
class Credentials:
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)

    def auth_config(self) -> dict[str, str]:
        """The docker SDK's ``auth_config`` (X-Registry-Auth) form."""
        if self.identity_token:
            return {"username": self.username, "identitytoken": self.identity_token}
        return {"username": self.username, "password": self.password}


def config_path(env: Mapping[str, str]) -> Path | None:
    directory = env.get("DOCKER_CONFIG")
    if directory:
        return Path(directory) / "config.json"
    home = env.get("HOME")
    return Path(home) / ".docker" / "config.json" if home else None


def _error(host: str, message: str, hint: str | None = None) -> SbxError:
    return SbxError(Reason.INVALID_ARGUMENT, f"registry credentials for {host}: {message}",
                    hint=hint)


def load_config(env: Mapping[str, str]) -> dict[str, Any]:
    path = config_path(env)
    if path is None or not path.is_file():
        return {}
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError("too large")
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        # The exception text could quote the file; name only the path and the kind.
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the Docker configuration {path} is unreadable ({type(exc).__name__})",
                       hint="Fix or move it, then retry.") from None
    return data if isinstance(data, dict) else {}


def _lookup(table: Any, host: str) -> Any:
    if not isinstance(table, Mapping):
        return None
    keys = _HUB_KEYS if host in _HUB_KEYS else (host,)
    for key in keys:
        if key in table:
            return table[key]
    for key, value in table.items():  # "https://host/v1/" style keys
        if isinstance(key, str) and key.split("://", 1)[-1].split("/", 1)[0] == host:
            return value
    return None


def resolve(host: str, env: Mapping[str, str]) -> Credentials | None:
    """The credentials for ``host`` (``name[:port]``), or None when there are none."""
    config = load_config(env)
    server = _HUB_KEYS[0] if host in _HUB_KEYS else host  # what the docker CLI asks helpers
    helper = _lookup(config.get("credHelpers"), host)
    if isinstance(helper, str) and helper:
        return run_helper(helper, server, env)
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        found = run_helper(store, server, env)
        if found is not None:
            return found
    entry = _lookup(config.get("auths"), host)
    if not isinstance(entry, Mapping):
        return None
    return _from_auths(host, entry)


def _from_auths(host: str, entry: Mapping[str, Any]) -> Credentials | None:
    username = str(entry.get("username") or "")
    password = str(entry.get("password") or "")
    token = str(entry.get("identitytoken") or "")
    encoded = entry.get("auth")
    if isinstance(encoded, str) and encoded:
        try:
            decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise _error(host, "the auths entry in the Docker configuration is not valid "
                               "base64 user:password") from None
        user, sep, secret = decoded.partition(":")
        if not sep:
            raise _error(host, "the auths entry in the Docker configuration is not "
                               "user:password")
        username, password = user, secret
    if not (username or password or token):
        return None
    return Credentials(username, password, token)


def run_helper(helper: str, host: str, env: Mapping[str, str]) -> Credentials | None:
    """``docker-credential-<helper> get`` with the host on stdin; None when it has none."""
    name = f"docker-credential-{helper}"
    if os.sep in helper or not helper.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise _error(host, f"the credential helper name {helper!r} is not valid")
    binary = shutil.which(name, path=env.get("PATH", os.defpath))
    if binary is None:
        raise _error(host, f"the credential helper {name} is not on PATH",
                     hint=f"Install {name} or remove it from the Docker configuration.")
    try:
        completed = subprocess.run([binary, "get"], input=host.encode("utf-8"),
                                   capture_output=True, timeout=HELPER_TIMEOUT_S,
                                   env=dict(env), check=False)
    except subprocess.TimeoutExpired:
        raise _error(host, f"{name} did not answer within {HELPER_TIMEOUT_S:.0f}s") from None
    except OSError as exc:
        raise _error(host, f"{name} could not run ({type(exc).__name__})") from None
    if completed.returncode != 0:
        # The docker CLI treats "credentials not found" as anonymous access.
        if b"credentials not found" in completed.stdout + completed.stderr:
            return None
        raise _error(host, f"{name} failed (exit {completed.returncode})")
    try:
        data = json.loads(completed.stdout)
        username = str(data.get("Username") or "")
        secret = str(data.get("Secret") or "")
    except (ValueError, AttributeError):
        raise _error(host, f"{name} answered something other than a JSON credential") from None
    if not secret:
        return None
    if username == "<token>":  # the docker CLI's marker for an identity token
        return Credentials("", "", secret)
    return Credentials(username, secret)


__all__ = ["Credentials", "config_path", "load_config", "resolve", "run_helper"]
