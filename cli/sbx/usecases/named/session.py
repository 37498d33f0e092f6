"""`sbx attach`, `sbx exec` and `sbx logs`: a terminal or pipes to a running named sandbox."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.seams.session.escape import DEFAULT_DETACH_KEYS
from sbx.seams.session.mode import decide_mode
from sbx.seams.session.pump import SessionEnd
from sbx.usecases import idlestop
from sbx.usecases.context import AppContext
from sbx.usecases.named.admit import admit_recorded
from sbx.usecases.named.listing import load_named
from sbx.usecases.namedrecord import check_workspace
from sbx.usecases.run.request import NO_DEADLINE_S, OutputSink
from sbx.usecases.run.session import OUTPUT_DRAIN_S, Terminal, TerminalOutput


def attach(ctx: AppContext, name: str, host: Any, *, on_output: OutputSink,
           on_warning: Callable[[str], None], on_notice: Callable[[str], None],
           interactive: bool | None = None, terminal_passthrough: bool = False,
           starting: Callable[[], bool] | None = None) -> int:
    """Attach this terminal (or these pipes) to a running sandbox until it exits (its status)
    or the user detaches (0: it keeps running). ``starting`` starts a stopped one once the
    stream is open (as `docker start -ai`), so none of its first output is missed; it says
    whether it started (and so admitted) the sandbox, else the attach admits it here."""
    record = load_named(ctx, name, command="sbx attach")
    name = record.name
    driver = ctx.driver
    container_id = record.container_id
    assert container_id is not None  # noqa: S101 - load_named checks
    if starting is None and driver.container_state(container_id) != "running":
        raise SbxError(Reason.INVALID_ARGUMENT, f"{name} is not running",
                       hint=f"Start it with `sbx start {name}`, then attach.")
    if starting is None:
        admit_recorded(ctx, record).close()  # checked like a start, though nothing is mounted
    mode = decide_mode(interactive=interactive, tty=record.tty, capture=False, host=host)
    keys = ctx.load_config().sandbox.detach_keys.value
    output = to_terminal(ctx, host, on_output, terminal_passthrough)
    stream = driver.attach(container_id, stdin=mode.stdin,
                           detach_keys=keys if record.tty else None)
    if starting is not None:
        try:
            if not starting():  # running already: nothing admitted it yet, and nothing flowed
                admit_recorded(ctx, record).close()
        except BaseException:
            stream.close()
            raise
    terminal = Terminal(host, tty=record.tty, raw=mode.raw,
                        resize_to=lambda rows, columns: driver.resize(
                            container_id, rows=rows, columns=columns))
    terminal.resize()
    session = terminal.session(stream, stdin=mode.stdin, sink=output.sink, detach_keys=keys)
    with idlestop.attached(runrecord.run_dir(ctx.state_home, record.run_id)), \
            terminal.live(session), output:  # a client: never idle while it lasts
        end = session.pump(time.monotonic() + NO_DEADLINE_S)
        if end is SessionEnd.EOF:
            session.drain(OUTPUT_DRAIN_S)
    if end is SessionEnd.DETACHED:
        check_workspace(ctx, record, on_warning)
        on_notice(f"detached from {name}; it keeps running")
        return 0
    if end is SessionEnd.OUTPUT_CLOSED:
        raise SbxError(Reason.OUTPUT_CLOSED, "the reader of sbx's output went away")
    code = driver.wait(container_id, 30)
    check_workspace(ctx, record, on_warning, stopped=code is not None)
    return 0 if code is None else code


def exec_in(ctx: AppContext, name: str, argv: Sequence[str], host: Any, *,
            env: Sequence[str], interactive: bool | None, tty: bool | None,
            on_output: OutputSink,
            on_warning: Callable[[str], None] = lambda _text: None,
            terminal_passthrough: bool = False) -> int:
    """Run a command in a running sandbox: its user, its hardening, its egress (the exec
    inherits the container's environment, proxy and sentinels included)."""
    if not argv:
        raise SbxError(Reason.INVALID_ARGUMENT, "sbx exec needs a command after `--`",
                       hint=f"e.g. sbx exec {name} -- sh")
    record = load_named(ctx, name, command="sbx exec")
    name = record.name
    driver = ctx.driver
    assert record.container_id is not None  # noqa: S101 - load_named checks
    if driver.container_state(record.container_id) != "running":
        raise SbxError(Reason.INVALID_ARGUMENT, f"{name} is not running",
                       hint=f"Start it with `sbx start {name}`.")
    mode = decide_mode(interactive=interactive, tty=tty, capture=False, host=host)
    admission = admit_recorded(ctx, record, env=env)
    admission.close()  # the paths are the running container's; only the decision is needed
    output = to_terminal(ctx, host, on_output, terminal_passthrough)
    stream, exec_id = driver.exec_attach(
        record.container_id, argv, user=f"{admission.user.uid}:{admission.user.gid}",
        env=admission.env,
        workdir=str(record.request.get("workspace_target") or "") or None, tty=mode.tty,
        stdin=mode.stdin)
    terminal = Terminal(host, tty=mode.tty, raw=mode.raw,
                        resize_to=lambda rows, columns: driver.exec_resize(
                            exec_id, rows=rows, columns=columns))
    session = terminal.session(stream, stdin=mode.stdin, sink=output.sink,
                               detach_keys=DEFAULT_DETACH_KEYS)
    terminal.resize()
    with idlestop.attached(runrecord.run_dir(ctx.state_home, record.run_id)), \
            terminal.live(session), output:
        end = session.pump(time.monotonic() + NO_DEADLINE_S)
    if end is SessionEnd.OUTPUT_CLOSED:
        raise SbxError(Reason.OUTPUT_CLOSED, "the reader of sbx's output went away")
    check_workspace(ctx, record, on_warning)
    for _ in range(50):  # the exec's status lands a moment after its stream ends (bounded)
        code = driver.exec_exit_code(exec_id)
        if code is not None:
            return code
        time.sleep(0.02)
    return 0 if end is SessionEnd.DETACHED else 126


def logs(ctx: AppContext, name: str, host: Any, *, follow: bool, on_output: OutputSink,
         terminal_passthrough: bool = False, tail: int | None = None) -> None:
    """The sandbox's engine log; with ``tail``, only its last ``tail`` lines (then followed,
    with ``follow``)."""
    if tail is not None and tail < 0:
        raise SbxError(Reason.INVALID_ARGUMENT, f"--tail {tail}: give a number of lines, 0 or "
                       "more", hint=f"e.g. sbx logs --tail 20 {name}")
    record = load_named(ctx, name, command="sbx logs")
    assert record.container_id is not None  # noqa: S101 - load_named checks
    with to_terminal(ctx, host, on_output, terminal_passthrough) as output:
        for stream, chunk in ctx.driver.output(record.container_id, follow=follow, tail=tail):
            output.sink(stream, chunk)


def to_terminal(ctx: AppContext, host: Any, on_output: OutputSink,
                 flag: bool) -> TerminalOutput:
    """``on_output`` filtered where it reaches a terminal, unless the flag or
    ``[sandbox] terminal_passthrough`` passes everything."""
    passthrough = flag or ctx.load_config().sandbox.terminal_passthrough.value
    return TerminalOutput(on_output, host, ctx.env, passthrough=passthrough)
