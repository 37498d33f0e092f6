"""Entry point and the one error edge: exceptions become exit statuses here and nowhere else.

- :class:`~sbx.errors.SbxError` → its reason's exit status, one line (or a JSON envelope).
- usage errors → 2; Ctrl-C / SIGTERM → 130.
- anything else is a bug: one line on screen, a report file with versions and the traceback,
  exit 70; ``--traceback`` (or ``SBX_TRACEBACK=1``) re-raises instead.
"""

from __future__ import annotations

import os
import platform
import signal
import sys
import traceback as traceback_module
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

from sbx import __version__
from sbx.errors import SbxError
from sbx.reasons import ExitStatus, Reason


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

    def renderer(self) -> Any:
        from sbx.render import Renderer

        return Renderer(self.stdout, self.stderr, as_json=self.as_json, env=self.env,
                        raw_out=self.stdout_bytes, raw_err=self.stderr_bytes)

    def context(self, *, verbose: int, traceback: bool) -> Any:
        from sbx.context import AppContext

        ctx = AppContext(env=self.env, cwd=self.cwd, renderer=self.renderer(),
                         as_json=self.as_json, verbose=verbose, traceback=traceback)
        object.__setattr__(ctx, "passthrough", self.passthrough)
        return ctx


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...] | None]:
    """Split ``sbx ... -- ARGS`` at the first ``--`` so ARGS never reach the option parser."""
    if "--" not in argv:
        return list(argv), None
    index = list(argv).index("--")
    return list(argv[:index]), tuple(argv[index + 1:])


def _command_name(args: Sequence[str]) -> str:
    return next((a for a in args if not a.startswith("-")), "sbx")


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    # SIGTERM takes the same path as Ctrl-C, so the run's cleanup (finally blocks) executes.
    raise KeyboardInterrupt(signal.Signals(signum).name)


def cli(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None,
        cwd: Path | None = None, stdout: IO[str] | None = None,
        stderr: IO[str] | None = None) -> int:
    """Run sbx with ``argv`` and return the exit status (used by ``main`` and by tests)."""
    import typer
    from typer._click import exceptions as click_exceptions

    from sbx.app import app

    environment = dict(os.environ if env is None else env)
    head, tail = split_passthrough(list(sys.argv[1:] if argv is None else argv))
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    launch = Launch(
        env=environment, cwd=cwd or Path.cwd(), passthrough=tail, as_json="--json" in head,
        stdout=out, stderr=err,
        stdout_bytes=getattr(out, "buffer", None), stderr_bytes=getattr(err, "buffer", None),
    )
    wants_traceback = "--traceback" in head or environment.get("SBX_TRACEBACK") == "1"
    command = _command_name(head)
    try:
        result = app(args=head, prog_name="sbx", standalone_mode=False, obj=launch)
    except SbxError as error:
        launch.renderer().error(error, command)
        return int(error.exit_status)
    except typer.Exit as done:
        return int(done.exit_code or 0)
    except typer.Abort:
        return _interrupted(launch, command)
    except click_exceptions.ClickException as usage:
        if launch.as_json:
            launch.renderer().error(SbxError(Reason.INVALID_ARGUMENT, usage.format_message()),
                                    command)
        else:
            usage.show(file=err)
        return int(ExitStatus.USAGE)
    except KeyboardInterrupt:
        return _interrupted(launch, command)
    except Exception:
        if wants_traceback:
            raise
        report = write_crash_report(environment, head)
        launch.renderer().crash(str(report) if report else None)
        return int(ExitStatus.INTERNAL)
    return int(result) if isinstance(result, int) else 0


def _interrupted(launch: Launch, command: str) -> int:
    launch.renderer().error(
        SbxError(Reason.INTERRUPTED, "interrupted; everything the run created was removed"),
        command)
    return int(ExitStatus.INTERRUPTED)


def write_crash_report(env: Mapping[str, str], argv: Sequence[str]) -> Path | None:
    """A paste-ready Markdown report with versions and the traceback; None if unwritable."""
    from sbx import paths

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
        path.write_text(body, encoding="utf-8")
        os.chmod(path, 0o600)
        return path
    except OSError:
        return None


def main() -> None:
    signal.signal(signal.SIGTERM, _raise_interrupt)
    sys.exit(cli())


if __name__ == "__main__":
    main()


__all__ = ["Launch", "cli", "main", "split_passthrough", "write_crash_report"]
