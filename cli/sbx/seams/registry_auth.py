"""Registry credentials from the user's Docker configuration, resolved by the docker SDK itself.

The config file is ``$DOCKER_CONFIG/config.json``, else ``$HOME/.docker/config.json`` (from
the injected environment). Reading it, choosing ``credHelpers[host]`` / ``credsStore`` /
``auths[host]`` and speaking the ``docker-credential-<helper> get`` protocol are the docker
SDK's own code (``docker.auth``, ``docker.credentials``), reached through
:func:`sbx.seams.driver.docker_auth_config` because only the driver imports ``docker``. sbx adds
only
what the SDK leaves out: a helper name that could escape ``PATH`` is refused before anything
runs, and every failure names the host and the helper, never a value (the SDK's messages can
quote a helper's output, so they are not passed on). As with the SDK and the docker CLI, the
helper is looked up on the process's ``PATH`` and runs with the injected environment.

:class:`Credentials` hides its fields from ``repr``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

DOCKER_HUB: Final = "docker.io"
_HELPER_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


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


def resolve(host: str, env: Mapping[str, str]) -> Credentials | None:
    """The credentials for ``host`` (``name[:port]``; ``docker.io`` for Docker Hub), or None
    when there are none (anonymous access)."""
    path = config_path(env)
    # Checked here: given a missing file, the SDK would fall back to the process's own
    # DOCKER_CONFIG and home, which are not the injected environment's.
    if path is None or not path.is_file() or _names_nothing_for(host, path):
        return None
    # Deferred: the docker SDK's reading (and the driver package with it) only when the config
    # may name credentials for this host; an anonymous pull never loads it.
    from sbx.seams.driver import registry_credentials

    helper = registry_credentials.docker_credential_store(host, path)
    if helper is not None:
        if not _HELPER_NAME.fullmatch(helper):
            raise _error(host, f"the credential helper name {helper!r} is not valid")
        if shutil.which(f"docker-credential-{helper}") is None:
            raise _error(host, f"the credential helper docker-credential-{helper} is not on "
                               "PATH",
                         hint=f"Install docker-credential-{helper} or remove it from the Docker "
                              "configuration.")
    try:
        found = registry_credentials.docker_auth_config(host, path, env)
    except ValueError:
        raise _error(host, f"an auths entry in the Docker configuration {path} is not valid "
                           "base64 user:password", hint="Fix or remove it (docker login "
                                                        "again), then retry.") from None
    except TimeoutError:
        raise SbxError(Reason.COMMAND_TIMEOUT,
                       f"registry credentials for {host}: the credential helper "
                       f"docker-credential-{helper} did not finish within "
                       f"{registry_credentials.HELPER_TIMEOUT_S:g}s; it was ended with everything "
                       "it started",
                       hint=f"Run `echo {host} | docker-credential-{helper} get` yourself to "
                            "see why it hangs (a prompt, a locked keychain).") from None
    except LookupError:
        raise _error(host, f"the credential helper docker-credential-{helper} failed",
                     hint=f"Run `docker-credential-{helper} list` to check it, or docker "
                          "login again.") from None
    return _credentials(found)


_HUB_NAMES: Final = frozenset({"docker.io", "index.docker.io"})


def _names_nothing_for(host: str, path: Path) -> bool:
    """True when the config surely holds nothing for ``host``, so the SDK (and with it
    requests) need not be imported to say so: no ``credsStore``, no ``credHelpers``, and no
    ``auths`` key naming ``host`` as the SDK matches them (``resolve_index_name``: scheme and
    path stripped, ``index.docker.io`` = ``docker.io``). Anything else — an unreadable file, a
    helper — is the SDK's to read."""
    import json

    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or data.get("credsStore") or data.get("credHelpers"):
        return False
    # Without an `auths` section the SDK reads the whole file as one (the old format).
    auths = data.get("auths") or data
    if not isinstance(auths, dict):
        return False
    wanted = _index_name(host)
    return all(isinstance(key, str) and _index_name(key) != wanted for key in auths)


def _index_name(name: str) -> str:
    hostname = name.replace("http://", "").replace("https://", "").split("/", 1)[0]
    return "docker.io" if hostname in _HUB_NAMES else hostname


def _credentials(found: Mapping[str, Any] | None) -> Credentials | None:
    """The SDK's answer (auths: ``username``/``password``/``IdentityToken``; a helper:
    ``Username``/``Password``/``IdentityToken``) as :class:`Credentials`."""
    if not found:
        return None
    username = str(found.get("username") or found.get("Username") or "")
    password = str(found.get("password") or found.get("Password") or "")
    token = str(found.get("IdentityToken") or found.get("identitytoken") or "")
    if not (username or password or token):
        return None
    return Credentials(username, password, token)


__all__ = ["DOCKER_HUB", "Credentials", "config_path", "resolve"]
