"""What `sbx resident start|stop|status` print."""

from __future__ import annotations

from typing import Any

from sbx.base.render import Envelope, Renderer


def state(renderer: Renderer, command: str, helper: Any) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command=command, status="ok", exit_code=0,
                                   data=helper.as_json()))
        return
    answer = helper.answer
    if command == "resident stop":
        renderer.message("stopped" if answer else "not running")
        return
    if answer.get("stale"):
        renderer.message("not running")
        renderer.note(f"the helper of sbx's previous code (pid {answer.get('pid')}) stops once "
                      f"its {answer.get('commands_running', 0)} commands end; "
                      "`sbx resident start` starts one of this code")
        return
    if not helper.running:
        renderer.message("not running")
        renderer.note("`sbx resident start` starts it; sbx works the same without it")
        return
    renderer.message(f"running (pid {answer.get('pid')})"
                     + (": started now" if helper.started_now else ""))
    renderer.note(f"served {answer.get('served', 0)} commands, declined "
                  f"{answer.get('declined', 0)}, {answer.get('commands_running', 0)} running; "
                  f"{int(answer.get('rss_kib', 0)) // 1024} MiB resident; exits after "
                  f"{int(answer.get('idle_s', 0))} s idle; socket {helper.socket}")


__all__ = ["state"]
