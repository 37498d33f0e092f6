"""`sbx run --prompt|--resume|--continue`: the workload's launch argv + the session verb.

The verbs are the composition's (sbx.domain.kits.sessions): headless (agent-sessions@1) for
--prompt and for a run without a terminal, the interactive ones (agent-interactive-sessions@1)
for --resume/--continue in a terminal when the workload declares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.sessions import SessionAsk, session_argv, verbs_of
from sbx.seams.session.mode import decide_mode
from sbx.usecases.run.request import RunRequest


def session_launch(request: RunRequest, composition: Any, workload: str,
                   launch: Sequence[str]) -> tuple[str, ...]:
    """The argv a run with a session verb starts: ``launch`` (Entrypoint + Cmd) + the tail."""
    ask = request.session
    assert ask is not None  # noqa: S101 - only asked with a verb
    if request.command is not None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{ask.flag} and a command after `--` both say what the agent runs",
                       hint=f"Give one: sbx run {request.workload} . {ask.flag} ..., or "
                            f"sbx run {request.workload} . -- CMD ...")
    return argv_for(ask, composition, workload, launch,
                    terminal=ask.verb != "prompt" and _terminal(request))


def argv_for(ask: SessionAsk, composition: Any, workload: str, launch: Sequence[str], *,
             terminal: bool) -> tuple[str, ...]:
    verbs = verbs_of(composition.agent_sessions, composition.agent_interactive_sessions,
                     workload, terminal=terminal)
    lifecycle = composition.lifecycle
    return session_argv(launch, verbs, ask,
                        lifecycle_tail=lifecycle.interactive if lifecycle is not None else None)


def _terminal(request: RunRequest) -> bool:
    return decide_mode(interactive=request.interactive, tty=request.tty,
                       capture=request.capture_output, host=request.host).tty


__all__ = ["argv_for", "session_launch"]
