"""The typer application: global options build one AppContext; commands are loaded lazily.

The command tree is a static table (name, the command function's "module:function", the first
paragraph of its help), so ``sbx --help`` lists every command without importing any command
module and a command line imports only the module of the command it runs.
tests/unit/test_app.py holds the table equal to each command's real help.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import typer
import typer.core
import typer.main

from sbx import __version__
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

_HELP_OPTIONS: Final = {"help_option_names": ["-h", "--help"]}


@dataclass(frozen=True)
class Command:
    """A command: where its function lives and what ``--help`` lists for it."""

    target: str  # "module:function"
    summary: str  # the first paragraph of its help (all that a listing shows)
    interspersed: bool = False  # options accepted after positional words (`sbx run KIT -v`)


@dataclass(frozen=True)
class Group:
    """A command group (`sbx kit ...`): its whole help and its commands."""

    summary: str
    commands: Mapping[str, Command] = field(default_factory=dict)


def _interruptible(command: Callable[..., int]) -> Callable[..., int]:
    """Turn Ctrl-C / SIGTERM and a closed stdout into reason-coded errors at the command
    boundary.

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
        except BrokenPipeError:
            # typer would end a closed stdout as exit 1; it ends as the cached run's does
            raise SbxError(Reason.OUTPUT_CLOSED, "the reader of sbx's output went away") \
                from None

    return wrapper


COMMANDS: Final[Mapping[str, Command | Group]] = {
    "run": Command("sbx.commands.run:run",
        'Run a workload kit (plus mixins) in a hardened sandbox.', interspersed=True),
    "explain": Command("sbx.commands.explain:explain",
        "Explain a reason code, a run's refusals, a sandbox, or one request's decision."),
    "doctor": Command("sbx.commands.doctor:doctor",
        'Check that this machine can run sandboxes safely: platform, config, identity, engine,\n'
        'enforced resource limits (a tiny probe container) and stale objects.'),
    "pull": Command("sbx.commands.pull:pull",
        "Fetch kits and plain images from a registry and pin kits' digests in the lock."),
    "gc": Command("sbx.commands.gc:gc",
        'Remove what crashed or killed runs left behind (by label, this state home only).'),
    "version": Command("sbx.commands.version:version",
        "Print sbx's version."),
    "ls": Command("sbx.commands.sandboxes:ls",
        'List named sandboxes: NAME, WORKLOAD, KITS, STATUS, WORKSPACE, CREATED.'),
    "ports": Command("sbx.commands.sandboxes:ports",
        "List a named sandbox's published ports: CONTAINER, HOST (where it is reachable now),\n"
        "SOURCE (kit: a kit's port@1; publish: a -p given at its creation)."),
    "create": Command("sbx.commands.create:create",
        'Create a kept sandbox and leave it running, without attaching; prints its name.'),
    "start": Command("sbx.commands.sandboxes:start",
        'Start a stopped named sandbox as it was created, without giving its workload again.'),
    "attach": Command("sbx.commands.sandboxes:attach",
        'Attach to a running named sandbox (the detach keys leave it running).'),
    "exec": Command("sbx.commands.sandboxes:exec_",
        'Run a command in a named sandbox: its user, hardening and egress.'),
    "logs": Command("sbx.commands.sandboxes:logs",
        "Print a named sandbox's output (its engine log, bounded)."),
    "stop": Command("sbx.commands.sandboxes:stop",
        'Stop named sandboxes (SIGTERM, then SIGKILL after -t seconds); their proxies stop too.'),
    "rm": Command("sbx.commands.sandboxes:rm",
        'Remove named sandboxes and everything they own (HOME and volumes included); prints\n'
        'each name removed.'),
    "cp": Command("sbx.commands.copy:cp",
        "Copy files between the host and a named sandbox (Docker's `cp` syntax)."),
    "df": Command("sbx.commands.df:df",
        'Show what this state home takes: images, sandboxes, volumes, HOMEs, its own files, and\n'
        "what `sbx gc` could reclaim now (gc's own decisions, as a dry run)."),
    "sessions": Command("sbx.commands.sandboxes:sessions",
        "List the agent's resumable sessions in a named or kept sandbox, most recent first."),
    "diff": Command("sbx.commands.clone:diff",
        "Show a --clone sandbox's changes (committed and not) against the commit it started\n"
        "from."),
    "fetch": Command("sbx.commands.clone:fetch",
        "Bring a --clone sandbox's commits into the host repository as branch sbx/NAME."),
    "save": Command("sbx.commands.template:save",
        "Save a named sandbox's image and HOME as a template image TAG on its engine."),
    "template": Group("List and remove the templates `sbx save` made.", {
        "ls": Command("sbx.commands.template:ls",
            'List the templates on the engine: TAG, WORKLOAD, KITS, SAVED FROM, CREATED.'),
        "rm": Command("sbx.commands.template:rm",
            "Remove a template's tag (the image goes with its last tag); refuses an image that is\n"
            "not an sbx template."),
    }),
    "completion": Command("sbx.commands.completion:completion",
        'Print the shell completion script for SHELL (bash, zsh or fish).'),
    "secret": Group(
        "Store, list, import and remove the secrets (API keys, OAuth logins) that kits' "
        "credential@1 capabilities use.", {
        "set": Command("sbx.commands.secret:set_secret",
            'Store the secret for SERVICE, or where to get it at each run.'),
        "login": Command("sbx.commands.secret:login",
            "Log in as an agent does (claude, codex, gemini) or store SERVICE's real OAuth tokens\n"
            "on the host, for kits' credential@1 oauth."),
        "ls": Command("sbx.commands.secret:ls",
            'List secrets, masked: service, value mask, length, last update, where it lives; and\n'
            'OAuth logins (masked access token, expiry).'),
        "rm": Command("sbx.commands.secret:rm",
            'Remove the secret and the OAuth tokens for SERVICE, from the OS keyring too (exit 2\n'
            'when there is neither).'),
        "import": Command("sbx.commands.secret_import:import_secrets",
            'Offer the API keys found in the environment as secrets, asking for each.'),
    }),
    "kit": Group('Create, check, inspect and publish kits.', {
        "ls": Command("sbx.commands.kit_ls:ls",
            'List the agent kits bundled with sbx by short name (claude, codex, gemini) and what\n'
            'each name resolves to from this directory. `sbx run NAME '
            '[WORKSPACE]` runs one. A kit\n'
            'reference resolves in this order: an existing path, then a '
            'kit pinned by `sbx pull`, then\n'
            'a short name; so a directory or pinned kit of the same name '
            'comes first (shown here).'),
        "init": Command("sbx.commands.kit_author:init",
            'Create a minimal kit in DIR that validates and runs.'),
        "validate": Command("sbx.commands.kit_author:validate",
            'Check one kit with the loader `sbx run` uses; exit 125 (invalid_kit) when invalid.'),
        "inspect": Command("sbx.commands.kit_author:inspect",
            'Show the effective composition: what `sbx run WORKLOAD --kit MIXIN...` would get.'),
        "push": Command("sbx.commands.kit:push",
            "Build a local kit's image as `sbx run` does, push it as REF, and annotate it."),
        "mounts": Command("sbx.commands.kit_mounts:mounts",
            'List the host directories kits keep with host-mount@1 (kit identity, path in the\n'
            "sandbox, host directory), or remove one kit's. They outlive "
            "every sandbox: sbx removes\n"
            'them only here. SBX_HOST_MOUNTS chooses where they live (default\n'
            '$XDG_DATA_HOME/sbx/host-mounts or ~/.local/share/sbx/host-mounts).'),
        "registry": Command("sbx.commands.kit_registry:registry",
            "List what sandboxes pushed to sbx's kit registry (NAME, TAG, DIGEST, SIZE), "
            "or remove\n"
            'a tag or repository. Only sandboxes whose kits declare kit-registry@1 reach it, as\n'
            '$SBX_KIT_REGISTRY (kit-registry.sbx.internal), and only repositories under kits/.'),
    }),
    "skills": Group(
        "List, add and remove the skills in the host's skills store, which kits' "
        "agent-skills@1 show in sandboxes.", {
        "ls": Command("sbx.commands.skills:ls",
            "List the skills in the host's skills store: name, description (SKILL.md's front\n"
            "matter) and size."),
        "add": Command("sbx.commands.skills:add",
            'Copy a skill directory into the host\'s skills store (no link followed, at most 64\n'
            'MiB); every sandbox whose kits declare agent-skills@1 sees it from its next start.'),
        "rm": Command("sbx.commands.skills:rm",
            "Remove a skill from the host's skills store; sandboxes stop seeing it from their\n"
            "next start."),
    }),
    "config": Group('Show where the config file is and every setting in effect.', {
        "path": Command("sbx.commands.config:path",
            'Print the path of the config file sbx reads (it need not exist).'),
        "show": Command("sbx.commands.config:show",
            'Show every setting in effect, with its value and where it came from.'),
    }),
    "policy": Group(
        "See and steer egress: the request log, and your own allow and deny rules over the "
        "kits'.", {
        "log": Command("sbx.commands.policy:log",
            'What the egress proxies decided: per destination by '
            'default, every record with --json.'),
        "allow": Command("sbx.commands.policy:allow",
            'Allow requests the kits do not: HOST[:PORT][PATH], for every sandbox or one.'),
        "deny": Command("sbx.commands.policy:deny",
            'Deny requests, whatever the kits allow: HOST[:PORT][PATH], for every sandbox or one.'),
        "ls": Command("sbx.commands.policy:ls",
            "List the user policy's rules in force, each with its id."),
        "rm": Command("sbx.commands.policy:rm",
            'Remove a user policy rule; running sandboxes follow from their next request.'),
    }),
    "mcp": Group("Offer sbx's sandboxes to an orchestrating agent as MCP tools.", {
        "serve": Command("sbx.commands.mcp:serve",
            'Serve MCP on stdin/stdout (JSON-RPC, one message a line) until stdin ends.'),
    }),
    "resident": Group("This user's resident helper: commands served by a process with sbx "
                      "loaded.", {
        "start": Command("sbx.commands.resident:start",
            'Start the resident helper (a socket only you can open; exits when idle).'),
        "stop": Command("sbx.commands.resident:stop",
            'Stop the resident helper once the commands it runs have ended.'),
        "status": Command("sbx.commands.resident:status",
            'Whether the resident helper runs, what it served and declined, its memory.'),
    }),
}


class _LazyCommands(MutableMapping[str, Any]):
    """A group's click commands by name, each built (its module imported) on first lookup;
    click's add_command still adds a built one."""

    def __init__(self, entries: Mapping[str, Command | Group]) -> None:
        self._entries = entries
        self._names = list(entries)
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = _build(name, self._entries[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        if name not in self._names:
            self._names.append(name)

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class LazyGroup(typer.core.TyperGroup):
    """A typer group whose commands come from a table: listing them imports nothing."""

    def __init__(self, *args: Any, entries: Mapping[str, Command | Group] = COMMANDS,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entries = entries
        self.commands = _LazyCommands(entries)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The Commands section as click writes it, from the table's summaries."""
        limit = formatter.width - 6 - max(len(name) for name in self.entries)
        rows = [(name, typer.core.TyperCommand(name, help=entry.summary)
                 .get_short_help_str(limit)) for name, entry in self.entries.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _build(name: str, entry: Command | Group) -> Any:
    """The click command of one table entry: a group's, or a command's from its module."""
    if isinstance(entry, Group):
        return LazyGroup(name=name, help=entry.summary, entries=entry.commands,
                         no_args_is_help=True, rich_markup_mode=None,
                         context_settings=dict(_HELP_OPTIONS))
    module, _, function = entry.target.partition(":")
    # only the invoked command's module is imported (`sbx --help` imports none)
    command = getattr(importlib.import_module(module), function)
    single = typer.Typer(add_completion=False, rich_markup_mode=None,
                         pretty_exceptions_enable=False)
    settings = {"allow_interspersed_args": True} if entry.interspersed else {}
    single.command(name, context_settings=settings)(_interruptible(command))
    return typer.main.get_command(single)


app = typer.Typer(
    name="sbx",
    help="Run AI agents inside locked-down Docker containers, with the permissions their kits "
         "declare.",
    cls=LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings=dict(_HELP_OPTIONS),
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


# The command groups (`sbx config show`): error envelopes name the group's command too.
GROUPS: Final = frozenset(name for name, entry in COMMANDS.items() if isinstance(entry, Group))

__all__ = ["COMMANDS", "GROUPS", "Command", "Group", "LazyGroup", "app"]
