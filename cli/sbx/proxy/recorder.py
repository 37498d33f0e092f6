"""The proxy's side of the request log: one record per decision, into the sink it was given.

Allowed requests are recorded when their answer ended (status, bytes, duration), tunnels when
they close, refusals and failures when they are answered (:class:`~sbx.proxy.
refusals.Refuser`). The record's shape is :mod:`sbx.domain.egress.requestlog`'s; what a
client controls (host, path) is scrubbed of every secret value, OAuth token and sentinel the
proxy knows before it is written, and nothing else a client sent (headers, cookies, the
query) is ever read into a record.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sbx.domain.egress.policy import describe_rule
from sbx.domain.egress.requestlog import CAUSES, REDACTED, SCHEMA_VERSION, bounded, timestamp
from sbx.domain.kits.compose import Phase, Rule

if TYPE_CHECKING:
    from sbx.domain.egress.proxyconfig import ProxyConfig
    from sbx.proxy.refusal import EgressRefusal

# When the request (or, before its first request, the connection) being handled began: a
# refusal's duration. Each client connection is its own task, so each has its own value.
STARTED: contextvars.ContextVar[float | None] = contextvars.ContextVar("sbx_started",
                                                                      default=None)


class RecordSink(Protocol):
    """Where records go (a file the CLI reads: :class:`sbx.domain.egress.requestlog.JsonlSink`)."""

    def write(self, record: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass
class Traffic:
    """What one exchange or tunnel carried: body bytes each way, the origin's status."""

    up: int = 0
    down: int = 0
    status: int | None = None
    refused: bool = False  # a tunnel refused on its first bytes (recorded as a refusal)


def mark_start() -> float:
    started = time.monotonic()
    STARTED.set(started)
    return started


@functools.lru_cache(maxsize=4096)
def _rule_record(rule: Rule) -> dict[str, Any]:
    if rule.user_rule:
        return {"source": "user", "id": rule.user_rule, "phase": rule.phase,
                "action": rule.action, "text": describe_rule(rule)}
    return {"source": "kit", "kit": rule.kit, "index": rule.index, "phase": rule.phase,
            "action": rule.action, "at": rule.declared_at or f"capabilities[{rule.index}]",
            "text": describe_rule(rule)}


def rule_record(rule: Rule | None) -> dict[str, Any] | None:
    """The log's ``rule`` of a policy rule (made once per rule: records share it)."""
    return None if rule is None else _rule_record(rule)


class RecordedProxy(Protocol):
    """What the recorder reads of its proxy's context (:class:`sbx.proxy.context.ProxyContext`,
    which holds the recorder): named by shape, so neither module imports the other."""

    @property
    def config(self) -> ProxyConfig: ...

    @property
    def phase(self) -> Phase: ...


class Recorder:
    """Builds the records of one proxy. ``needles``: what a record must never hold (read at
    each record: secrets are re-read on SIGHUP and OAuth tokens are learnt as they come)."""

    def __init__(self, ctx: RecordedProxy, sink: RecordSink,
                 needles: Any = None) -> None:
        self.ctx = ctx
        self.sink = sink
        self._needles = needles  # a callable returning the current needles, or None

    def redact(self, value: Any) -> Any:
        """``value`` (text, or lists and mappings of it) without any value no record may hold:
        for the audit log's details of a refusal, which carry the same host, path and fix."""
        needles = [n for n in (self._needles() if self._needles is not None else ())
                   if len(n) >= 4]
        return _redacted(value, needles)

    def _scrub(self, text: str | None, needles: Iterable[str]) -> str | None:
        if text is None:
            return None
        for needle in needles:
            if len(needle) >= 4 and needle in text:
                text = text.replace(needle, REDACTED)
        return bounded(text)

    def _write(self, *, phase: Phase, mode: str, method: str | None, scheme: str, host: str,
               port: int, path: str | None, decision: str, status: int | None,
               reason: str | None, code: str, rule: dict[str, Any] | None,
               credentials: Sequence[str], up: int | None, down: int | None,
               started: float | None, cause: dict[str, Any] | None,
               client: str | None = None, fix: str | None = None) -> None:
        needles: Iterable[str] = self._needles() if self._needles is not None else ()
        record: dict[str, Any] = {
            "v": SCHEMA_VERSION, "time": timestamp(), "sandbox": self.ctx.config.sandbox,
            "run_id": self.ctx.config.run_id, "phase": phase, "mode": mode,
            "method": self._scrub(method, needles),
            "scheme": scheme, "host": self._scrub(host, needles), "port": port,
            "path": self._scrub(path, needles), "decision": decision, "status": status,
            "reason": reason, "code": code, "rule": rule, "credentials": list(credentials),
            "bytes_up": up, "bytes_down": down,
            "duration_ms": None if started is None
            else round((time.monotonic() - started) * 1000, 3),
            "cause": cause, "fix": self._scrub(fix, needles)}
        if client is not None:
            record["client"] = client
        self.sink.write(record)

    def request(self, *, scheme: str, host: str, port: int, method: str, path: str,
                rule: Rule | None, code: str, credentials: Sequence[str], traffic: Traffic,
                started: float) -> None:
        """An allowed HTTP request, once its answer ended (or was cut short)."""
        self._write(phase=self.ctx.phase, mode="intercepted" if scheme == "https" else "plain",
                    method=method, scheme=scheme, host=host, port=port, path=path,
                    decision="allowed", status=traffic.status, reason=None, code=code,
                    rule=rule_record(rule), credentials=credentials, up=traffic.up,
                    down=traffic.down, started=started, cause=None)

    def tunnel(self, *, host: str, port: int, phase: Phase, rule: Rule | None,
               traffic: Traffic, started: float) -> None:
        """An allowed CONNECT tunnel, once it closed."""
        self._write(phase=phase, mode="tunnel", method=None, scheme="https", host=host,
                    port=port, path=None, decision="allowed", status=None, reason=None,
                    code="allowed", rule=rule_record(rule), credentials=(), up=traffic.up,
                    down=traffic.down, started=started, cause=None)

    def refusal(self, refusal: EgressRefusal) -> None:
        """A refusal or failure, as it is answered."""
        method = refusal.method
        connection = method is None or method == "CONNECT"
        mode = "plain" if refusal.scheme == "http" else (
            "connect" if connection else "intercepted")
        if refusal.deciding is not None:
            rule = rule_record(refusal.deciding)
        elif refusal.rule == "default-deny":
            rule = None
        else:
            rule = {"source": "proxy", "text": refusal.rule_text}
        cause = None
        if refusal.failed:
            needles = self._needles() if self._needles is not None else ()
            cause = {"kind": CAUSES.get(refusal.code, "protocol"),
                     "detail": self._scrub(refusal.reason, needles)}
        self._write(phase=self.ctx.phase, mode=mode, method=None if connection else method,
                    scheme=refusal.scheme, host=refusal.host, port=refusal.port,
                    path=None if connection else refusal.path,
                    decision="failed" if refusal.failed else "denied", status=refusal.status,
                    reason=str(refusal.sbx_reason), code=str(refusal.code), rule=rule,
                    credentials=(), up=None, down=None, started=STARTED.get(), cause=cause,
                    client=refusal.client,
                    fix=refusal.fix.command if refusal.fix is not None else None)


def _redacted(value: Any, needles: Sequence[str]) -> Any:
    if isinstance(value, str):
        for needle in needles:
            if needle in value:
                value = value.replace(needle, REDACTED)
        return value
    if isinstance(value, dict):
        return {key: _redacted(item, needles) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, needles) for item in value]
    return value


__all__ = ["STARTED", "RecordSink", "RecordedProxy", "Recorder", "Traffic", "mark_start",
           "rule_record"]
