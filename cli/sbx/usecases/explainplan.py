"""What `sbx explain WORKLOAD|NAME ...` answers from.

- A workload: ``sbx run``'s pipeline (:func:`sbx.usecases.pipeline.load`, then
  :func:`~sbx.usecases.pipeline.plan`). Its first stage (config, kits) must pass — without
  kits there is nothing to explain, and explain refuses as run would. When the second stage
  cannot finish (the engine is down, the image missing, a credential without a secret, …),
  explain still answers from the kits, the config and the user policy (the arg-expanded
  descriptors, no image) and says what ``sbx run`` would refuse, with run's reason.
- A named sandbox, by its name: the rules its proxy really runs with (its own config in the
  run directory) and the user policy in force for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbx.base.errors import SbxError
from sbx.domain.egress.policy import describe_rule, rule_dict, rule_where
from sbx.domain.egress.policystore import PolicyStore
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.egress.userpolicy import overlay
from sbx.domain.kits.compose import PHASES, Phase
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import NAME_PATTERN, SandboxRecord
from sbx.usecases import enginefit, explainrequest, explainsandbox, fleet, pipeline
from sbx.usecases import explain as core
from sbx.usecases.context import AppContext
from sbx.usecases.explainrequest import RequestExplanation, RunRefusal, judge_request
from sbx.usecases.idlestop import IdleStopped, stopped_mark
from sbx.usecases.named.ports import PortRow, sandbox_ports
from sbx.usecases.policyrules import named_sandbox
from sbx.usecases.sandboxstore import SandboxStore

if TYPE_CHECKING:
    from sbx.usecases.pipeline import ProgressFactory, WorkloadRequest


@dataclass(frozen=True)
class WorkloadAnswer:
    sandbox: explainsandbox.SandboxExplanation | None
    request: RequestExplanation | None
    run_refusal: RunRefusal | None


def explain_workload(ctx: AppContext, request: WorkloadRequest,
                     target: explainrequest.Target | None, phase: Phase, *, resolve: bool,
                     progress: ProgressFactory | None = None) -> WorkloadAnswer:
    loaded = pipeline.load(ctx, request)  # config and kits: refused as run refuses
    kit_set, config = loaded.kit_set, loaded.config
    user_rules = PolicyStore(ctx.state_home).load()
    refusal: RunRefusal | None = None
    planned = None
    run_id = _dry_run_id()
    try:
        planned = pipeline.plan(ctx, loaded, run_id=run_id,
                                progress=progress or pipeline.quiet_progress,
                                helper_labels=pipeline.helper_labels(ctx, run_id, kit_set),
                                resolve_secrets=False)
        # A far engine: run would refuse what needs this machine, before creating anything.
        far = enginefit.not_local(ctx.driver.location(), enginefit.planned_needs(planned))
        if far is not None:
            refusal = RunRefusal.of(far)
    except SbxError as error:
        refusal = RunRefusal.of(error)
        try:
            static = core.static_composition(kit_set)
        except SbxError:
            raise error from None  # the kits alone do not compose: nothing to answer from
    if target is None:
        if planned is not None:
            described = explainsandbox.explain_plan(
                planned, pipeline.planned_user(ctx, planned), state_home=ctx.state_home,
                cwd=ctx.cwd)
        else:
            bound, oauth = explainsandbox.stored_credentials(kit_set, ctx.state_home)
            described = explainsandbox.explain_sandbox(kit_set, config, bound=bound, oauth=oauth)
        return WorkloadAnswer(_with_user_rules(described, user_rules), None, refusal)
    composition = planned.composition if planned is not None else static
    upstream = config.network.upstream_proxy.value is not None
    kit_files = {k.reference: str(k.local.descriptor_file.absolute())
                 for k in kit_set.kits if k.local.image is None}
    answers = None if upstream else core.addresses_of(target.host, target.port, resolve=resolve)
    judged = core.explain_request(composition, [k.reference for k in kit_set.kits], target,
                                  phase, user_rules=user_rules, upstream=upstream,
                                  answers=answers, kit_files=kit_files, run_refusal=refusal)
    return WorkloadAnswer(None, judged, refusal)


def _dry_run_id() -> str:
    import uuid

    return uuid.uuid4().hex


def _with_user_rules(described: explainsandbox.SandboxExplanation,
                     user_rules: Any) -> explainsandbox.SandboxExplanation:
    """The user policy's rules for every sandbox beside the kits' (a one-shot run's)."""
    import dataclasses
    import time

    now = time.time()
    network = {phase: (*items, *(_rule_item(r.as_rule()) for r in user_rules
                                 if r.applies(None, now) and r.phase == phase))
               for phase, items in described.network.items()}
    return dataclasses.replace(described, network=network)


def _rule_item(rule: Any) -> explainsandbox.Item:
    change = (f"sbx policy rm {rule.user_rule}" if rule.user_rule
              else f"edit {rule_where(rule)}, or do not compose {rule.kit}")
    return explainsandbox.Item(describe_rule(rule), rule.action, rule_where(rule), change,
                               {"rule": rule_dict(rule)})


# -- a named sandbox ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NamedAnswer:
    name: str
    workload: str
    kits: tuple[str, ...]
    network: dict[str, tuple[explainsandbox.Item, ...]] | None  # None: it has no network
    request: RequestExplanation | None
    notes: tuple[str, ...] = ()
    ports: tuple[PortRow, ...] = ()  # its kits' and -p ports, as `sbx ports` reads them
    stopped: IdleStopped | None = None  # its keeper stopped it for being idle

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "workload": self.workload, "kits": list(self.kits),
                "network": None if self.network is None else {
                    p: [i.as_dict() for i in items] for p, items in self.network.items()},
                "ports": [r.as_dict() for r in self.ports],
                "notes": list(self.notes),
                "stopped": None if self.stopped is None else self.stopped.as_dict()}


def is_named(ctx: AppContext, subject: str) -> bool:
    if not NAME_PATTERN.fullmatch(subject):
        return False
    return (SandboxStore(ctx.state_home).directory(subject) / "sandbox.json").is_file()


def explain_named(ctx: AppContext, name: str, target: explainrequest.Target | None,
                  phase: Phase, *, resolve: bool,
                  notes: Callable[[str], tuple[str, ...]] | None = None) -> NamedAnswer:
    """A named sandbox judged by its name, with its real current rules."""
    import time

    ctx = fleet.for_sandbox(ctx, name)  # its engine: whether it runs again
    named = named_sandbox(ctx, name)
    record = named.record
    kits = (record.workload, *record.kits)
    user_rules = PolicyStore(ctx.state_home).load()
    said = notes(name) if notes is not None else ()
    ports = tuple(sandbox_ports(ctx, name)[1])
    stopped = _stopped(ctx, record) if target is None else None
    if named.proxy_config is None:
        request = None if target is None else judge_request(None, kits, target, phase,
                                                            sandbox=name)
        return NamedAnswer(name, record.workload, kits, None, request, said, ports, stopped)
    proxy = ProxyConfig.load(named.proxy_config)
    merged = overlay(proxy.network, user_rules, sandbox=name, now=time.time())
    network: dict[str, tuple[explainsandbox.Item, ...]] = {}
    for part in PHASES:
        rules = () if merged is None else (*merged.phase(part).allow, *merged.phase(part).deny)
        network[part] = tuple(_rule_item(r) for r in rules)
    request = None
    if target is not None:
        upstream = proxy.upstream_proxy is not None
        answers = None if upstream else core.addresses_of(target.host, target.port,
                                                          resolve=resolve)
        request = judge_request(proxy.network, kits, target, phase, user_rules=user_rules,
                                sandbox=name, upstream=upstream, answers=answers,
                                kit_files=proxy.kit_files)
    return NamedAnswer(name, record.workload, kits, network, request, said, ports, stopped)


def _stopped(ctx: AppContext, record: SandboxRecord) -> IdleStopped | None:
    """Its keeper's idle-stop mark, unless it runs again (the engine asked only then)."""
    mark = stopped_mark(runrecord.run_dir(ctx.state_home, record.run_id))
    if mark is None or record.container_id is None:
        return mark
    try:
        state = ctx.driver.container_state(record.container_id)
    except SbxError:
        return mark  # the engine does not answer: the mark is what is known
    return None if state == "running" else mark


__all__ = ["NamedAnswer", "WorkloadAnswer", "explain_named", "explain_workload", "is_named"]
