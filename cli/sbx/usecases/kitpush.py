"""`sbx kit push DIR REF`: publish a local kit to a registry as a v3 kit image.

The kit's published form (:mod:`sbx.domain.kits.publish`: build-phase args expanded, context files
staged) is computed first and revalidated with the rules `sbx pull` applies, so sbx never
publishes what it would refuse to pull. The content image is built exactly as `sbx run` builds
it (:func:`ensure_kit_image`, with the build-phase arg values), the kit-sources layer is added on
top (a declaration-only mixin has only that layer), the result is tagged REF and pushed with the
engine; then its manifest is re-put with the kit annotations (KIT-SPEC-V3 §6.1), which changes
the manifest digest.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.args import parse_arg_assignments
from sbx.domain.kits.descriptor import parse_descriptor_text
from sbx.domain.kits.publish import Published, publish_form, staging_context
from sbx.domain.kits.reference import load_kit
from sbx.domain.sandbox.kitimages import KIT_LABEL, ensure_kit_image
from sbx.seams.registry import annotate, kit_annotations, parse_reference
from sbx.usecases.context import AppContext
from sbx.usecases.pull import published_form_problems

if TYPE_CHECKING:
    from sbx.seams.engine import Distribution, Images

    class PushEngine(Images, Distribution, Protocol):
        """The roles a kit push uses: its images built, then pushed."""

Progress = Callable[[str], AbstractContextManager[Callable[[str], None]]]


@dataclass(frozen=True)
class PushResult:
    reference: str
    digest: str
    image: str  # repo@digest
    kind: str
    capabilities: str  # the capabilities annotation ("" when none)

    def as_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "digest": self.digest, "image": self.image,
                "kind": self.kind, "capabilities": self.capabilities}


def push_kit(app: AppContext, directory: str, reference: str, *,
             progress: Progress, arg_items: tuple[str, ...] = ()) -> PushResult:
    ref = parse_reference(reference)
    if ref.digest is not None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{reference}: push to a tag, not a digest (the digest is computed)")
    kit = load_kit(directory, cwd=app.cwd, lock_home=None,
                   cache_dir=app.state_home / "cache" / "descriptors")
    published = publish_form(kit, parse_arg_assignments(arg_items))
    _check_published(reference, published)
    engine: PushEngine = app.driver
    base = None
    if kit.dockerfile_text is not None:
        base = ensure_kit_image(engine, kit, progress, published.build_args,
                                lock_dir=app.state_home / "locks",
                                home_hash=app.home_hash).tag
    elif kit.descriptor.kind != "mixin":
        raise SbxError(Reason.INVALID_KIT,
                       f"{kit.descriptor.kind} kit {kit.reference} has no recipe (no "
                       f"{kit.stem}.dockerfile, `dockerfile:` or `build:`); a workload must "
                       "have content (only a mixin may be declaration-only)",
                       hint=f"Add {kit.stem}.dockerfile beside {kit.descriptor_file.name}.")
    tagged = f"{ref.name}:{ref.tag or 'latest'}"
    context, dockerfile = staging_context(published, base)
    with progress(f"staging the kit sources of {kit.reference}") as on_line:
        engine.build(context, dockerfile, tagged,
                         {KIT_LABEL: kit.stem},
                         on_line)
    with progress(f"pushing {tagged}") as on_line:
        engine.push_image(tagged, on_line)
    annotations = kit_annotations(published.descriptor)
    digest = annotate(ref, annotations, env=app.env)
    return PushResult(tagged, digest, ref.pinned(digest), kit.descriptor.kind,
                      annotations.get("vnd.docker.sandbox.kit.capabilities", ""))


def _check_published(reference: str, published: Published) -> None:
    """Refuse to publish what `sbx pull` would refuse: the published descriptor goes through
    the same parse and published-form rules a consumer applies."""
    text = kit_annotations(published.descriptor)["vnd.docker.sandbox.kit.descriptor"]
    parse_descriptor_text(text, f"{reference} (published form)", authored=False)
    problems = published_form_problems(published.descriptor)
    if problems:
        raise KitError(f"{reference}: the kit would not be in published form; nothing was "
                       "pushed",
                       body="\n".join(f"  {path}: {message}" for path, message in problems),
                       hint="Give every provide a version (`name@1.2.3`, or the descriptor's "
                            "`version:`).",
                       details={"diagnostics": [{"path": p, "message": m, "file": reference,
                                                 "line": 0, "col": 0} for p, m in problems]})


__all__ = ["PushResult", "push_kit"]
