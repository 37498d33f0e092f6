"""`sbx secret set` and `sbx secret import`: where a secret comes from, decided here.

- ``set SERVICE`` stores a value read from stdin (or typed on a terminal) in the OS keyring
  when there is one, else in the 0600 file store
  (:class:`sbx.domain.credentials.secrets.SecretStore`).
- ``set SERVICE --from-env VAR`` / ``--from-command CMD`` store only where the value comes
  from; it is resolved on the host at each run start. By default the source is tried once now
  (the value is discarded, never shown), so a typo fails here rather than at the next run.
- ``import`` offers the API-key variables of well-known services found in sbx's environment
  and copies the accepted ones into the store. Values are never printed: only variable names,
  services and lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secrets import SecretStore
from sbx.domain.credentials.secretsources import resolve_env, run_command
from sbx.domain.credentials.secretvalues import (
    COMMAND,
    ENV,
    MAX_VALUE_BYTES,
    SecretInfo,
    SecretSource,
    normalize_value,
    read_value,
    validate_command,
    validate_env_name,
    validate_service,
)

# (variable, service), in the order offered; the first variable found wins for a service
# (GH_TOKEN before GITHUB_TOKEN, as the gh CLI reads them).
KNOWN_VARIABLES: Final[tuple[tuple[str, str], ...]] = (
    ("ANTHROPIC_API_KEY", "anthropic"),
    ("OPENAI_API_KEY", "openai"),
    ("GEMINI_API_KEY", "gemini"),
    ("GOOGLE_API_KEY", "google"),
    ("GH_TOKEN", "github"),
    ("GITHUB_TOKEN", "github"),
    ("GITLAB_TOKEN", "gitlab"),
    ("MISTRAL_API_KEY", "mistral"),
    ("GROQ_API_KEY", "groq"),
    ("OPENROUTER_API_KEY", "openrouter"),
    ("XAI_API_KEY", "xai"),
    ("DEEPSEEK_API_KEY", "deepseek"),
    ("HF_TOKEN", "huggingface"),
)


def read_value_from(stdin: IO[str] | None, prompt: Callable[[], str]) -> str:
    """The value for ``secret set``: typed at ``prompt`` on a terminal, else read from stdin
    (bounded; one trailing newline stripped)."""
    if stdin is not None and stdin.isatty():
        return normalize_value(prompt())
    if stdin is None:
        raise SbxError(Reason.INVALID_ARGUMENT, "no stdin to read the secret value from",
                       hint='Pipe the value: printf %s "$TOKEN" | sbx secret set SERVICE')
    raw = getattr(stdin, "buffer", None)  # a text-only stream (tests) has no buffer
    if raw is not None:
        return read_value(raw)
    return normalize_value(stdin.read(MAX_VALUE_BYTES + 3))


def set_value(store: SecretStore, service: str, read: Callable[[], str]) -> SecretInfo:
    """Store the value ``read`` returns (called once the service name passed its check)."""
    validate_service(service)
    return store.set(service, read())


def set_reference(store: SecretStore, service: str, env: Mapping[str, str], *,
                  from_env: str | None, from_command: str | None,
                  verify: bool) -> SecretInfo:
    """Record a host variable or command as ``service``'s source; with ``verify``, resolve it
    once now (the value is dropped) and refuse (``invalid_argument``) when it yields none."""
    validate_service(service)
    if (from_env is None) == (from_command is None):
        raise SbxError(Reason.INVALID_ARGUMENT, "give one of --from-env VAR or --from-command CMD",
                       hint="e.g. sbx secret set github --from-command 'gh auth token'")
    if from_env is not None:
        source = SecretSource(ENV, validate_env_name(from_env))
    else:
        source = SecretSource(COMMAND, validate_command(from_command or ""))
    if verify:
        try:
            if source.kind == ENV:
                resolve_env(service, source.reference or "", env)
            else:
                run_command(service, source.reference or "", env)
        except SbxError as error:
            # A command that hangs keeps its own reason; any other failure is the argument's.
            reason = (Reason.COMMAND_TIMEOUT if error.reason is Reason.COMMAND_TIMEOUT
                      else Reason.INVALID_ARGUMENT)
            raise SbxError(reason, f"{error.message}; nothing was stored",
                           hint=(error.hint or "") + " (--no-verify stores the source anyway.)",
                           details={"service": service}) from None
    return store.set_reference(service, source)


# -- import ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportCandidate:
    """A variable found in the environment; never its value."""

    variable: str
    service: str
    length: int
    existing: str | None = None  # where the service's secret already lives, if it has one
    problem: str | None = None  # why the value cannot be stored (empty, control characters)

    def as_dict(self) -> dict[str, Any]:
        return {"variable": self.variable, "service": self.service, "length": self.length,
                "existing": self.existing, "problem": self.problem}


@dataclass(frozen=True)
class ImportResult:
    candidates: tuple[ImportCandidate, ...]
    imported: tuple[SecretInfo, ...] = ()
    skipped: tuple[tuple[ImportCandidate, str], ...] = ()
    dry_run: bool = False
    store: str | None = None  # "keyring" or "file": where imported values went

    def as_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "store": self.store,
                "candidates": [c.as_dict() for c in self.candidates],
                "imported": [i.as_dict() for i in self.imported],
                "skipped": [{**c.as_dict(), "why": why} for c, why in self.skipped]}


def find_candidates(env: Mapping[str, str], store: SecretStore,
                    services: Sequence[str] = ()) -> list[ImportCandidate]:
    """The known variables set in ``env`` (one per service), limited to ``services`` if any."""
    unknown = sorted(set(services) - {service for _, service in KNOWN_VARIABLES})
    if unknown:
        known = ", ".join(dict.fromkeys(service for _, service in KNOWN_VARIABLES))
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"sbx knows no environment variable for {', '.join(unknown)}",
                       hint=f"Known services: {known}. For any other, use "
                            "`sbx secret set SERVICE --from-env VAR`.")
    found: dict[str, ImportCandidate] = {}
    for variable, service in KNOWN_VARIABLES:
        value = env.get(variable)
        if not value or service in found or (services and service not in services):
            continue
        problem = None
        try:
            normalize_value(value)
        except SbxError as error:
            problem = error.message
        existing = store.source(service)
        found[service] = ImportCandidate(variable, service, len(value),
                                         existing.describe() if existing else None, problem)
    return list(found.values())


def import_secrets(store: SecretStore, env: Mapping[str, str], *, services: Sequence[str],
                   yes: bool, dry_run: bool,
                   confirm: Callable[[ImportCandidate], bool] | None) -> ImportResult:
    """Copy the accepted candidates' values into the store.

    Accepted means: ``yes``, or ``confirm`` (the terminal's question) said yes. Without either
    and without ``dry_run`` nothing can be asked, so the import is refused
    (``invalid_argument``) naming what it would take. A service that already has a secret is
    skipped (``sbx secret rm`` it first to replace it).
    """
    candidates = find_candidates(env, store, services)
    if dry_run or not candidates:
        return ImportResult(tuple(candidates), dry_run=dry_run)
    if not yes and confirm is None:
        names = ", ".join(f"${c.variable} as {c.service}" for c in candidates)
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"not a terminal, so sbx cannot ask before importing {names}",
                       hint="Pass --yes to import them, or --dry-run to only list them.",
                       details={"candidates": [c.as_dict() for c in candidates]})
    imported: list[SecretInfo] = []
    skipped: list[tuple[ImportCandidate, str]] = []
    for candidate in candidates:
        if candidate.problem is not None:
            skipped.append((candidate, candidate.problem))
        elif candidate.existing is not None:
            skipped.append((candidate, f"{candidate.service} already has a secret "
                                       f"({candidate.existing}); `sbx secret rm "
                                       f"{candidate.service}` first to replace it"))
        elif not yes and confirm is not None and not confirm(candidate):
            skipped.append((candidate, "declined"))
        else:
            imported.append(store.set(candidate.service, env[candidate.variable]))
    where = imported[0].source if imported else None
    return ImportResult(tuple(candidates), tuple(imported), tuple(skipped), store=where)


__all__ = ["KNOWN_VARIABLES", "ImportCandidate", "ImportResult", "find_candidates",
           "import_secrets", "read_value_from", "set_reference", "set_value"]
