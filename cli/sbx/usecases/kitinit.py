"""`sbx kit init [--mixin] [--from IMAGE] DIR`: a minimal kit that validates and runs.

- A **workload**: ``<name>.yaml`` (kind ``workload``, versioned ``provides``) and
  ``<name>.dockerfile`` building ``FROM`` the image the user names (``--from``, default
  :data:`DEFAULT_BASE`) with a ``CMD`` that says where it runs. sbx never pulls a base image
  implicitly, so the image must be present locally (``docker pull`` / ``sbx pull``) to run.
- A **mixin**: ``<name>.yaml`` only (declaration-only: it adds permissions, no files).

Both descriptors carry commented examples of the capabilities people add first. ``<name>`` is
the directory's name, which must be a kit capability name (lowercase letters, digits, ``-``,
``.``, ``+``). Nothing is overwritten: if any file to be written exists, nothing is written.
The kit is loaded back with the strict loader before the command reports success.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.versions import VersionError, check_name

DEFAULT_BASE: Final = "debian:bookworm-slim"
INITIAL_VERSION: Final = "0.1.0"
# An image reference as `docker build` reads it after FROM: one token, no spaces or newlines.
_IMAGE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")

_EXAMPLES: Final = """\
# Permissions are capabilities; a kit without them gets no network and no credentials.
# Examples (uncomment and adapt; `sbx kit validate` checks them):
# capabilities:
#   - type: com.docker.sandbox/network-policy@1
#     config:
#       runtime:
#         allow: [api.example.com]
#   - type: com.docker.sandbox/credential@1
#     config:
#       service: example          # `sbx secret set example` stores its value
#       phase: runtime
#       apiKey:
#         name: EXAMPLE_TOKEN     # the sandbox sees a sentinel; the proxy injects the secret
#         proxyManaged: true
#         inject:
#           - {domain: api.example.com, header: Authorization, format: "Bearer %s"}
"""

_WORKLOAD: Final = """\
# syntax=docker/sandbox-kit:3
# A workload kit made by `sbx kit init`. Check it: sbx kit validate {directory}
# See its sandbox: sbx kit inspect {directory}   Run it: sbx run {directory} [WORKSPACE]
schemaVersion: "3"
kind: workload
displayName: {display}
description: "A sandboxed workload built from {image}."
version: "{version}"
provides: ["{name}@{version}"]
{examples}"""

_DOCKERFILE: Final = """\
# The image of the {name} kit. sbx builds it on `sbx run` (without network) and never pulls
# implicitly: make the base image present first, e.g. `docker pull {image}`.
FROM {image}
# The sandbox runs as a non-root user on a read-only root; /tmp, $HOME and the workspace
# ($SBX_WORKSPACE) are writable. Replace the CMD with your agent, or pass `-- COMMAND`.
CMD ["sh", "-c", "echo \\"{name}: uid $(id -u) in $SBX_WORKSPACE\\""]
"""

_MIXIN: Final = """\
# syntax=docker/sandbox-kit:3
# A mixin kit made by `sbx kit init --mixin`: declarations only (add {name}.dockerfile to
# layer files onto the workload). Check it: sbx kit validate {directory}
# Compose it: sbx run WORKLOAD --kit {directory}
schemaVersion: "3"
kind: mixin
displayName: {display}
description: "Permissions and settings mixed into a workload."
version: "{version}"
provides: ["{name}@{version}"]
{examples}"""


@dataclass(frozen=True)
class KitInitResult:
    directory: Path
    name: str
    kind: str
    files: tuple[Path, ...]
    base_image: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "name": self.name, "kind": self.kind,
                "files": [str(f) for f in self.files], "base_image": self.base_image}


def init_kit(directory: str, *, cwd: Path, mixin: bool, base_image: str | None) -> KitInitResult:
    """Write the kit's files into ``directory`` (created if missing) and check them."""
    target = (cwd / directory) if not os.path.isabs(directory) else Path(directory)
    target = Path(os.path.abspath(target))
    name = _kit_name(target)
    if mixin and base_image is not None:
        raise SbxError(Reason.INVALID_ARGUMENT, "--from names a workload's base image; a mixin "
                       "created by --mixin has no dockerfile",
                       hint="Drop --from, or drop --mixin to create a workload.")
    image = None if mixin else _checked_image(
        DEFAULT_BASE if base_image is None else base_image)
    fields = {"name": name, "display": _display(name), "version": INITIAL_VERSION,
              "image": image or "", "directory": _shown(directory), "examples": _EXAMPLES}
    contents = {target / f"{name}.yaml": (_MIXIN if mixin else _WORKLOAD).format(**fields)}
    if not mixin:
        contents[target / f"{name}.dockerfile"] = _DOCKERFILE.format(**fields)
    existing = [path for path in contents if os.path.lexists(path)]
    if existing:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "refusing to overwrite " + ", ".join(str(p) for p in existing),
                       hint="Choose a new directory, or move those files away first.",
                       details={"existing": [str(p) for p in existing]})
    _write(target, contents)
    # deferred: the descriptor loader and its YAML parser (the kit commands' --help import this)
    from sbx.domain.kits.local import load_local_kit

    load_local_kit(str(target), cwd=cwd)  # the strict loader: what we wrote must validate
    return KitInitResult(target, name, "mixin" if mixin else "workload", tuple(contents),
                         image)


def _kit_name(target: Path) -> str:
    name = target.name
    try:
        check_name(name)
        if "/" in name:
            raise VersionError("namespaced")
    except VersionError:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{name!r} cannot name a kit: the directory's name becomes the kit's "
                       "name, which is lowercase letters, digits, '-', '.' and '+', starting "
                       "with a letter or digit",
                       hint="Create the kit in a directory named like that, e.g. my-agent.",
                       ) from None
    return name


def _checked_image(image: str) -> str:
    if not _IMAGE.fullmatch(image):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{image!r} is not an image reference",
                       hint=f"e.g. --from {DEFAULT_BASE} or --from registry.example/base:1")
    return image


def _display(name: str) -> str:
    words = re.split(r"[-._+]+", name)
    return " ".join(word[:1].upper() + word[1:] for word in words if word) or name


def _shown(directory: str) -> str:
    return directory if re.fullmatch(r"[A-Za-z0-9._/+-]+", directory) else repr(directory)


def _write(target: Path, contents: dict[Path, str]) -> None:
    try:
        target.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        try:
            for path, text in contents.items():
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                written.append(path)
        except BaseException:
            for path in written:  # all or nothing: no half-made kit
                path.unlink(missing_ok=True)
            raise
    except FileExistsError as exc:  # created between the check and the write
        raise SbxError(Reason.INVALID_ARGUMENT, f"refusing to overwrite {exc.filename}",
                       hint="Choose a new directory.") from None
    except OSError as exc:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"cannot write the kit into {target}: {exc.strerror}",
                       hint="Choose a directory you may write to.") from None


__all__ = ["DEFAULT_BASE", "KitInitResult", "init_kit"]
