"""Output of the doctor commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sbx.base.render import Envelope, Renderer, escape

if TYPE_CHECKING:
    from sbx.usecases.doctor.model import DoctorReport


_DOCTOR_MARKS: Final = {"ok": ("✓", "green"), "warn": ("!", "yellow"), "fail": ("✗", "red")}

def doctor_report(renderer: Renderer, report: DoctorReport) -> None:
    """One line per check, ``✓ / ! / ✗  title — detail``, a fix line under each non-ok
    check, then a summary; or the envelope under --json."""
    status = int(report.exit_status)
    if renderer.as_json:
        counts = report.counts()
        renderer.envelope(Envelope(
            command="doctor", status="failed" if report.failed else "ok", exit_code=status,
            data=report.as_dict(),
            message=f"{counts['fail']} check(s) failed" if report.failed else None))
        return
    for check in report.checks:
        mark, style = _DOCTOR_MARKS[check.status.value]
        renderer.line(renderer.out_file,
                      f"[{style}]{mark}[/]  [bold]{escape(check.title)}[/] — "
                      f"{escape(check.detail)}",
                      f"{mark}  {check.title} — {check.detail}")
        if check.status.value != "ok" and (check.fix or check.reason):
            code = f" ({check.reason.value})" if check.reason else ""
            fix = check.fix or ""
            renderer.line(renderer.out_file, f"    [dim]fix:[/] {escape(fix)}{code}",
                          f"    fix: {fix}{code}")
    counts = report.counts()
    summary = (f"doctor: {counts['ok']} ok, {counts['warn']} warning"
               f"{'s' if counts['warn'] != 1 else ''}, {counts['fail']} failed")
    renderer.line(renderer.out_file, f"[dim]{summary}[/]", summary)

__all__ = ['doctor_report']
