"""Output of the gc commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sbx.base.render import Envelope, Renderer, escape

if TYPE_CHECKING:
    from sbx.usecases.gc.result import GcItem, GcResult


_GC_REPORTED: Final = frozenset({"deadline_missing", "deadline_unreadable"})

def gc_result(renderer: Renderer, result: GcResult, *, verbose: int = 0) -> None:
    """Silent when there was nothing to do or everything was removed (cron); one line per
    failure and per object kept with an unreadable deadline; what went (or would go) with
    -v or --dry-run; the envelope under --json."""
    status = int(result.exit_status)
    if renderer.as_json:
        first = result.failed[0] if result.failed else None
        renderer.envelope(Envelope(
            command="gc", status="failed" if result.failed else "ok", exit_code=status,
            data=result.as_dict(),
            reason=first.reason.value if first else None,
            message=(f"{len(result.failed)} cleanup failure(s); first: {first.message}"
                     if first else result.note),
            hint=first.reason.info.fix if first else None))
        return
    if result.note and verbose:
        renderer.line(renderer.err_file, f"[dim]sbx gc:[/] {escape(result.note)}",
                      f"sbx gc: {result.note}")
    verb = "would remove" if result.dry_run else "removed"
    if result.dry_run or verbose:
        for item in result.removed:
            text = f"{verb} {_gc_label(item)}: {item.detail}"
            renderer.line(renderer.out_file, escape(text), text)
    if verbose:
        for item in result.kept:
            if item.why not in _GC_REPORTED:
                text = f"sbx gc: kept {_gc_label(item)}: {item.detail}"
                renderer.line(renderer.err_file, f"[dim]{escape(text)}[/]", text)
    for item in result.kept:
        if item.why in _GC_REPORTED:
            text = f"sbx gc: kept {_gc_label(item)}: {item.detail}"
            renderer.line(renderer.err_file, f"[yellow]{escape(text)}[/]", text)
    for warning in result.workspace_warnings:
        renderer.warn(warning)
    for failure in result.failed:
        text = f"sbx gc: {failure.message} ({failure.reason.value})"
        renderer.line(renderer.err_file, f"[bold red]sbx gc:[/] {escape(failure.message)} "
                      f"({failure.reason.value})", text)


def _gc_label(item: GcItem) -> str:
    run = f" (run {item.run_id[:12]})" if item.run_id and item.kind != "run_dir" else ""
    return f"{item.kind.replace('_', ' ')} {item.short}{run}"

__all__ = ['gc_result']
