"""The OS keyring behind ``sbx secret``, when there is one (the optional ``keyring`` extra).

:func:`detect` returns the keyring to use, or None for the 0600 file store:

1. the ``keyring`` package is not installed → None;
2. ``keyring.get_keyring()`` (which honours ``PYTHON_KEYRING_BACKEND`` and keyring's own config
   file) answers a backend that is not an OS keyring → None: ``fail`` and ``null`` (no keyring
   at all), and the ``keyrings.alt`` file backends, which keep values in a file with weaker
   guarantees than sbx's own store;
3. a chainer of backends → its first OS keyring, else None;
4. otherwise that backend (Secret Service, KWallet, macOS Keychain, Windows Credential Manager,
   or whatever keyring plug-in the user installed and configured).

Entries are stored under the keyring service ``sbx:<state-home hash>`` with the sbx service
name as the user name, so two state homes never share or overwrite each other's secrets.
Errors never carry a value: keyring exceptions are reported by type and backend name only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.paths import home_hash
from sbx.base.reasons import Reason

# Backends that are not an OS keyring: no keyring at all, or a file sbx's own store beats.
_NOT_A_KEYRING: Final = ("keyring.backends.fail", "keyring.backends.null", "keyrings.alt")
SERVICE_PREFIX: Final = "sbx:"


def backend_name(backend: Any) -> str:
    """``module.Class`` of a keyring backend (what the store records)."""
    cls = type(backend)
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_os_keyring(backend: Any) -> bool:
    name = backend_name(backend)
    if any(name == prefix or name.startswith(prefix + ".") for prefix in _NOT_A_KEYRING):
        return False
    try:
        return float(getattr(backend, "priority", 1)) > 0
    except Exception:  # a plug-in whose priority check fails is not usable
        return False


@dataclass(frozen=True)
class Keyring:
    """One OS keyring backend, addressed for one state home."""

    backend: Any = field(repr=False)
    namespace: str  # the keyring service: "sbx:<state-home hash>"

    @property
    def name(self) -> str:
        return str(getattr(type(self.backend), "name", None) or backend_name(self.backend))

    @property
    def backend_id(self) -> str:
        return backend_name(self.backend)

    def get(self, service: str) -> str | None:
        try:
            value = self.backend.get_password(self.namespace, service)
        except Exception as exc:  # any backend failure (plug-ins raise their own types)
            raise self._error("read", exc) from None
        return None if value is None else str(value)

    def set(self, service: str, value: str) -> None:
        try:
            self.backend.set_password(self.namespace, service, value)
        except Exception as exc:  # any backend failure (plug-ins raise their own types)
            raise self._error("write", exc) from None

    def delete(self, service: str) -> bool:
        """Remove the entry; False when there was none."""
        from keyring.errors import PasswordDeleteError

        try:
            self.backend.delete_password(self.namespace, service)
        except PasswordDeleteError:
            return False
        except Exception as exc:  # any backend failure (plug-ins raise their own types)
            raise self._error("delete", exc) from None
        return True

    def _error(self, action: str, exc: BaseException) -> SbxError:
        # The exception's text is never shown: a backend may quote what it was given.
        return SbxError(
            Reason.SECRET_STORE_UNSAFE,
            f"the OS keyring ({self.name}) refused to {action} a secret ({type(exc).__name__})",
            hint="Unlock the keyring (log in to the desktop session) and retry, or remove the "
                 "secret with `sbx secret rm SERVICE` and store it again.",
            details={"keyring": self.backend_id, "action": action})


def detect(state_home: Path) -> Keyring | None:
    """The OS keyring to store secrets in, or None (then the file store is used)."""
    try:
        import keyring
        import keyring.backends.chainer
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:  # a broken keyring configuration means: no keyring
        return None
    candidates = [backend]
    if isinstance(backend, keyring.backends.chainer.ChainerBackend):
        candidates = list(backend.backends)
    chosen = next((c for c in candidates if _is_os_keyring(c)), None)
    if chosen is None:
        return None
    return Keyring(chosen, SERVICE_PREFIX + home_hash(state_home))


def open_backend(backend_id: str, state_home: Path) -> Keyring | None:
    """The keyring a secret was stored in (by its recorded backend id), if it is still the
    one :func:`detect` finds; None otherwise."""
    found = detect(state_home)
    if found is None or found.backend_id != backend_id:
        return None
    return found


__all__ = ["SERVICE_PREFIX", "Keyring", "backend_name", "detect", "open_backend"]
