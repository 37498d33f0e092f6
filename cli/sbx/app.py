"""The typer application: global options build one AppContext; commands are thin adapters.

Command modules are imported here, but each imports its core module (and through it the docker
SDK) only inside the command function, so ``sbx --help`` stays fast.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Final

import typer

from sbx import __version__
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.commands import clone as clone_command
from sbx.commands import completion as completion_command
from sbx.commands import config as config_command
from sbx.commands import copy as copy_command
from sbx.commands import create as create_command
from sbx.commands import df as df_command
from sbx.commands import doctor as doctor_command
from sbx.commands import explain as explain_command
from sbx.commands import gc as gc_command
from sbx.commands import kit as kit_command
from sbx.commands import kit_author as kit_author_command
from sbx.commands import kit_ls as kit_ls_command
from sbx.commands import kit_mounts as kit_mounts_command
from sbx.commands import policy as policy_command
from sbx.commands import pull as pull_command
from sbx.commands import run as run_command
from sbx.commands import sandboxes as sandboxes_command
from sbx.commands import secret as secret_command
from sbx.commands import secret_import as secret_import_command
from sbx.commands import version as version_command

app = typer.Typer(
    name="sbx",
    help="Run AI agents inside locked-down Docker containers, with the permissions their kits "
         "declare.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(ctx: typer.Context, value: bool) -> None:
    if value:
        ctx.obj.renderer().message(f"sbx {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    ctx: typer.Context,
    verbose: Annotated[int, typer.Option(
        "--verbose", "-v", count=True,
        help="More detail on stderr: -v shows build and pull output and gc's reasons; -vv "
             "also traces every engine call. Accepted after the subcommand too.")] = 0,
    traceback: Annotated[bool, typer.Option(
        "--traceback", help="Re-raise unexpected errors with a traceback (accepted after the "
                            "subcommand too).")] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version_callback, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """sbx: hardened sandboxes for AI agents."""
    launch = ctx.obj
    ctx.obj = launch.context(verbose=verbose, traceback=traceback)


def _interruptible(command: Callable[..., int]) -> Callable[..., int]:
    """Turn Ctrl-C / SIGTERM into a reason-coded error at the command boundary.

    typer would otherwise swallow KeyboardInterrupt into a bare exit status 130, which is
    indistinguishable from a workload that exits 130 itself.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            raise SbxError(Reason.INTERRUPTED,
                           "interrupted; everything the run created was removed") from None

    return wrapper


app.command("run", context_settings={"allow_interspersed_args": True})(
    _interruptible(run_command.run))
app.command("explain")(_interruptible(explain_command.explain))
app.command("doctor")(_interruptible(doctor_command.doctor))
app.command("pull")(_interruptible(pull_command.pull))
app.command("gc")(_interruptible(gc_command.gc))
app.command("version")(_interruptible(version_command.version))
app.command("ls")(_interruptible(sandboxes_command.ls))
app.command("create")(_interruptible(create_command.create))
app.command("start")(_interruptible(sandboxes_command.start))
app.command("attach")(_interruptible(sandboxes_command.attach))
app.command("exec")(_interruptible(sandboxes_command.exec_))
app.command("logs")(_interruptible(sandboxes_command.logs))
app.command("stop")(_interruptible(sandboxes_command.stop))
app.command("rm")(_interruptible(sandboxes_command.rm))
app.command("cp")(_interruptible(copy_command.cp))
app.command("diff")(_interruptible(clone_command.diff))
app.command("fetch")(_interruptible(clone_command.fetch))
app.command("df")(_interruptible(df_command.df))
app.command("sessions")(_interruptible(sandboxes_command.sessions))

secret_app = typer.Typer(
    name="secret",
    help="Store, list, import and remove the secrets (API keys, OAuth logins) that kits' "
         "credential@1 capabilities use.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
secret_app.command("set")(_interruptible(secret_command.set_secret))
secret_app.command("login")(_interruptible(secret_command.login))
secret_app.command("ls")(_interruptible(secret_command.ls))
secret_app.command("rm")(_interruptible(secret_command.rm))
secret_app.command("import")(_interruptible(secret_import_command.import_secrets))
app.add_typer(secret_app, name="secret")

kit_app = typer.Typer(
    name="kit",
    help="Create, check, inspect and publish kits.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
kit_app.command("ls")(_interruptible(kit_ls_command.ls))
kit_app.command("init")(_interruptible(kit_author_command.init))
kit_app.command("validate")(_interruptible(kit_author_command.validate))
kit_app.command("inspect")(_interruptible(kit_author_command.inspect))
kit_app.command("push")(_interruptible(kit_command.push))
kit_app.command("mounts")(_interruptible(kit_mounts_command.mounts))
app.add_typer(kit_app, name="kit")

config_app = typer.Typer(
    name="config",
    help="Show where the config file is and every setting in effect.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
config_app.command("path")(_interruptible(config_command.path))
config_app.command("show")(_interruptible(config_command.show))
app.add_typer(config_app, name="config")

policy_app = typer.Typer(
    name="policy",
    help="See and steer egress: the request log, and your own allow and deny rules over the "
         "kits'.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
policy_app.command("log")(_interruptible(policy_command.log))
policy_app.command("allow")(_interruptible(policy_command.allow))
policy_app.command("deny")(_interruptible(policy_command.deny))
policy_app.command("ls")(_interruptible(policy_command.ls))
policy_app.command("rm")(_interruptible(policy_command.rm))
app.add_typer(policy_app, name="policy")

app.command("completion")(_interruptible(completion_command.completion))

# The command groups (`sbx config show`): error envelopes name the group's command too.
GROUPS: Final = frozenset(str(group.name) for group in app.registered_groups)

__all__ = ["GROUPS", "app"]
