"""The one place that prints: human output through rich, machine output as a JSON envelope.

Core modules return results and raise :class:`~sbx.errors.SbxError`; commands hand both to a
:class:`Renderer`. Nothing else in sbx writes to the terminal (a workload's own output is passed
through :meth:`Renderer.workload_output` so that it, too, has one door).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any, Final

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sbx.errors import SbxError
from sbx.reasons import REGISTRY, ExitStatus, Reason

ENVELOPE_VERSION: Final = 1


@dataclass
class Envelope:
    """The ``--json`` result: one object per invocation, printed last on stdout."""

    command: str
    status: str  # ok | refused | failed | workload_exit | timeout | interrupted | denied
    exit_code: int
    data: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    message: str | None = None
    hint: str | None = None
    diagnostics: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sbx_result_version": ENVELOPE_VERSION,
            "command": self.command,
            "status": self.status,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "hint": self.hint,
            "data": self.data,
            "diagnostics": self.diagnostics,
        }


def status_for_error(error: SbxError) -> str:
    status = error.exit_status
    if status is ExitStatus.TIMEOUT:
        return "timeout"
    if status is ExitStatus.INTERRUPTED:
        return "interrupted"
    if status is ExitStatus.REFUSED or status is ExitStatus.USAGE:
        return "refused"
    return "failed"


def make_console(file: IO[str], env: Mapping[str, str], *, width: int | None = None) -> Console:
    no_color = "NO_COLOR" in env
    return Console(
        file=file,
        width=width,
        no_color=no_color,
        highlight=False,
        soft_wrap=True,
        emoji=False,
    )


class Renderer:
    def __init__(self, out: Console, err: Console, *, as_json: bool,
                 raw_out: IO[bytes] | None = None, raw_err: IO[bytes] | None = None) -> None:
        self.out = out
        self.err = err
        self.as_json = as_json
        self._raw_out = raw_out
        self._raw_err = raw_err

    # -- results -----------------------------------------------------------------------------

    def envelope(self, envelope: Envelope) -> None:
        self.out.file.write(json.dumps(envelope.as_dict(), sort_keys=True) + "\n")
        self.out.file.flush()

    def error(self, error: SbxError, command: str, data: dict[str, Any] | None = None) -> None:
        if self.as_json:
            self.envelope(Envelope(
                command=command,
                status=status_for_error(error),
                exit_code=int(error.exit_status),
                data=data or {},
                reason=error.reason.value,
                message=error.message,
                hint=error.hint,
                diagnostics=list(error.details.get("diagnostics", [])
                                 or error.details.get("problems", [])),
            ))
            return
        self.err.print(f"[bold red]sbx:[/] {escape(str(error))}")
        if error.body:
            self.err.print(escape(error.body))
        if error.hint:
            self.err.print(f"  [dim]fix:[/] {escape(error.hint)}")

    def message(self, text: str) -> None:
        """A line of human output on stdout (suppressed under --json)."""
        if not self.as_json:
            self.out.print(escape(text))

    def note(self, text: str) -> None:
        """Status for humans on stderr (suppressed under --json)."""
        if not self.as_json:
            self.err.print(f"[dim]sbx:[/] {escape(text)}")

    def warn(self, text: str) -> None:
        """A warning on stderr (under --json it travels in the envelope's data instead)."""
        if not self.as_json:
            self.err.print(f"[yellow]sbx: warning:[/] {escape(text)}")

    def crash(self, report_path: str | None) -> None:
        where = f" (report: {report_path})" if report_path else ""
        line = f"sbx hit an unexpected error{where}; rerun with --traceback for details " \
               f"({Reason.INTERNAL_ERROR.value})"
        self.err.print(escape(line))

    # -- workload passthrough ----------------------------------------------------------------

    def workload_output(self, stream: str, chunk: bytes) -> None:
        sink = self._raw_err if stream == "stderr" else self._raw_out
        if sink is None:
            sink = sys.stderr.buffer if stream == "stderr" else sys.stdout.buffer
        sink.write(chunk)
        sink.flush()

    # -- progress ----------------------------------------------------------------------------

    @contextmanager
    def progress(self, title: str) -> Iterator[Callable[[str], None]]:
        """A transient status line for long work; yields a callback taking the latest line."""
        if self.as_json or not self.err.is_terminal:
            self.note(title)
            yield lambda _line: None
            return
        with self.err.status(escape(title)) as status:
            def update(line: str) -> None:
                status.update(f"{escape(title)} [dim]{escape(line[-100:])}[/]")
            yield update

    # -- reason registry ---------------------------------------------------------------------

    def reason(self, reason: Reason) -> None:
        info = REGISTRY[reason]
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data=reason_as_dict(reason)))
            return
        self.out.print(f"[bold]{reason.value}[/] — {escape(info.title)}")
        self.out.print(f"  cause: {escape(info.cause)}")
        self.out.print(f"  fix:   {escape(info.fix)}")
        self.out.print(f"  exit status: {int(info.exit_status)} ({info.exit_status.name.lower()})")

    def reason_list(self, reasons: Sequence[Reason]) -> None:
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data={"reasons": [reason_as_dict(r) for r in reasons]}))
            return
        table = Table(box=None, show_header=True, pad_edge=False)
        table.add_column("code")
        table.add_column("exit")
        table.add_column("title")
        for reason in reasons:
            info = REGISTRY[reason]
            table.add_row(reason.value, str(int(info.exit_status)), info.title)
        self.out.print(table)


def reason_as_dict(reason: Reason) -> dict[str, Any]:
    info = REGISTRY[reason]
    return {"code": reason.value, "title": info.title, "cause": info.cause, "fix": info.fix,
            "exit_status": int(info.exit_status)}


__all__ = ["ENVELOPE_VERSION", "Envelope", "Renderer", "make_console", "reason_as_dict",
           "status_for_error"]
