"""What `sbx run --prompt|--resume|--continue` launches: one verb at a time, never with a
command after `--`, --prompt headless even in a terminal, the interactive verbs in one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.sessions import SessionAsk
from sbx.domain.kits.types import AGENT_SESSIONS, INTERACTIVE_SESSIONS
from sbx.seams.session.mode import HostStreams
from sbx.usecases.run.request import RunRequest, session_ask
from sbx.usecases.run.sessionverbs import session_launch

TERMINAL = HostStreams(stdin_fd=0, stdin_is_terminal=True, stdout_is_terminal=True)


@dataclass(frozen=True)
class _Origin:
    kit: str


@dataclass(frozen=True)
class _Merged:
    type: str
    config: dict[str, Any]
    origins: tuple[_Origin, ...] = (_Origin("wl"),)


@dataclass(frozen=True)
class _Composition:
    agent_sessions: Any
    agent_interactive_sessions: Any
    lifecycle: Any = None


COMPOSITION = _Composition(
    _Merged(AGENT_SESSIONS, {"prompt": ["-p", "{{.Prompt}}"], "continue": ["--continue"]}),
    _Merged(INTERACTIVE_SESSIONS, {"prompt": ["--", "{{.Prompt}}"], "continue": ["-c"]}))


def test_one_verb_at_a_time() -> None:
    assert session_ask(None, None, continue_=False) is None
    assert session_ask("hi", None, continue_=False) == SessionAsk("prompt", "hi")
    with pytest.raises(SbxError) as caught:
        session_ask("hi", "id", continue_=True)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
    assert "--prompt and --resume and --continue" in str(caught.value)


def test_a_command_after_the_dashes_and_a_verb_are_refused_together() -> None:
    request = RunRequest(workload="wl", command=("sh",), session=SessionAsk("continue"))
    with pytest.raises(SbxError) as caught:
        session_launch(request, COMPOSITION, "wl", ("agent",))
    assert caught.value.reason is Reason.INVALID_ARGUMENT


def test_prompt_is_headless_even_in_a_terminal_and_continue_is_interactive_there() -> None:
    prompt = RunRequest(workload="wl", host=TERMINAL, session=SessionAsk("prompt", "x y"))
    assert session_launch(prompt, COMPOSITION, "wl", ("agent",)) == ("agent", "-p", "x y")
    cont = RunRequest(workload="wl", host=TERMINAL, session=SessionAsk("continue"))
    assert session_launch(cont, COMPOSITION, "wl", ("agent",)) == ("agent", "-c")
    piped = RunRequest(workload="wl", session=SessionAsk("continue"))
    assert session_launch(piped, COMPOSITION, "wl", ("agent",)) == ("agent", "--continue")
