"""From a refusal to the narrowest reviewed fix: the ``sbx policy`` command to paste, and for a
kit author the YAML lines and the file to add them to.

One function (:func:`for_refusal`) for the 403 body, ``sbx explain --last`` (the proxy puts its
answer in the audit record) and ``sbx explain`` of a request, so all three print the same fix.
The command allows exactly the refused request's host (its port when that is not the scheme's
default, or for a connection), method and path prefix (the path without its last segment,
then ``/**``), in the refused phase, for the refused named sandbox (every sandbox for a
one-shot run); it is reviewed where it is run (a widening asks on a terminal). A request a
deny refuses has no allow to paste: deny wins, so the fix names the deny (``sbx policy rm ID``
for the user's own). Cloud metadata is never offered.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sbx.domain.egress.destination import Blocked
from sbx.domain.egress.policy import DEFAULT_PORTS, rule_where
from sbx.domain.kits.compose import Network, Phase, Rule

_ALLOW_CODES: Final = frozenset({"default_deny", "method_not_allowed", "path_not_allowed",
                                 "needs_inspection"})


@dataclass(frozen=True)
class KitFix:
    """For a kit author: the lines to add under ``under`` in ``file`` (None: a registry kit,
    which has no file here: the lines go into a mixin of one's own)."""

    kit: str
    file: str | None
    under: str
    lines: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"kit": self.kit, "file": self.file, "under": self.under,
                "lines": list(self.lines)}

    def text(self) -> str:
        where = self.file or f"a mixin of your own beside {self.kit} (a registry kit)"
        return f"add to {where} under {self.under}:"


@dataclass(frozen=True)
class Fix:
    command: str | None  # what to paste (None: no command helps)
    text: str  # what the command does, or what to do instead
    kit: KitFix | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"command": self.command, "text": self.text,
                "kit": None if self.kit is None else self.kit.as_dict()}


def path_prefix(path: str | None) -> str | None:
    """``/v1/messages`` → ``/v1/**``; ``/user`` → ``/user``; ``/`` → ``/``."""
    if not path:
        return None
    clean = path.split("?", 1)[0].split("#", 1)[0] or "/"
    segments = [s for s in clean.split("/") if s]
    if len(segments) <= 1:
        return clean
    return "/" + "/".join(segments[:-1]) + "/**"


def _authority(host: str, port: int, scheme: str, *, connection: bool) -> str:
    shown = f"[{host}]" if ":" in host else host
    if not connection and DEFAULT_PORTS.get(scheme) == port:
        return shown
    return f"{shown}:{port}"


def allow_command(host: str, port: int, *, scheme: str = "https", method: str | None = None,
                  path: str | None = None, phase: Phase = "runtime",
                  sandbox: str | None = None) -> str:
    connection = method is None or method == "CONNECT"
    words = ["sbx", "policy", "allow", _authority(host, port, scheme, connection=connection)]
    prefix = None if connection else path_prefix(path)
    if prefix is not None:
        words.append(prefix)
    if not connection and method is not None:
        words += ["--method", method.upper()]
    if phase == "install":
        words += ["--phase", "install"]
    if sandbox:
        words += ["--sandbox", sandbox]
    return shlex.join(words)


def _scope(sandbox: str | None) -> str:
    return f"sandbox {sandbox}" if sandbox else "every sandbox (a one-shot run has no name)"


def _entry(host: str, port: int, scheme: str, method: str | None, path: str | None,
           version: int) -> tuple[str, ...]:
    target = _authority(host, port, scheme, connection=method is None)
    if version < 2 or method is None or method == "CONNECT":
        return (f"- {target}",)
    lines = [f"- hosts: [{target}]", f"  methods: [{method.upper()}]"]
    prefix = path_prefix(path)
    if prefix is not None:
        lines.append(f"  paths: ['{prefix}']")
    return tuple(lines)


def _kit_for(deciding: Rule | None, network: Network | None) -> tuple[str, str] | None:
    """(kit, capability path) where an allow would go: the bounding rule's capability, else
    the composition's first network-policy capability."""
    if deciding is not None and not deciding.user_rule and deciding.action == "allow":
        return deciding.kit, deciding.declared_at or f"capabilities[{deciding.index}]"
    if network is not None and network.origins:
        origin = network.origins[0]
        return origin.kit, origin.path
    return None


def for_refusal(*, code: str, host: str, port: int, scheme: str = "https",
                method: str | None = None, path: str | None = None, phase: Phase = "runtime",
                sandbox: str | None = None, deciding: Rule | None = None,
                destination: Blocked | None = None, network: Network | None = None,
                kit_files: Mapping[str, str] | None = None) -> Fix | None:
    """The fix of a refusal (None: nothing in the policy opens it — a protocol refusal, a
    failure: ``sbx explain CODE`` says what to do)."""
    files = kit_files or {}
    if code == "deny_rule" and deciding is not None:
        if deciding.user_rule:
            return Fix(f"sbx policy rm {deciding.user_rule}",
                       f"your rule {deciding.user_rule} denies it; deny wins, so remove it "
                       "(no allow can open it while it stands)")
        return Fix(None, f"the deny at {rule_where(deciding)} refuses it; deny wins, so no "
                   f"allow opens it: remove that entry from the kit (or do not compose "
                   f"{deciding.kit})",
                   KitFix(deciding.kit, files.get(deciding.kit),
                          f"{deciding.declared_at or f'capabilities[{deciding.index}]'}"
                          f".config.{phase}.deny", ()))
    if code == "destination_blocked" and destination is not None:
        if destination.metadata:
            return Fix(None, "cloud metadata is never opened by a suggestion; if this is "
                       f"really meant, allow the exact {destination.named} yourself")
        literal = destination.address or destination.host
        command = allow_command(literal, destination.port, phase=phase, sandbox=sandbox)
        return Fix(command, f"allows the sandbox to connect to {destination.named} itself "
                   f"(an allow naming it literally; {_scope(sandbox)})")
    if code not in _ALLOW_CODES:
        return None
    connection = method is None or method == "CONNECT"
    command = allow_command(host, port, scheme=scheme, method=method, path=path, phase=phase,
                            sandbox=sandbox)
    what = (f"connections to {_authority(host, port, scheme, connection=True)}" if connection
            else f"{method} on {path_prefix(path)} of "
                 f"{_authority(host, port, scheme, connection=False)}")
    text = f"allows only {what}, in the {phase} phase, for {_scope(sandbox)}"
    kit = None
    place = _kit_for(deciding, network)
    if place is not None:
        version = network.version if network is not None else 2
        kit = KitFix(place[0], files.get(place[0]), f"{place[1]}.config.{phase}.allow",
                     _entry(host, port, scheme, None if connection else method, path, version))
    return Fix(command, text, kit)


def body_lines(fix: Fix | None, suggestion: str | None) -> list[str]:
    """The fix as a refusal's body and ``explain --last`` print it: the command (or what to do
    instead), then for a kit author the kit-side change (``suggestion``, the decision's) with
    the file and the lines."""
    if fix is None:
        return [f"fix: {suggestion}"] if suggestion else []
    lines: list[str] = []
    if fix.command is not None:
        review = ("; on a terminal it shows the widening and asks, elsewhere add --yes"
                  if fix.command.startswith("sbx policy allow") else "")
        lines += [f"fix: {fix.command}", f"  ({fix.text}{review})"]
    else:
        lines.append(f"fix: {fix.text}")
    kit = fix.kit
    if kit is not None and kit.lines:
        lead = f"{suggestion}; as lines: " if suggestion and fix.command is not None else ""
        lines.append(f"kit fix: {lead}{kit.text()}")
        lines.extend(f"    {line}" for line in kit.lines)
    elif kit is not None and kit.file:
        lines.append(f"kit fix: in {kit.file}, the entry at {kit.under}")
    elif suggestion and fix.command is not None:
        lines.append(f"kit fix: {suggestion}")
    return lines


__all__ = ["Fix", "KitFix", "allow_command", "body_lines", "for_refusal", "path_prefix"]
