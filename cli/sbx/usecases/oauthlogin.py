"""`sbx secret login`: store a service's real OAuth tokens on the host
(:mod:`sbx.domain.credentials.oauth`).

The tokens come from what the agent's own login wrote on the host (``--from-file``:
``~/.claude/.credentials.json``, ``~/.codex/auth.json``...) or from a token response pasted on
stdin. With ``--kit DIR`` the file is read through that kit's ``credentialFile.structure`` for
the service; without, through the shapes sbx knows
(:data:`sbx.domain.credentials.oauth.KNOWN_SHAPES`) and the
plain token-response shape. The tokens never reach a sandbox: runs get sentinels, and the
egress proxy refreshes and swaps them at the boundary.

A login made *inside* a sandbox is that sandbox's alone (the proxy keeps it in the sandbox's
run directory); ``--from-sandbox NAME`` (:func:`promote`) moves a named sandbox's login to the
user's store, the only way it ever replaces the user's own login.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials import agentlogins as al
from sbx.domain.credentials.oauthparse import parse_login, tokens_from_response
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.credentials.secrets import mask
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import check_name
from sbx.seams import oauth_http
from sbx.usecases.explain import load, static_composition
from sbx.usecases.sandboxstore import SandboxStore

MAX_INPUT_BYTES: Final = 64 * 1024
DEVICE_TIMEOUT_S: Final = 15 * 60.0  # Codex's own bound on a device code


@dataclass(frozen=True)
class OAuthEntry:
    """One stored OAuth login, as shown (masked; never a token)."""

    service: str
    masked: str | None  # None: the record could not be read
    refresh: bool
    expires_at: float | None
    updated: float
    sandbox: str | None = None  # a login made inside this named sandbox, kept for it alone
    source: str = ""
    refreshes: int = 0  # refreshes (each rotating the stored tokens) sbx made since the login
    refreshed_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "kind": "oauth", "sandbox": self.sandbox,
                "access_token": self.masked,
                "refresh_token": self.refresh, "expires_at": _iso(self.expires_at),
                "expired": self.expires_at is not None and self.expires_at < time.time(),
                "updated": _iso(self.updated) if self.updated else None,
                "source": self.source or None, "refreshes": self.refreshes,
                "refreshed_at": _iso(self.refreshed_at)}


def _iso(when: float | None) -> str | None:
    return None if when is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def read_login_input(from_file: Path | None, stdin: IO[bytes] | None) -> str:
    """The login text: the file's, else stdin's (bounded); ``invalid_argument`` otherwise."""
    if from_file is not None:
        try:
            with from_file.open("rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
        except OSError as error:
            raise SbxError(Reason.INVALID_ARGUMENT, f"cannot read {from_file}: "
                           f"{error.strerror}", hint="Name the file the agent's own login "
                           "wrote, e.g. ~/.claude/.credentials.json.") from None
    elif stdin is None or stdin.isatty():
        raise SbxError(Reason.INVALID_ARGUMENT, "nothing to log in with",
                       hint="Pass --from-file PATH (the agent's credential file) or pipe a "
                            "token response on stdin.")
    else:
        data = stdin.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the login input is larger than {MAX_INPUT_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SbxError(Reason.INVALID_ARGUMENT, "the login input is not UTF-8 text") from None


def kit_structure(kit: str, service: str, *, cwd: Path, state_home: Path) -> Any:
    """The ``credentialFile.structure`` the kit declares for ``service``."""
    composition = static_composition(load(kit, (), (), cwd=cwd, state_home=state_home))
    for credential in composition.credentials:
        if credential.service != service:
            continue
        oauth = credential.config.get("oauth")
        file = oauth.get("credentialFile") if isinstance(oauth, Mapping) else None
        if isinstance(file, Mapping) and file.get("structure") is not None:
            return file["structure"]
    raise SbxError(Reason.INVALID_ARGUMENT,
                   f"the kit {kit} declares no oauth.credentialFile for service {service!r}",
                   hint="Name the kit whose credential@1 has that service, or leave --kit out "
                        "to read a known agent file or a token response.",
                   details={"kit": kit, "service": service})


def login(state_home: Path, service: str, text: str, *, structure: Any = None,
          source: str = "") -> OAuthEntry:
    """Parse and store the tokens (0600, atomic, under the store's lock); the masked entry."""
    store = OAuthStore(state_home)
    store.path(service)  # a bad service name is refused before the input is read
    tokens = parse_login(text, structure=structure).with_source(source)
    with store.locked(service):
        store.set(service, tokens)
    return _entry(service, tokens, time.time())


def agent_login(state_home: Path, login: Any, *, upstream_proxy: str | None,
                ca_file: Path | None, show: Callable[[str], None],
                read_code: Callable[[str], str], sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic,
                device_timeout: float = DEVICE_TIMEOUT_S) -> OAuthEntry:
    """The agent's own OAuth login (:mod:`sbx.domain.credentials.agentlogins`), done here on
    the host: the user opens a URL in a browser and pastes the code it shows (Claude Code,
    Gemini CLI) or enters a device code there (Codex); the tokens go straight from the
    provider to the host's store. Nothing is stored unless the provider issued tokens."""
    def send(post: al.Post) -> oauth_http.Answer:
        return oauth_http.post(post.url, post.content_type, post.body,
                               upstream_proxy=upstream_proxy, ca_file=ca_file)

    store = OAuthStore(state_home)
    store.path(login.service)
    if login.flow == "device-code":
        started = send(al.device_code_request(login))
        if not 200 <= started.status < 300:
            raise _refused(login, started)
        device = al.read_device_code(login, started.data)
        show(f"To sign {login.agent} in with your account, open {login.verification_url} in "
             f"a browser on any machine and enter the code {device.user_code} (it expires in "
             "15 minutes; never share it). Waiting for the sign-in...")
        deadline = clock() + device_timeout
        while True:
            polled = send(al.device_poll_request(login, device))
            if 200 <= polled.status < 300:
                code, verifier = al.read_device_grant(login, polled.data)
                break
            if not al.device_pending(polled.status):
                raise _refused(login, polled)
            if clock() + device.interval > deadline:
                raise SbxError(Reason.LOGIN_FAILED, f"the {login.agent} device code was not "
                               f"approved within {int(device_timeout // 60)} minutes",
                               hint=f"Run `sbx secret login {login.agent}` again.")
            sleep(device.interval)
        exchange = al.code_exchange(login, code, verifier)
    else:
        pkce = al.Pkce.new()
        show(f"To sign {login.agent} in with your account, open this URL in a browser on "
             f"this machine or any other:\n\n  {al.authorize_url(login, pkce)}\n\n"
             "After you sign in, the page shows a code: paste it here.")
        code = al.pasted_code(login, read_code("Code: "), pkce)
        exchange = al.code_exchange(login, code, pkce.verifier, pkce.state)
    answer = send(exchange)
    tokens = _issued(login, answer).with_source(f"sbx secret login {login.agent} "
                                                f"({login.flow})")
    with store.locked(login.service):
        store.set(login.service, tokens)
    return _entry(login.service, tokens, time.time())


def _issued(login: Any, answer: Any) -> Any:
    if not 200 <= answer.status < 300 or not isinstance(answer.data, Mapping):
        raise _refused(login, answer)
    try:
        return tokens_from_response(answer.data)
    except (ValueError, SbxError):
        raise SbxError(Reason.LOGIN_FAILED, f"the {login.agent} token endpoint answered "
                       "without a usable access token; nothing was stored",
                       hint=f"Run `sbx secret login {login.agent}` again.") from None


def _refused(login: Any, answer: Any) -> SbxError:
    """The provider's refusal: its status and OAuth error code (RFC 6749 §5.2), never more."""
    error = answer.data.get("error") if isinstance(answer.data, Mapping) else None
    if isinstance(error, Mapping):
        error = error.get("code") or error.get("type")
    code = f" ({error})" if isinstance(error, str) and error.isprintable() \
        and len(error) <= 64 else ""
    return SbxError(Reason.LOGIN_FAILED, f"the {login.agent} login was refused by "
                    f"{login.token_host}: HTTP {answer.status}{code}; nothing was stored",
                    hint=f"Run `sbx secret login {login.agent}` again and use the code of "
                         "that attempt (each code works once, for a few minutes).",
                    details={"agent": login.agent, "status": answer.status})


def entries(state_home: Path) -> list[OAuthEntry]:
    """The user's logins, then those made inside named sandboxes (each its sandbox's)."""
    found = [_entry(service, tokens, updated)
             for service, tokens, updated in OAuthStore(state_home).services()]
    for name, store in _sandbox_logins(state_home):
        found.extend(_entry(service, tokens, updated, sandbox=name)
                     for service, tokens, updated in store.services())
    return found


def _sandbox_logins(state_home: Path) -> list[tuple[str, Any]]:
    store = SandboxStore(state_home)
    found = []
    for name in store.names():
        try:
            record = store.load(name)
        except SbxError:
            continue
        if record is not None:
            found.append((name, OAuthStore.at(runrecord.login_dir(state_home, record.run_id))))
    return found


def promote(state_home: Path, service: str, name: str) -> OAuthEntry:
    """Move the login made inside the named sandbox ``name`` to the user's store: every
    sandbox uses it from then on (that one too, whose own copy is gone: two copies of one
    rotating refresh token would spend each other)."""
    user = OAuthStore(state_home)
    user.path(service)  # a bad service name is refused first
    record = SandboxStore(state_home).load(check_name(name))
    if record is None:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no sandbox named {name}",
                       hint="`sbx ls` lists them; `sbx secret ls` lists the logins they hold.")
    kept = OAuthStore.at(runrecord.login_dir(state_home, record.run_id))
    with user.locked(service):  # the egress proxies take the same lock to refresh
        tokens = kept.get(service)
        if tokens is None:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"the sandbox {name} holds no OAuth login of {service}",
                           hint="`sbx secret ls` lists the logins made inside sandboxes.",
                           details={"sandbox": name, "service": service})
        user.set(service, tokens)
        kept.remove(service)
    return _entry(service, tokens, time.time())


def _entry(service: str, tokens: Any, updated: float, *,
           sandbox: str | None = None) -> OAuthEntry:
    if tokens is None:
        return OAuthEntry(service, None, False, None, updated, sandbox)
    return OAuthEntry(service, mask(tokens.access_token), tokens.refresh_token is not None,
                      tokens.expires_at, updated, sandbox, tokens.source, tokens.refreshes,
                      tokens.refreshed_at)


def remove(state_home: Path, service: str) -> bool:
    store = OAuthStore(state_home)
    store.path(service)  # validates the name before it names a lock file
    with store.locked(service):
        return store.remove(service)


__all__ = ["MAX_INPUT_BYTES", "OAuthEntry", "entries", "kit_structure", "login", "promote",
           "read_login_input", "remove"]
