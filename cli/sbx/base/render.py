"""The one place that prints: human output through rich, machine output as a JSON envelope.

Core modules return results and raise :class:`~sbx.base.errors.SbxError`; commands hand both to a
:class:`Renderer`. Nothing else in sbx writes to the terminal (a workload's own output is passed
through :meth:`Renderer.workload_output` so that it, too, has one door).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import IO, TYPE_CHECKING, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import DETAILS, REGISTRY, ExitStatus, Reason

if TYPE_CHECKING:
    from rich.console import Console

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


MAX_LOG_LINES: Final = 20
MAX_LOG_LINE_CHARS: Final = 300


def _log_tail(error: SbxError) -> list[str]:
    """The last lines of a failed build's output (the driver collects them), bounded in count
    and width: enough to show the failing step, never a whole log."""
    raw = error.details.get("log_tail")
    if not isinstance(raw, list):
        return []
    lines = [str(line) for line in raw if str(line).strip()][-MAX_LOG_LINES:]
    return [line if len(line) <= MAX_LOG_LINE_CHARS else line[:MAX_LOG_LINE_CHARS - 3] + "..."
            for line in lines]


def make_console(file: IO[str], env: Mapping[str, str], *, width: int | None = None) -> Console:
    from rich.console import Console

    return Console(file=file, width=width, no_color="NO_COLOR" in env, highlight=False,
                   soft_wrap=True, emoji=False)


class Renderer:
    """Prints results. rich is imported only for a terminal that wants styling: piped and CI
    output is plain text, which keeps rich's import off the non-interactive `sbx run` path."""

    def __init__(self, out: IO[str], err: IO[str], *, as_json: bool,
                 env: Mapping[str, str] | None = None,
                 raw_out: IO[bytes] | None = None, raw_err: IO[bytes] | None = None,
                 width: int | None = None) -> None:
        self.out_file = _tolerant(out)
        self.err_file = _tolerant(err)
        self._env = dict(env or {})
        self.as_json = as_json
        self._raw_out = raw_out
        self._raw_err = raw_err
        self._width = width
        self.verbose = 0  # -v count: 1 prints each build/pull output line (progress())

    @cached_property
    def out(self) -> Console:
        return make_console(self.out_file, self._env, width=self._width)

    @cached_property
    def err(self) -> Console:
        return make_console(self.err_file, self._env, width=self._width)

    def styled(self, file: IO[str]) -> bool:
        return "NO_COLOR" not in self._env and _isatty(file)

    def line(self, file: IO[str], markup: str, plain: str) -> None:
        # A message for a terminal or reader that is gone (a closed SSH session: EIO; a closed
        # pipe) is dropped: it must not turn a clean exit into a crash.
        try:
            if self.styled(file):
                console = self.err if file is self.err_file else self.out
                console.print(_encodable(markup, file))
            else:
                file.write(_encodable(plain, file) + "\n")
                file.flush()
        except (OSError, ValueError):
            return

    # -- results -----------------------------------------------------------------------------

    def envelope(self, envelope: Envelope) -> None:
        self.out_file.write(json.dumps(envelope.as_dict(), sort_keys=True) + "\n")
        self.out_file.flush()

    def error(self, error: SbxError, command: str, data: dict[str, Any] | None = None) -> None:
        log_tail = _log_tail(error)
        if self.as_json:
            self.envelope(Envelope(
                command=command,
                status=status_for_error(error),
                exit_code=int(error.exit_status),
                data={**(data or {}), **({"log_tail": log_tail} if log_tail else {})},
                reason=error.reason.value,
                message=error.message,
                hint=error.hint,
                diagnostics=list(error.details.get("diagnostics", [])
                                 or error.details.get("problems", [])),
            ))
            return
        if log_tail:
            # The build's own words come first, so the error line below them reads as its end.
            self.line(self.err_file, f"[dim]sbx: the last {len(log_tail)} lines of the "
                       "build output:[/]",
                       f"sbx: the last {len(log_tail)} lines of the build output:")
            for line in log_tail:
                self.line(self.err_file, f"  [dim]|[/] {escape(line)}", f"  | {line}")
        self.line(self.err_file, f"[bold red]sbx:[/] {escape(str(error))}", f"sbx: {error}")
        if error.body:
            self.line(self.err_file, escape(error.body), error.body)
        if error.hint:
            self.line(self.err_file, f"  [dim]fix:[/] {escape(error.hint)}",
                       f"  fix: {error.hint}")

    def message(self, text: str) -> None:
        """A line of human output on stdout (suppressed under --json)."""
        if not self.as_json:
            self.line(self.out_file, escape(text), text)

    def note(self, text: str) -> None:
        """Status for humans on stderr (suppressed under --json)."""
        if not self.as_json:
            self.line(self.err_file, f"[dim]sbx:[/] {escape(text)}", f"sbx: {text}")

    def warn(self, text: str) -> None:
        """A warning on stderr (under --json it travels in the envelope's data instead)."""
        if not self.as_json:
            self.line(self.err_file, f"[yellow]sbx: warning:[/] {escape(text)}",
                       f"sbx: warning: {text}")

    def trace(self, text: str) -> None:
        """`-v` detail on stderr, also under --json (stdout stays the envelope alone)."""
        self.line(self.err_file, f"[dim]sbx: {escape(text)}[/]", f"sbx: {text}")

    def crash(self, report_path: str | None) -> None:
        where = f" (report: {report_path})" if report_path else ""
        line = f"sbx hit an unexpected error{where}; rerun with --traceback for details " \
               f"({Reason.INTERNAL_ERROR.value})"
        self.line(self.err_file, escape(line), line)

    def usage_error(self, error: Exception, *, hint: str | None = None) -> None:
        """A usage error as typer/click show it (usage line, hint, message), on stderr, then
        sbx's own fix for it when there is one."""
        show = getattr(error, "show", None)
        if callable(show):
            show(file=self.err_file)
        else:
            message = getattr(error, "format_message", lambda: str(error))()
            self.line(self.err_file, f"Error: {escape(message)}", f"Error: {message}")
        if hint:
            self.line(self.err_file, f"  [dim]fix:[/] {escape(hint)}", f"  fix: {hint}")

    def text(self, body: str) -> None:
        """Text printed exactly as given on stdout (a completion script, a generated file)."""
        self.out_file.write(body)
        self.out_file.flush()

    def protocol(self, line: str) -> None:
        """One message of a protocol spoken on stdout (`sbx mcp serve`), exactly as given."""
        self.out_file.write(line)
        self.out_file.flush()

    # -- workload passthrough ----------------------------------------------------------------

    def workload_output(self, stream: str, chunk: bytes | memoryview) -> None:
        sink = self._raw_err if stream == "stderr" else self._raw_out
        if sink is None:
            sink = sys.stderr.buffer if stream == "stderr" else sys.stdout.buffer
        sink.write(chunk)
        sink.flush()

    # -- progress ----------------------------------------------------------------------------

    @contextmanager
    def progress(self, title: str) -> Iterator[Callable[[str], None]]:
        """A transient status line for long work; yields a callback taking the latest line."""
        if self.verbose >= 1:  # -v: the whole output, line by line, instead of a status line
            self.note(title)
            yield lambda line: self.trace(f"  {line}")
            return
        if self.as_json or not self.styled(self.err_file):
            self.note(title)
            yield lambda _line: None
            return
        with self.err.status(escape(title)) as status:
            def update(line: str) -> None:
                status.update(f"{escape(visible(title))} [dim]{escape(visible(line[-100:]))}[/]")
            yield update

    # -- reason registry ---------------------------------------------------------------------

    def reason(self, reason: Reason) -> None:
        info = REGISTRY[reason]
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data=reason_as_dict(reason)))
            return
        status = f"{int(info.exit_status)} ({info.exit_status.name.lower()})"
        self.line(self.out_file, f"[bold]{reason.value}[/] — {escape(info.title)}",
                   f"{reason.value} — {info.title}")
        self.line(self.out_file, f"  cause: {escape(info.cause)}", f"  cause: {info.cause}")
        self.line(self.out_file, f"  fix:   {escape(info.fix)}", f"  fix:   {info.fix}")
        self.line(self.out_file, f"  exit status: {status}", f"  exit status: {status}")

    def reason_list(self, reasons: Sequence[Reason]) -> None:
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data={"reasons": [reason_as_dict(r) for r in reasons],
                                         "details": [detail_as_dict(c) for c in DETAILS]}))
            return
        self.table(("code", "exit", "title"),
                   ((reason.value, str(int(REGISTRY[reason].exit_status)), REGISTRY[reason].title)
                    for reason in reasons))
        self.line(self.out_file, "", "")
        self.line(self.out_file, "detail codes of the egress boundary (403/407/502 bodies, "
                  "the audit and request logs):", "detail codes of the egress boundary "
                  "(403/407/502 bodies, the audit and request logs):")
        self.table(("detail", "under", "title"),
                   ((code, DETAILS[code].reason.value, DETAILS[code].title) for code in DETAILS))

    def detail(self, code: str) -> None:
        """A detail code of the egress boundary: what it means, the fix, its reason code."""
        info = DETAILS[code]
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data=detail_as_dict(code)))
            return
        under = info.reason.value
        self.line(self.out_file, f"[bold]{code}[/] — {escape(info.title)} (under {under})",
                  f"{code} — {info.title} (under {under})")
        self.line(self.out_file, f"  cause: {escape(info.cause)}", f"  cause: {info.cause}")
        self.line(self.out_file, f"  fix:   {escape(info.fix)}", f"  fix:   {info.fix}")
        self.line(self.out_file, f"  see:   sbx explain {under}", f"  see:   sbx explain {under}")

    # -- explain (request, sandbox, run) -----------------------------------------------------

    def plain(self, text: str) -> None:
        self.line(self.out_file, escape(text), text)

    def page(self, text: str) -> None:
        """A help page as the CLI parser prints it (wrapped already): written as it is."""
        self.out_file.write(text)
        self.out_file.flush()

    # -- kits and config (sbx kit init|validate, sbx config path|show) ------------------------

    # -- doctor ------------------------------------------------------------------------------

    # -- gc ----------------------------------------------------------------------------------

    # -- secrets -----------------------------------------------------------------------------

    def read_secret(self, prompt: str) -> str:
        """Read a secret typed on the terminal, without echo; the prompt goes to the terminal
        (stderr if there is none), never to stdout. End of input reads as empty."""
        import getpass
        from typing import TextIO, cast

        try:
            return getpass.getpass(prompt, stream=cast("TextIO", self.err_file))
        except EOFError:
            return ""

    # -- registry: pull and kit push ---------------------------------------------------------

    def interactive(self) -> bool:
        """Whether a question can be asked: stdin and stderr are terminals (never under --json)."""
        return not self.as_json and _isatty(sys.stdin) and _isatty(self.err_file)

    def table(self, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        """Columns on stdout, aligned (cells are rich markup: escape what is not yours)."""
        from rich.table import Table

        table = Table(box=None, show_header=True, pad_edge=False)
        for column in header:
            table.add_column(column)
        for row in rows:
            table.add_row(*(visible(cell) for cell in row))
        self.out.print(table)

    def confirm(self, question: str) -> bool:
        """Ask a yes/no question on stderr (the caller checked :meth:`interactive`)."""
        self.err_file.write(f"{question} [y/N] ")
        self.err_file.flush()
        try:
            answer = sys.stdin.readline()
        except (OSError, ValueError):
            return False
        return answer.strip().lower() in {"y", "yes"}

    # -- named sandboxes ---------------------------------------------------------------------


# rich's markup tag, as rich.markup.escape finds it.
_MARKUP_TAG: Final = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def escape(text: str) -> str:
    """``rich.markup.escape(text)``, without importing rich: most output is plain (a pipe, a
    file, ``--json``) and never reaches rich, so importing it (~20 ms) only to escape markup
    nobody renders was start-up time for nothing. Same algorithm; a test compares the two."""
    escaped = _MARKUP_TAG.sub(lambda m: f"{m[1]}{m[1]}\\{m[2]}", text)
    if escaped.endswith("\\") and not escaped.endswith("\\\\"):
        return escaped + "\\"
    return escaped


# What a terminal or pipe that cannot show a character gets instead (PYTHONIOENCODING=ascii,
# LANG=C on an old system): readable ASCII first, then a backslash escape, never a crash and
# never a silently dropped line.
_ASCII_FALLBACK: Final = str.maketrans({
    "\u2713": "+", "\u2717": "x", "\u2014": "-", "\u2013": "-", "\u2026": "...",
    "\u2192": "->", "\u2190": "<-", "\u2018": "'", "\u2019": "'", "\u201c": '"',
    "\u201d": '"', "\u2022": "*", "\u00a7": "S", "\u00d7": "x"})


# Control characters in a message (a build's or a hook's words, a name from a kit) would act on
# the terminal (a clipboard write, a title): shown as escapes instead; newlines and tabs stay.
_CONTROLS: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab written as an escape."""
    return _CONTROLS.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def _encodable(text: str, file: IO[str]) -> str:
    """``text`` as ``file``'s encoding can carry it (lone surrogates from a non-UTF-8 command
    line or file name included), its control characters made visible."""
    text = visible(text)
    encoding = getattr(file, "encoding", None)
    if not isinstance(encoding, str):
        return text
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return text.translate(_ASCII_FALLBACK).encode(encoding, "backslashreplace").decode(
            encoding, "replace")
    except LookupError:
        return text
    return text


def _tolerant(stream: IO[str]) -> IO[str]:
    """``stream`` set to escape what its encoding cannot carry instead of raising
    ``UnicodeEncodeError`` (a text stream's default for stdout is to raise), so that output
    the renderer does not build line by line (rich tables) cannot crash sbx either."""
    reconfigure = getattr(stream, "reconfigure", None)
    if callable(reconfigure) and getattr(stream, "errors", None) == "strict":
        # A stream that forbids it (already read from, say) keeps raising; _encodable still
        # guards every line the renderer writes itself.
        with contextlib.suppress(OSError, ValueError):
            reconfigure(errors="backslashreplace")
    return stream


def _isatty(file: IO[str]) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False


def reason_as_dict(reason: Reason) -> dict[str, Any]:
    info = REGISTRY[reason]
    return {"code": reason.value, "title": info.title, "cause": info.cause, "fix": info.fix,
            "exit_status": int(info.exit_status)}


def detail_as_dict(code: str) -> dict[str, Any]:
    info = DETAILS[code]
    return {"code": code, "title": info.title, "cause": info.cause, "fix": info.fix,
            "reason": info.reason.value, "exit_status": int(info.reason.exit_status)}


__all__ = ["ENVELOPE_VERSION", "Envelope", "Renderer", "detail_as_dict", "make_console",
           "reason_as_dict", "status_for_error"]
