"""Session verbs in a named (or kept) sandbox: `sbx run NAME… --prompt|--resume|--continue`
and `sbx sessions NAME`.

The verbs and the launch argv are the ones recorded when the sandbox was created (the
workload's own declaration, sbx.usecases.namedrecord.session_record); each runs as a process
of the sandbox (as `sbx exec` does: its user, hardening and egress), which is created first
when missing and started when stopped. The sandbox's own workload stays as it was created.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.sessions import SessionAsk, SessionVerbs, parse_ids, session_argv
from sbx.domain.sandbox.records import SandboxRecord, SandboxStore, check_name
from sbx.seams.session.mode import decide_mode
from sbx.usecases.context import AppContext
from sbx.usecases.named.listing import load_named
from sbx.usecases.named.session import exec_in
from sbx.usecases.named.start import start_named
from sbx.usecases.run.request import NO_HOST_STREAMS, OutputSink, RunRequest


@dataclass(frozen=True)
class SessionList:
    """`sbx sessions NAME`: the ids the list verb printed, most recent first."""

    name: str
    ids: tuple[str, ...]
    command: tuple[str, ...]
    exit_code: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sessions": list(self.ids), "command": list(self.command),
                "exit_code": self.exit_code}


def run_verb_named(ctx: AppContext, request: RunRequest, *, on_output: OutputSink,
                   on_warning: Callable[[str], None], on_notice: Callable[[str], None],
                   create: Callable[[RunRequest], Any]) -> int:
    """The verb of ``request`` in its named sandbox; ``create`` makes a missing one (left
    running, its own workload not attached)."""
    ask = request.session
    assert ask is not None and request.name is not None  # noqa: S101 - the entry checks
    name = check_name(request.name)
    if request.command is not None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{ask.flag} and a command after `--` both say what the agent runs",
                       hint=f"Give one, or run a command in it: sbx exec {name} -- CMD ...")
    if SandboxStore(ctx.state_home).load(name) is None:
        create(dataclasses.replace(request, session=None, detach=True))
    record = _running(ctx, name, on_warning, on_notice)
    tty = request.tty
    if tty is None and ask.verb == "prompt":
        tty = False  # headless: the output as the agent wrote it, byte for byte
    terminal = decide_mode(interactive=request.interactive, tty=tty, capture=False,
                           host=request.host).tty
    argv = _argv(record, ask, terminal=terminal)
    return exec_in(ctx, name, argv, request.host, env=request.env,
                   interactive=request.interactive, tty=tty, on_output=on_output,
                   on_warning=on_warning, terminal_passthrough=request.terminal_passthrough)


def list_sessions(ctx: AppContext, word: str, *, on_output: OutputSink,
                  on_warning: Callable[[str], None],
                  on_notice: Callable[[str], None]) -> SessionList:
    """Run the workload's list verb in the sandbox and read its stdout as ids; its stderr is
    passed on as the agent wrote it."""
    record = load_named(ctx, word, command="sbx sessions")
    record = _running(ctx, record.name, on_warning, on_notice)
    command = _argv(record, SessionAsk("list"), terminal=False)
    out = bytearray()

    def collect(stream: str, chunk: bytes | memoryview) -> None:
        if stream == "stdout":
            if len(out) < 16 * 1024 * 1024:  # bounded: ids, not a transcript
                out.extend(chunk)
        else:
            on_output(stream, chunk)

    code = exec_in(ctx, record.name, command, NO_HOST_STREAMS, env=(), interactive=False,
                   tty=False, on_output=collect, on_warning=on_warning)
    return SessionList(record.name, tuple(parse_ids(bytes(out))), command, code)


def _running(ctx: AppContext, name: str, on_warning: Callable[[str], None],
             on_notice: Callable[[str], None]) -> SandboxRecord:
    record = load_named(ctx, name, command="sbx sessions")
    if ctx.driver.container_state(record.container_id or "") != "running":
        start_named(ctx, record.name, on_warning=on_warning, on_notice=on_notice)
        on_notice(f"{record.name} was stopped: started it for this session "
                  f"(`sbx stop {record.name}` stops it again)")
    return record


def _argv(record: SandboxRecord, ask: SessionAsk, *, terminal: bool) -> tuple[str, ...]:
    kept = record.request.get("sessions")
    if not isinstance(kept, Mapping):
        raise SbxError(Reason.SESSIONS_UNSUPPORTED,
                       f"{record.name} was created before sbx kept its session verbs",
                       hint=f"sbx run --name {record.name} --recreate {record.workload}")
    headless, tui = _verbs(kept.get("agent_sessions")), _verbs(kept.get("interactive"))
    verbs = tui if terminal and tui is not None else headless or tui
    launch = [str(a) for a in kept.get("launch") or ()]
    tail = kept.get("lifecycle_interactive")
    return session_argv(launch, verbs, ask,
                        lifecycle_tail=[str(a) for a in tail] if isinstance(tail, list) else None)


def _verbs(entry: Any) -> SessionVerbs | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("config"), Mapping):
        return None
    return SessionVerbs(str(entry.get("type")), entry["config"])


__all__ = ["SessionList", "list_sessions", "run_verb_named"]
