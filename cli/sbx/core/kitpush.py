"""`sbx kit push DIR REF`: publish a local kit to a registry as a v3 kit image.

The image is built exactly as `sbx run` builds it (:func:`ensure_kit_image`), tagged REF and
pushed with the engine; then its manifest is re-put with the kit annotations
(KIT-SPEC-V3 §6.1), which changes the manifest digest.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.context import AppContext
from sbx.core.images import ensure_kit_image
from sbx.errors import SbxError
from sbx.kits.args import expand_build_phase
from sbx.kits.local import load_local_kit
from sbx.reasons import Reason
from sbx.registry import annotate, kit_annotations, parse_reference

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
             progress: Progress) -> PushResult:
    ref = parse_reference(reference)
    if ref.digest is not None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{reference}: push to a tag, not a digest (the digest is computed)")
    kit = load_local_kit(directory, cwd=app.cwd, cache_dir=app.state_home / "cache" / "descriptors")
    # Build-phase args are resolved (to their defaults) at publish time and baked into both the
    # image and the published descriptor, which may not reference them any more (§1.9).
    published = expand_build_phase(kit.descriptor, file=kit.descriptor.file)
    built = ensure_kit_image(app.driver, kit, progress, published.build_args)
    tagged = f"{ref.name}:{ref.tag or 'latest'}"
    app.driver.tag_image(built.image.id, tagged)
    with progress(f"pushing {tagged}") as on_line:
        app.driver.push_image(tagged, on_line)
    annotations = kit_annotations(_inline_context_files(published.data, kit.directory))
    digest = annotate(ref, annotations, env=app.env)
    return PushResult(tagged, digest, ref.pinned(digest), kit.descriptor.kind,
                      annotations.get("vnd.docker.sandbox.kit.capabilities", ""))


def _inline_context_files(data: dict[str, Any], directory: Path) -> dict[str, Any]:
    """``agent-context@1`` ``contentFile`` bodies inlined as ``content``: a consumer of the
    published kit has the descriptor, not the kit directory the path is relative to."""
    entries: list[dict[str, Any]] = []
    for item in data.get("capabilities") or []:
        group = item.get("group") if isinstance(item, dict) else None
        members = group.get("capabilities") if isinstance(group, dict) else None
        entries.extend(m for m in (members if isinstance(members, list) else [item])
                       if isinstance(m, dict))
    for entry in entries:
        config = entry.get("config")
        if entry.get("type") != "com.docker.sandbox/agent-context@1" \
                or not isinstance(config, dict) or not isinstance(config.get("contentFile"), str):
            continue
        target = (directory / config["contentFile"]).resolve()
        if not target.is_relative_to(directory.resolve()) or not target.is_file():
            raise SbxError(Reason.INVALID_KIT,
                           f"agent-context contentFile {config['contentFile']!r} is not a file "
                           "inside the kit directory")
        del config["contentFile"]
        config["content"] = target.read_text(encoding="utf-8")
    return data


__all__ = ["PushResult", "push_kit"]
