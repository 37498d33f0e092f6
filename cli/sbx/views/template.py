"""What `sbx save` and `sbx template ls|rm` print."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sbx.base.render import Envelope, Renderer, escape


def saved(renderer: Renderer, result: Any) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="save", status="ok", exit_code=0,
                                   data=result.as_json()))
        return
    template = result.template
    renderer.message(template.tag)
    renderer.note(f"saved {template.source} as {template.tag} ({result.home_bytes} bytes in "
                  f"HOME); `sbx run --template {template.tag} --name NEW` starts one from it")


def listing(renderer: Renderer, templates: Sequence[Any]) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="template ls", status="ok", exit_code=0,
                                   data={"templates": [t.as_json() for t in templates]}))
        return
    if not templates:
        renderer.note("no templates (`sbx save NAME TAG` makes one)")
        return
    rows = [("TAG", "WORKLOAD", "KITS", "SAVED FROM", "CREATED")]
    for template in templates:
        created = template.created
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(int(created))) \
            if created.isdigit() else "-"
        rows.append((template.tag, template.workload, ",".join(template.mixins) or "-",
                     template.source or "-", when))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        text = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        renderer.line(renderer.out_file, escape(text.rstrip()), text.rstrip())


def removed(renderer: Renderer, template: Any) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="template rm", status="ok", exit_code=0,
                                   data=template.as_json()))
        return
    renderer.message(template.tag)


__all__ = ["listing", "removed", "saved"]
