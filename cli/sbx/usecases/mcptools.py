"""The tools `sbx mcp serve` offers: each calls the use case its CLI command calls.

A refusal (SbxError) is a tool result with ``isError`` and its reason code and fix hint, as
the ``--json`` envelope carries them; a workload's output is captured and bounded, never
written to stdout (the protocol's channel).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, Any, Final

from sbx import __version__
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import mcpwire
from sbx.seams.mcpwire import Tool
from sbx.usecases import fleet
from sbx.usecases.context import NO_STREAMS, AppContext
from sbx.usecases.named import clone, copy, everywhere, removal, start
from sbx.usecases.run import entry
from sbx.usecases.run.request import RunRequest

MAX_OUTPUT_BYTES: Final = 64 * 1024  # each stream of a command's output a tool returns
MAX_COPY_BYTES: Final = 1 << 30  # sbx cp's default --max-size


class _Collected:
    """What one call said besides its result: bounded output per stream, warnings, notices."""

    def __init__(self) -> None:
        self.output: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = False
        self.warnings: list[str] = []
        self.notices: list[str] = []

    def on_output(self, stream: str, chunk: bytes | memoryview) -> None:
        buffer = self.output["stderr" if stream == "stderr" else "stdout"]
        room = MAX_OUTPUT_BYTES - len(buffer)
        if len(chunk) > room:
            self.truncated = True
        buffer.extend(bytes(chunk[:max(room, 0)]))

    @contextmanager
    def progress(self, title: str) -> Any:
        self.notices.append(title)
        yield lambda _line: None

    def extra(self) -> dict[str, Any]:
        return {"warnings": self.warnings, "notices": self.notices}


def _text(data: Mapping[str, Any], *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(data, sort_keys=True)}],
            "structuredContent": dict(data), "isError": is_error}


def refusal(error: SbxError) -> dict[str, Any]:
    return _text({"reason": error.reason.value, "message": error.message, "hint": error.hint,
                  "exit_code": int(error.exit_status)}, is_error=True)


def _strings(arguments: Mapping[str, Any], key: str, *, required: bool = False) -> tuple[str, ...]:
    value = arguments.get(key)
    if value is None and not required:
        return ()
    if not isinstance(value, list) or (not value and required) \
            or not all(isinstance(item, str) for item in value):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{key} must be a list of strings"
                       + (" (not empty)" if required else ""),
                       hint=f'Give {key} as e.g. ["sh", "-c", "echo hi"].')
    return tuple(value)


def _string(arguments: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = arguments.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise SbxError(Reason.INVALID_ARGUMENT, f"{key} must be a non-empty string",
                       hint=f"Give {key} as a string.")
    return value


def _output(collected: _Collected) -> dict[str, Any]:
    return {"stdout": collected.output["stdout"].decode("utf-8", "replace"),
            "stderr": collected.output["stderr"].decode("utf-8", "replace"),
            "truncated": collected.truncated}


def _run(app: AppContext, arguments: Mapping[str, Any], collected: _Collected) -> dict[str, Any]:
    timeout = arguments.get("timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        raise SbxError(Reason.INVALID_ARGUMENT, "timeout_s must be a positive number",
                       hint="Give timeout_s in seconds, e.g. 60.")
    request = RunRequest(workload=_string(arguments, "workload", required=True) or "",
                         workspace=_string(arguments, "workspace"),
                         access=_string(arguments, "access"),
                         kits=_strings(arguments, "kits"),
                         command=_strings(arguments, "command") or None,
                         timeout_s=float(timeout) if timeout is not None else None,
                         capture_output=True, keep=False)
    result = entry.run(app, request, on_output=collected.on_output,
                       progress=collected.progress, on_warning=collected.warnings.append,
                       on_notice=collected.notices.append)
    collected.on_output("stdout", result.stdout)
    collected.on_output("stderr", result.stderr)
    collected.truncated = collected.truncated or result.truncated
    return {"exit_code": result.exit_code, "run_id": result.run_id, **_output(collected)}


def _create(app: AppContext, arguments: Mapping[str, Any],
            collected: _Collected) -> dict[str, Any]:
    request = RunRequest(workload=_string(arguments, "workload", required=True) or "",
                         workspace=_string(arguments, "workspace"),
                         access=_string(arguments, "access"), kits=_strings(arguments, "kits"),
                         name=_string(arguments, "name", required=True),
                         clone=_flag(arguments, "clone"))
    result = entry.create(app, request, on_output=collected.on_output,
                          progress=collected.progress, on_warning=collected.warnings.append,
                          on_notice=collected.notices.append)
    return {"name": result.name, "exit_code": result.exit_code}


def _exec(app: AppContext, arguments: Mapping[str, Any], collected: _Collected) -> dict[str, Any]:
    name = _string(arguments, "name", required=True) or ""
    exit_code = start.exec_started(
        fleet.for_sandbox(app, name), name,  # on the engine it lives on, as `sbx exec`
        _strings(arguments, "command", required=True), NO_STREAMS, env=(),
        interactive=False, tty=False, on_output=collected.on_output,
        on_warning=collected.warnings.append, on_notice=collected.notices.append)
    return {"exit_code": exit_code, **_output(collected)}


def _stop(app: AppContext, arguments: Mapping[str, Any], collected: _Collected) -> dict[str, Any]:
    names = [_string(arguments, "name", required=True) or ""]
    return {"stopped": removal.stop(fleet.for_sandbox(app, names[0]), names,
                                    on_warning=collected.warnings.append)}


def _rm(app: AppContext, arguments: Mapping[str, Any], collected: _Collected) -> dict[str, Any]:
    names = [_string(arguments, "name", required=True) or ""]
    return {"removed": removal.remove(fleet.for_sandbox(app, names[0]), names,
                                      on_warning=collected.warnings.append)}


def _ls(app: AppContext, arguments: Mapping[str, Any], collected: _Collected) -> dict[str, Any]:
    return {"sandboxes": [status.as_dict() for status in
                          everywhere.list_everywhere(app, include_runs=False).sandboxes]}


def _flag(arguments: Mapping[str, Any], key: str) -> bool:
    value = arguments.get(key, False)
    if not isinstance(value, bool):
        raise SbxError(Reason.INVALID_ARGUMENT, f"{key} must be true or false",
                       hint=f'Give "{key}": true or leave it out.')
    return value


def _diff(app: AppContext, arguments: Mapping[str, Any], collected: _Collected) -> dict[str, Any]:
    collected.on_output("stdout", clone.diff(app, _string(arguments, "name", required=True) or ""))
    return {"diff": collected.output["stdout"].decode("utf-8", "replace"),
            "truncated": collected.truncated}


def _fetch(app: AppContext, arguments: Mapping[str, Any],
           collected: _Collected) -> dict[str, Any]:
    return clone.fetch(app, _string(arguments, "name", required=True) or "",
                       force=_flag(arguments, "force"))


def _cp(app: AppContext, arguments: Mapping[str, Any], collected: _Collected) -> dict[str, Any]:
    result = copy.copy(app, _string(arguments, "source", required=True) or "",
                       _string(arguments, "destination", required=True) or "",
                       max_bytes=MAX_COPY_BYTES)
    return result.as_dict()


_STR: Final = {"type": "string"}
_ARGV: Final = {"type": "array", "items": {"type": "string"}, "minItems": 1}
_KITS: Final = {"type": "array", "items": {"type": "string"},
                "description": "Mixin kits to compose on the workload."}
_WORKSPACE: Final = {"type": "string", "description": "Host directory used as the workspace."}
_ACCESS: Final = {"type": "string", "enum": ["none", "ro", "rw"]}
_NAME: Final = {"type": "string", "description": "The named sandbox (or its run id)."}

Handler = Callable[[AppContext, Mapping[str, Any], _Collected], dict[str, Any]]
_TABLE: Final[Sequence[tuple[str, str, dict[str, Any], Handler]]] = (
    ("run", "Run one command in a new one-shot sandbox (removed after); returns its exit "
     "code and bounded output, as `sbx run --json WORKLOAD [WORKSPACE] -- COMMAND`.",
     {"workload": _STR, "workspace": _WORKSPACE, "access": _ACCESS, "kits": _KITS,
      "command": _ARGV, "timeout_s": {"type": "number", "exclusiveMinimum": 0}},
     _run),
    ("create", "Create a named sandbox and leave it running (`sbx create --name NAME`); "
     "with clone, on its own git checkout of the workspace's repository (`--clone`).",
     {"name": _STR, "workload": _STR, "workspace": _WORKSPACE, "access": _ACCESS,
      "kits": _KITS, "clone": {"type": "boolean"}}, _create),
    ("diff", "A --clone sandbox's changes against the commit it started from (`sbx diff NAME`).",
     {"name": _NAME}, _diff),
    ("fetch", "Bring a --clone sandbox's commits into the host repository as branch sbx/NAME "
     "(`sbx fetch NAME`); force overwrites a branch that would not fast-forward.",
     {"name": _NAME, "force": {"type": "boolean"}}, _fetch),
    ("exec", "Run a command in a named sandbox (`sbx exec NAME -- COMMAND`).",
     {"name": _NAME, "command": _ARGV}, _exec),
    ("stop", "Stop a named sandbox (`sbx stop NAME`).", {"name": _NAME}, _stop),
    ("rm", "Remove a named sandbox and everything it keeps (`sbx rm -f NAME`).",
     {"name": _NAME}, _rm),
    ("ls", "List the named sandboxes (`sbx ls --json`).", {}, _ls),
    ("cp", "Copy files between the host and a named sandbox (`sbx cp SRC NAME:DST`, "
     "`sbx cp NAME:SRC DST`).", {"source": _STR, "destination": _STR}, _cp),
)
_REQUIRED: Final = {"run": ["workload"], "create": ["name", "workload"],
                    "exec": ["name", "command"], "stop": ["name"], "rm": ["name"],
                    "diff": ["name"], "fetch": ["name"],
                    "cp": ["source", "destination"]}


def tools(app: AppContext) -> list[Tool]:
    return [Tool(name=name, description=description,
                 input_schema={"type": "object", "properties": properties,
                               "required": _REQUIRED.get(name, []),
                               "additionalProperties": False},
                 call=_bound(app, handler))
            for name, description, properties, handler in _TABLE]


def _bound(app: AppContext, handler: Handler) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    def call(arguments: Mapping[str, Any]) -> dict[str, Any]:
        collected = _Collected()
        try:
            data = handler(app, arguments, collected)
        except SbxError as error:
            result = refusal(error)
            result["structuredContent"].update(collected.extra())
            return result
        except Exception as error:  # a bug in one call must not end the session
            if app.traceback:
                raise
            return _text({"reason": Reason.INTERNAL_ERROR.value,
                          "message": f"unexpected error: {type(error).__name__}",
                          "hint": "rerun the same command with the sbx CLI and --traceback",
                          "exit_code": 70, **collected.extra()}, is_error=True)
        return _text({**data, **collected.extra()})

    return call


def serve(app: AppContext, stream: IO[bytes], write: Callable[[str], None]) -> None:
    """Answer MCP requests from ``stream`` until it ends; ``write`` is the renderer's."""
    mcpwire.serve(stream, mcpwire.Server("sbx", __version__, tools(app)), write)


__all__ = ["MAX_OUTPUT_BYTES", "refusal", "serve", "tools"]
