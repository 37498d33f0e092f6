"""The published form of a local kit (KIT-SPEC-V3 §1.6, §6.2, SPEC-v3 §9, §10): what `sbx kit
push` annotates and stages, computed without the engine.

- build-phase args (``buildArg``) are expanded with the values the image is built with, so the
  published descriptor names no build-phase arg (a consumer cannot know those values) while
  create-phase references stay for the runtime;
- an ``agent-context@1`` ``contentFile`` (authored relative to the kit directory) is staged under
  ``/usr/share/sandbox/kit/<stem>/`` and the field rewritten to that in-image path: a pulled kit
  has no directory, only its image;
- the kit-sources layer holds ``kit.yaml`` (the published descriptor), ``kit.dockerfile`` (the
  recipe, when there is one) and the staged context files. A declaration-only mixin publishes
  exactly that one layer.

``kind: set`` is an authoring form the kit frontend merges at build time; sbx does not merge sets
and refuses them here, naming the rule (:func:`refuse_set`).
"""

from __future__ import annotations

import io
import json
import posixpath
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import KitError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.args import expand_build_phase
from sbx.domain.kits.diagnostics import Diagnostic
from sbx.domain.kits.localkit import LocalKit
from sbx.domain.kits.types import STAGE_ROOT
from sbx.seams.host import files, lookup

AGENT_CONTEXT: Final = "com.docker.sandbox/agent-context@1"
# A staged context file is prose for the agent; a kit cannot make sbx publish a huge one.
MAX_STAGED_BYTES: Final = 1024 * 1024
_STAGING_DIR: Final = "kit-sources"


@dataclass(frozen=True)
class Published:
    """A kit in published form: the descriptor to annotate, the build args its image is built
    with, and the files of its kit-sources layer (name inside the stage dir → bytes)."""

    stem: str
    descriptor: dict[str, Any]
    build_args: dict[str, str] = field(default_factory=dict)
    staged: dict[str, bytes] = field(default_factory=dict)

    @property
    def stage_dir(self) -> str:
        return f"{STAGE_ROOT}/{self.stem}"


def refuse_set(kit: LocalKit) -> None:
    if kit.descriptor.kind == "set":
        raise SbxError(
            Reason.INVALID_KIT,
            f"{kit.reference} is a kind: set kit, which sbx cannot publish: a set is an "
            "authoring form that the kit builder merges into one workload or mixin at build "
            "time (SPEC-v3 §3.4 and §9.5: each listed kit resolved to a digest, declarations "
            "merged, layers concatenated), and sbx does not merge sets; a published kit is never "
            "kind: set",
            hint="Publish each listed kit on its own and compose them when running: "
                 "sbx run WORKLOAD --kit MIXIN ...")


def publish_form(kit: LocalKit, supplied: Mapping[str, str]) -> Published:
    """The published descriptor and staged sources of ``kit`` (see the module docstring)."""
    refuse_set(kit)
    expanded = expand_build_phase(kit.descriptor.data, supplied=supplied,
                                  file=kit.descriptor.file)
    data = expanded.data
    stem = kit.stem
    staged: dict[str, bytes] = {}
    problems: list[Diagnostic] = []
    for path, config in _context_configs(data):
        content_file = config.get("contentFile")
        if not isinstance(content_file, str):
            continue
        name, body, problem = _stage_file(kit.directory, content_file)
        if problem is not None:
            problems.append(Diagnostic(f"{path}.config.contentFile", problem,
                                       kit.descriptor.file, 0, 0))
            continue
        staged[name] = body
        config["contentFile"] = f"{STAGE_ROOT}/{stem}/{name}"
    if problems:
        raise KitError(f"{kit.descriptor.file}: cannot stage the kit's files",
                       body="\n\n".join(d.render() for d in problems),
                       details={"diagnostics": [d.as_dict() for d in problems]})
    staged["kit.yaml"] = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if kit.dockerfile_text is not None:
        staged["kit.dockerfile"] = kit.dockerfile_text.encode("utf-8")
    return Published(stem, data, expanded.build_args, staged)


def _context_configs(data: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every agent-context config, top level and in groups, with its dotted path."""
    for i, item in enumerate(data.get("capabilities") or []):
        if not isinstance(item, dict):
            continue
        group = item.get("group")
        if isinstance(group, dict):
            for j, member in enumerate(group.get("capabilities") or []):
                if isinstance(member, dict) and member.get("type") == AGENT_CONTEXT \
                        and isinstance(member.get("config"), dict):
                    yield f"capabilities[{i}].group.capabilities[{j}]", member["config"]
        elif item.get("type") == AGENT_CONTEXT and isinstance(item.get("config"), dict):
            yield f"capabilities[{i}]", item["config"]


def _stage_file(directory: Path, content_file: str) -> tuple[str, bytes, str | None]:
    """(name in the stage dir, bytes, problem). The name keeps the authored relative path,
    cleaned, so two context files never collide and the kit's own names stay recognisable."""
    if content_file.startswith(f"{STAGE_ROOT}/"):
        return "", b"", "is already an in-image path; author it relative to the kit directory"
    name = posixpath.normpath(content_file)
    if posixpath.isabs(name) or name == ".." or name.startswith("../") or name in (
            ".", "kit.yaml", "kit.dockerfile"):
        return "", b"", (f"{content_file!r} must name a file inside the kit directory (and not "
                         "kit.yaml or kit.dockerfile, which the kit-sources layer holds)")
    target = lookup.resolved(directory / name)
    if not target.is_relative_to(lookup.resolved(directory)) \
            or not lookup.is_file_checked(target):
        return "", b"", f"{content_file!r} is not a file inside the kit directory"
    size = lookup.status(target).st_size
    if size > MAX_STAGED_BYTES:
        return "", b"", f"{content_file!r} is {size} bytes; at most {MAX_STAGED_BYTES}"
    return name, files.file_bytes(target), None


def staging_context(published: Published, base: str | None) -> tuple[bytes, str]:
    """The build context (a tar) and the dockerfile name that add the kit-sources layer on
    ``base`` (an image tag), or make it the only layer (``base`` None: a declaration-only
    mixin). The stage path is written in the JSON form of COPY, which takes any name."""
    dockerfile = (f"FROM {base or 'scratch'}\n"
                  f"COPY {json.dumps([f'{_STAGING_DIR}/', published.stage_dir + '/'])}\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        directories: set[str] = set()
        for name in sorted(published.staged):
            parts = name.split("/")[:-1]
            for depth in range(len(parts)):
                directories.add("/".join(parts[:depth + 1]))
        for directory in ["", *sorted(directories)]:
            info = tarfile.TarInfo(f"{_STAGING_DIR}/{directory}".rstrip("/"))
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            archive.addfile(info)
        for name in sorted(published.staged):
            body = published.staged[name]
            info = tarfile.TarInfo(f"{_STAGING_DIR}/{name}")
            info.size = len(body)
            info.mode = 0o644  # prose and recipes for anyone in the sandbox to read
            archive.addfile(info, io.BytesIO(body))
        recipe = dockerfile.encode("utf-8")
        info = tarfile.TarInfo(_RECIPE)
        info.size = len(recipe)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(recipe))
    return buffer.getvalue(), _RECIPE


_RECIPE: Final = ".sbx-stage.dockerfile"

__all__ = ["STAGE_ROOT", "Published", "publish_form", "refuse_set", "staging_context"]
