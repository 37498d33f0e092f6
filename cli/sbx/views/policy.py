"""Output of the policy commands: the request log (summary, records, the live tail) and the
user policy's rules."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sbx.base.render import Envelope, Renderer, escape
from sbx.domain.kits import surface
from sbx.usecases import policylog

if TYPE_CHECKING:
    from sbx.domain.egress.userpolicy import UserRule
    from sbx.usecases.policylog import LogView
    from sbx.usecases.policyrules import Added


def log_summary(renderer: Renderer, view: LogView, *, subject: str | None) -> None:
    """Per sandbox and destination: allowed and denied counts, the last rule, last seen."""
    if view.skipped:
        renderer.warn(f"skipped {view.skipped} line(s) of the request logs that are not "
                      "well-formed records")
    rows = view.summary()
    if not rows:
        where = subject or "any sandbox"
        renderer.note(f"no requests recorded for {where}"
                      + ("" if view.sources else " (no request log kept)"))
        return
    _columns(renderer, [("SANDBOX", "DESTINATION", "ALLOWED", "DENIED", "LAST SEEN",
                         "LAST RULE"),
                        *((r.sandbox, r.destination, str(r.allowed), str(r.denied),
                           r.last_seen, r.last_rule) for r in rows)])


def _columns(renderer: Renderer, rows: Sequence[Sequence[str]]) -> None:
    """Aligned columns, nothing cut (a log summary is read by people and by grep)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        text = "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
        renderer.line(renderer.out_file, escape(text.rstrip()), text.rstrip())


def log_record(renderer: Renderer, record: Mapping[str, Any], *, as_json: bool) -> None:
    """One record: the schema's JSON line (``--json``), or a line for people."""
    if as_json:
        renderer.text(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
        return
    renderer.plain(policylog.record_line(record))


def rules_list(renderer: Renderer, rules: Sequence[UserRule]) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="policy", status="ok", exit_code=0,
                                   data={"rules": [rule_view(r) for r in rules]}))
        return
    if not rules:
        renderer.note("no user policy rules; the kits' rules alone apply (add one with "
                      "`sbx policy allow HOST[:PORT][PATH]`)")
        return
    _columns(renderer, [("ID", "ACTION", "METHODS", "PHASE", "APPLIES TO", "EXPIRES",
                         "TARGET"),
                        *((r.id, r.action, ",".join(r.methods) or "ANY", r.phase,
                           r.sandbox or "every sandbox", _expires(r.expires), r.target)
                          for r in rules)])


def rule_view(rule: UserRule) -> dict[str, Any]:
    return {**rule.as_dict(), "target": rule.target,
            "remove": f"sbx policy rm {rule.id}"}


def _expires(when: float | None) -> str:
    if when is None:
        return "never"
    left = max(0, int(when - time.time()))
    if left >= 86400:
        return f"in {left // 86400}d {left % 86400 // 3600}h"
    if left >= 3600:
        return f"in {left // 3600}h {left % 3600 // 60}m"
    return f"in {left // 60}m {left % 60}s"


def rule_added(renderer: Renderer, added: Added) -> None:
    rule = added.rule
    if renderer.as_json:
        renderer.envelope(Envelope(command="policy", status="ok", exit_code=0,
                                   data={**added.as_dict(), "rule": rule_view(rule)}))
        return
    lasting = "" if rule.expires is None else f", until {_expires(rule.expires)}"
    text = (f"added rule {rule.id}: {rule.action} {rule.target} "
            f"{','.join(rule.methods) or 'any method'} ({rule.phase} phase, {added.scope}"
            f"{lasting}); running sandboxes follow it from their next request; remove it "
            f"with `sbx policy rm {rule.id}`")
    renderer.line(renderer.out_file, escape(text), text)


def rule_removed(renderer: Renderer, rule: UserRule) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="policy", status="ok", exit_code=0,
                                   data={"removed": rule_view(rule)}))
        return
    text = f"removed rule {rule.id}: {rule.describe()}"
    renderer.line(renderer.out_file, escape(text), text)


def confirm_widening(renderer: Renderer, rule: UserRule, widenings: Sequence[Any],
                     scope: str) -> bool:
    """The widening as the pull gate shows one, on stderr, and the question; anything but yes
    declines."""
    what = ("it applies to every sandbox, whatever its kits declare" if rule.sandbox is None
            else f"the kits of {rule.sandbox} do not grant it")
    text = (f"user policy rule {rule.action} {rule.target} for {scope}: {what}:\n"
            f"{surface.format_widenings(widenings)}")
    renderer.line(renderer.err_file, escape(text), text)
    renderer.err_file.write("Accept these permissions? [y/N] ")
    renderer.err_file.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):
        return False
    return answer.strip().lower() in {"y", "yes"}


__all__ = ["confirm_widening", "log_record", "log_summary", "rule_added", "rule_removed",
           "rule_view", "rules_list"]
