"""Templates (`sbx save NAME TAG`, `--template TAG`): a named sandbox's image and HOME kept as a
local image, and the decisions about one, without an engine.

A template is the sandbox's per-run image (the kit set's image plus what its install hooks
made) with HOME's content under :data:`HOME_DIR`, and nothing of the run's boundary: sbx's
generated files (:data:`SCRUBBED`, the startup script holds the proxy URL and its token), the
egress CA (the system bundle gets back the image's own certificates) and the credential files
the start-up step put in HOME are left out. Its labels say it is one, which kits (by the
digests of their descriptors and recipes) and which sbx made it; a run from it loads those
kits again and refuses if they changed, so the policy it runs under is the recorded one.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final, cast

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.mountedfiles import STAGED_DIR

TEMPLATE: Final = label_keys.TEMPLATE  # "1" on every template
TEMPLATE_KITS: Final = f"{label_keys.PREFIX}.template.kits"  # the kits' fingerprint, JSON
TEMPLATE_FROM: Final = f"{label_keys.PREFIX}.template.from"  # the sandbox it was saved from
TEMPLATE_HOME: Final = f"{label_keys.PREFIX}.template.home"  # HOME's path in that sandbox
TEMPLATE_CREATED: Final = f"{label_keys.PREFIX}.template.created"
# HOME's saved content, in the image (copied into the new sandbox's HOME by its create step).
HOME_DIR: Final = "/.sbx-template/home"
# What sbx itself writes into a per-run image for one run: its generated startup script and
# staged files (/.sbx) and the egress CA (/etc/sbx).
SCRUBBED: Final = ("/.sbx", "/etc/sbx")
# What the engine puts into every container (and so into an export of one), not the image's.
ENGINE_ADDED: Final = (".dockerenv", "etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/mtab",
                       "dev/console", "dev/pts", "dev/shm")
# Repositories sbx names its own images in: a template there would be gc's or a cache's.
OWN_REPOSITORIES: Final = ("sbx-run/", "sbx-kit", "sbx-assembled/", "sbx-prep/", "sbx-use/",
                           "sbx-installed/")
_TAG: Final = re.compile(r"[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
                         r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")


@dataclass(frozen=True)
class Template:
    """What a template's labels say."""

    tag: str
    image_id: str
    kits: Mapping[str, Any]  # the fingerprint (sbx.usecases.namedkits.fingerprint)
    version: str
    source: str
    home: str
    created: str

    @property
    def workload(self) -> str:
        return str(self.kits.get("workload", ""))

    @property
    def mixins(self) -> tuple[str, ...]:
        return tuple(str(m) for m in self.kits.get("mixins") or ())

    def as_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "id": self.image_id, "workload": self.workload,
                "kits": list(self.mixins), "sbx_version": self.version,
                "saved_from": self.source, "created": self.created}


def check_tag(tag: str) -> str:
    """A tag a template may take: a plain local image reference, not one of sbx's own
    repositories (gc and the caches own those)."""
    if not _TAG.fullmatch(tag) or len(tag) > 255:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{tag[:80]!r} is not an image tag sbx can save to: lower-case "
                       "repository[:tag]", hint="e.g. sbx save NAME my-agent:v1")
    if tag.startswith(OWN_REPOSITORIES):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{tag} is in one of sbx's own repositories ({', '.join(OWN_REPOSITORIES)}"
                       "), which gc and its caches manage", hint="e.g. sbx save NAME my-agent:v1")
    return tag if ":" in tag.rpartition("/")[2] else f"{tag}:latest"


def template_labels(*, kits: Mapping[str, Any], version: str, source: str, home: str,
                    created: float) -> dict[str, str]:
    """A template's own labels; every run label of the image it came from is set empty by
    the caller (:func:`sbx.base.labels.own_labels`), so gc never takes it for a run's."""
    return {TEMPLATE: "1", TEMPLATE_KITS: json.dumps(dict(kits), sort_keys=True),
            label_keys.VERSION: version, TEMPLATE_FROM: source, TEMPLATE_HOME: home,
            TEMPLATE_CREATED: str(int(created))}


def is_template(labels: Mapping[str, str]) -> bool:
    return label_keys.value(labels, TEMPLATE) == "1"


def read_template(tag: str, image_id: str, labels: Mapping[str, str]) -> Template:
    """The template ``tag`` is, or refused (``not_a_template``) with what to do."""
    if not is_template(labels):
        raise not_a_template(tag, "it has no sbx template label")
    try:
        kits = json.loads(labels.get(TEMPLATE_KITS) or "")
    except ValueError:
        kits = None
    if not isinstance(kits, dict) or not isinstance(kits.get("workload"), str) \
            or not isinstance(kits.get("kits"), dict):
        raise not_a_template(tag, f"its label {TEMPLATE_KITS} does not name a kit set")
    return Template(tag, image_id, kits, labels.get(label_keys.VERSION, ""),
                    labels.get(TEMPLATE_FROM, ""), labels.get(TEMPLATE_HOME, ""),
                    labels.get(TEMPLATE_CREATED, ""))


def not_a_template(tag: str, why: str) -> SbxError:
    return SbxError(Reason.NOT_A_TEMPLATE, f"{tag} is not an sbx template: {why}",
                    hint="`sbx template ls` lists the templates; make one with `sbx save NAME "
                         "TAG` from a named sandbox.", details={"tag": tag})


def kits_for(template: Template, workload: str | None,
             mixins: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The kits a run from ``template`` loads: the recorded ones when none are given; given
    ones are loaded as given and checked by :func:`check_kits` once resolved."""
    if workload is None and not mixins:
        return template.workload, template.mixins
    if workload is None:
        raise SbxError(Reason.TEMPLATE_MISMATCH,
                       f"--kit without a WORKLOAD: {template.tag} was saved from "
                       f"{template.workload}", hint=_mismatch_hint(template))
    return workload, tuple(mixins)


def check_kits(template: Template, loaded: Mapping[str, Any]) -> None:
    """The kits loaded now (their fingerprint) must be the set the template recorded: the
    same workload and mixins, each with the same descriptor and recipe digests, so the run
    gets the hardening, admission and egress policy the template was made under."""
    recorded = template.kits
    problems: list[str] = []
    if loaded.get("workload") != recorded.get("workload"):
        problems.append(f"workload {loaded.get('workload')} (saved with "
                        f"{recorded.get('workload')})")
    now, then = sorted(loaded.get("mixins") or ()), sorted(recorded.get("mixins") or ())
    if now != then:
        problems.append(f"mixins {', '.join(now) or 'none'} (saved with "
                        f"{', '.join(then) or 'none'})")
    if not problems:
        kits_now, kits_then = loaded.get("kits") or {}, recorded.get("kits") or {}
        changed = [kit for kit in sorted(kits_then) if kits_now.get(kit) != kits_then[kit]]
        if changed:
            problems.append("changed since the save: " + ", ".join(changed))
    if problems:
        raise SbxError(Reason.TEMPLATE_MISMATCH,
                       f"the kits do not match {template.tag}'s: " + "; ".join(problems),
                       hint=_mismatch_hint(template), details={"tag": template.tag,
                                                               "problems": problems})


def _mismatch_hint(template: Template) -> str:
    return (f"Leave out WORKLOAD and --kit (the template names its own: "
            f"{' '.join([template.workload, *(f'--kit {m}' for m in template.mixins)])}); "
            "if those kits changed since, save a new template from a sandbox of the kits as "
            "they are now.")


def staged_targets(startup_script: str) -> list[str]:
    """The paths the start-up step of sbx.domain.sandbox.mountedfiles copies kit files to
    (credential files among them), read from the generated startup script: that step is one
    quoted ``sh -c`` word, whose lines ``... cat /.sbx/files/N > TARGET && chmod`` name them."""
    lines = startup_script.splitlines()
    while lines and lines[0].startswith("#"):  # its header (shebang, comment) only
        lines.pop(0)
    try:
        words = shlex.split("\n".join(lines))
    except ValueError:
        return []
    found: list[str] = []
    for word in words:
        if f"{STAGED_DIR}/" not in word:
            continue
        for inner in word.splitlines():
            try:
                parts = shlex.split(inner)
            except ValueError:
                continue
            found.extend(parts[at + 1] for at in range(1, len(parts) - 1)
                         if parts[at] == ">" and parts[at - 1].startswith(f"{STAGED_DIR}/"))
    return found


def restored_bundle(bundle: bytes, ca_pem: bytes) -> bytes | None:
    """The image's own CA bundle without what sbx's create step appended (its CA and any
    upstream proxy CA: sbx.domain.egress.plan.trust_bundle); None when sbx appended nothing."""
    if not ca_pem or not bundle.endswith(ca_pem):
        return None
    base = bundle[:-len(ca_pem)].rstrip(b"\n")
    return base + b"\n" if base else b""


def template_archive(image: IO[bytes], home: IO[bytes], target: IO[bytes], *, home_name: str,
                     leave_out: Iterable[str], replace: Mapping[str, bytes],
                     needles: Sequence[bytes], max_home_bytes: int) -> tuple[int, list[str]]:
    """The template's whole file system as one tar (``target``), from the sandbox image's
    export (``image``) without sbx's per-run files (:data:`SCRUBBED`) and what the engine adds
    to every container, with ``replace``'s contents (the restored CA bundle), plus HOME's
    archive (``home``, top entry ``home_name``) under :data:`HOME_DIR` without ``leave_out``
    (relative to HOME). Returns HOME's bytes of file data and the names of the files that hold
    one of ``needles`` (the proxy token); HOME over ``max_home_bytes`` is refused."""
    leaks: list[str] = []
    wanted = [n for n in needles if n]
    with tarfile.open(fileobj=target, mode="w|") as writer:
        _image_entries(image, writer, replace, wanted, leaks)
        total = _home_entries(home, writer, home_name, leave_out, max_home_bytes, wanted, leaks)
    return total, leaks


def _dropped(name: str) -> bool:
    name = name.strip("/").removeprefix("./")
    cut = (*(p.strip("/") for p in SCRUBBED), HOME_DIR.strip("/").split("/")[0])
    return name in ENGINE_ADDED or any(name == p or name.startswith(p + "/") for p in cut)


def _image_entries(source: IO[bytes], writer: tarfile.TarFile, replace: Mapping[str, bytes],
                   needles: Sequence[bytes], leaks: list[str]) -> None:
    swapped = {k.strip("/"): v for k, v in replace.items()}
    with tarfile.open(fileobj=source, mode="r|") as reader:
        for entry in reader:
            name = entry.name.strip("/").removeprefix("./")
            if _dropped(name) or (entry.islnk() and _dropped(entry.linkname)):
                continue
            if entry.isfile() and name in swapped:
                data = swapped[name]
                entry.size = len(data)
                _add(writer, entry, io.BytesIO(data), needles, leaks)
            elif entry.isfile():
                _add(writer, entry, reader.extractfile(entry), needles, leaks)
            else:
                writer.addfile(entry)


def _home_entries(source: IO[bytes], writer: tarfile.TarFile, home_name: str,
                  leave_out: Iterable[str], max_bytes: int, needles: Sequence[bytes],
                  leaks: list[str]) -> int:
    """HOME's entries renamed under :data:`HOME_DIR`; links kept as links, devices, FIFOs
    and sockets dropped."""
    skip = {p.strip("/") for p in leave_out}
    total = 0
    parents = HOME_DIR.strip("/").split("/")
    for index in range(1, len(parents)):
        directory = tarfile.TarInfo("/".join(parents[:index]))
        directory.type, directory.mode = tarfile.DIRTYPE, 0o755
        writer.addfile(directory)
    with tarfile.open(fileobj=source, mode="r|") as reader:
        for entry in reader:
            first, _, rest = entry.name.partition("/")
            if first != home_name or rest in skip:
                continue
            if not (entry.isfile() or entry.isdir() or entry.issym() or entry.islnk()):
                continue
            entry.name = HOME_DIR.strip("/") + (f"/{rest}" if rest else "")
            if entry.islnk():
                _, _, linked = entry.linkname.partition("/")
                entry.linkname = HOME_DIR.strip("/") + f"/{linked}"
            if entry.isfile():
                total += entry.size
                if total > max_bytes:
                    raise SbxError(Reason.INVALID_ARGUMENT,
                                   f"HOME holds more than {max_bytes} bytes of files",
                                   hint="Remove what the template does not need from HOME "
                                        "(`sbx exec NAME -- du -sh ~/*`), then save again.")
                _add(writer, entry, reader.extractfile(entry), needles, leaks)
            else:
                writer.addfile(entry)
    return total


def _add(writer: tarfile.TarFile, entry: tarfile.TarInfo, data: IO[bytes] | None,
         needles: Sequence[bytes], leaks: list[str]) -> None:
    scanning = _Scanning(data, needles)
    writer.addfile(entry, cast(IO[bytes], scanning) if data is not None else None)
    if scanning.found:
        leaks.append("/" + entry.name.strip("/"))


class _Scanning:
    """A file read through, noting whether it holds one of ``needles`` (across reads)."""

    def __init__(self, data: IO[bytes] | None, needles: Sequence[bytes]) -> None:
        self._data = data
        self._needles = needles
        self._keep = max((len(n) for n in needles), default=1) - 1
        self._tail = b""
        self.found = False

    def read(self, size: int = -1) -> bytes:
        block = self._data.read(size) if self._data is not None else b""
        if self._needles and not self.found and block:
            window = self._tail + block
            self.found = any(n in window for n in self._needles)
            self._tail = window[-self._keep:] if self._keep else b""
        return block


__all__ = ["HOME_DIR", "OWN_REPOSITORIES", "SCRUBBED", "TEMPLATE", "TEMPLATE_KITS", "Template",
           "check_kits", "check_tag", "is_template", "kits_for", "not_a_template",
           "read_template", "restored_bundle", "staged_targets", "template_archive",
           "template_labels"]
