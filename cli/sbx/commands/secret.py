"""`sbx secret set|login|ls|rm|import`: adapters to :mod:`sbx.usecases.secretops`,
:mod:`sbx.usecases.oauthlogin` and the stores.

``set`` reads the value from stdin (one trailing newline stripped), so it never appears in the
shell history or the process list; on a terminal it prompts without echo instead. With
``--from-env`` / ``--from-command`` only the source is stored. A missing secret given to ``rm``
is an ``invalid_argument`` (exit 2), like any name that does not exist.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sbx.base.deferred import deferred
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.views import secret as secret_view

if TYPE_CHECKING:
    from sbx.domain.credentials import agentlogins, secrets
    from sbx.usecases import oauthlogin, secretops
else:  # deferred: the stores and the OAuth flows; `sbx secret ... --help` none
    agentlogins = deferred("sbx.domain.credentials.agentlogins")
    secrets = deferred("sbx.domain.credentials.secrets")
    oauthlogin = deferred("sbx.usecases.oauthlogin")
    secretops = deferred("sbx.usecases.secretops")

if TYPE_CHECKING:
    from sbx.base.render import Renderer

_SERVICE_HELP = "The service name a kit's credential@1 uses (e.g. github)."
_LOGIN_HELP = ("An agent (claude, codex, gemini: its own login, for the bundled agent kits) "
               "or the service name a kit's credential@1 uses (e.g. anthropic, github).")


def set_secret(
    ctx: typer.Context,
    service: Annotated[str, typer.Argument(metavar="SERVICE", help=_SERVICE_HELP)],
    from_env: Annotated[str | None, typer.Option(
        "--from-env", metavar="VAR",
        help="Read the value from this variable of sbx's environment at each run start "
             "(only the name is stored).")] = None,
    from_command: Annotated[str | None, typer.Option(
        "--from-command", metavar="CMD",
        help="Run this command on the host (/bin/sh -c) at each run start and use what it "
             "prints (only the command is stored).")] = None,
    no_verify: Annotated[bool, typer.Option(
        "--no-verify", help="With --from-env/--from-command: do not try the source now.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Store the secret for SERVICE, or where to get it at each run.

    The value is read from stdin (on a terminal, sbx prompts without echo; one trailing newline
    is stripped) and stored in the OS keyring when one is available, else in the state home's
    file store (0600); the output says which. With --from-env or --from-command nothing secret
    is stored: the value is resolved on the host when a run starts and handed to the egress
    proxy only.

    Example: printf %s "$GH_TOKEN" | sbx secret set github

    Example: sbx secret set github --from-command 'gh auth token'
    """
    app = ctx.obj
    store = secrets.SecretStore(app.state_home)
    if from_env is not None or from_command is not None:
        info = secretops.set_reference(store, service, app.env, from_env=from_env,
                                       from_command=from_command, verify=not no_verify)
    else:
        info = secretops.set_value(store, service, lambda: secretops.read_value_from(
            sys.stdin, lambda: app.renderer.read_secret(f"Secret for {service}: ")))
    secret_view.secret_stored(app.renderer, info, store.directory)
    return 0


def login(
    ctx: typer.Context,
    service: Annotated[str, typer.Argument(metavar="AGENT|SERVICE", help=_LOGIN_HELP)],
    from_file: Annotated[Path | None, typer.Option(
        "--from-file", metavar="PATH",
        help="The credential file the agent's own login wrote on the host (e.g. "
             "~/.claude/.credentials.json, ~/.codex/auth.json); default: stdin.")] = None,
    kit: Annotated[str | None, typer.Option(
        "--kit", metavar="DIR",
        help="Read the file through this kit's oauth.credentialFile.structure for "
             "SERVICE.")] = None,
    from_sandbox: Annotated[str | None, typer.Option(
        "--from-sandbox", metavar="NAME",
        help="Make the login done inside the named sandbox NAME yours (moved to your store; "
             "every sandbox uses it from then on).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Log in as an agent does (claude, codex, gemini) or store SERVICE's real OAuth tokens
    on the host, for kits' credential@1 oauth.

    `sbx secret login claude|codex|gemini` runs the agent's own login here on the host, for
    the bundled agent kits (services anthropic, openai, gemini): Claude Code's and Gemini
    CLI's print a URL to open in a browser and read back the code the page shows, Codex's
    prints a device code to enter at auth.openai.com/codex/device. With --from-file the
    agent's own login file from this machine is imported instead.

    The tokens stay on the host (the state home's oauth/SERVICE.json, 0600). A sandbox gets
    sentinels in the kit's credentialFile; the egress proxy answers the kit's token endpoint
    with sentinels (refreshing here with the real refresh token and storing the new tokens)
    and swaps the access sentinel for the real token on the kit's resource hosts.

    Input: the agent's own credential file (--from-file; with --kit read through the kit's
    credentialFile structure, else Claude Code's and Codex's known shapes), or a token
    response ({"access_token": ..., "refresh_token": ..., "expires_in": ...}) on stdin.

    Example: sbx secret login claude

    Example: sbx secret login codex --from-file ~/.codex/auth.json

    A login made inside a sandbox (the agent's own login flow) is kept for that sandbox alone
    and never replaces yours; --from-sandbox NAME makes a named sandbox's login yours.

    Example: sbx secret login github --from-sandbox dev
    """
    app = ctx.obj
    agent = agentlogins.agent_login(service)
    if agent is not None:
        service = agent.service
        if from_file is None and from_sandbox is None and kit is None:
            network = app.load_config().network
            ca_file = network.upstream_ca_file.value
            secret_view.oauth_stored(app.renderer, oauthlogin.agent_login(
                app.state_home, agent, upstream_proxy=network.upstream_proxy.value,
                ca_file=Path(ca_file) if ca_file else None,
                show=lambda text: secret_view.login_instructions(app.renderer, text),
                read_code=lambda prompt: _read_line(app.renderer, prompt)))
            return 0
    if from_sandbox is not None:
        if from_file is not None or kit is not None:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           "--from-sandbox takes the sandbox's login; it goes without "
                           "--from-file and --kit",
                           hint=f"sbx secret login {service} --from-sandbox {from_sandbox}")
        secret_view.oauth_stored(app.renderer, oauthlogin.promote(app.state_home, service,
                                                                  from_sandbox))
        return 0
    structure = None if kit is None else oauthlogin.kit_structure(
        kit, service, cwd=app.cwd, state_home=app.state_home)
    text = oauthlogin.read_login_input(from_file, None if from_file else sys.stdin.buffer)
    source = f"--from-file {from_file}" if from_file is not None else "stdin"
    secret_view.oauth_stored(app.renderer, oauthlogin.login(app.state_home, service, text,
                                                            structure=structure,
                                                            source=source))
    return 0


def _read_line(renderer: Renderer, prompt: str) -> str:
    """The code the user pastes: typed without echo on a terminal, else one line of stdin."""
    if sys.stdin.isatty():
        return renderer.read_secret(prompt)
    return sys.stdin.readline(4097)


def ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """List secrets, masked: service, value mask, length, last update, where it lives; and
    OAuth logins (masked access token, expiry)."""
    secret_view.secret_list(ctx.obj.renderer, secrets.SecretStore(ctx.obj.state_home).services(),
                            oauthlogin.entries(ctx.obj.state_home))
    return 0


def rm(
    ctx: typer.Context,
    service: Annotated[str, typer.Argument(metavar="SERVICE", help=_SERVICE_HELP)],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON envelope.")] = False,
) -> int:
    """Remove the secret and the OAuth tokens for SERVICE, from the OS keyring too (exit 2
    when there is neither)."""
    app = ctx.obj
    kinds = [kind for kind, removed in (
        ("secret", secrets.SecretStore(app.state_home).remove(service)),
        ("oauth", oauthlogin.remove(app.state_home, service))) if removed]
    if not kinds:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no secret stored for {service!r}",
                       hint="`sbx secret ls` lists the stored services.",
                       details={"service": service})
    secret_view.secret_removed(app.renderer, service, kinds)
    return 0


__all__ = ["login", "ls", "rm", "set_secret"]
