"""`sbx kit validate DIR|REF`: the strict loader's verdict on one kit, as data.

Never a second validator: the reference resolves as ``sbx run`` resolves it
(:func:`sbx.domain.kits.reference.find_kit`: a path, a kit pinned in the lock, a bundled short
name) and loads through the same strict loader (decode, schema and rules, recipe checks); any
other registry reference goes through one manifest
GET and :func:`sbx.usecases.pull.preflight` (the published-form checks of ``sbx pull``; nothing is
pulled or pinned). The result is Docker sbx's shape, ``{reference, kind, valid, errors,
warnings}``; ``errors`` are the diagnostics (dotted path, message, file, line, column).

Warnings name what the kit asks for that this sbx will not give it (capabilities it skips or
refuses at run time) and spellings kept only for compatibility.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.reference import RegistryReference, find_kit
from sbx.domain.kits.selection import select
from sbx.domain.sandbox.capabilities import SUPPORTED
from sbx.seams import registry
from sbx.usecases.pull import preflight


@dataclass(frozen=True)
class KitValidation:
    reference: str
    kind: str | None
    valid: bool
    errors: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    source: str = "local"  # local | locked | registry
    descriptor: str | None = None  # the descriptor file, or where it was read from
    body: str | None = None  # the positioned diagnostics, rendered for people

    def as_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "kind": self.kind, "valid": self.valid,
                "errors": [dict(e) for e in self.errors], "warnings": list(self.warnings),
                "source": self.source, "descriptor": self.descriptor}


def validate_kit(reference: str, *, cwd: Path, state_home: Path,
                 env: Mapping[str, str]) -> KitValidation:
    """Validate one kit; an invalid one is a result (``valid`` false), not an exception.

    Raises only when there is nothing to validate (no such directory, an unreachable
    registry), as ``sbx run`` would."""
    source = "local"
    try:
        # Resolved as `sbx run` resolves it (a path, a pinned kit, a bundled short name); only
        # a registry reference the lock does not pin is asked of its registry.
        found = find_kit(reference, cwd=cwd, lock_home=state_home)
        if isinstance(found, RegistryReference):
            return _validate_remote(reference, env)
        kit = found
        if kit.image is not None:
            source = "locked"
    except KitError as error:
        return _invalid(reference, error, source)
    data = kit.descriptor.data
    errors: list[Mapping[str, Any]] = []
    if kit.descriptor.kind == "workload" and kit.dockerfile_text is None and kit.image is None:
        errors.append({"path": "", "file": kit.descriptor.file, "line": 0, "col": 0,
                       "message": f"a workload must have content: add {kit.stem}.dockerfile, "
                                  "`dockerfile:` or `build:`"})
    return KitValidation(reference, kit.descriptor.kind, not errors, tuple(errors),
                         tuple(warnings(reference, data)), source, kit.descriptor.file,
                         "\n".join(f"{e['file']}: {e['message']}" for e in errors) or None)


def _validate_remote(reference: str, env: Mapping[str, str]) -> KitValidation:
    try:
        ref = registry.parse_reference(reference)
    except SbxError:
        raise SbxError(Reason.IMAGE_MISSING,
                       f"{reference!r} is neither a local kit directory, a pulled kit nor a "
                       "registry reference",
                       hint="Name a kit directory, or a registry reference such as "
                            "docker/sbx-kit-x:1.") from None
    manifest = registry.fetch_kit_manifest(ref, env=env)
    if manifest.descriptor_text is None:
        raise SbxError(Reason.INVALID_KIT,
                       f"{ref.canonical} is an image without a kit descriptor (no "
                       "vnd.docker.sandbox.kit.descriptor annotation)",
                       hint="Name a kit, or run the image as the FROM of a local kit.")
    try:
        found = preflight(reference, manifest)
    except KitError as error:
        return _invalid(reference, error, "registry")
    import json

    data = json.loads(manifest.descriptor_text)
    kind = found[0] if found else None
    return KitValidation(reference, kind, True, (), tuple(warnings(reference, data)),
                         "registry", f"{ref.canonical}@{manifest.digest}")


def _invalid(reference: str, error: KitError, source: str) -> KitValidation:
    diagnostics = error.details.get("diagnostics") or [
        {"path": "", "message": error.message, "file": reference, "line": 0, "col": 0}]
    kind = None
    return KitValidation(reference, kind, False, tuple(diagnostics), (), source, None,
                         error.body or error.message)


def warnings(reference: str, data: Mapping[str, Any]) -> list[str]:
    """What a valid kit asks for that this sbx will not give it, and legacy spellings."""
    out: list[str] = []
    if data.get("kind") == "sandbox":
        out.append("kind: `sandbox` is the old spelling of `workload`")
    capabilities: Sequence[Mapping[str, Any]] = [
        c for c in data.get("capabilities") or [] if isinstance(c, Mapping)]
    selection = select(reference, capabilities, SUPPORTED)
    for record in selection.skipped:
        out.append(f"{record.path} ({record.type}) is optional and {record.reason}: "
                   "`sbx run` skips it")
    for record in selection.refused:
        kinds = ", ".join(record.rejected_types) if record.type == "group" else record.type
        out.append(f"{record.path} ({kinds}) is required and not implemented by this sbx: "
                   "`sbx run` refuses the kit (unsupported_capability)")
    return out


__all__ = ["KitValidation", "validate_kit", "warnings"]
