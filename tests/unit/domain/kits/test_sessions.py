"""The session verbs as argv: raw substitution into one element (never a shell), tails after
the launch argv, headless vs interactive presence rules, the workload's declaration only, ids
checked before they reach ``resume`` and read back from ``list``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.sessions import (
    SessionAsk,
    SessionVerbs,
    check_session_id,
    expand,
    parse_ids,
    session_argv,
    verbs_of,
)
from sbx.domain.kits.types import AGENT_SESSIONS, INTERACTIVE_SESSIONS

LAUNCH = ("claude",)
HEADLESS = SessionVerbs(AGENT_SESSIONS, {
    "prompt": ["-p", "{{.Prompt}}"], "resume": ["--resume", "{{.SessionID}}"],
    "continue": ["--continue"], "list": "ls sessions"})
ATTACKS = ["; rm -rf / #", "$(id)", "`id`", "a\nb", "'\"", "| cat /etc/passwd", "&& true",
           "> /etc/x", "*", "-p", "--resume=x", "\x00", "{{.SessionID}}", ""]


@pytest.mark.parametrize("prompt", ATTACKS)
def test_a_prompt_is_one_argv_element_exactly_as_given(prompt: str) -> None:
    argv = session_argv(LAUNCH, HEADLESS, SessionAsk("prompt", prompt))
    assert argv == ("claude", "-p", prompt)


def test_a_placeholder_inside_a_token_is_substituted_raw() -> None:
    assert expand(["--prompt={{.Prompt}}", "x{{.Prompt}}y"], SessionAsk("prompt", "a b")) \
        == ("--prompt=a b", "xa by")


def test_only_the_verbs_own_placeholder_is_filled() -> None:
    assert expand(["{{.SessionID}}", "{{.Prompt}}"], SessionAsk("prompt", "p")) \
        == ("{{.SessionID}}", "p")


def test_tails_follow_the_launch_argv_and_never_replace_it() -> None:
    assert session_argv(("node", "cli.js"), HEADLESS, SessionAsk("continue")) \
        == ("node", "cli.js", "--continue")
    assert session_argv(LAUNCH, HEADLESS, SessionAsk("resume", "abc-1")) \
        == ("claude", "--resume", "abc-1")


def test_list_is_its_own_command_and_a_string_is_the_kits_sh_c() -> None:
    assert session_argv(LAUNCH, HEADLESS, SessionAsk("list")) == ("sh", "-c", "ls sessions")
    verbs = SessionVerbs(AGENT_SESSIONS, {"list": ["agent", "ls"]})
    assert session_argv(LAUNCH, verbs, SessionAsk("list")) == ("agent", "ls")


def test_headless_reads_an_empty_tail_as_absent() -> None:
    verbs = SessionVerbs(AGENT_SESSIONS, {"prompt": ["{{.Prompt}}"], "continue": []})
    with pytest.raises(SbxError) as caught:
        session_argv(LAUNCH, verbs, SessionAsk("continue"))
    assert caught.value.reason is Reason.SESSION_VERB_MISSING
    assert "it declares: prompt" in str(caught.value)


def test_interactive_tells_an_empty_tail_from_an_absent_one() -> None:
    verbs = SessionVerbs(INTERACTIVE_SESSIONS, {"continue": [], "prompt": ["{{.Prompt}}"]})
    assert session_argv(LAUNCH, verbs, SessionAsk("continue")) == LAUNCH
    with pytest.raises(SbxError) as caught:
        session_argv(LAUNCH, verbs, SessionAsk("sessionPicker"))
    assert caught.value.reason is Reason.SESSION_VERB_MISSING


def test_an_absent_new_session_is_the_lifecycle_interactive_launch() -> None:
    verbs = SessionVerbs(INTERACTIVE_SESSIONS, {"continue": ["-c"]})
    assert session_argv(LAUNCH, verbs, SessionAsk("newSession"), lifecycle_tail=["--tui"]) \
        == ("claude", "--tui")
    stated = SessionVerbs(INTERACTIVE_SESSIONS, {"newSession": []})
    assert session_argv(LAUNCH, stated, SessionAsk("newSession"), lifecycle_tail=["--tui"]) \
        == LAUNCH


def test_no_capability_is_refused_with_its_reason() -> None:
    with pytest.raises(SbxError) as caught:
        session_argv(LAUNCH, None, SessionAsk("prompt", "x"))
    assert caught.value.reason is Reason.SESSIONS_UNSUPPORTED
    assert "-- CMD" in (caught.value.hint or "")


@pytest.mark.parametrize("bad", ["", "-x", "--all", "a b", "a\tb", "a\nb", "\x1b]0;t\x07",
                                 "x" * 257, "a\x00b", "\x7f"])
def test_a_session_id_that_is_no_id_is_refused(bad: str) -> None:
    with pytest.raises(SbxError) as caught:
        session_argv(LAUNCH, HEADLESS, SessionAsk("resume", bad))
    assert caught.value.reason is Reason.SESSION_ID_INVALID


@pytest.mark.parametrize("good", ["0199a213-81c0-7800-8aa1-bbab2a035a53", "latest", "s1",
                                  "ünï", "a=b", "x" * 256])
def test_ids_as_agents_print_them_pass(good: str) -> None:
    assert check_session_id(good) == good


def test_listed_ids_keep_their_order_and_drop_what_is_no_id() -> None:
    out = b"s3\n\ns2\r\n\x1b]0;evil\x07\n-rf\nwith space\ns1\n"
    assert parse_ids(out) == ["s3", "s2", "s1"]


@dataclass(frozen=True)
class _Origin:
    kit: str


@dataclass(frozen=True)
class _Merged:
    type: str
    config: dict[str, Any]
    origins: tuple[_Origin, ...]


def test_the_workloads_declaration_governs_and_a_terminal_picks_the_interactive_one() -> None:
    head = _Merged(AGENT_SESSIONS, {"prompt": ["-p", "{{.Prompt}}"]}, (_Origin("wl"),))
    tui = _Merged(INTERACTIVE_SESSIONS, {"continue": []}, (_Origin("wl"),))
    assert verbs_of(head, tui, "wl", terminal=True) == SessionVerbs(INTERACTIVE_SESSIONS,
                                                                    {"continue": []})
    assert verbs_of(head, tui, "wl", terminal=False) == SessionVerbs(
        AGENT_SESSIONS, {"prompt": ["-p", "{{.Prompt}}"]})
    from_mixin = _Merged(AGENT_SESSIONS, {"prompt": ["{{.Prompt}}"]}, (_Origin("mixin"),))
    assert verbs_of(from_mixin, None, "wl", terminal=False) is None
