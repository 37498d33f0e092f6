"""The egress proxy config's one error and the readers that validate each field of its JSON
(unknown keys refused, every type checked), shared by the config and its credential specs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.compose import PHASES, Phase


class ProxyConfigError(SbxError):
    def __init__(self, message: str) -> None:
        super().__init__(Reason.PROXY_FAILED, f"invalid egress proxy config: {message}",
                         hint="The file is written by `sbx run`; re-run it rather than editing.")


def has_controls(text: str) -> bool:
    return any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text)


def check_keys(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ProxyConfigError(f"unknown key {unknown[0]!r} in {what}")


def as_map(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProxyConfigError(f"{what} must be an object")
    return value


_MISSING: Final = object()


def read_str(data: Mapping[str, Any], key: str, default: Any = _MISSING) -> str:
    value = data.get(key, default)
    if value is _MISSING:
        raise ProxyConfigError(f"{key} is required")
    if not isinstance(value, str):
        raise ProxyConfigError(f"{key} must be a string")
    return value


def read_opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProxyConfigError(f"{key} must be a string or null")
    return value


def read_int(data: Mapping[str, Any], key: str, default: Any = _MISSING) -> int:
    value = data.get(key, default)
    if value is _MISSING:
        raise ProxyConfigError(f"{key} is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProxyConfigError(f"{key} must be an integer")
    return value


def read_bool(data: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ProxyConfigError(f"{key} must be true or false")
    return value


def read_strs(data: Mapping[str, Any], key: str) -> Sequence[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProxyConfigError(f"{key} must be a list of strings")
    return value


def read_phase(value: Any) -> Phase:
    if value not in PHASES:
        raise ProxyConfigError(f"phase {value!r} is not install or runtime")
    return cast(Phase, value)
