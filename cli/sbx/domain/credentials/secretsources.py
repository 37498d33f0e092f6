"""A dynamic secret's value, resolved at each run start: a variable of sbx's environment, or what
a command run on the host prints (through :mod:`sbx.seams.host.shell`)."""

from __future__ import annotations

from collections.abc import Mapping

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secretvalues import COMMAND_TIMEOUT_S, MAX_VALUE_BYTES, normalize_value
from sbx.seams.host.shell import CommandTimeout, run_shell


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
