"""`sbx explain`'s answers, computed with the code that enforces (SPEC §2.3).

- :func:`explain_request` judges one request or connection with
  :func:`sbx.domain.egress.policy.decide` — the function the egress proxy calls — on a plan's
  effective composition; here too the target's grammar and the kit set loaded without the engine.
- :mod:`sbx.usecases.explainsandbox` describes the sandbox ``sbx run`` would start (from the one
  pipeline's plan: kits, selection, hardening values with their provenance, network rules per
  phase, credentials bound or not, never a value), and its static form for ``sbx kit inspect``.
- :mod:`sbx.usecases.explainrun` reads the audit log: the refusals recorded for one run.

Nothing here prints or exits; commands render the results.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from sbx.base.errors import SbxError
from sbx.base.reasons import DETAILS, Reason
from sbx.domain.egress.hosts import is_literal_address, normalize_host
from sbx.domain.kits.compose import PHASES, Composition, Contribution, Phase, Rule, compose
from sbx.domain.kits.kitset import KitSet, load_kit_set
from sbx.domain.sandbox.capabilities import SUPPORTED
from sbx.seams import names
from sbx.usecases.explainrequest import RequestExplanation, Target, judge_request

ENV_REFERENCE: Final = "${{ kit.env."
RUN_ID: Final = re.compile(r"[0-9a-f]{32}")
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
HTTP_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS",
                                 "CONNECT", "TRACE"})


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
    name = normalize_host(host) or host
    if is_literal_address(name):
        return None  # literals are judged as themselves
    found = names.from_resolver(name, port) if resolve else names.from_hosts_file(name)
    return found or None


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
