"""The session verbs of agent-sessions@1 and agent-interactive-sessions@1, as argv.

A verb is an argv *tail* appended to the workload's launch argv (image Entrypoint + Cmd); its
placeholders (``{{.Prompt}}``, ``{{.SessionID}}``) are replaced by the caller's raw value inside
each element, never through a shell, so a prompt is one argv element whatever it holds.
``list`` is a complete command (a string is run by ``sh -c`` as the schema says: the kit's own
text, never the caller's). Headless (agent-sessions@1) reads an empty tail as absent; the
interactive type tells ``[]`` (the launch argv alone) from an omitted key, and an omitted
``newSession`` is the lifecycle@1 interactive launch. The workload's declaration governs: a
mixin's has no agent to drive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.types import AGENT_SESSIONS, INTERACTIVE_SESSIONS

PROMPT: Final = "{{.Prompt}}"
SESSION_ID: Final = "{{.SessionID}}"
HEADLESS_VERBS: Final = ("prompt", "resume", "continue", "list")
INTERACTIVE_VERBS: Final = ("prompt", "resume", "continue", "newSession", "sessionPicker",
                            "list")
# What --resume passes: one printable token that no agent reads as an option.
_SESSION_ID: Final = re.compile(r"[^\s\x00-\x1f\x7f-][^\s\x00-\x1f\x7f]{0,255}")
_MAX_IDS: Final = 10_000


@dataclass(frozen=True)
class SessionAsk:
    """What the caller asks: a verb and its value (the prompt, the session id, or None)."""

    verb: str
    value: str | None = None

    @property
    def flag(self) -> str:
        return {"prompt": "--prompt", "resume": "--resume", "continue": "--continue",
                "list": "sbx sessions", "acp": "--acp"}.get(self.verb, self.verb)


@dataclass(frozen=True)
class SessionVerbs:
    """One composed session capability of the workload: its type and config."""

    type: str
    config: Mapping[str, Any]

    @property
    def interactive(self) -> bool:
        return self.type == INTERACTIVE_SESSIONS

    def declared(self) -> list[str]:
        verbs = INTERACTIVE_VERBS if self.interactive else HEADLESS_VERBS
        return [v for v in verbs if self.tail_of(v) is not None or
                (v == "list" and self.list_command() is not None)]

    def tail_of(self, verb: str) -> tuple[str, ...] | None:
        """The verb's tail as declared (None: the agent has no such operation)."""
        if verb == "list":
            return None
        value = self.config.get(verb)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return None
        if not value and not self.interactive:
            return None  # agent-sessions@1: an empty tail reads as absent
        return tuple(value)

    def list_command(self) -> tuple[str, ...] | None:
        value = self.config.get("list")
        if isinstance(value, str) and value.strip():
            return ("sh", "-c", value)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value) \
                and value[0].strip():
            return tuple(value)
        return None


def check_session_id(session_id: str) -> str:
    """The id as given, or refused (``session_id_invalid``): ids feed ``resume`` verbatim, so
    one that an agent would read as an option or split never reaches it."""
    if not _SESSION_ID.fullmatch(session_id):
        shown = session_id if len(session_id) <= 40 else session_id[:40] + "..."
        raise SbxError(Reason.SESSION_ID_INVALID,
                       f"--resume {shown!r} is not a session id: 1 to 256 printable characters, "
                       "no whitespace, not starting with `-`",
                       hint="Pick one from `sbx sessions NAME`, or use --continue.")
    return session_id


def expand(tail: Sequence[str], ask: SessionAsk) -> tuple[str, ...]:
    """Raw substitution of the placeholders in each element (no shell, no re-quoting); only
    the verb's own placeholder is filled, so a prompt holding ``{{.SessionID}}`` stays text."""
    needle = {"prompt": PROMPT, "resume": SESSION_ID}.get(ask.verb)
    if needle is None or ask.value is None:
        return tuple(tail)
    return tuple(element.replace(needle, ask.value) for element in tail)


def verbs_of(sessions: Any, interactive: Any, workload: str,
             *, terminal: bool) -> SessionVerbs | None:
    """The capability a run drives: in a terminal the interactive one when the workload
    declares it, else the headless one; a mixin's declaration does not count."""
    def own(entry: Any) -> SessionVerbs | None:
        if entry is None or not any(o.kit == workload for o in entry.origins):
            return None
        return SessionVerbs(entry.type, dict(entry.config or {}))

    headless, tui = own(sessions), own(interactive)
    if terminal and tui is not None:
        return tui
    return headless if headless is not None else tui


def session_argv(launch: Sequence[str], verbs: SessionVerbs | None, ask: SessionAsk, *,
                 lifecycle_tail: Sequence[str] | None = None) -> tuple[str, ...]:
    """The invocation of ``ask``: the launch argv + the verb's tail, substituted; ``list`` is
    its own command. Refused when the workload declares no such verb."""
    if verbs is None:
        raise no_sessions(ask)
    if ask.verb == "resume" and ask.value is not None:
        check_session_id(ask.value)
    if ask.verb == "list":
        command = verbs.list_command()
        if command is None:
            raise verb_missing(verbs, ask)
        return command
    tail = verbs.tail_of(ask.verb)
    if tail is None and ask.verb == "newSession" and verbs.interactive:
        tail = tuple(lifecycle_tail or ())
    if tail is None:
        raise verb_missing(verbs, ask)
    return (*launch, *expand(tail, ask))


def no_sessions(ask: SessionAsk) -> SbxError:
    return SbxError(Reason.SESSIONS_UNSUPPORTED,
                    f"{ask.flag} needs session verbs, and the workload kit declares no "
                    f"{AGENT_SESSIONS} (nor {INTERACTIVE_SESSIONS})",
                    hint="Pass the agent's own command instead: sbx run KIT . -- CMD ...")


def verb_missing(verbs: SessionVerbs, ask: SessionAsk) -> SbxError:
    declared = ", ".join(verbs.declared()) or "none"
    other = ("; in a terminal (-t) the interactive verbs apply" if not verbs.interactive
             else "")
    return SbxError(Reason.SESSION_VERB_MISSING,
                    f"the workload's {verbs.type} declares no {ask.verb!r} verb "
                    f"(it declares: {declared}){other}",
                    hint="Use a declared verb, or pass the agent's own arguments: "
                         "sbx run KIT . -- CMD ...",
                    details={"declared": verbs.declared(), "type": verbs.type})


def parse_ids(stdout: bytes) -> list[str]:
    """The list verb's stdout: one id per line, most recent first. Blank lines and lines that
    are no id ``--resume`` would take (control characters, spaces, a leading ``-``) are
    dropped: the sandbox wrote them, and they reach the user's terminal."""
    text = stdout.decode("utf-8", errors="replace")
    ids = [line.strip() for line in text.splitlines()]
    return [i for i in ids if _SESSION_ID.fullmatch(i)][:_MAX_IDS]


__all__ = ["HEADLESS_VERBS", "INTERACTIVE_VERBS", "PROMPT", "SESSION_ID", "SessionAsk",
           "SessionVerbs", "check_session_id", "expand", "no_sessions", "parse_ids",
           "session_argv", "verb_missing", "verbs_of"]
