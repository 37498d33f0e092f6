"""Output of the sandboxes commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sbx.base.render import Envelope, Renderer, escape


def sandbox_list(renderer: Renderer, statuses: Sequence[Any], *, quiet: bool = False,
                 engines: Sequence[Any] | None = None) -> None:
    """``engines``: the engines a fleet listing covered (None: the one engine of today, no
    ENGINE column); an unreachable one gets a row of its own and a warning with why."""
    if renderer.as_json:
        data: dict[str, Any] = {"sandboxes": [s.as_dict() for s in statuses]}
        if engines is not None:
            data["engines"] = [e.as_dict() for e in engines]
        renderer.envelope(Envelope(command="ls", status="ok", exit_code=0, data=data))
        return
    if quiet:
        for status in statuses:
            renderer.line(renderer.out_file, escape(status.name), status.name)
        return
    rows: list[tuple[str, ...]] = [("NAME", "WORKLOAD", "KITS", "STATUS", "WORKSPACE", "CREATED")]
    if engines is not None:
        rows = [(*rows[0], "ENGINE")]
    for status in statuses:
        created = (datetime.fromtimestamp(status.created, UTC).strftime("%Y-%m-%d %H:%M")
                   if status.created else "-")
        state = status.status if getattr(status, "stopped", None) is None \
            else f"{status.status} ({status.stopped.reason.value})"  # e.g. stopped_idle
        row = (status.name, status.workload, ",".join(status.kits) or "-",
               state, status.workspace or "-", created)
        rows.append((*row, status.engine or "-") if engines is not None else row)
    for engine in engines or ():
        if engine.reason is not None:
            rows.append(("-", "-", "-", "unreachable", "-", "-", engine.name or "-"))
    _table(renderer, rows)
    for engine in engines or ():
        if engine.reason is not None:
            said = (engine.message or "").removeprefix(f"engine {engine.name}: ")  # said here
            renderer.warn(f"engine {engine.name or engine.host} ({engine.host}) is unreachable: "
                          f"{said} ({engine.reason}); its sandboxes are listed as "
                          "unreachable")
        if engine.aliases:  # names reaching one daemon: its sandboxes are listed once
            others = ", ".join(a or "the environment's engine" for a in engine.aliases)
            renderer.note(f"{others} reach the same engine as {engine.name or 'the environment'}"
                          f" ({engine.host}): listed once, as {engine.name or '-'}")


def port_list(renderer: Renderer, name: str, rows: Sequence[Any]) -> None:
    """`sbx ports NAME`: one line a port, its host address or `-` while stopped."""
    if renderer.as_json:
        renderer.envelope(Envelope(command="ports", status="ok", exit_code=0,
                                   data={"name": name, "ports": [r.as_dict() for r in rows]}))
        return
    if not rows:
        renderer.note(f"{name} publishes no ports")
        return
    table = [("CONTAINER", "HOST", "SOURCE")]
    table += [(f"{row.container}/tcp", row.where(), row.source) for row in rows]
    _table(renderer, table)


def _table(renderer: Renderer, rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        text = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        renderer.line(renderer.out_file, escape(text.rstrip()), text.rstrip())


def removed(renderer: Renderer, names: Sequence[str]) -> None:
    """The sandboxes `sbx rm` removed, one name a line (or in the envelope)."""
    if renderer.as_json:
        renderer.envelope(Envelope(command="rm", status="ok", exit_code=0,
                                   data={"removed": list(names)}))
        return
    if not names:
        renderer.note("no named sandboxes to remove")
    for name in names:
        renderer.message(name)


def session_list(renderer: Renderer, listed: Any, *, as_json: bool) -> None:
    """`sbx sessions`: one id a line, most recent first (or in the envelope)."""
    if as_json:
        renderer.envelope(Envelope(command="sessions",
                                   status="ok" if listed.exit_code == 0 else "workload_exit",
                                   exit_code=listed.exit_code, data=listed.as_dict()))
        return
    for session_id in listed.ids:
        renderer.message(escape(session_id))
    if not listed.ids:
        renderer.note(f"{listed.name}: no sessions")


__all__ = ["port_list", "removed", "sandbox_list", "session_list"]
