"""`sbx explain`'s answers, computed with the code that enforces (SPEC §2.3).

- :func:`explain_plan` describes the sandbox ``sbx run`` would start, from the plan of the one
  pipeline (:func:`sbx.usecases.pipeline.dry_plan`): kits, selection, hardening values with their
  provenance, network rules per phase, credentials (bound or not, never a value). Whatever
  ``sbx run`` would refuse, the pipeline raises first, with the same reason.
- :func:`explain_request` judges one request or connection with
:func:`sbx.domain.egress.policy.decide`
  — the function the egress proxy calls — on that plan's effective composition.
- :func:`explain_sandbox` is the static form of the description (arg-expanded descriptors, no
  engine) that ``sbx kit inspect`` shows kit authors; ``${{ kit.env.* }}`` references there
  need the built image's environment, so a rule that still holds one is reported, not guessed.
- :func:`explain_run` reads the audit log: the refusals recorded for one run.

Nothing here prints or exits; commands render the results.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from sbx.base.config import DEFAULT_SOURCE, Config
from sbx.base.errors import SbxError
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.egress.policy import describe_rule, rule_dict, rule_where
from sbx.domain.kits.compose import PHASES, Composition, Contribution, Phase, Rule, compose
from sbx.domain.kits.kitset import KitSet, load_kit_set
from sbx.domain.kits.selection import SelectionRecord
from sbx.domain.sandbox.capabilities import SUPPORTED
from sbx.seams import audit
from sbx.usecases.explainrequest import RequestExplanation, Target, judge_request

if TYPE_CHECKING:
    from sbx.domain.sandbox.images import SandboxUser
    from sbx.usecases.kitgate import PermissionState
    from sbx.usecases.pipeline import WorkloadPlan

ENV_REFERENCE: Final = "${{ kit.env."
RUN_ID: Final = re.compile(r"[0-9a-f]{32}")
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
HTTP_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS",
                                 "CONNECT", "TRACE"})
RUN_EVENTS: Final = frozenset({audit.SANDBOX_STARTED, audit.SANDBOX_FINISHED,
                               audit.SANDBOX_UNAVAILABLE, audit.EGRESS_DENIED,
                               audit.EGRESS_FAILED})


def _usage(message: str, hint: str) -> SbxError:
    return SbxError(Reason.INVALID_ARGUMENT, message, hint=hint)


# --- the target ----------------------------------------------------------------------------------


def _parse_port(text: str, target: str) -> int:
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise _usage(f"{target!r}: the port {text!r} is not a number from 1 to 65535",
                     "Give the target as HOST, HOST:PORT or an http(s) URL.")
    return int(text)


def parse_target(target: str, method: str | None = None) -> Target:
    """``https://h/p`` → h:443 /p; ``http://h:8080/`` → h:8080; ``h`` → h:443; ``h:22`` → h:22.

    A URL without METHOD is a ``GET`` (what a client sends for it); a bare host without METHOD
    is a connection sbx cannot see into. Other schemes must be written as HOST:PORT.
    """
    if method is not None:
        if not _TOKEN.fullmatch(method):
            raise _usage(f"{method!r} is not an HTTP method",
                         "Give a method such as GET or POST before the target, or none.")
        method = method.upper()
    if "://" in target:
        try:
            parts = urlsplit(target)
        except ValueError as exc:  # e.g. an unclosed IPv6 bracket: "http://[::1"
            raise _usage(f"{target!r} is not a URL: {exc}",
                         "Give a URL such as https://example.com/path.") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise _usage(f"{target!r}: the scheme {parts.scheme!r} is not http or https",
                         "Give other protocols as HOST:PORT (judged as a connection).")
        try:
            port = parts.port
        except ValueError:
            raise _usage(f"{target!r}: the port is not a number from 1 to 65535",
                         "Correct the URL's port.") from None
        host = parts.hostname or ""
        if not host:
            raise _usage(f"{target!r} names no host", "Give a URL such as https://example.com/.")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        defaulted = method is None
        return Target(target, host, port or (443 if scheme == "https" else 80), scheme,
                      method or "GET", path, defaulted)
    if "/" in target:
        raise _usage(f"{target!r} has a path but no scheme",
                     "Write it as a URL (https://HOST/PATH) to judge a path.")
    host, port = target, 443
    if target.startswith("["):
        end = target.find("]")
        if end < 0:
            raise _usage(f"{target!r}: unclosed [", "Write an IPv6 address as [ADDR]:PORT.")
        host, rest = target[1:end], target[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise _usage(f"{target!r} is not HOST[:PORT]", "Write [ADDR]:PORT.")
            port = _parse_port(rest[1:], target)
    elif target.count(":") == 1:
        host, _, port_text = target.partition(":")
        port = _parse_port(port_text, target)
    if not host:
        raise _usage(f"{target!r} names no host", "Give the target as HOST or HOST:PORT.")
    return Target(target, host, port, "https", method, None)


# --- the kit set without the engine --------------------------------------------------------------


def load(workload: str, mixins: Sequence[str], args: Sequence[str], *, cwd: Path,
         state_home: Path) -> KitSet:
    """The kit set exactly as ``sbx run`` loads it (decode, args, selection, resolution)."""
    return load_kit_set(workload, mixins, args, cwd=cwd,
                        cache_dir=state_home / "cache" / "descriptors", supported=SUPPORTED,
                        lock_home=state_home)


def static_composition(kit_set: KitSet) -> Composition:
    """Compose what selection kept from the arg-expanded descriptors (no image, no kit.env)."""
    contributions = []
    for kit in kit_set.resolution.topological:
        loaded = kit_set.by_reference(kit.reference)
        contributions.append(Contribution(kit.reference, loaded.selection.selected,
                                          loaded.selection.selected_paths or None))
    return compose(contributions)


def pending_rules(composition: Composition) -> tuple[Rule, ...]:
    """Network rules still holding a ``${{ kit.env.* }}`` reference (known only with the image)."""
    network = composition.network
    if network is None:
        return ()
    return tuple(rule for phase in PHASES
                 for rule in (*network.phase(phase).allow, *network.phase(phase).deny)
                 if any(ENV_REFERENCE in text for text in (rule.host, *rule.methods,
                                                           *rule.paths)))


def explain_prefix(kit_set: KitSet) -> str:
    kits = " ".join(f"--kit {shlex.quote(k.reference)}" for k in kit_set.mixins)
    return " ".join(filter(None, ["sbx explain", shlex.quote(kit_set.workload.reference), kits]))


# --- form: one request ---------------------------------------------------------------------------


def explain_request(composition: Composition, kits: Sequence[str], target: Target,
                    phase: Phase, **context: Any) -> RequestExplanation:
    """The decision for ``target`` under ``composition`` (the plan's effective one for ``sbx
    explain``; a rule left with a ``${{ kit.env.* }}`` reference is reported as pending), with
    the user policy and the destination checks ``context`` gives
    (:func:`sbx.usecases.explainrequest.judge_request`)."""
    return judge_request(composition.network, kits, target, phase,
                         pending=pending_rules(composition), **context)


def addresses_of(host: str, port: int, *, resolve: bool) -> list[str] | None:
    """What ``host`` resolves to here for the destination checks: an IP literal is itself;
    a name is looked up in /etc/hosts, or with ``resolve`` by the system resolver (None: not
    known, so the answer depends on resolution)."""
    from sbx.domain.egress.hosts import is_literal_address, normalize_host
    from sbx.seams import names

    name = normalize_host(host) or host
    if is_literal_address(name):
        return None  # literals are judged as themselves
    found = names.from_resolver(name, port) if resolve else names.from_hosts_file(name)
    return found or None


# --- form: the effective sandbox -----------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One described thing: what it is, where it came from, and what changes it."""

    name: str
    value: str
    source: str
    change: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "source": self.source,
                "change": self.change, **self.extra}


@dataclass(frozen=True)
class SandboxExplanation:
    kits: tuple[Item, ...]
    selected: tuple[Item, ...]
    skipped: tuple[Item, ...]
    hardening: tuple[Item, ...]
    network: Mapping[str, tuple[Item, ...]]
    credentials: tuple[Item, ...]
    storage: tuple[Item, ...]
    pending: tuple[Rule, ...]
    explain: str
    permissions: tuple[PermissionState, ...] = ()  # what each kit asks for, and was approved

    def as_dict(self) -> dict[str, Any]:
        return {
            "permissions": [p.as_dict() for p in self.permissions],
            "kits": [i.as_dict() for i in self.kits],
            "capabilities": {"selected": [i.as_dict() for i in self.selected],
                             "skipped": [i.as_dict() for i in self.skipped]},
            "hardening": [i.as_dict() for i in self.hardening],
            "network": {p: [i.as_dict() for i in items] for p, items in self.network.items()},
            "credentials": [i.as_dict() for i in self.credentials],
            "storage": [i.as_dict() for i in self.storage],
            "pending_env": [rule_dict(r) for r in self.pending],
            "explain": self.explain,
        }


_FLAGS: Final = {"sandbox.timeout_ms": "--timeout SECONDS"}


def config_item(key: str, value: object, source: str, config: Config) -> Item:
    """One setting as explain and `sbx config show` print it: value, source, what changes it."""
    section, _, name = key.partition(".")
    change = f"[{section}] {name} in {config.path}"
    if key in _FLAGS:
        change += f", or {_FLAGS[key]}"
    shown = source if source != DEFAULT_SOURCE else "default"
    # ``raw`` keeps the typed value: the renderer spells it for people (4 GiB, none), --json
    # readers get the number itself.
    return Item(key, repr(value) if isinstance(value, str) else str(value), shown, change,
                {"raw": list(value) if isinstance(value, tuple) else value})


def _version(data: Mapping[str, Any]) -> str:
    provides = data.get("provides") or []
    if provides and isinstance(provides[0], str) and "@" in provides[0]:
        return str(provides[0]).rpartition("@")[2]
    return str(data.get("version") or "-")


def explain_sandbox(kit_set: KitSet, config: Config, *, bound: Mapping[str, bool],
                    oauth: Mapping[str, bool] | None = None) -> SandboxExplanation:
    """The static description (no engine, for ``sbx kit inspect``). ``bound`` maps each
    credential service to whether a secret is stored, ``oauth`` to whether OAuth tokens are
    (never a value). Each credential shows the mode ``sbx run`` would bind it in
    (:func:`sbx.domain.credentials.oauth.credential_mode`): ``bound (oauth)``, ``bound`` (the API
    key), or ``not
    bound`` with the command that binds it."""
    composition = static_composition(kit_set)
    hardening = tuple(config_item(key, value, source, config)
                      for key, value, source in config.provenance())
    return _sandbox(kit_set, composition, hardening=hardening,
                    credentials=tuple(_credential_item(c, bound, oauth or {})
                                      for c in composition.credentials),
                    later_skips=(), explain=explain_prefix(kit_set))


def explain_plan(planned: WorkloadPlan, user: SandboxUser | None, *,
                 state_home: Path | None = None, cwd: Path | None = None) -> SandboxExplanation:
    """The sandbox ``sbx run`` would start for the plan: its effective composition, the
    limits after the kits' ``resources@1``, the image and the user, the credentials as bound
    (``user`` None: it needs the image's accounts, which only ``sbx run`` reads); with the
    state home, each kit's permissions against what was approved (sbx.usecases.kitgate)."""
    from sbx.usecases.pipeline import explain_command

    config = planned.config
    capabilities = planned.capabilities
    limits = capabilities.limits
    kit_limits = {"sandbox.memory_bytes": limits.memory_bytes,
                  "sandbox.cpu_millis": limits.cpu_millis}
    hardening: list[Item] = []
    for key, value, source in config.provenance():
        item = config_item(key, value, source, config)
        if key in kit_limits and kit_limits[key] != value:
            item = Item(key, str(kit_limits[key]), "a kit's resources@1 request",
                        f"edit the kit's resources@1 request (bound: {item.value} from "
                        f"{item.source})")
        hardening.append(item)
    image_source = "locked registry kit" if planned.kit_set.workload.local.image else (
        "cached build" if not planned.image_built else "built now")
    hardening.append(Item("image", planned.image_tag, image_source,
                          "edit the kits' dockerfiles (rebuilt when their content changes)"))
    if user is not None:
        hardening.append(Item("user", f"{user.uid}:{user.gid}", user.source,
                              "--user UID:GID, a workspace's owner, or [sandbox] user"))
    else:
        hardening.append(Item("user", "resolved by sbx run",
                              f"image USER {planned.image.user}",
                              "--user UID:GID, a workspace's owner, or [sandbox] user"))
    hardening.append(Item("privileged", str(capabilities.privileged).lower(),
                          "privileged@1 with --allow-privileged" if capabilities.privileged
                          else "default", "a kit's privileged@1 and --allow-privileged"))
    modes = dict(planned.egress.modes) if planned.egress is not None else {}
    credentials = tuple(_credential_item(
        c, {s: m == "apikey" for s, m in modes.items()},
        {s: m == "oauth" for s, m in modes.items()}) for c in planned.composition.credentials)
    explanation = _sandbox(planned.kit_set, planned.composition, hardening=tuple(hardening),
                           credentials=credentials,
                           later_skips=(*capabilities.skipped,
                                        *(planned.egress.skipped if planned.egress else ())),
                           explain=explain_command(planned.loaded))
    if state_home is None or cwd is None:
        return explanation
    from sbx.usecases.kitgate import permission_states

    return dataclasses.replace(explanation, permissions=permission_states(
        state_home, planned.kit_set, planned.effective, cwd))


def _sandbox(kit_set: KitSet, composition: Composition, *, hardening: tuple[Item, ...],
             credentials: tuple[Item, ...], later_skips: Sequence[SelectionRecord],
             explain: str) -> SandboxExplanation:
    kits = tuple(
        Item(k.reference, k.local.descriptor.kind, str(k.local.directory),
             "--kit MIXIN adds a mixin; the order comes from the kits' requirements",
             {"kind": k.local.descriptor.kind, "version": _version(k.local.descriptor.data),
              "descriptor": k.local.descriptor.file})
        for k in kit_set.kits)
    dropped = {(r.kit, r.path) for r in later_skips}
    selected = tuple(Item(f"{r.kit} {r.path}", r.type, r.kit, "edit the kit's capabilities",
                          {"kit": r.kit, "path": r.path, "type": r.type})
                     for k in kit_set.kits for r in k.selection.selected_records
                     if (r.kit, r.path) not in dropped)
    skipped = tuple(Item(f"{r.kit} {r.path}", r.type, r.kit,
                         "an optional capability this sbx does not provide is skipped; "
                         "it cannot be turned on here",
                         {"kit": r.kit, "path": r.path, "type": r.type, "reason": r.reason})
                    for r in (*(r for k in kit_set.kits for r in k.selection.skipped),
                              *later_skips))
    network: dict[str, tuple[Item, ...]] = {}
    for phase in PHASES:
        rules: tuple[Rule, ...] = ()
        if composition.network is not None:
            part = composition.network.phase(phase)
            rules = (*part.allow, *part.deny)
        network[phase] = tuple(
            Item(describe_rule(r), r.action, rule_where(r),
                 f"edit {rule_where(r)}, or do not compose {r.kit}", {"rule": rule_dict(r)})
            for r in rules)
    storage = tuple(
        Item(v.path, "tmpfs" if v.tmpfs else "volume", str(v.origins[0]) if v.origins else "-",
             "edit the kit's volume@1 capability", {"size": v.size})
        for v in composition.volumes)
    return SandboxExplanation(kits, selected, skipped, hardening, network, credentials, storage,
                              pending_rules(composition), explain)


def _credential_item(credential: Any, bound: Mapping[str, bool],
                     oauth: Mapping[str, bool]) -> Item:
    from sbx.domain.credentials.oauth import (
        OAuthConfig,
        credential_mode,
        has_api_key,
        passthrough_refusal,
    )

    service = credential.service
    mode = credential_mode(service, credential.config, api_key=bool(bound.get(service)),
                           oauth=bool(oauth.get(service)))
    declared = OAuthConfig.from_credential(service, credential.config)
    refused = passthrough_refusal(credential) is not None
    if mode is not None:
        value, change = ("bound (oauth)" if mode == "oauth" else "bound"), \
            f"sbx secret rm {service}"
    elif refused:
        value, change = "refused (oauth.passthrough)", "drop passthrough: true from the kit"
    else:
        value = "not bound"
        change = f"sbx secret login {service}" if declared is not None and not has_api_key(
            credential.config) else f"sbx secret set {service}" + (
            f" or sbx secret login {service}" if declared is not None else "")
    return Item(service, value,
                f"{credential.kit} {credential.declared_at or f'capabilities[{credential.index}]'}",
                change, {"service": service, "phase": credential.phase,
                         "bound": mode is not None, "mode": mode,
                         "optional": credential.optional, "kit": credential.kit})


def stored_credentials(kit_set: KitSet, state_home: Path,
                       ) -> tuple[dict[str, bool], dict[str, bool]]:
    """Per credential service: whether a secret is stored, and whether OAuth tokens are."""
    from sbx.domain.credentials.oauthstore import OAuthStore
    from sbx.domain.credentials.secrets import SecretStore

    secrets, tokens = SecretStore(state_home), OAuthStore(state_home)
    services = credential_services(kit_set)
    return {s: secrets.has(s) for s in services}, {s: tokens.has(s) for s in services}


def credential_services(kit_set: KitSet) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.service for c in static_composition(kit_set).credentials))


# --- form: the refusals of a run -----------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRefusal:
    event: str
    timestamp: str
    blocked: str
    rule: str
    code: str
    fix: str
    explain: str
    command: str | None = None  # the narrowest fix to paste (`sbx policy ...`), if one helps
    fix_lines: tuple[str, ...] = ()  # the fix as the 403 body printed it
    sandbox: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"event": self.event, "timestamp": self.timestamp, "blocked": self.blocked,
                "rule": self.rule, "code": self.code, "fix": self.fix, "explain": self.explain,
                "command": self.command, "fix_lines": list(self.fix_lines),
                "sandbox": self.sandbox}


@dataclass(frozen=True)
class RunExplanation:
    run_id: str | None
    workload: str | None
    refusals: tuple[RecordedRefusal, ...]
    audit_log: str
    skipped_lines: int = 0  # audit log lines that were not well-formed events

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "workload": self.workload, "audit_log": self.audit_log,
                "refusals": [r.as_dict() for r in self.refusals],
                "skipped_lines": self.skipped_lines}


def _egress_target(details: Mapping[str, Any]) -> str:
    host = str(details.get("host") or "")
    shown = f"[{host}]" if ":" in host else host
    port = details.get("port")
    method = details.get("method")
    path = details.get("path")
    if method in (None, "CONNECT") or not path:
        return f"{shown}:{port}" if port else shown
    scheme = str(details.get("scheme") or "https")
    default = 443 if scheme == "https" else 80
    where = shown if port in (None, default) else f"{shown}:{port}"
    return f"{method} {scheme}://{where}{path}"


def _refusal(event: Mapping[str, Any], prefix: str) -> RecordedRefusal | None:
    details = event.get("details") or {}
    if not isinstance(details, Mapping):
        return None
    kind = event.get("event_type")
    stamp = str(event.get("timestamp") or "")
    if kind in (audit.EGRESS_DENIED, audit.EGRESS_FAILED):
        from sbx.base.reasons import DETAILS

        target = _egress_target(details)
        phase = details.get("phase")
        phase_flag = " --phase install" if phase == "install" else ""
        code = str(details.get("code") or "")
        sandbox = details.get("sandbox") if isinstance(details.get("sandbox"), str) else None
        own = f"sbx explain {sandbox}" if sandbox else prefix
        command = (f"sbx explain {code}" if kind == audit.EGRESS_FAILED
                   else f"{own}{phase_flag} {shlex.join(target.split(' '))}")
        method = details.get("method") or "CONNECT"
        where = f"{details.get('host')}:{details.get('port')}"
        blocked = f"{method} {where}" + (f" {details['path']}" if details.get("path") else "")
        fix_lines, paste = _recorded_fix(details)
        if not fix_lines and code in DETAILS:
            fix_lines = (f"fix: {DETAILS[code].fix}",)
        text = REGISTRY[Reason.EGRESS_DENIED].fix if kind == audit.EGRESS_DENIED else (
            DETAILS[code].fix if code in DETAILS else REGISTRY[Reason.PROXY_FAILED].fix)
        return RecordedRefusal(kind, stamp, f"{blocked} ({phase or 'runtime'} phase)",
                               str(details.get("rule") or "-"), code, text, command, paste,
                               fix_lines, sandbox)
    if kind == audit.SANDBOX_UNAVAILABLE:
        code = str(details.get("reason") or "")
        try:
            reason = Reason(code)
        except ValueError:
            return RecordedRefusal(kind, stamp, "the run did not start", "-", code, "-",
                                   "sbx explain --list")
        workload = details.get("workload", "?")
        return RecordedRefusal(kind, stamp, f"the run of {workload} did not start",
                               "-", code, REGISTRY[reason].fix, f"sbx explain {code}")
    return None


def _recorded_fix(details: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """The fix the proxy recorded with a refusal, as its body printed it."""
    from sbx.domain.egress.fixes import Fix, KitFix, body_lines

    raw = details.get("fix")
    suggestion = details.get("suggestion")
    suggestion = suggestion if isinstance(suggestion, str) else None
    if not isinstance(raw, Mapping):
        return tuple(body_lines(None, suggestion)), None
    command = raw.get("command") if isinstance(raw.get("command"), str) else None
    kit_raw = raw.get("kit")
    kit = None
    if isinstance(kit_raw, Mapping):
        lines = kit_raw.get("lines")
        kit = KitFix(str(kit_raw.get("kit") or ""),
                     kit_raw.get("file") if isinstance(kit_raw.get("file"), str) else None,
                     str(kit_raw.get("under") or ""),
                     tuple(str(x) for x in lines) if isinstance(lines, list) else ())
    fix = Fix(command, str(raw.get("text") or ""), kit)
    return tuple(body_lines(fix, suggestion)), command


def explain_run(state_home: Path, run_id: str | None) -> RunExplanation:
    """The refusals of ``run_id`` (None: the last run recorded)."""
    # Lines that are not well-formed events (a torn write, foreign or damaged bytes) are
    # skipped and counted: they must not hide the runs recorded around them.
    log_read = audit.read_log(state_home)
    events = [e for e in log_read.events if e.get("event_type") in RUN_EVENTS
              and isinstance(e.get("run_id"), str) and e.get("run_id")]
    log = str(audit.audit_path(state_home))
    skipped = log_read.skipped
    if run_id is None:
        if not events:
            return RunExplanation(None, None, (), log, skipped)
        run_id = str(events[-1]["run_id"])
    mine = [e for e in events if e.get("run_id") == run_id]
    if not mine:
        raise SbxError(Reason.INVALID_ARGUMENT, f"no run {run_id} in the audit log {log}",
                       hint="`sbx explain --last` shows the last run's refusals.")
    workload: str | None = None
    prefix = "sbx explain WORKLOAD [--kit MIXIN]..."
    for event in mine:
        details = event.get("details") or {}
        if event.get("event_type") == audit.SANDBOX_STARTED and isinstance(details, Mapping):
            workload = str(details.get("workload") or "") or None
            listed = details.get("kits")
            kits = [str(k) for k in (listed if isinstance(listed, list) else [])
                    if k != workload]
            recorded = details.get("explain")
            if isinstance(recorded, str) and recorded.startswith("sbx explain "):
                prefix = recorded  # the run's own request: absolute paths, its --arg values
            elif workload:
                prefix = " ".join(["sbx explain", shlex.quote(workload),
                                   *(f"--kit {shlex.quote(k)}" for k in kits)])
        elif event.get("event_type") == audit.SANDBOX_UNAVAILABLE and isinstance(details,
                                                                                 Mapping):
            workload = workload or (str(details.get("workload") or "") or None)
    refusals = tuple(r for r in (_refusal(e, prefix) for e in mine) if r is not None)
    return RunExplanation(run_id, workload, refusals, log, skipped)


# --- the argument grammar ------------------------------------------------------------------------


def is_run_id(text: str) -> bool:
    return RUN_ID.fullmatch(text) is not None


def reason_of(text: str) -> Reason | None:
    try:
        return Reason(text)
    except ValueError:
        return None


def detail_of(text: str) -> bool:
    """Whether ``text`` is a detail code of the egress boundary (``destination_blocked``...)."""
    from sbx.base.reasons import DETAILS

    return text in DETAILS


def split_request(rest: Sequence[str]) -> tuple[str | None, str | None]:
    """``[METHOD] TARGET`` after WORKLOAD → (method, target); () → (None, None)."""
    if not rest:
        return None, None
    if len(rest) == 1:
        if rest[0].upper() in HTTP_METHODS and rest[0].isupper():
            raise _usage(f"{rest[0]} needs a target after it",
                         "sbx explain WORKLOAD [--kit MIXIN]... [METHOD] URL|HOST[:PORT]")
        return None, rest[0]
    if len(rest) == 2:
        return rest[0], rest[1]
    raise _usage(f"too many arguments: {' '.join(rest)}",
                 "sbx explain WORKLOAD [--kit MIXIN]... [METHOD] URL|HOST[:PORT]")


__all__ = ["Item", "RecordedRefusal", "RequestExplanation", "RunExplanation", "SandboxExplanation",
           "Target", "addresses_of", "config_item", "credential_services", "detail_of",
           "explain_prefix", "explain_request",
           "explain_plan", "explain_run", "explain_sandbox", "is_run_id", "load", "parse_target",
           "pending_rules", "reason_of", "split_request", "static_composition"]
