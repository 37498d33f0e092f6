"""`sbx pull REF...`: preflight each reference with one manifest GET, revalidate the kit
descriptor from its annotation, gate permission widenings against the lock, pull by digest, and
pin the digests in the lock (SPEC §2.4, KIT-SPEC-V3 §5, §6.3).

References are normalised as Docker does (``docker/kit:1`` = ``docker.io/docker/kit:1``) and
locked under that form. A kit's first pull shows every permission it asks for and needs the same
approval as a widening (a terminal's confirmation or ``--accept``; else
``permission_unapproved``); a kit that asks for nothing is pinned silently.

All references are preflighted and gated before anything is pulled, and the lock is written
once, atomically, after every pull succeeded: a refusal, an invalid descriptor or an unreachable
registry leave the image store and the lock as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.bundled import SHORT_NAMES
from sbx.domain.kits.descriptor import parse_descriptor_text
from sbx.domain.kits.lock import (
    GateResult,
    LockDecision,
    LockEntry,
    gate,
    lock_path,
    parse_published,
    published_surface,
    read_lock,
    store_descriptor,
    write_lock,
)
from sbx.domain.kits.pathcheck import looks_like_path, path_kind
from sbx.domain.kits.surface import (
    Surface,
    Widening,
    format_surface,
    format_widenings,
    surface,
)
from sbx.seams import audit
from sbx.seams.registry import KitManifest, fetch_kit_manifest, parse_reference
from sbx.usecases.context import AppContext

if TYPE_CHECKING:
    from sbx.seams.engine import Distribution, Images

    class PullEngine(Images, Distribution, Protocol):
        """The roles a pull uses: the local image, else the registry's, and its tag."""

Progress = Callable[[str], AbstractContextManager[Callable[[str], None]]]
# (reference, widenings, first pull?) → approved?
Confirm = Callable[[str, Sequence[Widening], bool], bool]


@dataclass(frozen=True)
class PullItem:
    reference: str
    digest: str
    image: str  # repo@digest
    kind: str  # the kit kind, or "image" for a plain image
    permissions: Surface | None = None  # None for a plain image
    gate: GateResult | None = None
    previous_digest: str | None = None
    image_id: str = ""
    descriptor_text: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reference": self.reference, "digest": self.digest,
                               "image": self.image, "kind": self.kind, "image_id": self.image_id}
        if self.permissions is not None:
            out["permissions"] = self.permissions.to_json()
        if self.gate is not None:
            out["decision"] = self.gate.decision.value
            out["widenings"] = [w.as_dict() for w in self.gate.widenings]
            out["previous_digest"] = self.previous_digest
        return out


@dataclass(frozen=True)
class PullResult:
    items: tuple[PullItem, ...] = field(default_factory=tuple)
    lock_file: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"pulled": [i.as_dict() for i in self.items], "lock": self.lock_file}


def preflight(reference: str, manifest: KitManifest, *,
              state_home: Path | None = None) -> tuple[str, Surface] | None:
    """(kind, surface) of a kit, None for a plain image; raise ``invalid_kit`` when the
    annotation does not hold a valid published descriptor. With ``state_home``, a verdict on
    this exact text under these exact rules is reused
    (:func:`sbx.domain.kits.lock.parse_published`), and so are the published-form check and the
    surface (:func:`sbx.domain.kits.lock.published_surface`, keyed by the text and every source
    they depend on); failures are never cached."""
    text = manifest.descriptor_text
    if text is None:
        return None
    if state_home is None:
        return _checked(reference, text, None)
    return published_surface(text, state_home, lambda: _checked(reference, text, state_home))


def _checked(reference: str, text: str, state_home: Path | None) -> tuple[str, Surface]:
    """(kind, surface) of a published descriptor that passes every check, else raise."""
    file = f"{reference} (descriptor annotation)"
    try:
        descriptor = parse_descriptor_text(text, file, authored=False) if state_home is None \
            else parse_published(text, file, state_home)
    except KitError as error:
        raise KitError(f"{reference}: the published descriptor is invalid; nothing was pulled",
                       body=error.body or error.message, hint=error.hint,
                       details=error.details) from error
    except SbxError as error:
        raise SbxError(Reason.INVALID_KIT,
                       f"{reference}: the published descriptor is invalid: {error.message}; "
                       "nothing was pulled") from error
    problems = published_form_problems(descriptor.data)
    if problems:
        raise KitError(f"{reference}: the descriptor is not in published form; nothing was pulled",
                       body="\n".join(f"  {path}: {message}" for path, message in problems),
                       hint="Republish the kit with a kit builder that resolves build-phase "
                            "args and versions its provides.",
                       details={"diagnostics": [{"path": p, "message": m, "file": reference,
                                                 "line": 0, "col": 0} for p, m in problems]})
    return descriptor.kind, surface(descriptor.data)


def published_form_problems(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """:func:`sbx.domain.kits.publishedform.published_form_problems` (kit push checks the
    same rules)."""
    # deferred: only a descriptor not seen before loads the arg and version grammar
    from sbx.domain.kits import publishedform

    return publishedform.published_form_problems(data)


def pull(app: AppContext, references: Sequence[str], *, accept: bool,
         confirm: Confirm | None, progress: Progress,
         on_notice: Callable[[str], None]) -> PullResult:
    path = lock_path(app.state_home)
    lock = read_lock(path)
    planned: list[PullItem] = []
    for written in references:
        _refuse_path(written, app)
        ref = parse_reference(written)
        text = ref.canonical  # the lock's key: every spelling of one reference is one kit
        manifest = fetch_kit_manifest(ref, env=app.env)
        pinned = ref.pinned(manifest.digest)
        kit = preflight(text, manifest, state_home=app.state_home)
        if kit is None:
            planned.append(PullItem(text, manifest.digest, pinned, "image"))
            continue
        kind, candidate = kit
        previous = lock.get(text)
        ask = None if confirm is None else (
            lambda ws, t=text, first=previous is None: confirm(t, ws, first))
        result = gate(previous, manifest.digest, candidate, accept=accept, confirm=ask)
        previous_digest = previous.digest if previous else None
        details = {"reference": text, "digest": manifest.digest,
                   "previous_digest": previous_digest, "first_pull": previous is None,
                   "widenings": [w.as_dict() for w in result.widenings]}
        if result.decision is LockDecision.REFUSED:
            audit.record(app.state_home, audit.KIT_WIDENING_REFUSED, run_id=None,
                         severity="warning", details=details)
            raise _refusal(text, manifest.digest, previous_digest, result, details)
        if result.via is not None:  # approved: a widening, or a first pull's permissions
            audit.record(app.state_home, audit.KIT_WIDENING_ACCEPTED, run_id=None,
                         severity="warning", details={**details, "via": result.via})
            if result.decision is LockDecision.NEW and result.via == "accept-flag":
                on_notice(f"{text} asks for (accepted with --accept):\n"
                          + format_surface(candidate))
        planned.append(PullItem(text, manifest.digest, pinned, kind, candidate, result,
                                previous_digest, descriptor_text=manifest.descriptor_text))
    engine: PullEngine = app.driver
    done: list[PullItem] = []
    for item in planned:
        # An image the engine already holds as repo@digest is that very manifest's image
        # (content addressed): nothing to fetch. Otherwise the engine pulls it by digest.
        image = engine.image(item.image)
        if image is None:
            with progress(f"pulling {item.image}") as on_line:
                image = engine.pull_image(item.image, on_line)
        # Also tag it as written, so a local kit can build FROM it and `docker` users see it
        # (an image that already carries that tag, as the inspect says, needs no second call).
        if "@" not in item.reference and item.reference not in image.tags:
            engine.tag_image(image.id, item.reference)
        done.append(PullItem(item.reference, item.digest, item.image, item.kind,
                             item.permissions, item.gate, item.previous_digest, image.id,
                             item.descriptor_text))
    for item in done:
        if item.permissions is not None:
            if item.descriptor_text is not None:  # what `sbx run REF` reads, by digest
                store_descriptor(app.state_home, item.digest, item.descriptor_text)
            lock = lock.with_entry(LockEntry(item.reference, item.digest, item.image, item.kind,
                                             item.permissions))
    if any(item.permissions is not None for item in done):
        write_lock(path, lock)
        for item in done:
            if item.permissions is not None and item.digest != item.previous_digest:
                audit.record(app.state_home, audit.KIT_PULLED, run_id=None, severity="info",
                             details={"reference": item.reference, "digest": item.digest,
                                      "previous_digest": item.previous_digest})
    return PullResult(tuple(done), str(path))


def _refuse_path(written: str, app: AppContext) -> None:
    """A reference written as a path is a local kit directory, which is never pulled: say so
    (and whether it exists) instead of "not a registry reference". So is a bundled agent's
    short name: `sbx pull claude` would ask Docker Hub for a kit nobody published there."""
    if written in SHORT_NAMES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{written!r} is the short name of a kit bundled with sbx, which needs "
                       "no pull",
                       hint=f"Run it directly: sbx run {written} .  (a registry kit of that "
                            "name: give its full reference, e.g. docker.io/ORG/"
                            f"{written}:TAG)")
    if not written.startswith((".", "/", "~")):
        return  # every path spelling starts so (looks_like_path); skip importing kits.local
    if not looks_like_path(written):
        return
    kind = path_kind(app.cwd / written, written)
    if kind is None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{written!r} is a path, and no directory exists there; sbx pull fetches "
                       "registry references (host[:port]/repo:tag)",
                       hint="Check the path, or name a registry reference such as "
                            "127.0.0.1:5000/kits/gh:1.")
    raise SbxError(Reason.INVALID_ARGUMENT,
                   f"{written!r} is a local path; sbx pull fetches registry references "
                   "(host[:port]/repo:tag), and a local kit directory needs no pull",
                   hint=f"Run it directly: sbx run {written}")


def _refusal(text: str, digest: str, previous_digest: str | None, result: GateResult,
             details: Mapping[str, Any]) -> SbxError:
    extra = {**details, "problems": details["widenings"]}
    if previous_digest is None:
        return SbxError(
            Reason.PERMISSION_UNAPPROVED,
            f"{text} ({digest}) asks for permissions nobody approved; nothing was pulled and "
            "the lock is unchanged",
            body=format_widenings(result.widenings),
            hint="Review them, then pull on a terminal and confirm, or pass --accept.",
            details=extra)
    return SbxError(
        Reason.PERMISSION_WIDENED,
        f"{text} now resolves to {digest}, which asks for more than the locked "
        f"{previous_digest}; nothing was pulled and the lock is unchanged",
        body=format_widenings(result.widenings),
        hint="Review the widenings, then pull again on a terminal and confirm, or pass "
             "--accept.",
        details=extra)


__all__ = ["PullItem", "PullResult", "preflight", "pull"]
