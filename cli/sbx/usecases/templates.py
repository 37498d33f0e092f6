"""`sbx save NAME TAG`, `sbx template ls|rm`, and the template a `--template TAG` run starts
from (sbx.domain.sandbox.templates says what a template holds and leaves out).

Saving reads the sandbox's HOME through the engine's archive endpoint, running or stopped (a
running sandbox is not paused: HOME is taken as it is at that moment), and makes the template
in a helper container of the sandbox's own image, never the sandbox's container: the helper
removes sbx's per-run files, gives the system CA bundle back its own certificates, receives
HOME under /.sbx-template/home and is committed. The committed image is then read back whole
and refused (removed) if any file or its config holds the sandbox's proxy token.
"""

from __future__ import annotations

import contextlib
import posixpath
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sbx import __version__
from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.labels import own_labels
from sbx.base.reasons import Reason
from sbx.domain.egress.plan import CA_FILE, SYSTEM_BUNDLES
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox import templates as tpl
from sbx.domain.sandbox.hardening import Limits, build_create_step_spec
from sbx.domain.sandbox.lifecycle import CREATE_STEP_CAP_DROP, KEEPALIVE, STARTUP_SCRIPT, _tar
from sbx.seams import owned
from sbx.seams.engine import ImageInfo
from sbx.seams.signals import deferred_interrupts
from sbx.usecases.context import AppContext
from sbx.usecases.explain import static_composition
from sbx.usecases.named.listing import load_named
from sbx.usecases.namedkits import fingerprint

if TYPE_CHECKING:
    from sbx.domain.kits.kitset import KitSet

MAX_HOME_BYTES: Final = 8 << 30
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
    # Run labels of the sandbox's image (and the helper's, which a commit keeps) set empty:
    # a template is no run's, and gc never removes it (sbx.usecases.gc.judging).
    labels = own_labels({**base.labels, **helper}, {
        **template_labels, label_keys.MANAGED: "true", label_keys.HOME: ctx.home_hash})
    with tempfile.TemporaryFile() as raw, tempfile.TemporaryFile() as rewritten:
        chunks = driver.archive_read(str(record.container_id), home)
        with contextlib.closing(chunks):  # type: ignore[type-var]
            size = 0
            for chunk in chunks:
                size += len(chunk)
                if size > MAX_HOME_BYTES + (64 << 20):  # file data plus the archive's headers
                    raise SbxError(Reason.INVALID_ARGUMENT,
                                   f"{record.name}'s HOME is larger than a template takes "
                                   f"({MAX_HOME_BYTES} bytes)",
                                   hint=f"Remove what the template does not need from HOME "
                                        f"(`sbx exec {record.name} -- du -sh ~/*`), then save "
                                        "again.")
                raw.write(chunk)
        raw.seek(0)
        home_bytes = tpl.home_entries(raw, rewritten, home_name=posixpath.basename(home),
                                      leave_out=leave_out, max_bytes=MAX_HOME_BYTES)
        rewritten.seek(0)
        made = _commit(ctx, base, tag, labels, helper, rewritten, read)
    _refuse_leaks(ctx, record.run_id, made, helper)
    if existing is not None and existing.id != made.id:
        with contextlib.suppress(SbxError):  # the old template, now untagged, if unused
            driver.untag_image(existing.id)
    if state == "running":
        on_notice(f"{record.name} was running: HOME was saved as it was at this moment")
    return Saved(tpl.read_template(tag, made.id, made.labels), home_bytes, state == "running")


def _commit(ctx: AppContext, base: ImageInfo, tag: str, labels: dict[str, str],
            helper: dict[str, str], home_tar: Any,
            read: Mapping[str, bytes | None]) -> ImageInfo:
    """The template, made in a helper container of the sandbox's image (no network, the
    create step's shape): sbx's per-run files removed, the CA bundle restored, HOME added."""
    driver = ctx.driver
    config = ctx.load_config()
    spec = build_create_step_spec(image=base.id, limits=Limits.from_sandbox(config.sandbox),
                                  workdir="/", labels=helper, image_labels=base.labels,
                                  keepalive=KEEPALIVE, cap_drop=CREATE_STEP_CAP_DROP)
    container_id: str | None = None
    try:
        with deferred_interrupts():
            container_id = driver.create(spec)
        driver.start(container_id)
        output, status = driver.exec_stream(
            container_id, ["/bin/sh", "-c", 'rm -rf "$@"', "sh", *tpl.SCRUBBED,
                           tpl.HOME_DIR.rsplit("/", 1)[0]], user="0:0", workdir=None)
        for _stream, _chunk in output:
            pass
        if status() != 0:
            raise SbxError(Reason.CREATE_FAILED, "removing sbx's per-run files from the "
                           "template failed")
        ca_pem = read.get(CA_FILE) or b""
        bundles = [(path, tpl.restored_bundle(data, ca_pem)) for path in SYSTEM_BUNDLES
                   if (data := read.get(path)) is not None]
        restored = [(path, data, 0o644, 0, 0) for path, data in bundles if data is not None]
        if restored:
            driver.put_archive(container_id, "/", _tar(restored))
        driver.archive_write(container_id, "/", home_tar)
        driver.kill(container_id)
        driver.wait(container_id, 30)
        return driver.commit(container_id, tag, labels, base)
    finally:
        if container_id is not None:
            with deferred_interrupts():
                driver.remove_container(container_id)


def _refuse_leaks(ctx: AppContext, run_id: str, made: ImageInfo,
                  helper: dict[str, str]) -> None:
    """The template's files and config must not hold the sandbox's proxy token; if one does,
    the template is removed and the save refused, naming the files."""
    run_dir = runrecord.run_dir(ctx.state_home, run_id)
    token = owned.read_bytes(run_dir / TOKEN_FILE, max_bytes=4096)
    if not token or not token.strip():
        return
    needle = token.strip()
    found: list[str] = []
    if any(needle.decode("ascii", "replace") in item for item in made.env):
        found.append("(the image's environment)")
    chunks = ctx.driver.export_image(made.id, helper)
    with contextlib.closing(chunks):
        for name in tpl.find_needles(chunks, [needle]):
            found.append("/" + name)
            if len(found) >= 10:
                break
    if not found:
        return
    ctx.driver.remove_image(made.id)
    raise SbxError(Reason.TEMPLATE_LEAK,
                   "the sandbox's proxy token is in " + ", ".join(found) + "; no template "
                   "was kept", hint="Remove those files from the sandbox (HOME's are under "
                   f"{tpl.HOME_DIR} here: the same path in its HOME), then save again.",
                   details={"files": found})


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
