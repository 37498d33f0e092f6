"""`sbx run --prompt|--resume|--continue|--acp`: what the sandbox's process runs instead of the
workload's own launch.

The verbs are the composition's (sbx.domain.kits.sessions): headless (agent-sessions@1) for
--prompt and for a run without a terminal, the interactive ones (agent-interactive-sessions@1)
for --resume/--continue in a terminal when the workload declares them. --acp runs the agent's
ACP adapter (acp@1, sbx.domain.kits.acp): a complete command of its own, on stdio.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.acp import Adapter, adapters_of, choose_adapter
from sbx.domain.kits.kitset import KitSet
from sbx.domain.kits.sessions import SessionAsk, session_argv, verbs_of
from sbx.seams.session.mode import decide_mode
from sbx.usecases.run.request import RunRequest


def session_launch(request: RunRequest, composition: Any, kit_set: KitSet,
                   launch: Sequence[str]) -> tuple[str, ...]:
    """The argv a run with a session verb starts: ``launch`` (Entrypoint + Cmd) + the tail, or
    the ACP adapter's command."""
    ask = request.session
    assert ask is not None  # noqa: S101 - only asked with a verb
    workload = kit_set.workload.reference
    if request.command is not None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{ask.flag} and a command after `--` both say what the agent runs",
                       hint=f"Give one: sbx run {request.workload} . {ask.flag} ..., or "
                            f"sbx run {request.workload} . -- CMD ...")
    if ask.verb == "acp":
        return acp_adapter(composition, kit_set).command
    return argv_for(ask, composition, workload, launch,
                    terminal=ask.verb != "prompt" and _terminal(request))


def session_env(request: RunRequest, composition: Any, kit_set: KitSet) -> Mapping[str, str]:
    """The variables the asked verb adds to the sandbox's (an ACP adapter's ``env``)."""
    if request.session is None or request.session.verb != "acp":
        return {}
    return acp_adapter(composition, kit_set).env


def acp_facts(composition: Any, kit_set: KitSet) -> dict[str, Any]:
    """What --acp chooses from, as a named sandbox records it for a later `sbx run NAME --acp`."""
    provided = kit_set.resolution.provided
    workload = kit_set.workload.reference
    return {"adapters": [a.as_dict() for a in adapters_of(e.config for e in composition.acp)],
            "provided": [p.name for p in provided],
            "workload_provides": [p.name for p in provided if p.reference == workload]}


def acp_adapter(composition: Any, kit_set: KitSet) -> Adapter:
    facts = acp_facts(composition, kit_set)
    return choose_adapter(adapters_of(facts["adapters"]), facts["provided"],
                          facts["workload_provides"], workload=kit_set.workload.reference)


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


__all__ = ["acp_adapter", "acp_facts", "argv_for", "session_env", "session_launch"]
