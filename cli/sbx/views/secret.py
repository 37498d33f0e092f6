"""Output of the secret commands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sbx.base.render import Envelope, Renderer, escape

if TYPE_CHECKING:
    from pathlib import Path

    from sbx.domain.credentials.secretvalues import SecretInfo
    from sbx.usecases.secretops import ImportCandidate, ImportResult


def secret_stored(renderer: Renderer, info: SecretInfo, directory: Path | None = None) -> None:
    """Where the secret went: the OS keyring, the file store, or (dynamic) where it will
    be read from at each run; never the value."""
    if renderer.as_json:
        renderer.envelope(Envelope(command="secret", status="ok", exit_code=0,
                               data={"action": "set", **info.as_dict()}))
        return
    if info.dynamic:
        where = f"${info.reference}" if info.source == "env" else f"`{info.reference}`"
        text = (f"secret for {info.service}: read from {where} on the host at each run "
                "start; the value is not stored")
    elif info.source == "keyring":
        text = (f"stored secret for {info.service} in the OS keyring ({info.reference}): "
                f"{info.masked} ({info.length} characters)")
    else:
        store = f" {directory}" if directory is not None else ""
        text = (f"stored secret for {info.service}: {info.masked} ({info.length} "
                f"characters) in the file store{store} (mode 0600; no OS keyring found)")
    renderer.line(renderer.out_file, escape(text), text)


def secret_list(renderer: Renderer, infos: Sequence[SecretInfo], oauth: Sequence[Any] = ()) -> None:
    """A table of service, masked value, length and last update, then the OAuth logins
    (masked access token, expiry); never a value."""
    if renderer.as_json:
        renderer.envelope(Envelope(command="secret", status="ok", exit_code=0,
                               data={"action": "ls",
                                     "secrets": [info.as_dict() for info in infos],
                                     "oauth": [entry.as_dict() for entry in oauth]}))
        return
    if not infos and not oauth:
        renderer.note('no secrets stored; add one with: printf %s "$TOKEN" | '
                  "sbx secret set SERVICE (or `sbx secret login SERVICE` for OAuth)")
        return
    if oauth:
        oauth_list(renderer, oauth)
    if not infos:
        return
    rows: list[tuple[str, ...]] = []
    for info in infos:
        source = info.source
        if info.dynamic:
            source = f"{info.source} " + (f"${info.reference}" if info.source == "env"
                                          else f"`{info.reference}`")
        rows.append((escape(info.service), escape(info.masked or "-"),
                     str(info.length) if info.length is not None else "-",
                     info.updated.strftime("%Y-%m-%d %H:%M UTC"), escape(source)))
    renderer.table(("service", "secret", "length", "updated", "source"), rows)


def oauth_list(renderer: Renderer, entries: Sequence[Any]) -> None:
    for entry in entries:
        data = entry.as_dict()
        where = f"oauth {entry.service}"
        if entry.sandbox is not None:
            where += (f" (logged in inside sandbox {entry.sandbox}, used by it alone; "
                      f"`sbx secret login {entry.service} --from-sandbox {entry.sandbox}` "
                      "makes it yours)")
        if entry.masked is None:
            text = f"{where}: unreadable record (log in again)"
        else:
            expiry = data["expires_at"] or "unknown expiry"
            text = (f"{where}: access {entry.masked}, "
                    f"{'with' if entry.refresh else 'no'} refresh token, "
                    f"{'expired' if data['expired'] else 'expires'} {expiry}")
            if data["expired"] and entry.refresh:
                text += " (the next request through sbx refreshes it)"
            text += (f"; refreshed {entry.refreshes}x by sbx, last {data['refreshed_at']}"
                     if entry.refreshes else "; not refreshed since the login")
            if entry.source:
                text += f"; from {entry.source}"
        renderer.line(renderer.out_file, escape(text), text)


def login_instructions(renderer: Renderer, text: str) -> None:
    """What to do in the browser, on stderr (stdout keeps the result, also under --json)."""
    for line in text.splitlines() or [""]:
        renderer.line(renderer.err_file, escape(line), line)


def oauth_stored(renderer: Renderer, entry: Any) -> None:
    """A stored OAuth login: service, masked access token, expiry; never a token."""
    if renderer.as_json:
        renderer.envelope(Envelope(command="secret", status="ok", exit_code=0,
                               data={"action": "login", **entry.as_dict()}))
        return
    data = entry.as_dict()
    text = (f"stored OAuth tokens for {entry.service}: access {entry.masked}, "
            f"{'with' if entry.refresh else 'no'} refresh token, expires "
            f"{data['expires_at'] or 'unknown'}; sandboxes get sentinels only")
    renderer.line(renderer.out_file, escape(text), text)


def secret_removed(renderer: Renderer, service: str, kinds: Sequence[str] = ("secret",)) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="secret", status="ok", exit_code=0,
                               data={"action": "rm", "service": service, "removed": True,
                                     "kinds": list(kinds)}))
        return
    what = " and ".join("OAuth tokens" if k == "oauth" else "secret" for k in kinds)
    text = f"removed {what} for {service}"
    renderer.line(renderer.out_file, escape(text), text)


def confirm_import(renderer: Renderer, candidate: ImportCandidate) -> bool:
    """Ask before importing one variable (its name, service and length, never the value)."""
    return renderer.confirm(f"Import ${candidate.variable} ({candidate.length} characters) as "
                        f"the secret for {candidate.service}?")


def secret_import(renderer: Renderer, result: ImportResult) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="secret", status="ok", exit_code=0,
                               data={"action": "import", **result.as_dict()}))
        return
    if not result.candidates:
        renderer.note("no known API-key variable is set in this environment")
        return
    if result.dry_run:
        for candidate in result.candidates:
            state = (f"; already set ({candidate.existing})" if candidate.existing
                     else f"; {candidate.problem}" if candidate.problem else "")
            renderer.plain(f"would import ${candidate.variable} as {candidate.service} "
                        f"({candidate.length} characters{state})")
        return
    for info in result.imported:
        variable = next(c.variable for c in result.candidates if c.service == info.service)
        where = "the OS keyring" if info.source == "keyring" else "the file store"
        renderer.plain(f"imported ${variable} as {info.service} into {where}: {info.masked}")
    for candidate, why in result.skipped:
        renderer.note(f"skipped ${candidate.variable} ({candidate.service}): {why}")

__all__ = ["confirm_import", "login_instructions", "oauth_stored", "secret_import",
           "secret_list", "secret_removed", "secret_stored"]
