"""`sbx save NAME TAG`, `sbx template ls|rm`, and the template a `--template TAG` run starts
from (sbx.domain.sandbox.templates says what a template holds and leaves out).

Saving reads the sandbox's HOME through the engine's archive endpoint, running or stopped (a
running sandbox is not paused: HOME is taken as it is at that moment), and the files of the
sandbox's own image through an export of a helper container (never the sandbox's container).
Both become one tar without sbx's per-run files, the CA bundle given back its own
certificates, scanned for the sandbox's proxy token on the way (a file that holds it refuses
the save before anything is made), and imported as a one-layer image: no lower layer keeps
what was left out, as a commit on top of the sandbox's image would.
"""

from __future__ import annotations

import contextlib
import posixpath
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sbx import __version__
from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress.plan import CA_FILE, SYSTEM_BUNDLES
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox import templates as tpl
from sbx.domain.sandbox.lifecycle import STARTUP_SCRIPT
from sbx.seams import owned
from sbx.seams.engine import ImageInfo
from sbx.usecases import fleet
from sbx.usecases.context import AppContext
from sbx.usecases.explain import static_composition
from sbx.usecases.named.listing import load_named
from sbx.usecases.namedkits import fingerprint

if TYPE_CHECKING:
    from sbx.domain.kits.kitset import KitSet

MAX_HOME_BYTES: Final = 8 << 30
MAX_IMAGE_BYTES: Final = 64 << 30
HELPER_DEADLINE_S: Final = 3600
TOKEN_FILE: Final = "proxy.token"  # noqa: S105 - sbx.usecases.keeper's file name, no secret


@dataclass(frozen=True)
class Saved:
    template: tpl.Template
    home_bytes: int
    was_running: bool

    def as_json(self) -> dict[str, Any]:
        return {**self.template.as_json(), "home_bytes": self.home_bytes,
                "was_running": self.was_running}


def save(ctx: AppContext, word: str, tag: str, *,
         on_notice: Callable[[str], None] = lambda _text: None) -> Saved:
    tag = tpl.check_tag(tag)
    ctx = fleet.for_sandbox(ctx, word)  # the sandbox's engine, where the template goes
    record = load_named(ctx, word, command="sbx save")
    driver = ctx.driver
    existing = driver.image(tag)
    if existing is not None and not tpl.is_template(existing.labels):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{tag} names an image that is not an sbx template; sbx will not "
                       "replace it", hint=f"Save under another tag, e.g. sbx save "
                                          f"{record.name} {tag.partition(':')[0]}-sbx:1")
    base = driver.image(record.image or "")
    state = driver.container_state(record.container_id or "")
    if base is None or state is None or not record.home_volume:
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name}'s image or container is gone",
                       hint=f"`sbx rm -f {record.name}` and create it again.")
    kits = record.request.get("kits_state")
    if not isinstance(kits, dict):
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name}'s record names no kit set",
                       hint=f"Recreate it (`sbx run --name {record.name} --recreate`), then "
                            "save again.")
    home = record.home_volume
    helper = label_keys.object_labels(
        home_hash=ctx.home_hash, run_id=record.run_id,
        deadline=int(time.time()) + HELPER_DEADLINE_S, kits=[], role=label_keys.ROLE_HELPER)
    read = driver.probe_image(base.id, files=(STARTUP_SCRIPT, CA_FILE, *SYSTEM_BUNDLES),
                              dirs=(), labels=helper).files
    script = (read.get(STARTUP_SCRIPT) or b"").decode("utf-8", "replace")
    leave_out = [posixpath.relpath(path, home) for path in tpl.staged_targets(script)
                 if path.startswith(home.rstrip("/") + "/")]
    template_labels = tpl.template_labels(kits=kits, version=__version__, source=record.name,
                                          home=home, created=time.time())
    # An imported image has only the labels given: the image's own (not sbx's run labels,
    # so gc never takes it for a run's: sbx.usecases.gc.judging) and the template's.
    labels = {**{k: v for k, v in base.labels.items()
                 if not k.startswith(f"{label_keys.PREFIX}.")},
              **template_labels, label_keys.MANAGED: "true", label_keys.HOME: ctx.home_hash}
    ca_pem = read.get(CA_FILE) or b""
    restored = {path: bundle for path in SYSTEM_BUNDLES
                if (data := read.get(path)) is not None
                and (bundle := tpl.restored_bundle(data, ca_pem)) is not None}
    token = _token(ctx, record.run_id)
    with tempfile.TemporaryFile() as raw_home, tempfile.TemporaryFile() as raw_image, \
            tempfile.TemporaryFile() as tree:
        _spool(driver.archive_read(str(record.container_id), home), raw_home,
               MAX_HOME_BYTES + (64 << 20), f"{record.name}'s HOME")
        _spool(driver.export_image(base.id, helper), raw_image, MAX_IMAGE_BYTES,
               f"{record.name}'s image")
        raw_home.seek(0)
        raw_image.seek(0)
        home_bytes, leaks = tpl.template_archive(
            raw_image, raw_home, tree, home_name=posixpath.basename(home),
            leave_out=leave_out, replace=restored, needles=[token] if token else [],
            max_home_bytes=MAX_HOME_BYTES)
        if token and any(token.decode("ascii", "replace") in item for item in base.env):
            leaks.insert(0, "(the image's environment)")
        if leaks:
            raise SbxError(
                Reason.TEMPLATE_LEAK,
                "the sandbox's proxy token is in " + ", ".join(leaks[:10]) + "; no template "
                "was made", hint=f"HOME's files (listed under {tpl.HOME_DIR}): `sbx exec "
                f"{record.name} -- rm ~/FILE`; the image's (an install hook wrote them): "
                "change the kit's hook not to write the proxy URL, then `sbx run --name "
                f"{record.name} --recreate`. Then save again.",
                details={"files": leaks[:50]})
        tree.seek(0)
        made = driver.import_image(tree, tag, labels, base)
    if existing is not None and existing.id != made.id:
        with contextlib.suppress(SbxError):  # the old template, now untagged, if unused
            driver.untag_image(existing.id)
    if state == "running":
        on_notice(f"{record.name} was running: HOME was saved as it was at this moment")
    return Saved(tpl.read_template(tag, made.id, made.labels), home_bytes, state == "running")


def _spool(chunks: Any, into: Any, bound: int, what: str) -> None:
    """An engine stream into a temporary file, refused past ``bound`` bytes."""
    with contextlib.closing(chunks):
        size = 0
        for chunk in chunks:
            size += len(chunk)
            if size > bound:
                raise SbxError(Reason.INVALID_ARGUMENT,
                               f"{what} is larger than a template takes ({bound} bytes)",
                               hint="Remove what the template does not need (`sbx exec NAME "
                                    "-- du -sh ~/*`), then save again.")
            into.write(chunk)


def _token(ctx: AppContext, run_id: str) -> bytes | None:
    """The sandbox's proxy token (none without egress): what no template may hold."""
    raw = owned.read_bytes(runrecord.run_dir(ctx.state_home, run_id) / TOKEN_FILE,
                           max_bytes=4096)
    return raw.strip() or None if raw else None


def find(ctx: AppContext, tag: str) -> tpl.Template:
    """The template ``tag`` on this engine, or refused (``not_a_template``)."""
    ref = tag if ":" in tag.rpartition("/")[2] or tag.startswith("sha256:") else f"{tag}:latest"
    image = ctx.driver.image(ref)
    if image is None:
        raise tpl.not_a_template(tag, "no such image on this engine")
    return tpl.read_template(ref, image.id, image.labels)


def image_for(ctx: AppContext, tag: str, kit_set: KitSet) -> ImageInfo:
    """The image a `--template TAG` run starts from, once the kits loaded for it are the set
    the template recorded (sbx.domain.sandbox.templates.check_kits)."""
    template = find(ctx, tag)
    tpl.check_kits(template, fingerprint(kit_set, static_composition(kit_set)))
    image = ctx.driver.image(template.image_id)
    if image is None:  # removed in between
        raise tpl.not_a_template(tag, "no such image on this engine")
    return image


def kits_of(ctx: AppContext, tag: str, workload: str | None,
            mixins: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The WORKLOAD and --kit a `--template TAG` run loads: the template's when none given."""
    return tpl.kits_for(find(ctx, tag), workload, mixins)


def listing(ctx: AppContext) -> list[tpl.Template]:
    """Every template on the engine, one entry per tag."""
    found: list[tpl.Template] = []
    for raw in ctx.driver.list_labelled_images({tpl.TEMPLATE: "1"}):
        labels = raw.get("Labels") or {}
        for tag in raw.get("RepoTags") or ():
            if tag == "<none>:<none>":
                continue
            with contextlib.suppress(SbxError):
                found.append(tpl.read_template(tag, str(raw.get("Id", "")), labels))
    return sorted(found, key=lambda t: t.tag)


def remove(ctx: AppContext, tag: str) -> tpl.Template:
    """`sbx template rm TAG`: the tag goes (the image with its last tag); a non-template is
    refused, and so is one a sandbox still runs from."""
    template = find(ctx, tag)
    if not ctx.driver.untag_image(template.tag):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{template.tag} is in use by a container",
                       hint="Remove the sandboxes made from it first (`sbx ls`), then again.")
    return template


__all__ = ["Saved", "find", "image_for", "kits_of", "listing", "remove", "save"]
