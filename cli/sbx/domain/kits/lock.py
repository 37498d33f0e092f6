"""The kit lock, ``<state>/kits.lock.json`` (KIT-SPEC-V3 §5.3), and the upgrade gate decision.

``{"version": 1, "kits": [{"reference", "digest", "image", "kind", "args", "permissions"}]}``.
Written atomically (temp file in the same directory, fsync, rename), so a crash or a refused
pull never leaves a half-written or changed lock. Kits are keyed by their normalised reference
(:func:`sbx.seams.registry.normalize_reference`).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.descriptor import Descriptor, parse_descriptor_text
from sbx.domain.kits.document import MAX_DESCRIPTOR_BYTES
from sbx.domain.kits.localkit import LocalKit
from sbx.domain.kits.schema import validation_fingerprint
from sbx.domain.kits.surface import Surface, Widening, diff_widenings
from sbx.seams import owned, state
from sbx.seams.host import lookup
from sbx.seams.registry import canonical_reference
from sbx.seams.statefile import MAX_STATE_BYTES, read_state, write_atomic

LOCK_FILE: Final = "kits.lock.json"
MAX_LOCK_BYTES: Final = MAX_STATE_BYTES
LOCK_VERSION: Final = 1
DESCRIPTORS_DIR: Final = "kits"
# Verdicts on published descriptors (`sbx pull`, `sbx run REF`), beside the local kits' ones.
VERDICTS_DIR: Final = ("cache", "descriptors")


def lock_path(state_home: Path) -> Path:
    return state_home / LOCK_FILE


@dataclass(frozen=True)
class LockEntry:
    reference: str
    digest: str
    image: str  # repo@digest: what `sbx run` of the reference uses
    kind: str
    permissions: Surface
    args: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "digest": self.digest, "image": self.image,
                "kind": self.kind, "args": dict(self.args),
                "permissions": self.permissions.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> LockEntry:
        if not isinstance(data, Mapping):
            raise ValueError("a lock entry is a JSON object")
        strings = {}
        for key in ("reference", "digest", "image", "kind"):
            value = data.get(key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"lock entry field {key} must be a non-empty string")
            strings[key] = value
        args = data.get("args") or {}
        if not isinstance(args, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in args.items()):
            raise ValueError("lock entry field args must map strings to strings")
        return cls(permissions=Surface.from_json(data.get("permissions") or {}),
                   args=dict(args), **strings)


@dataclass(frozen=True)
class Lock:
    kits: tuple[LockEntry, ...] = ()

    def get(self, reference: str) -> LockEntry | None:
        """The entry for ``reference`` in any spelling Docker treats as the same (``ubuntu`` =
        ``docker.io/library/ubuntu:latest``, :func:`sbx.seams.registry.normalize_reference`), so
        entries written before references were normalised are still found."""
        wanted = canonical_reference(reference)
        return next((k for k in self.kits if canonical_reference(k.reference) == wanted), None)

    def with_entry(self, entry: LockEntry) -> Lock:
        """The lock with ``entry`` replacing the one for its reference (in place), or appended."""
        previous = self.get(entry.reference)
        if previous is None:
            return replace(self, kits=(*self.kits, entry))
        return replace(self, kits=tuple(entry if k is previous else k for k in self.kits))

    def to_json(self) -> dict[str, Any]:
        return {"version": LOCK_VERSION, "kits": [k.to_json() for k in self.kits]}

    @classmethod
    def from_json(cls, data: Any) -> Lock:
        if not isinstance(data, Mapping):
            raise ValueError("the lock is a JSON object")
        if data.get("version") != LOCK_VERSION:
            raise ValueError(f"unsupported lock version {data.get('version')!r}")
        kits = data.get("kits", [])
        if not isinstance(kits, list):
            raise ValueError("the lock's kits is a list")
        return cls(tuple(LockEntry.from_json(k) for k in kits))


def read_lock(path: Path) -> Lock:
    """The lock at ``path``; an absent file is an empty lock, a damaged one a refusal
    (``state_corrupt``). A damaged lock is never read as empty: that would forget every
    approved permission surface, and the next pull of a widened kit would pass the gate."""
    fix = f"Move {path} aside (keep it to inspect), then `sbx pull` the kits again."
    return read_state(path, Lock.from_json, Lock(), what="the kit lock", fix=fix)


def write_lock(path: Path, lock: Lock) -> None:
    """Replace the lock atomically: readers see the old or the new file, never a mix."""
    payload = (json.dumps(lock.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    write_atomic(path, payload)


# --- locked registry kits at run time ------------------------------------------------------


def descriptor_path(state_home: Path, digest: str) -> Path:
    """Where `sbx pull` keeps a kit's published descriptor, by manifest digest."""
    return state_home / DESCRIPTORS_DIR / f"{digest.replace(':', '-')}.json"


def store_descriptor(state_home: Path, digest: str, text: str) -> None:
    write_atomic(descriptor_path(state_home, digest), text.encode("utf-8"))


def published_cache_key(text: str) -> str:
    """The validation cache key of a *published* descriptor's exact text: the rules it is
    checked under (``authored=False``) differ from an authored file's, so the key is apart
    from :func:`sbx.domain.kits.descriptor.parse_descriptor_file`'s and carries the same fingerprint
    of every schema and rule source."""
    return hashlib.sha256(
        f"sbx-published-v1\0{validation_fingerprint()}\0{text}".encode("utf-8", "surrogatepass")
    ).hexdigest()


def parse_published(text: str, file: str, state_home: Path) -> Descriptor:
    """:func:`parse_descriptor_text` of a published descriptor (``authored=False``), with its
    verdict cached under the state home.

    Validation is a pure function of (schemas, rules, text): text that already passed under
    this exact fingerprint is read back as the plain data it decoded to, which skips the YAML
    parser and jsonschema (their imports alone cost tens of milliseconds on every `sbx pull`
    and every `sbx run` of a locked kit). Text that fails is never cached, so its problems are
    reported every time; a damaged entry is a miss.
    """
    entry = state_home.joinpath(*VERDICTS_DIR, f"{published_cache_key(text)}.json")
    cached = owned.read_cache(entry, max_bytes=MAX_DESCRIPTOR_BYTES * 4)  # this user's only
    if isinstance(cached, dict) and isinstance(cached.get("kind"), str):
        return Descriptor(data=cached, file=file)
    descriptor = parse_descriptor_text(text, file, authored=False)
    owned.write_cache(entry, descriptor.data)  # best effort: a miss only costs speed
    return descriptor


# Sources beyond the validation fingerprint's that decide a published descriptor's surface and
# its published-form problems (paths inside the sbx package): hashed into the surface cache key.
SURFACE_SOURCES: Final = ("domain/kits/surface.py", "domain/kits/surfacetypes.py",
                          "domain/kits/composed.py", "domain/kits/publishedform.py",
                          "usecases/pull.py")


def _surface_cache_path(text: str, state_home: Path) -> Path:
    package = resources.files("sbx")
    digest = hashlib.sha256(f"sbx-published-surface-v1\0{published_cache_key(text)}".encode())
    for name in SURFACE_SOURCES:
        digest.update(b"\0" + lookup.resource_bytes(package.joinpath(*name.split("/"))))
    return state_home.joinpath(*VERDICTS_DIR, f"surface-{digest.hexdigest()}.json")


def published_surface(text: str, state_home: Path,
                      compute: Callable[[], tuple[str, Surface]]) -> tuple[str, Surface]:
    """``compute()`` — (kind, surface) of a published descriptor that passed every check —
    with its result cached by the exact text and every source it depends on, as
    :func:`parse_published` caches a verdict: a re-pull then loads no capability handler.
    A failure raises from ``compute`` and is never cached; a damaged entry is a miss."""
    try:
        entry = _surface_cache_path(text, state_home)
    except OSError:  # pragma: no cover - a zipped install without sources: no cache
        return compute()
    cached = owned.read_cache(entry, max_bytes=MAX_DESCRIPTOR_BYTES * 4)  # this user's only
    if isinstance(cached, dict) and isinstance(cached.get("kind"), str) \
            and isinstance(cached.get("surface"), dict):
        try:
            return cached["kind"], Surface.from_json(cached["surface"])
        except ValueError:
            pass
    kind, computed = compute()
    owned.write_cache(entry, {"kind": kind, "surface": computed.to_json()})
    return kind, computed


def load_locked_kit(reference: str, state_home: Path) -> LocalKit | None:
    """The registry kit pinned in the lock under ``reference``, at its locked digest; None when
    the lock does not name it. Nothing here talks to a registry: a tag that moved there is not
    followed (only `sbx pull` moves the lock)."""
    entry = read_lock(lock_path(state_home)).get(reference)
    if entry is None:
        return None
    stored = descriptor_path(state_home, entry.digest)
    fix = f"Move {stored} aside, then fetch it again with `sbx pull {reference}`."
    try:
        found = owned.read_prefix(stored, MAX_DESCRIPTOR_BYTES + 1)  # this user's own only
    except OSError as exc:
        raise state.corrupt(stored, f"it cannot be read ({exc.strerror})",
                            what="the stored descriptor", fix=fix) from exc
    if found is None:
        raise SbxError(Reason.IMAGE_MISSING,
                       f"kit {reference} is locked at {entry.digest}, but its descriptor "
                       f"({stored}) is missing",
                       hint=f"Fetch it again with `sbx pull {reference}`.")
    raw = found
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise state.corrupt(stored, f"it is not UTF-8 text (byte offset {exc.start})",
                            what="the stored descriptor", fix=fix) from exc
    descriptor = parse_published(text, f"{reference} (locked {entry.digest[:19]})", state_home)
    stem = entry.reference.rsplit("/", 1)[-1].partition("@")[0].partition(":")[0] or "kit"
    return LocalKit(reference=reference, directory=stored.parent, stem=stem,
                    descriptor=descriptor, dockerfile_text=None, image=entry.image)


# --- the gate ---------------------------------------------------------------------------------


class LockDecision(enum.StrEnum):
    NEW = "new"  # not in the lock: pinned after showing its surface
    UNCHANGED = "unchanged"  # same digest as locked
    WITHIN = "within"  # a new digest within (or narrower than) the granted surface: silent
    ACCEPTED = "accepted"  # widened, approved (terminal or --accept)
    REFUSED = "refused"  # widened, not approved


@dataclass(frozen=True)
class GateResult:
    decision: LockDecision
    widenings: tuple[Widening, ...] = ()
    via: str | None = None  # "accept-flag" | "terminal" for ACCEPTED

    @property
    def allowed(self) -> bool:
        return self.decision is not LockDecision.REFUSED


def gate(previous: LockEntry | None, digest: str, candidate: Surface, *, accept: bool,
         confirm: Callable[[Sequence[Widening]], bool] | None) -> GateResult:
    """Decide a pull of ``digest`` with surface ``candidate`` against the lock entry.

    ``confirm`` is the terminal prompt (None without a terminal). A first pull is a widening
    from nothing: a kit that asks for any permission needs approval (refused as
    :attr:`LockDecision.REFUSED` with no previous entry); one that asks for none is pinned
    silently. The digest already locked is the very descriptor that was approved, whatever
    fields a newer sbx projects from it.
    """
    if previous is not None and previous.digest == digest:
        return GateResult(LockDecision.UNCHANGED)
    return decide(previous.permissions if previous is not None else None, candidate,
                  accept=accept, confirm=confirm, first_needs_approval=True)


def decide(granted: Surface | None, candidate: Surface, *, accept: bool,
           confirm: Callable[[Sequence[Widening]], bool] | None,
           first_needs_approval: bool) -> GateResult:
    """The one gate, for pulled and local kits: ``candidate`` against the ``granted`` surface
    (None: nothing recorded yet). Widenings need ``accept`` or a confirmation; narrowing and
    movement inside the granted surface apply silently. Without a record, a pull
    (``first_needs_approval``) needs approval of every permission; a local kit's first run is
    recorded as it is (the user named the kit on the command line)."""
    if granted is None:
        everything = tuple(diff_widenings(Surface(), candidate))
        if not everything or not first_needs_approval:
            return GateResult(LockDecision.NEW, everything)
        if accept:
            return GateResult(LockDecision.NEW, everything, "accept-flag")
        if confirm is not None and confirm(everything):
            return GateResult(LockDecision.NEW, everything, "terminal")
        return GateResult(LockDecision.REFUSED, everything)
    widenings = tuple(diff_widenings(granted, candidate))
    if not widenings:
        return GateResult(LockDecision.WITHIN)
    if accept:
        return GateResult(LockDecision.ACCEPTED, widenings, "accept-flag")
    if confirm is not None and confirm(widenings):
        return GateResult(LockDecision.ACCEPTED, widenings, "terminal")
    return GateResult(LockDecision.REFUSED, widenings)


__all__ = ["LOCK_FILE", "LockDecision", "GateResult", "Lock", "LockEntry", "decide",
           "descriptor_path", "gate", "load_locked_kit", "lock_path", "parse_published",
           "published_cache_key", "published_surface", "read_lock", "store_descriptor",
           "write_lock"]
