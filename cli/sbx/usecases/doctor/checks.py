"""The host, config, identity, engine, stale-object and workload checks."""

from __future__ import annotations

import shlex
from typing import Final

from sbx.base.errors import ConfigError, SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.requirements import check_engine as engine_rules
from sbx.domain.sandbox.requirements import check_host
from sbx.usecases.doctor.model import ENGINE_DOWN, DoctorState, Status, Verdict
from sbx.usecases.enginefit import not_local, planned_needs
from sbx.usecases.gc.collect import survey
from sbx.usecases.kitgate import permission_states
from sbx.usecases.pipeline import WorkloadRequest, dry_plan, explain_command, load, planned_user

_SEVERITY: Final = {Status.OK: 0, Status.WARN: 1, Status.FAIL: 2}


def check_platform(state: DoctorState) -> Verdict:
    host = state.host
    try:
        check_host(host.os_name)  # the rule `sbx run` applies
    except SbxError as error:
        return Verdict(Status.FAIL, f"{host.system} ({host.os_name}) is not a unix host",
                       error.reason, error.reason.info.fix)
    return Verdict(Status.OK, f"{host.system} (posix)")


def check_config(state: DoctorState) -> Verdict:
    try:
        config = state.ctx.load_config()
    except ConfigError as error:
        state.config_error = error
        problems = error.details.get("problems") or []
        file = error.details.get("file")
        if problems and file:
            listed = "; ".join(f"{file}:{p['line']}: {p['key']}: {p['message']}"
                               for p in problems)
            detail = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}: {listed}"
        else:
            detail = error.message.replace("\n", " ")
        return Verdict(Status.FAIL, detail, Reason.INVALID_CONFIG,
                       error.hint or Reason.INVALID_CONFIG.info.fix,
                       {"problems": list(problems),
                        "invalid_sections": list(error.details.get("invalid_sections", []))})
    state.config = config
    if not config.exists:
        return Verdict(Status.OK, f"no file at {config.path}; built-in defaults",
                       data={"file": str(config.path), "exists": False})
    from_file = sum(1 for _key, _value, source in config.provenance() if source != "default")
    return Verdict(Status.OK, f"{config.path} is valid ({from_file} setting"
                   f"{'s' if from_file != 1 else ''} from the file)",
                   data={"file": str(config.path), "exists": True})


def check_identity(state: DoctorState) -> Verdict:
    host = state.host
    parts: list[str] = []
    findings: list[Verdict] = []
    if host.euid is None:
        parts.append("process identity unknown on this platform")
    else:
        parts.append(f"sbx runs as uid {host.euid} gid {host.egid}")
        if host.euid == 0:
            findings.append(Verdict(
                Status.WARN, "", Reason.ROOT_USER,
                "Run sbx as an unprivileged user in the `docker` group; as root, a bug in sbx "
                "runs with root's rights (sandboxes still run as a non-root user)."))
    if state.config is None:
        parts.append("sandbox user unknown (the config is invalid)")
    else:
        user = state.config.sandbox.user
        parts.append(f"sandbox fallback user {user.value}:{user.value} ({user.source})")
        if user.value == 0:
            findings.append(Verdict(Status.FAIL, "", Reason.ROOT_USER,
                                    Reason.ROOT_USER.info.fix))
    worst = max(findings, key=lambda f: _SEVERITY[f.status], default=None)
    if worst is None:
        return Verdict(Status.OK, "; ".join(parts))
    return Verdict(worst.status, "; ".join(parts), worst.reason, worst.fix)


def check_engine(state: DoctorState) -> Verdict:
    try:
        info = state.ctx.driver.info()
    except SbxError as error:
        state.engine_error = error
        raise
    mode = "rootless" if info.rootless else "rootful"
    cgroup = f"cgroup v{info.cgroup_version or '?'} ({info.cgroup_driver or 'unknown driver'})"
    product = "Podman" if info.product == "podman" else "Docker"
    detail = f"{product} {info.version} (API {info.api_version}), {mode}, {cgroup}"
    data = {"version": info.version, "api_version": info.api_version, "rootless": info.rootless,
            "cgroup_version": info.cgroup_version, "cgroup_driver": info.cgroup_driver,
            "os": info.os}
    if not info.os or info.os == "linux":
        state.engine = info  # the other checks may use it, even when a rule below fails
    try:
        engine_rules(info)  # the rules `sbx run` refuses by
    except SbxError as error:
        if error.reason is Reason.ENGINE_UNSUPPORTED:
            state.engine = None  # nothing sbx makes runs there: the engine checks do not apply
        if state.engine is None:
            state.engine_error = error
        return Verdict(Status.FAIL, f"{detail}; {error.message}", error.reason,
                       error.hint or error.reason.info.fix, data)
    return Verdict(Status.OK, detail, data=data)


def check_gc(state: DoctorState) -> Verdict:
    if state.config is None:
        return Verdict(Status.WARN, "not counted: the config is invalid (see the config check)",
                       Reason.INVALID_CONFIG, "Fix the config file, then run `sbx doctor` again.")
    result = survey(state.ctx)
    if result.outcome == "skipped":
        return Verdict(Status.OK, "nothing to collect (no sandbox ever ran from this state "
                       "home)", data={"stale": {}})
    if result.failed:
        failure = result.failed[0]
        return Verdict(Status.WARN, f"not counted: {failure.message}", failure.reason,
                       failure.reason.info.fix)
    counts = {k: v for k, v in result.counts().items() if v}
    odd = len(result.reported)
    data = {"stale": counts, "unreadable_deadlines": odd}
    if not counts and not odd:
        return Verdict(Status.OK, "nothing stale", data=data)
    parts = [f"{count} {_plural(kind.replace('_', ' '), count)}" for kind, count in counts.items()]
    detail = ("stale: " + ", ".join(parts)) if parts else "nothing stale"
    if odd:
        detail += f"; {odd} kept with an unreadable deadline"
    return Verdict(Status.WARN, detail, Reason.CLEANUP_FAILED,
                   "Run `sbx gc` (or from cron, e.g. `*/10 * * * * sbx gc`); `sbx gc --dry-run` "
                   "lists what it would remove.", data)


def _plural(noun: str, count: int) -> str:
    if count == 1:
        return noun
    return noun + ("es" if noun.endswith("s") else "s")


PLAN_TIMEOUT_S: Final = 900.0  # the plan may build the kit image, as `sbx run` would


def check_workload(state: DoctorState) -> Verdict:
    """`sbx run`'s planning for the WORKLOAD, creating nothing (sbx.usecases.pipeline): a refusal
    is this check's failure, with the reason `sbx run` would give."""
    request = state.request
    assert request.workload is not None  # noqa: S101 - the check exists only with one
    workload = WorkloadRequest(workload=request.workload, kits=request.kits, args=request.args,
                               allow_privileged=request.allow_privileged)
    if state.engine is None:
        # Run refuses at the engine only once config and kits passed: the same order here,
        # without asking the engine again (its check already failed or timed out).
        load(state.ctx, workload)
        raise state.engine_error or SbxError(Reason.DOCKER_UNREACHABLE, ENGINE_DOWN)
    planned = dry_plan(state.ctx, workload)
    user = planned_user(state.ctx, planned)
    kits = [k.reference for k in planned.kit_set.kits]
    skipped = planned.selection()["skipped"]
    modes = dict(planned.egress.modes) if planned.egress is not None else {}
    shown_user = f"{user.uid}:{user.gid} ({user.source})" if user is not None else \
        f"from the image's USER {planned.image.user!r} (resolved by sbx run)"
    detail = (f"sbx run would start {', '.join(kits)}: image {planned.image_tag} "
              f"({'built now' if planned.image_built else 'cached'}), user {shown_user}")
    data = {"kits": kits, "image": planned.image_tag, "image_built": planned.image_built,
            "user": f"{user.uid}:{user.gid}" if user is not None else None,
            "skipped": skipped, "credentials": modes,
            "explain": explain_command(planned.loaded)}
    far = not_local(state.ctx.driver.location(), planned_needs(planned))
    if far is not None:  # run refuses it before creating anything
        return Verdict(Status.FAIL, f"{detail}; but {far.message}", far.reason, far.hint, data)
    widened = [p for p in permission_states(state.ctx.state_home, planned.kit_set,
                                            planned.effective, state.ctx.cwd)
               if p.status == "widened"]
    if widened:
        listed = "; ".join(f"{p.reference}: " + ", ".join(str(w) for w in p.widenings)
                           for p in widened)
        accept = shlex.join(["sbx", "run", "--accept",
                             *shlex.split(explain_command(planned.loaded))[2:]])
        return Verdict(Status.WARN, f"{detail}; asks for more than at its last approved run: "
                       f"{listed}", Reason.PERMISSION_WIDENED,
                       "sbx run asks on a terminal and refuses without one: review the "
                       f"widenings, then run it on a terminal, or approve them with {accept}",
                       {**data, "widened": [p.as_dict() for p in widened]})
    if skipped:
        types = ", ".join(sorted({s["type"] for s in skipped}))
        credential = any(s["type"].endswith("/credential@1") for s in skipped)
        return Verdict(Status.WARN, f"{detail}; optional capabilities skipped: {types}",
                       Reason.CREDENTIAL_UNBOUND if credential
                       else Reason.UNSUPPORTED_CAPABILITY,
                       "Skipped capabilities are recorded; nothing to do unless the kit "
                       "needs them (`sbx secret set SERVICE` binds a credential).", data)
    return Verdict(Status.OK, detail, data=data)
