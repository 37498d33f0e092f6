"""What a secret value may be (non-empty, at most 64 KiB of UTF-8, valid as an HTTP field value),
how it is shown (masked), and where a dynamic one comes from (a variable of sbx's environment,
or a command run on the host at each run start)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:
    pass
from sbx.seams.host.shell import CommandTimeout, run_shell

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


def unresolved(service: str, what: str, fix: str) -> SbxError:
    return SbxError(Reason.CREDENTIAL_UNBOUND, f"the secret for {service!r}: {what}", hint=fix,
                    details={"service": service})


def resolve_env(service: str, name: str, env: Mapping[str, str]) -> str:
    """The value of variable ``name`` in ``env`` (sbx's own environment), checked."""
    value = env.get(name)
    if not value:
        raise unresolved(service, f"${name} is not set in sbx's environment",
                          f"Export {name} in the shell that runs sbx, or store the value itself: "
                          f"sbx secret set {service}")
    try:
        return normalize_value(value)
    except SbxError as error:  # the messages never include the value
        raise unresolved(service, f"${name} holds no usable value: {error.message}",
                          f"Put the bare token in {name}.") from None


def run_command(service: str, command: str, env: Mapping[str, str], *,
                timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run ``command`` with ``/bin/sh -c`` on the host and return what it prints, checked.

    Its stdin is empty and its stderr discarded (a helper may print anything there); stdout is
    read no further than the value limit, within ``timeout`` seconds. The command runs in a
    session of its own, ended whole when it exits or times out (sbx.seams.host.shell): nothing
    it starts in the background outlives it. Messages name the command and its exit status,
    never output.
    """
    fix = f"Run `{command}` yourself to see why, then retry."
    try:
        done = run_shell(command, env=env, timeout=timeout, max_output=MAX_VALUE_BYTES + 2)
    except CommandTimeout:
        raise SbxError(Reason.COMMAND_TIMEOUT,
                       f"the secret for {service!r}: its command did not finish within "
                       f"{timeout:.0f}s; it was ended with everything it started", hint=fix,
                       details={"service": service}) from None
    except OSError as exc:
        raise unresolved(service, f"cannot run its command ({exc.strerror})", fix) from None
    if done.overflow:
        raise unresolved(service, f"its command printed more than {MAX_VALUE_BYTES} bytes",
                          fix)
    if done.returncode != 0:
        raise unresolved(service, f"its command `{command}` failed (exit {done.returncode})",
                          fix)
    try:
        return normalize_value(done.stdout.decode("utf-8"))
    except (UnicodeDecodeError, SbxError):
        raise unresolved(service, f"its command `{command}` printed no usable value (one "
                                   "line of UTF-8, no control characters)", fix) from None
