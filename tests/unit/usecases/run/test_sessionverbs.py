"""What `sbx run --prompt|--resume|--continue|--acp` launches: one verb at a time, never with a
command after `--`, --prompt headless even in a terminal, the interactive verbs in one, and
--acp the composed agent's adapter with its variables."""

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
from sbx.usecases.run.sessionverbs import session_env, session_launch

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
    acp: tuple[Any, ...] = ()


@dataclass(frozen=True)
class _Kit:
    reference: str


@dataclass(frozen=True)
class _Provided:
    name: str
    reference: str


@dataclass(frozen=True)
class _Resolution:
    provided: tuple[_Provided, ...] = (_Provided("wl", "wl"),)


@dataclass(frozen=True)
class _KitSet:
    workload: _Kit = _Kit("wl")
    resolution: _Resolution = _Resolution()


KITS: Any = _KitSet()


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
        session_launch(request, COMPOSITION, KITS, ("agent",))
    assert caught.value.reason is Reason.INVALID_ARGUMENT


def test_prompt_is_headless_even_in_a_terminal_and_continue_is_interactive_there() -> None:
    prompt = RunRequest(workload="wl", host=TERMINAL, session=SessionAsk("prompt", "x y"))
    assert session_launch(prompt, COMPOSITION, KITS, ("agent",)) == ("agent", "-p", "x y")
    cont = RunRequest(workload="wl", host=TERMINAL, session=SessionAsk("continue"))
    assert session_launch(cont, COMPOSITION, KITS, ("agent",)) == ("agent", "-c")
    piped = RunRequest(workload="wl", session=SessionAsk("continue"))
    assert session_launch(piped, COMPOSITION, KITS, ("agent",)) == ("agent", "--continue")


ADAPTER = _Merged("com.docker.sandbox/acp@1", {"agent": "wl", "command": ["wl-acp", "--stdio"],
                                               "env": {"WL_BIN": "/usr/bin/wl"}})


def test_acp_starts_the_adapter_with_its_variables_and_no_verb_besides() -> None:
    composition = _Composition(None, None, acp=(ADAPTER,))
    request = RunRequest(workload="wl", session=session_ask(None, None, continue_=False,
                                                            acp=True))
    assert session_launch(request, composition, KITS, ("agent",)) == ("wl-acp", "--stdio")
    assert session_env(request, composition, KITS) == {"WL_BIN": "/usr/bin/wl"}
    assert session_env(RunRequest(workload="wl"), composition, KITS) == {}
    with pytest.raises(SbxError) as caught:
        session_ask("hi", None, continue_=False, acp=True)
    assert "--prompt and --acp" in str(caught.value)


def test_acp_without_an_adapter_for_a_composed_agent_is_refused() -> None:
    other = _Merged("com.docker.sandbox/acp@1", {"agent": "elsewhere", "command": "x"})
    request = RunRequest(workload="wl", session=SessionAsk("acp"))
    for adapters in ((), (other,)):
        with pytest.raises(SbxError) as caught:
            session_launch(request, _Composition(None, None, acp=adapters), KITS, ("agent",))
        assert caught.value.reason is Reason.ACP_UNAVAILABLE
