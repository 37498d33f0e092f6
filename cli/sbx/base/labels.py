"""Labels on everything sbx creates (SPEC §7). gc and tests find objects by these, never by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from sbx import __version__

PREFIX: Final = "dev.sbx"
MANAGED: Final = f"{PREFIX}.managed"
HOME: Final = f"{PREFIX}.home"
RUN: Final = f"{PREFIX}.run"
DEADLINE: Final = f"{PREFIX}.deadline"
KITS: Final = f"{PREFIX}.kits"
VERSION: Final = f"{PREFIX}.version"
ROLE: Final = f"{PREFIX}.role"
NAME: Final = f"{PREFIX}.name"  # on everything a named sandbox owns
TEMPLATE: Final = f"{PREFIX}.template"  # "1" on a template `sbx save` made: user data

# Roles: the sandbox itself, and short-lived helper containers (reading a file out of an image,
# doctor's limit probe) that are removed right after use.
ROLE_SANDBOX: Final = "sandbox"
ROLE_HELPER: Final = "helper"
ROLE_PROXY: Final = "proxy"  # a run's egress proxy in a container beside its sandbox
ROLE_RUNTIME: Final = "runtime"  # the image of sbx's own programs (sbx.usecases.runtimeimage)


def home_selector(home_hash: str) -> dict[str, str]:
    """The label filter selecting everything one state home owns."""
    return {MANAGED: "true", HOME: home_hash}


def object_labels(*, home_hash: str, run_id: str, deadline: int, kits: Sequence[str],
                  role: str) -> dict[str, str]:
    return {
        MANAGED: "true",
        HOME: home_hash,
        RUN: run_id,
        DEADLINE: str(deadline),
        KITS: ",".join(kits),
        VERSION: __version__,
        ROLE: role,
    }


def own_labels(image_labels: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` for a container (or a commit) made from an image labelled ``image_labels``.

    The engine merges an image's labels into its containers' and offers no way to drop one, so
    a kit image's ``LABEL dev.sbx.name=X`` would make its one-shot runs look like sandbox X's.
    Every ``dev.sbx.*`` label of the image that sbx does not set itself is therefore set
    empty, and readers take an empty sbx label as absent (:func:`value`).
    """
    shadowed = {key: "" for key in image_labels
                if key.startswith(f"{PREFIX}.") and key not in labels}
    return {**shadowed, **labels}


def value(labels: Mapping[str, str], key: str) -> str | None:
    """A label's value; None when missing or empty (an image's label sbx shadowed)."""
    found = labels.get(key)
    return found or None


def deadline_of(labels: Mapping[str, str]) -> int | None:
    """The deadline as unix seconds, or None when missing or unreadable (never guessed)."""
    raw = labels.get(DEADLINE, "")
    return int(raw) if raw.isdigit() else None


__all__ = ["DEADLINE", "HOME", "KITS", "MANAGED", "NAME", "PREFIX", "ROLE", "ROLE_HELPER",
           "ROLE_PROXY", "ROLE_RUNTIME", "ROLE_SANDBOX", "RUN", "TEMPLATE", "VERSION",
           "deadline_of", "home_selector", "object_labels", "own_labels", "value"]
