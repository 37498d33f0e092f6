"""Entry point and the one error edge: exceptions become exit statuses here and nowhere else.

- :class:`~sbx.base.errors.SbxError` → its reason's exit status, one line (or a JSON envelope).
- usage errors → 2; Ctrl-C / SIGTERM → 130.
- anything else is a bug: one line on screen, a report file with versions and the traceback,
  exit 70; ``--traceback`` (or ``SBX_TRACEBACK=1``) re-raises instead.
"""

from __future__ import annotations

import io
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sbx import __version__
from sbx.base import paths
from sbx.base.deferred import deferred
from sbx.base.errors import SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.base.render import Renderer
from sbx.commands import help_fast
from sbx.domain.sandbox import runargs
from sbx.seams import state
from sbx.seams.host import lookup
from sbx.seams.session.mode import HostStreams
from sbx.seams.session.terminal import is_terminal
from sbx.seams.signals import INTERRUPTING_SIGNALS, interrupt, interrupted
from sbx.usecases import context

if TYPE_CHECKING:
    from sbx import app as cli_app
    from sbx.commands import pull_fast, run_cached
else:  # deferred: each path loads its own (typer; the plan cache; a pull's core), no other
    cli_app = deferred("sbx.app")
    pull_fast = deferred("sbx.commands.pull_fast")
    run_cached = deferred("sbx.commands.run_cached")


@dataclass(frozen=True)
class Launch:
    """What the process was started with; turned into an AppContext by the CLI callback."""

    env: Mapping[str, str]
    cwd: Path
    passthrough: tuple[str, ...] | None
    as_json: bool
    stdout: IO[str]
    stderr: IO[str]
    stdout_bytes: IO[bytes] | None
    stderr_bytes: IO[bytes] | None
    streams: HostStreams
    argv: tuple[str, ...] = ()  # the words before `--`, global options first

    def renderer(self) -> Any:
        return Renderer(self.stdout, self.stderr, as_json=self.as_json, env=self.env,
                        raw_out=self.stdout_bytes, raw_err=self.stderr_bytes)

    def context(self, *, verbose: int, traceback: bool) -> Any:
        renderer = self.renderer()
        renderer.verbose = verbose
        return context.AppContext(env=self.env, cwd=self.cwd, renderer=renderer,
                                  as_json=self.as_json, verbose=verbose, traceback=traceback,
                                  passthrough=self.passthrough, streams=self.streams,
                                  argv=self.argv)


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...] | None]:
    """Split ``sbx ... -- ARGS`` at the first ``--`` so ARGS never reach the option parser."""
    if "--" not in argv:
        return list(argv), None
    index = list(argv).index("--")
    return list(argv[:index]), tuple(argv[index + 1:])


# sbx's own options (the root callback's), accepted anywhere before `--` as docker accepts
# `docker run --debug`-style globals after the subcommand: `sbx run -v ...`, `sbx gc --verbose`.
GLOBAL_FLAGS = frozenset({"--verbose", "--traceback"})
_SHORT_VERBOSE = re.compile(r"^-v+$")


def hoist_global_options(args: Sequence[str]) -> list[str]:
    """Move sbx's global flags that follow the subcommand to the front, where the root parser
    reads them; everything else keeps its order. Only the part before `--` is ever given here
    (:func:`split_passthrough`), so a workload's own ``-v`` is never touched."""
    first = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
    moved = [a for a in args[first:] if a in GLOBAL_FLAGS or _SHORT_VERBOSE.match(a)]
    if not moved:
        return list(args)
    rest = [a for a in args[first:] if not (a in GLOBAL_FLAGS or _SHORT_VERBOSE.match(a))]
    return [*moved, *args[:first], *rest]


def _command_name(args: Sequence[str]) -> str:
    """The command an envelope names: ``run``, or ``config show`` for a group's command (the
    name its success envelope carries). Global options are flags, so the first words are it."""
    words = [a for a in args if not a.startswith("-")][:2]
    if not words:
        return "sbx"
    if words[0] in ("run", "pull"):  # no group: known without importing the CLI (the paths
        return words[0]              # that skip typer: a cached run, a remembered pull)
    return " ".join(words) if words[0] in cli_app.GROUPS and len(words) == 2 else words[0]





def host_streams(stdin: IO[Any] | None, stdout: IO[Any],
                 stderr: IO[Any] | None = None) -> HostStreams:
    """What sbx's standard streams are: a usable stdin descriptor (None when closed or not a
    real file, as under pytest), and whether each is a terminal."""
    fd: int | None
    try:
        fd = stdin.fileno() if stdin is not None else None
        if fd is not None:
            os.fstat(fd)
    except (OSError, ValueError, AttributeError):
        fd = None
    out_fd = _fileno(stdout)
    return HostStreams(stdin_fd=fd, stdin_is_terminal=is_terminal(fd),
                       stdout_is_terminal=is_terminal(out_fd), stdout_fd=out_fd,
                       stderr_is_terminal=is_terminal(_fileno(stderr)) if stderr else False)


def _fileno(stream: IO[Any]) -> int | None:
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError):
        return None


def cli(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None,
        cwd: Path | None = None, stdout: IO[str] | None = None,
        stderr: IO[str] | None = None, stdin: IO[Any] | None = None) -> int:
    """Run sbx with ``argv`` and return the exit status (used by ``main`` and by tests)."""
    environment = dict(os.environ if env is None else env)
    head, tail = split_passthrough(list(sys.argv[1:] if argv is None else argv))
    head = hoist_global_options(head)
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    launch = Launch(
        env=environment, cwd=cwd or Path.cwd(), passthrough=tail, as_json="--json" in head,
        stdout=out, stderr=err,
        stdout_bytes=getattr(out, "buffer", None), stderr_bytes=getattr(err, "buffer", None),
        streams=host_streams(stdin if stdin is not None else sys.stdin, out, err),
        argv=tuple(head),
    )
    try:
        status = _dispatch(launch, head, environment)
    except BrokenPipeError:
        # Whoever read our output went away (`sbx ... | head -1`), here while reporting: end
        # quietly, as a shell pipeline does on SIGPIPE.
        return int(ExitStatus.OUTPUT_CLOSED)
    except KeyboardInterrupt:  # while importing, before the command's own handling
        return _interrupted(launch, _command_name(head))
    if interrupted() is not None and status not in (ExitStatus.INTERRUPTED,
                                                    ExitStatus.OUTPUT_CLOSED):
        # The signal's KeyboardInterrupt was swallowed somewhere (a library's bare except):
        # the user still asked sbx to stop, and the exit status says so.
        return _interrupted(launch, _command_name(head))
    return status


def _invoke(launch: Launch, head: list[str]) -> Any:
    """A run whose plan is cached runs without the CLI parser (sbx.usecases.plancache), and so
    does a pull typer parsed before (sbx.commands.pull_fast) and `sbx --help` on a terminal of 80
    columns or more (sbx.commands.help_fast); every other command line goes through typer."""
    page = help_fast.page(head)
    if page is not None:
        launch.renderer().page(page)
        return 0
    verb = next((word for word in head if not word.startswith("-")), None)
    if verb == "run":
        status = run_cached.run_from_cache(launch)
        if status is not None:
            return status
    elif verb == "pull":
        status = pull_fast.pull_by_hand(launch)
        if status is not None:
            return status
    return cli_app.app(args=head, prog_name="sbx", standalone_mode=False, obj=launch)


def _typer_outcome(launch: Launch, error: Exception, command: str,
                   head: Sequence[str]) -> int | None:
    """typer's own exits, aborts and usage errors (None for anything else). typer is looked up,
    not imported: a run from the plan cache never loads it, and then nothing here is typer's."""
    typer = sys.modules.get("typer")
    if typer is None:
        return None
    if isinstance(error, typer.Exit):
        return int(error.exit_code or 0)
    if isinstance(error, typer.Abort):
        return _interrupted(launch, command)
    if isinstance(error, typer.TyperException):
        # typer's public base of its (vendored) click usage errors: no private module needed.
        hint = _usage_hint(head, error)
        if launch.as_json:
            launch.renderer().error(SbxError(Reason.INVALID_ARGUMENT, error.format_message(),
                                             hint=hint), command)
        else:
            launch.renderer().usage_error(error, hint=hint)
        return int(ExitStatus.USAGE)
    return None


def _usage_hint(head: Sequence[str], usage: Exception) -> str | None:
    """A fix for the usage errors people coming from `docker run IMAGE CMD` make."""
    option = getattr(usage, "option_name", None)
    cwd = Path.cwd()
    return runargs.command_hint(head, option if isinstance(option, str) else None,
                                lambda word: lookup.is_directory(cwd / word))


def _dispatch(launch: Launch, head: list[str], environment: Mapping[str, str]) -> int:
    wants_traceback = "--traceback" in head or environment.get("SBX_TRACEBACK") == "1"
    command = _command_name(head)
    try:
        result = _invoke(launch, head)
    except SbxError as error:
        if error.reason is Reason.OUTPUT_CLOSED:
            return int(error.exit_status)  # quiet: nobody is reading any more
        launch.renderer().error(error, command)
        return int(error.exit_status)
    except KeyboardInterrupt:
        return _interrupted(launch, command)
    except BrokenPipeError:
        # Whoever read our output went away (`sbx ... | head -1`): end quietly, as a shell
        # pipeline does on SIGPIPE. Cleanup already ran in the commands' finally blocks.
        return int(ExitStatus.OUTPUT_CLOSED)
    except OSError as exc:
        # The state home on a full disk or a read-only mount, or not a directory, is the
        # user's environment, not a bug: whatever path a module did not wrap itself still
        # ends as `state_unwritable` with a fix (sbx.seams.state). Any other OSError is a bug.
        translated = _state_error(exc, environment)
        if translated is None:
            if wants_traceback:
                raise
            return _crash(launch, environment, head)
        launch.renderer().error(translated, command)
        return int(translated.exit_status)
    except Exception as error:
        outcome = _typer_outcome(launch, error, command, head)
        if outcome is not None:
            return outcome
        if wants_traceback:
            raise
        return _crash(launch, environment, head)
    return int(result) if isinstance(result, int) else 0


def _crash(launch: Launch, environment: Mapping[str, str], head: Sequence[str]) -> int:
    report = write_crash_report(environment, head)
    launch.renderer().crash(str(report) if report else None)
    return int(ExitStatus.INTERNAL)


def _state_error(exc: OSError, environment: Mapping[str, str]) -> SbxError | None:
    try:
        home = paths.state_home(environment)
    except SbxError:
        return None
    return state.from_os_error(exc, home)


def _interrupted(launch: Launch, command: str) -> int:
    launch.renderer().error(
        SbxError(Reason.INTERRUPTED, "interrupted; everything the run created was removed"),
        command)
    return int(ExitStatus.INTERRUPTED)


def write_crash_report(env: Mapping[str, str], argv: Sequence[str]) -> Path | None:
    """A paste-ready Markdown report with versions and the traceback; None if unwritable."""
    import platform
    import traceback as traceback_module
    from datetime import UTC, datetime

    try:
        directory = paths.state_home(env) / "crash-reports"
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = directory / f"crash-{stamp}.md"
        try:
            from importlib.metadata import version as dist_version

            sdk = dist_version("docker")
        except Exception:
            sdk = "unknown"
        body = (
            "# sbx crash report\n\n"
            f"- sbx: {__version__}\n- python: {platform.python_version()}\n"
            f"- platform: {platform.platform()}\n- docker SDK: {sdk}\n"
            f"- command: sbx {' '.join(argv[:1])} (arguments omitted)\n\n"
            "```\n" + traceback_module.format_exc() + "```\n"
        )
        path.write_text(body, encoding="utf-8", errors="backslashreplace")
        os.chmod(path, 0o600)
        return path
    except (OSError, ValueError, SbxError):
        # No report beats a second crash: the state home may be unwritable, not a directory,
        # unnamed (SbxError) or not even a valid path (ValueError: a NUL in SBX_HOME).
        return None


def lost_helper(argv: Sequence[str]) -> int:
    """The resident helper took the command and ended with it, neither saying how it ended."""
    head, _tail = split_passthrough(list(argv))
    renderer = Renderer(sys.stdout, sys.stderr, as_json="--json" in head, env=os.environ)
    error = SbxError(Reason.RESIDENT_LOST, "the resident helper running this command ended "
                     "without its exit status")
    renderer.error(error, _command_name(hoist_global_options(head)))
    return int(error.exit_status)


def fill_closed_outputs() -> None:
    """A process started with stdout or stderr closed (``sbx ls >&-``) gets them back as what
    they mean: stdout a pipe whose reader is gone (writes fail as a closed pipe's do, exit 141),
    stderr /dev/null. Left closed, the next file sbx opened would become descriptor 1 or 2 and
    receive its output."""
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        if fd == 1:
            reader, target = os.pipe()
            os.close(reader)
        else:
            target = os.open(os.devnull, os.O_WRONLY)
        if target != fd:
            os.dup2(target, fd)
            os.close(target)
        if getattr(sys, stream) is None:
            setattr(sys, stream, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                                  encoding="utf-8", errors="backslashreplace",
                                                  line_buffering=True))


def main() -> None:
    fill_closed_outputs()
    for signum in INTERRUPTING_SIGNALS:
        signal.signal(signum, interrupt)
    # Nothing sbx creates is group or world writable (its own checks would refuse it).
    os.umask(os.umask(0o022) | 0o022)
    status = cli()
    if status == ExitStatus.OUTPUT_CLOSED:
        _silence_closed_output()
    sys.exit(status)


def _silence_closed_output() -> None:
    """Point stdout/stderr at /dev/null, so the interpreter's final flush of a closed pipe does
    not print "Exception ignored ... BrokenPipeError" (the recipe in Python's signal docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):
            continue


if __name__ == "__main__":
    main()


__all__ = ["Launch", "cli", "fill_closed_outputs", "hoist_global_options", "lost_helper", "main",
           "split_passthrough", "write_crash_report"]
