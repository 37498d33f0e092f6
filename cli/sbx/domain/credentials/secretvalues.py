"""What a secret value may be (non-empty, at most 64 KiB of UTF-8, valid as an HTTP field value),
how it is shown (masked), and the names of the places it may come from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:
    pass

# credential@1's service grammar (schema/capabilities/credential@1.json): a DNS-label-like name.
SERVICE_PATTERN: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
MAX_VALUE_BYTES: Final = 64 * 1024
# RFC 9110 field-value: no control character except HTAB (CR/LF would split the header).
_FORBIDDEN_CHARS: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_SET_HINT: Final = 'Pipe the value on stdin: printf %s "$TOKEN" | sbx secret set SERVICE'

# Sources (see the module docstring).
FILE: Final = "file"
KEYRING: Final = "keyring"
ENV: Final = "env"
COMMAND: Final = "command"
DYNAMIC: Final = frozenset({ENV, COMMAND})
MAX_COMMAND_CHARS: Final = 4096
COMMAND_TIMEOUT_S: Final = 30.0
ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")




@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a secret: never the value itself.

    ``masked`` and ``length`` are known for the file store only (a keyring is not unlocked,
    and a variable or command is not resolved, just to list them). ``reference`` is the
    variable or command of a dynamic source, or the keyring's name.
    """

    service: str
    length: int | None
    masked: str | None
    updated: datetime
    source: str = FILE
    reference: str | None = None

    @property
    def dynamic(self) -> bool:
        return self.source in DYNAMIC

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "source": self.source, "reference": self.reference,
                "masked": self.masked, "length": self.length,
                "updated": self.updated.isoformat(timespec="seconds")}


@dataclass(frozen=True)
class SecretSource:
    """Where a service's secret lives: ``file``, ``keyring`` (``reference`` = the backend id),
    ``env`` (the variable name) or ``command`` (the command line)."""

    kind: str
    reference: str | None = None

    def describe(self) -> str:
        if self.kind == ENV:
            return f"${self.reference}"
        if self.kind == COMMAND:
            return f"`{self.reference}`"
        return self.kind


MASK_CLEAR_FROM: Final = 20  # shorter values show nothing of themselves
MASK_MAX_PREFIX: Final = 6


def mask(value: str) -> str:
    """Mask a value for display: below 20 characters nothing of it (``****``); from 20 on a
    prefix of at most an eighth of it and at most 6 characters (``ghp_xJ****``), which names
    the kind of token without giving much of it away. The length is shown separately."""
    if len(value) < MASK_CLEAR_FROM:
        return "****"
    return value[:min(MASK_MAX_PREFIX, len(value) // 8)] + "****"


def validate_service(service: str) -> str:
    """Return ``service`` if it matches credential@1's grammar, else raise ``invalid_argument``."""
    if not SERVICE_PATTERN.fullmatch(service):
        raise SbxError(
            Reason.INVALID_ARGUMENT, f"{service!r} is not a valid service name",
            hint="Use 1-64 lowercase letters, digits and inner hyphens, as in a kit's "
                 "credential@1 `service` (e.g. github, openai-api).",
            details={"service": service})
    return service


def normalize_value(value: str) -> str:
    """Strip one trailing newline and check the value; raise ``invalid_argument`` if unusable.

    The messages never include the value or any part of it.
    """
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]
    if not value:
        raise SbxError(Reason.INVALID_ARGUMENT, "the secret value is empty", hint=_SET_HINT)
    if len(value.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the secret value is longer than {MAX_VALUE_BYTES} bytes")
    found = _FORBIDDEN_CHARS.search(value)
    if found:
        where = "a NUL byte" if found.group() == "\x00" else \
            f"control character U+{ord(found.group()):04X}"
        raise SbxError(
            Reason.INVALID_ARGUMENT, f"the secret value contains {where}",
            hint="Values are injected into HTTP headers: pass the bare token, on one line.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "the secret value is not valid UTF-8") from None
    return value


def read_value(stream: IO[bytes]) -> str:
    """Read a value from a byte stream (stdin), bounded, decoded as UTF-8 and normalized."""
    # Room for the limit plus a trailing CR LF, plus one byte to notice an oversized value
    # without reading an unbounded stream into memory.
    raw = stream.read(MAX_VALUE_BYTES + 3)
    if len(raw) > MAX_VALUE_BYTES + 2:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the secret value is longer than {MAX_VALUE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SbxError(Reason.INVALID_ARGUMENT, "the secret value is not valid UTF-8") from None
    return normalize_value(text)


# -- dynamic sources -------------------------------------------------------------------------------


def validate_env_name(name: str) -> str:
    """A variable name for ``--from-env`` (``[A-Za-z_][A-Za-z0-9_]*``), else
    ``invalid_argument``."""
    if not ENV_NAME.fullmatch(name):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{name!r} is not an environment variable name",
                       hint="Name the variable without `$`, e.g. --from-env GH_TOKEN.")
    return name


def validate_command(command: str) -> str:
    """A command for ``--from-command``: one line, not empty, at most 4096 characters."""
    if not command.strip() or "\n" in command or "\r" in command or "\0" in command \
            or len(command) > MAX_COMMAND_CHARS:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "the command must be one non-empty line of at most "
                       f"{MAX_COMMAND_CHARS} characters",
                       hint="e.g. --from-command 'gh auth token'")
    return command
