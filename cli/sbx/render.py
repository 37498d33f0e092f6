"""The one place that prints: human output through rich, machine output as a JSON envelope.

Core modules return results and raise :class:`~sbx.errors.SbxError`; commands hand both to a
:class:`Renderer`. Nothing else in sbx writes to the terminal (a workload's own output is passed
through :meth:`Renderer.workload_output` so that it, too, has one door).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import IO, TYPE_CHECKING, Any, Final

from sbx.errors import SbxError
from sbx.reasons import REGISTRY, ExitStatus, Reason

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from sbx.core.configview import ConfigLocation, ConfigView
    from sbx.core.doctor import DoctorReport
    from sbx.core.explain import (
        RequestExplanation,
        RunExplanation,
        SandboxExplanation,
    )
    from sbx.core.gc import GcItem, GcResult
    from sbx.core.kitinit import KitInitResult
    from sbx.core.kitpush import PushResult
    from sbx.core.kitvalidate import KitValidation
    from sbx.core.pull import PullResult
    from sbx.core.secretops import ImportCandidate, ImportResult
    from sbx.kits.surface import Widening
    from sbx.secrets import SecretInfo

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


def _setting(item: Any) -> str:
    """A config value as people read it: sizes in IEC units (``4 GiB``), durations in the
    largest whole unit (``1 h``), an empty or unset value as ``none``, lists comma-joined,
    text without quotes. Falls back to the core's own spelling when no typed value came."""
    extra = getattr(item, "extra", None) or {}
    if "raw" not in extra:
        return str(item.value)
    value, name = extra["raw"], str(item.name)
    if value is None or value in ("", [], ()):
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        if name.endswith("_bytes"):
            return _iec(value)
        if name.endswith("_ms"):
            return _duration(value, 1)
        if name.endswith("_seconds") or name.endswith("_ttl"):
            return _duration(value, 1000)
        if name.endswith("cpu_millis"):
            return f"{value / 1000:g} CPU" + ("" if value == 1000 else "s")
        return str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _iec(number: int) -> str:
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if number >= unit and number % unit == 0:
            return f"{number // unit} {name}"
    return f"{number} bytes"


def _duration(count: int, ms_per: int) -> str:
    millis = count * ms_per
    for unit, name in ((3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if millis >= unit and millis % unit == 0:
            return f"{millis // unit} {name}"
    return f"{millis} ms"


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
        self._out_file = _tolerant(out)
        self._err_file = _tolerant(err)
        self._env = dict(env or {})
        self.as_json = as_json
        self._raw_out = raw_out
        self._raw_err = raw_err
        self._width = width
        self.verbose = 0  # -v count: 1 prints each build/pull output line (progress())

    @cached_property
    def out(self) -> Console:
        return make_console(self._out_file, self._env, width=self._width)

    @cached_property
    def err(self) -> Console:
        return make_console(self._err_file, self._env, width=self._width)

    def _styled(self, file: IO[str]) -> bool:
        return "NO_COLOR" not in self._env and _isatty(file)

    def _line(self, file: IO[str], markup: str, plain: str) -> None:
        # A message for a terminal or reader that is gone (a closed SSH session: EIO; a closed
        # pipe) is dropped: it must not turn a clean exit into a crash.
        try:
            if self._styled(file):
                console = self.err if file is self._err_file else self.out
                console.print(_encodable(markup, file))
            else:
                file.write(_encodable(plain, file) + "\n")
                file.flush()
        except (OSError, ValueError):
            return

    # -- results -----------------------------------------------------------------------------

    def envelope(self, envelope: Envelope) -> None:
        self._out_file.write(json.dumps(envelope.as_dict(), sort_keys=True) + "\n")
        self._out_file.flush()

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
            self._line(self._err_file, f"[dim]sbx: the last {len(log_tail)} lines of the "
                       "build output:[/]",
                       f"sbx: the last {len(log_tail)} lines of the build output:")
            for line in log_tail:
                self._line(self._err_file, f"  [dim]|[/] {_escape(line)}", f"  | {line}")
        self._line(self._err_file, f"[bold red]sbx:[/] {_escape(str(error))}", f"sbx: {error}")
        if error.body:
            self._line(self._err_file, _escape(error.body), error.body)
        if error.hint:
            self._line(self._err_file, f"  [dim]fix:[/] {_escape(error.hint)}",
                       f"  fix: {error.hint}")

    def message(self, text: str) -> None:
        """A line of human output on stdout (suppressed under --json)."""
        if not self.as_json:
            self._line(self._out_file, _escape(text), text)

    def note(self, text: str) -> None:
        """Status for humans on stderr (suppressed under --json)."""
        if not self.as_json:
            self._line(self._err_file, f"[dim]sbx:[/] {_escape(text)}", f"sbx: {text}")

    def warn(self, text: str) -> None:
        """A warning on stderr (under --json it travels in the envelope's data instead)."""
        if not self.as_json:
            self._line(self._err_file, f"[yellow]sbx: warning:[/] {_escape(text)}",
                       f"sbx: warning: {text}")

    def trace(self, text: str) -> None:
        """`-v` detail on stderr, also under --json (stdout stays the envelope alone)."""
        self._line(self._err_file, f"[dim]sbx: {_escape(text)}[/]", f"sbx: {text}")

    def crash(self, report_path: str | None) -> None:
        where = f" (report: {report_path})" if report_path else ""
        line = f"sbx hit an unexpected error{where}; rerun with --traceback for details " \
               f"({Reason.INTERNAL_ERROR.value})"
        self._line(self._err_file, _escape(line), line)

    def usage_error(self, error: Exception) -> None:
        """A usage error as typer/click show it (usage line, hint, message), on stderr."""
        show = getattr(error, "show", None)
        if callable(show):
            show(file=self._err_file)
            return
        message = getattr(error, "format_message", lambda: str(error))()
        self._line(self._err_file, f"Error: {_escape(message)}", f"Error: {message}")

    def text(self, body: str) -> None:
        """Text printed exactly as given on stdout (a completion script, a generated file)."""
        self._out_file.write(body)
        self._out_file.flush()

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
        if self.as_json or not self._styled(self._err_file):
            self.note(title)
            yield lambda _line: None
            return
        with self.err.status(_escape(title)) as status:
            def update(line: str) -> None:
                status.update(f"{_escape(title)} [dim]{_escape(line[-100:])}[/]")
            yield update

    # -- reason registry ---------------------------------------------------------------------

    def reason(self, reason: Reason) -> None:
        info = REGISTRY[reason]
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data=reason_as_dict(reason)))
            return
        status = f"{int(info.exit_status)} ({info.exit_status.name.lower()})"
        self._line(self._out_file, f"[bold]{reason.value}[/] — {_escape(info.title)}",
                   f"{reason.value} — {info.title}")
        self._line(self._out_file, f"  cause: {_escape(info.cause)}", f"  cause: {info.cause}")
        self._line(self._out_file, f"  fix:   {_escape(info.fix)}", f"  fix:   {info.fix}")
        self._line(self._out_file, f"  exit status: {status}", f"  exit status: {status}")

    def reason_list(self, reasons: Sequence[Reason]) -> None:
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data={"reasons": [reason_as_dict(r) for r in reasons]}))
            return
        from rich.table import Table

        table = Table(box=None, show_header=True, pad_edge=False)
        table.add_column("code")
        table.add_column("exit")
        table.add_column("title")
        for reason in reasons:
            info = REGISTRY[reason]
            table.add_row(reason.value, str(int(info.exit_status)), info.title)
        self.out.print(table)

    # -- explain (request, sandbox, run) -----------------------------------------------------

    def _plain(self, text: str) -> None:
        self._line(self._out_file, _escape(text), text)

    def explain_request(self, result: RequestExplanation) -> None:
        """Allowed/denied, every matched rule, the deciding one, the reason and the fix."""
        decision = result.decision
        status = 0 if decision.allowed else int(ExitStatus.DENIED)
        if self.as_json:
            self.envelope(Envelope(
                command="explain", status="ok" if decision.allowed else "denied",
                exit_code=status, data=result.as_dict(),
                reason=None if decision.allowed else Reason.EGRESS_DENIED.value,
                message=decision.reason, hint=decision.suggestion))
            return
        request = decision.request
        verdict = "allowed" if decision.allowed else "denied"
        what = request.method or "connection"
        where = f"{decision.host or request.host}:{request.port}"
        path = f" {decision.path or request.path}" if request.method and request.path else ""
        style = "green" if decision.allowed else "red"
        text = f"{verdict}: {what} {where}{path} ({request.phase} phase, {decision.code})"
        rest = _escape(text[len(verdict) + 2:])
        self._line(self._out_file, f"[bold {style}]{verdict}[/]: {rest}", text)
        if result.target.method_defaulted:
            self._plain("  (a URL without METHOD is judged as GET)")
        if decision.matched:
            self._plain("  matched rules:")
            for match in decision.matched:
                rule = match.rule
                mark = " <- decides" if rule == decision.deciding else ""
                declared = rule.declared_at or f"capabilities[{rule.index}]"
                self._plain(f"    {match.effect:<12} {rule.kit} {declared} {rule.phase}."
                            f"{rule.action}: {_rule_text(rule)}{mark}")
        else:
            self._plain("  matched rules: none")
        for rule in decision.superseded:
            self._plain(f"  superseded: {rule.kit} capabilities[{rule.index}]: "
                        f"{_rule_text(rule)} (another rule grants the host outright)")
        self._plain(f"  reason: {decision.reason}")
        if decision.suggestion:
            self._plain(f"  fix:    {decision.suggestion}")
        for rule in result.pending:
            self._plain(f"  note: {rule.kit} capabilities[{rule.index}] {rule.phase}.{rule.action} "
                        f"{_rule_text(rule)} holds a ${{{{ kit.env.* }}}} reference, known only "
                        "once the image is built; it was judged literally (matching nothing), "
                        "so `sbx run` may decide otherwise")

    def explain_sandbox(self, result: SandboxExplanation, *, command: str = "explain") -> None:
        """The effective sandbox: kits, capabilities, hardening, network, credentials."""
        if self.as_json:
            self.envelope(Envelope(command=command, status="ok", exit_code=0,
                                   data=result.as_dict()))
            return
        self._plain("kits (composition order):")
        for item in result.kits:
            self._plain(f"  {item.name}  {item.extra.get('kind')} "
                        f"{item.extra.get('version')}  ({item.extra.get('descriptor')})")
        self._plain("capabilities selected:")
        for item in result.selected or ():
            self._plain(f"  {item.name}  {item.value}")
        if result.skipped:
            self._plain("capabilities skipped:")
            for item in result.skipped:
                self._plain(f"  {item.name}  {item.value}: {item.extra.get('reason')}")
        self._plain("hardening (value, source; change with):")
        for item in result.hardening:
            self._plain(f"  {item.name} = {_setting(item)}  ({item.source}; {item.change})")
        for phase, items in result.network.items():
            self._plain(f"network, {phase} phase:" + ("" if items else " nothing allowed"))
            for item in items:
                self._plain(f"  {item.value:<5} {item.name}")
        self._plain("credentials:" + ("" if result.credentials else " none"))
        for item in result.credentials:
            self._plain(f"  {item.name} ({item.extra.get('phase')}): {item.value}, from "
                        f"{item.source}; change: {item.change}")
        for item in result.storage:
            self._plain(f"storage: {item.name} ({item.value}) from {item.source}")
        for rule in result.pending:
            self._plain(f"note: {rule.kit} capabilities[{rule.index}] {_rule_text(rule)} holds a "
                        "${{ kit.env.* }} reference, resolved only once the image is built")
        self._plain(f"judge a request: {result.explain} [METHOD] URL|HOST[:PORT]")

    def explain_run(self, result: RunExplanation) -> None:
        """The refusals recorded for one run, each with its rule and fix."""
        if self.as_json:
            self.envelope(Envelope(command="explain", status="ok", exit_code=0,
                                   data=result.as_dict()))
            return
        if result.skipped_lines:
            self.warn(f"{result.audit_log}: skipped {result.skipped_lines} line(s) that are not "
                      "well-formed audit events (damaged or foreign)")
        if result.run_id is None:
            self._plain(f"no runs recorded in {result.audit_log}")
            return
        head = f"run {result.run_id}" + (f" ({result.workload})" if result.workload else "")
        if not result.refusals:
            self._plain(f"{head}: no refusals recorded")
            return
        self._plain(f"{head}: {len(result.refusals)} refusal(s)")
        for refusal in result.refusals:
            self._plain(f"  {refusal.timestamp} {refusal.event}: {refusal.blocked}")
            self._plain(f"    rule: {refusal.rule}  code: {refusal.code}")
            self._plain(f"    fix:  {refusal.fix}")
            self._plain(f"    explain: {refusal.explain}")

    # -- kits and config (sbx kit init|validate, sbx config path|show) ------------------------

    def kit_init(self, result: KitInitResult) -> None:
        if self.as_json:
            self.envelope(Envelope(command="kit init", status="ok", exit_code=0,
                                   data=result.as_dict()))
            return
        self._plain(f"created {result.kind} kit {result.name} in {result.directory}:")
        for path in result.files:
            self._plain(f"  {path.name}")
        self._plain(f"check it:   sbx kit validate {result.directory}")
        if result.kind == "workload":
            self._plain(f"run it:     sbx run {result.directory}   (needs {result.base_image} "
                        "present locally: sbx never pulls implicitly)")
        else:
            self._plain(f"compose it: sbx run WORKLOAD --kit {result.directory}")

    def kit_validation(self, result: KitValidation) -> None:
        """``valid`` on stdout, or the diagnostics and an ``invalid_kit`` line on stderr."""
        status = 0 if result.valid else int(Reason.INVALID_KIT.exit_status)
        if self.as_json:
            self.envelope(Envelope(
                command="kit validate", status="ok" if result.valid else "refused",
                exit_code=status, data=result.as_dict(),
                reason=None if result.valid else Reason.INVALID_KIT.value,
                message=None if result.valid else f"{result.reference} is not a valid kit",
                diagnostics=[dict(e) for e in result.errors]))
            return
        for warning in result.warnings:
            self.warn(f"{result.reference}: {warning}")
        if result.valid:
            where = f" ({result.descriptor})" if result.descriptor else ""
            self._plain(f"{result.reference}: valid {result.kind} kit{where}")
            return
        count = len(result.errors)
        self.error(SbxError(Reason.INVALID_KIT,
                            f"{result.reference} is not a valid kit ({count} problem"
                            f"{'s' if count != 1 else ''})", body=result.body,
                            hint="Fix each field at the path and position shown."), "kit")

    def config_location(self, result: ConfigLocation) -> None:
        if self.as_json:
            self.envelope(Envelope(command="config path", status="ok", exit_code=0,
                                   data=result.as_dict()))
            return
        self._plain(str(result.path))

    def config_view(self, result: ConfigView) -> None:
        if self.as_json:
            self.envelope(Envelope(command="config show", status="ok", exit_code=0,
                                   data=result.as_dict()))
            return
        state = "" if result.exists else " (absent: every value is the default)"
        self._plain(f"config file: {result.path}{state}")
        for item in result.settings:
            self._plain(f"  {item.name} = {_setting(item)}  ({item.source}; {item.change})")

    # -- doctor ------------------------------------------------------------------------------

    def doctor_report(self, report: DoctorReport) -> None:
        """One line per check, ``✓ / ! / ✗  title — detail``, a fix line under each non-ok
        check, then a summary; or the envelope under --json."""
        status = int(report.exit_status)
        if self.as_json:
            counts = report.counts()
            self.envelope(Envelope(
                command="doctor", status="failed" if report.failed else "ok", exit_code=status,
                data=report.as_dict(),
                message=f"{counts['fail']} check(s) failed" if report.failed else None))
            return
        for check in report.checks:
            mark, style = _DOCTOR_MARKS[check.status.value]
            self._line(self._out_file,
                       f"[{style}]{mark}[/]  [bold]{_escape(check.title)}[/] — "
                       f"{_escape(check.detail)}",
                       f"{mark}  {check.title} — {check.detail}")
            if check.status.value != "ok" and (check.fix or check.reason):
                code = f" ({check.reason.value})" if check.reason else ""
                fix = check.fix or ""
                self._line(self._out_file, f"    [dim]fix:[/] {_escape(fix)}{code}",
                           f"    fix: {fix}{code}")
        counts = report.counts()
        summary = (f"doctor: {counts['ok']} ok, {counts['warn']} warning"
                   f"{'s' if counts['warn'] != 1 else ''}, {counts['fail']} failed")
        self._line(self._out_file, f"[dim]{summary}[/]", summary)

    # -- gc ----------------------------------------------------------------------------------

    def gc_result(self, result: GcResult, *, verbose: int = 0) -> None:
        """Silent when there was nothing to do or everything was removed (cron); one line per
        failure and per object kept with an unreadable deadline; what went (or would go) with
        -v or --dry-run; the envelope under --json."""
        status = int(result.exit_status)
        if self.as_json:
            first = result.failed[0] if result.failed else None
            self.envelope(Envelope(
                command="gc", status="failed" if result.failed else "ok", exit_code=status,
                data=result.as_dict(),
                reason=first.reason.value if first else None,
                message=(f"{len(result.failed)} cleanup failure(s); first: {first.message}"
                         if first else result.note),
                hint=first.reason.info.fix if first else None))
            return
        if result.note and verbose:
            self._line(self._err_file, f"[dim]sbx gc:[/] {_escape(result.note)}",
                       f"sbx gc: {result.note}")
        verb = "would remove" if result.dry_run else "removed"
        if result.dry_run or verbose:
            for item in result.removed:
                text = f"{verb} {_gc_label(item)}: {item.detail}"
                self._line(self._out_file, _escape(text), text)
        if verbose:
            for item in result.kept:
                if item.why not in _GC_REPORTED:
                    text = f"sbx gc: kept {_gc_label(item)}: {item.detail}"
                    self._line(self._err_file, f"[dim]{_escape(text)}[/]", text)
        for item in result.kept:
            if item.why in _GC_REPORTED:
                text = f"sbx gc: kept {_gc_label(item)}: {item.detail}"
                self._line(self._err_file, f"[yellow]{_escape(text)}[/]", text)
        for failure in result.failed:
            text = f"sbx gc: {failure.message} ({failure.reason.value})"
            self._line(self._err_file, f"[bold red]sbx gc:[/] {_escape(failure.message)} "
                       f"({failure.reason.value})", text)

    # -- secrets -----------------------------------------------------------------------------

    def read_secret(self, prompt: str) -> str:
        """Read a secret typed on the terminal, without echo; the prompt goes to the terminal
        (stderr if there is none), never to stdout. End of input reads as empty."""
        import getpass
        from typing import TextIO, cast

        try:
            return getpass.getpass(prompt, stream=cast("TextIO", self._err_file))
        except EOFError:
            return ""

    def secret_stored(self, info: SecretInfo, directory: Path | None = None) -> None:
        """Where the secret went: the OS keyring, the file store, or (dynamic) where it will
        be read from at each run; never the value."""
        if self.as_json:
            self.envelope(Envelope(command="secret", status="ok", exit_code=0,
                                   data={"action": "set", **info.as_dict()}))
            return
        if info.dynamic:
            where = f"${info.reference}" if info.source == "env" else f"`{info.reference}`"
            text = (f"secret for {info.service}: read from {where} on the host at each run "
                    "start; the value is not stored")
        elif info.source == "keyring":
            text = (f"stored secret for {info.service} in the OS keyring ({info.reference}): "
                    f"{info.masked} ({info.length} characters)")
        else:
            store = f" {directory}" if directory is not None else ""
            text = (f"stored secret for {info.service}: {info.masked} ({info.length} "
                    f"characters) in the file store{store} (mode 0600; no OS keyring found)")
        self._line(self._out_file, _escape(text), text)

    def secret_list(self, infos: Sequence[SecretInfo], oauth: Sequence[Any] = ()) -> None:
        """A table of service, masked value, length and last update, then the OAuth logins
        (masked access token, expiry); never a value."""
        if self.as_json:
            self.envelope(Envelope(command="secret", status="ok", exit_code=0,
                                   data={"action": "ls",
                                         "secrets": [info.as_dict() for info in infos],
                                         "oauth": [entry.as_dict() for entry in oauth]}))
            return
        if not infos and not oauth:
            self.note('no secrets stored; add one with: printf %s "$TOKEN" | '
                      "sbx secret set SERVICE (or `sbx secret login SERVICE` for OAuth)")
            return
        if oauth:
            self._oauth_list(oauth)
        if not infos:
            return
        from rich.table import Table

        table = Table(box=None, show_header=True, pad_edge=False)
        for column in ("service", "secret", "length", "updated", "source"):
            table.add_column(column)
        for info in infos:
            source = info.source
            if info.dynamic:
                source = f"{info.source} " + (f"${info.reference}" if info.source == "env"
                                              else f"`{info.reference}`")
            table.add_row(_escape(info.service), _escape(info.masked or "-"),
                          str(info.length) if info.length is not None else "-",
                          info.updated.strftime("%Y-%m-%d %H:%M UTC"), _escape(source))
        self.out.print(table)

    def _oauth_list(self, entries: Sequence[Any]) -> None:
        for entry in entries:
            data = entry.as_dict()
            if entry.masked is None:
                text = f"oauth {entry.service}: unreadable record (log in again)"
            else:
                expiry = data["expires_at"] or "unknown expiry"
                text = (f"oauth {entry.service}: access {entry.masked}, "
                        f"{'with' if entry.refresh else 'no'} refresh token, "
                        f"{'expired' if data['expired'] else 'expires'} {expiry}")
            self._line(self._out_file, _escape(text), text)

    def oauth_stored(self, entry: Any) -> None:
        """A stored OAuth login: service, masked access token, expiry; never a token."""
        if self.as_json:
            self.envelope(Envelope(command="secret", status="ok", exit_code=0,
                                   data={"action": "login", **entry.as_dict()}))
            return
        data = entry.as_dict()
        text = (f"stored OAuth tokens for {entry.service}: access {entry.masked}, "
                f"{'with' if entry.refresh else 'no'} refresh token, expires "
                f"{data['expires_at'] or 'unknown'}; sandboxes get sentinels only")
        self._line(self._out_file, _escape(text), text)

    def secret_removed(self, service: str, kinds: Sequence[str] = ("secret",)) -> None:
        if self.as_json:
            self.envelope(Envelope(command="secret", status="ok", exit_code=0,
                                   data={"action": "rm", "service": service, "removed": True,
                                         "kinds": list(kinds)}))
            return
        what = " and ".join("OAuth tokens" if k == "oauth" else "secret" for k in kinds)
        text = f"removed {what} for {service}"
        self._line(self._out_file, _escape(text), text)

    def confirm_import(self, candidate: ImportCandidate) -> bool:
        """Ask before importing one variable (its name, service and length, never the value)."""
        return self.confirm(f"Import ${candidate.variable} ({candidate.length} characters) as "
                            f"the secret for {candidate.service}?")

    def secret_import(self, result: ImportResult) -> None:
        if self.as_json:
            self.envelope(Envelope(command="secret", status="ok", exit_code=0,
                                   data={"action": "import", **result.as_dict()}))
            return
        if not result.candidates:
            self.note("no known API-key variable is set in this environment")
            return
        if result.dry_run:
            for candidate in result.candidates:
                state = (f"; already set ({candidate.existing})" if candidate.existing
                         else f"; {candidate.problem}" if candidate.problem else "")
                self._plain(f"would import ${candidate.variable} as {candidate.service} "
                            f"({candidate.length} characters{state})")
            return
        for info in result.imported:
            variable = next(c.variable for c in result.candidates if c.service == info.service)
            where = "the OS keyring" if info.source == "keyring" else "the file store"
            self._plain(f"imported ${variable} as {info.service} into {where}: {info.masked}")
        for candidate, why in result.skipped:
            self.note(f"skipped ${candidate.variable} ({candidate.service}): {why}")

    # -- registry: pull and kit push ---------------------------------------------------------

    def interactive(self) -> bool:
        """Whether a question can be asked: stdin and stderr are terminals (never under --json)."""
        return not self.as_json and _isatty(sys.stdin) and _isatty(self._err_file)

    def confirm_widenings(self, reference: str, widenings: Sequence[Widening],
                          first: bool = False) -> bool:
        """Show a kit upgrade's widenings (or, on its first pull, every permission it asks
        for) on stderr and ask; anything but yes declines."""
        from sbx.kits.surface import format_widenings

        what = ("asks for these permissions" if first
                else "the new version asks for more than you approved")
        text = f"{reference}: {what}:\n{format_widenings(widenings)}"
        self._line(self._err_file, _escape(text), text)
        self._err_file.write("Accept these permissions? [y/N] ")
        self._err_file.flush()
        try:
            answer = sys.stdin.readline()
        except (OSError, ValueError):
            return False
        return answer.strip().lower() in {"y", "yes"}

    def confirm(self, question: str) -> bool:
        """Ask a yes/no question on stderr (the caller checked :meth:`interactive`)."""
        self._err_file.write(f"{question} [y/N] ")
        self._err_file.flush()
        try:
            answer = sys.stdin.readline()
        except (OSError, ValueError):
            return False
        return answer.strip().lower() in {"y", "yes"}

    # -- named sandboxes ---------------------------------------------------------------------

    def sandbox_list(self, statuses: Sequence[Any], *, quiet: bool = False) -> None:
        if self.as_json:
            self.envelope(Envelope(command="ls", status="ok", exit_code=0,
                                   data={"sandboxes": [s.as_dict() for s in statuses]}))
            return
        if quiet:
            for status in statuses:
                self._line(self._out_file, _escape(status.name), status.name)
            return
        rows = [("NAME", "WORKLOAD", "KITS", "STATUS", "WORKSPACE", "CREATED")]
        for status in statuses:
            created = (datetime.fromtimestamp(status.created, UTC).strftime("%Y-%m-%d %H:%M")
                       if status.created else "-")
            rows.append((status.name, status.workload, ",".join(status.kits) or "-",
                         status.status, status.workspace or "-", created))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            text = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            self._line(self._out_file, _escape(text.rstrip()), text.rstrip())

    def pull_result(self, result: PullResult) -> None:
        if self.as_json:
            self.envelope(Envelope(command="pull", status="ok", exit_code=0,
                                   data=result.as_dict()))
            return
        for item in result.items:
            decision = item.gate.decision.value if item.gate is not None else "image"
            text = f"{item.reference}: {item.kind} {item.digest} ({decision})"
            self._line(self._out_file, _escape(text), text)

    def kit_pushed(self, result: PushResult) -> None:
        if self.as_json:
            self.envelope(Envelope(command="kit push", status="ok", exit_code=0,
                                   data=result.as_dict()))
            return
        text = f"pushed {result.reference}: {result.digest}"
        self._line(self._out_file, _escape(text), text)


_DOCTOR_MARKS: Final = {"ok": ("✓", "green"), "warn": ("!", "yellow"), "fail": ("✗", "red")}
_GC_REPORTED: Final = frozenset({"deadline_missing", "deadline_unreadable"})


def _gc_label(item: GcItem) -> str:
    run = f" (run {item.run_id[:12]})" if item.run_id and item.kind != "run_dir" else ""
    return f"{item.kind.replace('_', ' ')} {item.short}{run}"


def _rule_text(rule: Any) -> str:
    text = str(rule.host)
    if rule.bounded:
        text += " " + (",".join(rule.methods) or "ANY")
        if rule.paths:
            text += " " + ",".join(rule.paths)
    return text


# rich's markup tags: `[` then a letter, `#`, `/` or `@`, up to the next `]`, with any
# backslashes before it (rich.markup.escape's own pattern).
_MARKUP_TAG: Final = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def _escape(text: str) -> str:
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


def _encodable(text: str, file: IO[str]) -> str:
    """``text`` as ``file``'s encoding can carry it (lone surrogates from a non-UTF-8 command
    line or file name included)."""
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


__all__ = ["ENVELOPE_VERSION", "Envelope", "Renderer", "make_console", "reason_as_dict",
           "status_for_error"]
