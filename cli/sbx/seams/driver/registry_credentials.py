"""The user's registry credentials as docker's own configuration names them (its config file and
credential helpers), read through the docker SDK; :mod:`sbx.seams.registry_auth` decides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sbx.seams.host import processes

if TYPE_CHECKING:
    from pathlib import Path




def docker_auth_config(registry: str, config_file: Path,
                       env: Mapping[str, str]) -> dict[str, Any] | None:
    """The docker SDK's own resolution of ``registry``'s credentials from ``config_file``
    (``docker.auth``: ``credHelpers``, ``credsStore`` through ``docker.credentials``' helper
    protocol, then ``auths``), or None for anonymous access.

    The helper runs with ``env`` over the process environment and, as in the SDK and the
    docker CLI, is looked up on the process's PATH. Errors are :class:`ValueError` (an
    unreadable ``auths`` entry) or :class:`LookupError` (the named helper failed), carrying
    no text from the file or the helper, which may hold secrets.
    """
    import warnings

    from docker import auth, credentials
    from docker.errors import DockerException

    try:
        config = auth.load_config(config_path=str(config_file), credstore_env=dict(env))
    except (ValueError, TypeError, DockerException) as exc:
        raise ValueError(type(exc).__name__) from None
    store = None
    try:
        with warnings.catch_warnings():
            # The SDK warns when a helper is not on PATH; the caller reports that itself.
            warnings.simplefilter("ignore")
            store = config.get_credential_store(registry)
            if store:
                # The SDK's helper protocol, with the helper run as every host command is.
                internals: Any = config  # its store cache, as _get_store_instance fills it
                internals._stores[store] = _helper_store(store, internals._credstore_env)
            found = config.resolve_authconfig(registry)
    except _HelperTimeout:
        raise TimeoutError(f"docker-credential-{store}") from None
    except (DockerException, credentials.StoreError, ValueError, KeyError) as exc:
        raise LookupError(type(exc).__name__) from None
    return dict(found) if found else None


HELPER_TIMEOUT_S = 30.0


class _HelperTimeout(Exception):
    """A credential helper did not finish in time (it and what it started were ended)."""


def _helper_store(name: str, environment: Any) -> Any:
    """docker's ``credentials.Store`` for helper ``name``, its helper run in a session of its
    own with a deadline (sbx.seams.host.processes): a hanging helper cannot hang sbx, nor leave
    anything running, and what it prints on stderr never reaches the terminal."""
    from docker import credentials
    from docker.credentials import utils

    environment_of: Any = utils.create_environment_dict  # untyped in the SDK

    class _Store(credentials.Store):
        def _execute(self, subcmd: str, data_input: bytes | None) -> bytes:
            if self.exe is None:
                raise credentials.StoreError(f"{self.program} not installed or not available "
                                             "in PATH")
            try:
                done = processes.run([self.exe, subcmd], timeout=HELPER_TIMEOUT_S,
                                    input_data=data_input or b"",
                                    env=environment_of(self.environment))
            except processes.CommandTimeout:
                raise _HelperTimeout(self.program) from None
            except OSError as exc:
                raise credentials.StoreError(f"{self.program} could not run "
                                             f"({exc.strerror})") from None
            if done.returncode != 0:
                failed = processes.CalledProcessError(done.returncode, [self.exe, subcmd],
                                                       done.stdout)
                raise credentials.errors.process_store_error(failed, self.program)
            return done.stdout

    return _Store(name, environment=environment)


def docker_credential_store(registry: str, config_file: Path) -> str | None:
    """The credential helper the Docker config names for ``registry`` (``credHelpers``, else
    ``credsStore``), as the SDK chooses it; None when it names none."""
    from docker import auth
    from docker.errors import DockerException

    try:
        config = auth.load_config(config_path=str(config_file))
    except (ValueError, TypeError, DockerException):  # reported by docker_auth_config
        return None
    store = config.get_credential_store(registry)
    return str(store) if store else None


__all__ = ["HELPER_TIMEOUT_S", "docker_auth_config", "docker_credential_store"]
