"""Readers of decoded JSON that accept exactly one type each: a stored file someone edited
(or a damaged one) fails with TypeError, never passes a wrong type on."""

from __future__ import annotations

from typing import Any


def as_list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("expected a list")
    return value


def as_str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def as_int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("expected an integer")
    return value


def as_number(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError("expected a number")
    return float(value)


def as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected a boolean")
    return value


def as_opt_str(value: object) -> str | None:
    return None if value is None else as_str(value)


def as_opt_bool(value: object) -> bool | None:
    return None if value is None else as_bool(value)


def as_strs(value: object) -> list[str]:
    if not isinstance(value, list):
        raise TypeError("expected a list")
    return [as_str(v) for v in value]


def as_opt_strs(value: object) -> tuple[str, ...] | None:
    return None if value is None else tuple(as_strs(value))


def as_str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    return {as_str(k): as_str(v) for k, v in value.items()}


__all__ = ["as_bool", "as_int", "as_list", "as_number", "as_opt_bool", "as_opt_str", "as_opt_strs",
           "as_str", "as_str_map", "as_strs"]
