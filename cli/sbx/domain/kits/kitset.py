"""The kit stage of a run: load, expand args, select, resolve — then, once the image's
environment is known, the effective descriptors and their composition.

Order (KIT-SPEC-V3 §1.9): strict decode → create-phase arg expansion → selection (refusals by
type name, before anything is built) → resolution (coherence, before anything is built) → …
images are built and assembled … → ``${{ kit.env.* }}`` expansion against the final container
environment → strict validation of the effective form → composition. Every stage collects all of
its problems across all kits before failing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.args import (
    ExpandedKit,
    declarations,
    expand,
    parse_arg_assignments,
    validate_effective,
)
from sbx.domain.kits.compose import Composition, Contribution, compose
from sbx.domain.kits.kitsets import apply_pins, expand_sets
from sbx.domain.kits.localkit import LocalKit
from sbx.domain.kits.reference import load_kit
from sbx.domain.kits.resolve import KitInput, Resolution, resolve
from sbx.domain.kits.rules import check_selected, parse_path
from sbx.domain.kits.schema import validation_fingerprint
from sbx.domain.kits.selection import Selection, refuse_unsupported, select
from sbx.seams import owned
from sbx.seams.host import lookup


@dataclass(frozen=True)
class LoadedKit:
    local: LocalKit
    supplied: Mapping[str, str]  # the --arg values this kit declares
    expanded: ExpandedKit  # args expanded; kit.env references still pending
    selection: Selection

    @property
    def reference(self) -> str:
        return self.local.reference


@dataclass(frozen=True)
class KitSet:
    kits: tuple[LoadedKit, ...]  # layer order: the workload, then mixins in dependency order
    resolution: Resolution

    @property
    def workload(self) -> LoadedKit:
        return self.kits[0]

    @property
    def mixins(self) -> tuple[LoadedKit, ...]:
        return self.kits[1:]

    def by_reference(self, reference: str) -> LoadedKit:
        return next(k for k in self.kits if k.reference == reference)

    @property
    def env_exports(self) -> dict[str, str]:
        """Arg ``env:`` exports of every kit, in dependency order (later wins)."""
        exports: dict[str, str] = {}
        for kit in self.resolution.topological:
            exports.update(self.by_reference(kit.reference).expanded.env_exports)
        return exports

    def selection_records(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {"selected": [], "skipped": []}
        for kit in self.kits:
            part = kit.selection.as_dict()
            out["selected"].extend(part["selected"])
            out["skipped"].extend(part["skipped"])
        return out


def load_kit_set(workload: str, mixins: Sequence[str], arg_items: Sequence[str], *,
                 cwd: Path, cache_dir: Path, supported: Collection[str],
                 lock_home: Path | None = None) -> KitSet:
    """Each reference resolves as :mod:`sbx.domain.kits.reference` says: a path, else (with
    ``lock_home``, the state home) a kit pinned in its lock at the locked digest, else a
    bundled agent's short name."""
    references = [workload, *mixins]
    supplied = parse_arg_assignments(arg_items)

    def load(ref: str) -> LocalKit:
        return load_kit(ref, cwd=cwd, cache_dir=cache_dir, lock_home=lock_home)

    members = expand_sets([load(ref) for ref in references], supplied, load)
    locals_ = [m.kit for m in members]
    _refuse_duplicates(locals_)
    per_kit = apply_pins(members, _split_args(locals_, supplied))
    expanded: list[ExpandedKit] = []
    problems: list[KitError] = []
    for local, values in zip(locals_, per_kit, strict=True):
        try:
            expanded.append(expand(local.descriptor, supplied=values, env=None,
                                   file=local.descriptor.file))
        except KitError as error:
            problems.append(error)
    if problems:
        raise _merge_kit_errors(problems)
    selections = [select(local.reference, list(e.data.get("capabilities") or []), supported)
                  for local, e in zip(locals_, expanded, strict=True)]
    refuse_unsupported(selections)
    resolution = resolve([KitInput.of(m.kit.reference, e.data, last_among_equals=m.own_of_set)
                          for m, e in zip(members, expanded, strict=True)])
    loaded = {local.reference: LoadedKit(local, values, e, s) for local, values, e, s
              in zip(locals_, per_kit, expanded, selections, strict=True)}
    return KitSet(tuple(loaded[k.reference] for k in resolution.ordered), resolution)


def effective_composition(kit_set: KitSet, final_env: Mapping[str, str],
                          supported: Collection[str], *, cache_dir: Path | None = None,
                          ) -> tuple[Composition, dict[str, Any]]:
    """Expand ``${{ kit.env.* }}``, validate strictly, select again, and compose.

    With ``cache_dir``, an effective descriptor that already passed strict validation under
    the same rules (same digest) is not validated again.
    """
    contributions: list[Contribution] = []
    effective: dict[str, Any] = {}
    problems: list[SbxError] = []
    for kit in kit_set.resolution.topological:
        loaded = kit_set.by_reference(kit.reference)
        try:
            data = expand(loaded.local.descriptor, supplied=loaded.supplied, env=final_env,
                          file=loaded.local.descriptor.file).data
            _validate_effective_cached(data, loaded.local.descriptor.file, cache_dir)
        except KitError as error:
            problems.append(error)
            continue
        effective[kit.reference] = data
        selection = select(kit.reference, list(data.get("capabilities") or []), supported)
        # Rules that groups defer until selection (arity, inject domains inside the same
        # phase's allow list) are checked on what was actually selected. Without groups the
        # parse-time check already covered every declaration.
        deferred = _check_selected_groups(selection, loaded.local.descriptor.file)
        if deferred:
            problems.append(KitError(
                f"{loaded.local.descriptor.file}: the selected capabilities are inconsistent",
                body="\n\n".join(d.render() for d in deferred),
                details={"diagnostics": [d.as_dict() for d in deferred]}))
            continue
        contributions.append(Contribution(kit.reference, selection.selected,
                                          selection.selected_paths))
    if problems:
        raise _merge_kit_errors([p for p in problems if isinstance(p, KitError)])
    return compose(contributions), effective


def _check_selected_groups(selection: Selection, file: str) -> list[Any]:
    if not any(".group." in path for path in selection.selected_paths) and not any(
            r.type == "group" for r in selection.skipped):
        return []
    return check_selected(selection.selected, file,
                          [parse_path(p) for p in selection.selected_paths])


def _validate_effective_cached(data: Mapping[str, Any], file: str,
                               cache_dir: Path | None) -> None:
    if cache_dir is None:
        validate_effective(data, file)
        return
    payload = json.dumps(data, sort_keys=True, ensure_ascii=False)
    key = hashlib.sha256(
        f"sbx-effective-v1\0{validation_fingerprint()}\0{payload}".encode(
            "utf-8", "surrogatepass")).hexdigest()
    marker = cache_dir / f"{key}.valid"
    if owned.read_file(marker, max_bytes=0) is not None:  # this user's own marker only
        return
    validate_effective(data, file)
    try:
        owned.ensure_directory(cache_dir)
        owned.write_file(marker, b"", durable=False)
    except OSError:
        pass  # a cache that cannot be written only costs speed


def _refuse_duplicates(kits: Sequence[LocalKit]) -> None:
    seen: dict[Path, str] = {}
    for kit in kits:
        key = lookup.resolved(kit.descriptor_file)
        if key in seen:
            raise SbxError(Reason.KIT_INCOHERENT,
                           f"{kit.reference} and {seen[key]} are the same kit; name it once")
        seen[key] = kit.reference


def _split_args(kits: Sequence[LocalKit], supplied: Mapping[str, str]) -> list[dict[str, str]]:
    """Each `--arg NAME=VALUE` goes to every kit that declares NAME; none declaring it is an
    error (an arg nobody reads is almost always a typo)."""
    declared = [declarations(kit.descriptor.data) for kit in kits]
    unknown = sorted(name for name in supplied if not any(name in d for d in declared))
    if unknown:
        names = ", ".join(unknown)
        known = sorted({name for d in declared for name in d})
        pronoun = "it" if len(unknown) == 1 else "them"
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--arg {names}: no kit in the set declares {pronoun}",
                       hint=f"Declared args: {', '.join(known) or 'none'}.")
    return [{k: v for k, v in supplied.items() if k in d} for d in declared]


def _merge_kit_errors(errors: Sequence[KitError]) -> KitError:
    if len(errors) == 1:
        return errors[0]
    diagnostics = [d for e in errors for d in e.details.get("diagnostics", [])]
    body = "\n\n".join(filter(None, (e.body or e.message for e in errors)))
    return KitError(f"{len(errors)} kits are invalid", body=body,
                    hint=errors[0].hint, details={"diagnostics": diagnostics})


__all__ = ["KitSet", "LoadedKit", "effective_composition", "load_kit_set"]
