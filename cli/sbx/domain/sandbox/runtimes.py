"""The OCI runtime a sandbox's containers run on (``--runtime`` over ``[sandbox] runtime``), and
the rule that refuses one the engine lacks.

The engine runs a container on its default runtime (usually runc) when it is not asked for
another; a sandbox that asked for gVisor or Kata and quietly got runc would be weaker than the
user chose, so a runtime the engine's ``/info`` does not list refuses the run before anything
is created (``runtime_missing``). One function per rule, used by ``sbx run`` (full and cached
plans, named sandboxes at their start) and by ``sbx doctor``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:
    from sbx.base.config import Config
    from sbx.seams.engine import EngineInfo

FLAG = "--runtime"


@dataclass(frozen=True)
class RuntimeChoice:
    """A runtime asked for, and where it was asked (shown in a refusal)."""

    name: str
    source: str  # "--runtime", "[sandbox] runtime (<path>:<line>)", or a named sandbox's
    named: str | None = None  # the named sandbox created on it, at its start


def choose_runtime(flag: str | None, config: Config) -> RuntimeChoice | None:
    """``--runtime`` beats ``[sandbox] runtime``; None: the engine's default. A flag gets the
    config file's rule for the name (the file's value was checked when it was read)."""
    if flag is not None:
        message = _name_problem(flag)
        if message is not None:
            raise SbxError(Reason.INVALID_ARGUMENT, f"{FLAG} {flag!r} is refused: {message}",
                           hint="Pass a runtime name the engine lists (`sbx doctor` shows "
                                "them), e.g. --runtime runsc.",
                           details={"flag": FLAG, "problem": message})
        return RuntimeChoice(flag, FLAG)
    setting = config.sandbox.runtime
    if setting.value is None:
        return None
    return RuntimeChoice(setting.value, f"[sandbox] runtime ({setting.source})")


def check_runtime(info: EngineInfo, choice: RuntimeChoice | None) -> None:
    """Refuse a runtime the engine has not registered (never a silent fall-back to runc)."""
    if choice is None or choice.name in info.runtimes:
        return
    name = choice.name
    listed = ", ".join(info.runtimes) or "none listed"
    default = f"; default {info.default_runtime}" if info.default_runtime else ""
    hint = (f"Register {name} with the engine on its host: `dockerd --add-runtime "
            f"{name}=$(command -v {name})` (or \"runtimes\" in /etc/docker/daemon.json, then "
            "`sudo systemctl reload docker`)")
    others = [r for r in info.runtimes if r != name]
    if choice.named is not None:
        hint += (f"; or make it again on one the engine has: `sbx run --name {choice.named} "
                 f"--recreate {FLAG} {info.default_runtime or 'runc'}`.")
    elif choice.source != FLAG:
        where = choice.source.partition("(")[2].rstrip(")")
        hint += f"; or remove `runtime` at {where} to run on the engine's default."
    elif others:
        hint += f"; or run on one it has: `{FLAG} {(info.default_runtime or others[0])}`."
    else:
        hint += "."
    raise SbxError(
        Reason.RUNTIME_MISSING,
        f"{choice.source} asks for the OCI runtime {name!r}, which the engine does not have "
        f"(it has: {listed}{default}); the sandbox is not run on another runtime",
        hint=hint,
        details={"runtime": name, "source": choice.source,
                 "engine_runtimes": list(info.runtimes),
                 "default_runtime": info.default_runtime or None})


def _name_problem(name: str) -> str | None:
    """What is wrong with ``name`` by the config schema's rule for ``[sandbox] runtime``."""
    # Only a --runtime flag pays for the schema: a run from the plan cache loads no config code.
    from sbx.base.config.check import config_schema, strict_validator, value_message

    schema = config_schema()["properties"]["sandbox"]["properties"]["runtime"]
    errors = sorted(strict_validator(schema).iter_errors(name), key=lambda e: str(e.validator))
    return value_message(errors[0], "sandbox.runtime", name) if errors else None


__all__ = ["FLAG", "RuntimeChoice", "check_runtime", "choose_runtime"]
