"""``-e/--env NAME[=VALUE]`` and ``--env-file FILE``: the user's variables for the workload.

Values are never echoed: not in errors, the audit log, ``--json`` or the run record. Names that
would override sbx's boundary are refused (``invalid_argument``): the proxy variables (either
case), the CA-bundle variables, anything ``SBX_*``, and the variables a kit's ``credential@1``
fills with a sentinel — a real value there would carry a secret into the sandbox that the proxy
exists to keep out.

Files follow ``docker run --env-file``: one ``NAME=VALUE`` or ``NAME`` per line, ``#`` starts a
comment line, the value is taken verbatim (no quotes, no expansion). Files are read first, in
order, then the flags; a later definition of a name wins. ``NAME`` alone takes the host's value
and is left out when the host has none.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.host import lookup

BOUNDARY_NAMES: Final = frozenset({
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "FTP_PROXY",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
})
MAX_ENV_FILE_BYTES: Final = 1024 * 1024
_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def boundary_reason(name: str, credential_names: Collection[str]) -> str | None:
    """Why ``name`` may not be set by the user, or None."""
    if name.upper() in BOUNDARY_NAMES:
        return "it is part of sbx's egress boundary (proxy and CA settings)"
    if name.upper().startswith("SBX_"):
        return "SBX_* variables are set by sbx itself"
    if name in credential_names:
        return "a kit's credential@1 holds a sentinel there; the real value stays on the host"
    if name == "HOME":
        return "HOME is the sandbox's own writable tmpfs (size it with [sandbox] home_bytes)"
    return None


def parse_env(flags: Sequence[str], files: Sequence[str], *, host_env: Mapping[str, str],
              cwd: Path, credential_names: Collection[str] = ()) -> dict[str, str]:
    result: dict[str, str] = {}
    for file in files:
        for where, entry in _file_entries(file, cwd):
            _add(result, entry, where, host_env, credential_names)
    for entry in flags:
        _add(result, entry, "-e", host_env, credential_names)
    return result


def _file_entries(file: str, cwd: Path) -> list[tuple[str, str]]:
    path = Path(file) if Path(file).is_absolute() else cwd / file
    try:
        raw = lookup.read_head(path, MAX_ENV_FILE_BYTES + 1)
    except OSError as exc:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--env-file {file}: cannot be read ({exc.strerror or type(exc).__name__})"
                       ) from exc
    if len(raw) > MAX_ENV_FILE_BYTES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--env-file {file}: larger than {MAX_ENV_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--env-file {file}: not UTF-8 text (byte offset {exc.start})") from exc
    entries: list[tuple[str, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.removesuffix("\r").lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        entries.append((f"--env-file {file}:{number}", stripped))
    return entries


def _add(result: dict[str, str], entry: str, where: str, host_env: Mapping[str, str],
         credential_names: Collection[str]) -> None:
    name, sep, value = entry.partition("=")
    if not _NAME.match(name):
        shown = name if len(name) <= 40 and name.isprintable() else name[:40].encode(
            "unicode_escape").decode("ascii") + "..."
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{where}: {shown!r} is not a variable name",
                       hint="Use NAME=VALUE or NAME (letters, digits, _ . -; not starting with "
                            "a digit).")
    reason = boundary_reason(name, credential_names)
    if reason is not None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{where}: {name} cannot be set: {reason}",
                       details={"name": name})
    if not sep:
        if name not in host_env:
            return
        value = host_env[name]
    if "\0" in value:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{where}: the value of {name} holds a NUL byte")
    result[name] = value


__all__ = ["BOUNDARY_NAMES", "boundary_reason", "parse_env"]
