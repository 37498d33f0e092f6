"""A named sandbox's start, attach or exec decided again as its first start was."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sbx.base.errors import MountBlocked, SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.admission import StartRequest, admit, recorded_paths, recorded_user
from sbx.domain.sandbox.mountpolicy import MountPolicy
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases.context import AppContext

if TYPE_CHECKING:
    from sbx.domain.sandbox.admission import Admission
def admit_recorded(ctx: AppContext, record: SandboxRecord, *, env: Sequence[str] = (),
                   env_files: Sequence[str] = ()) -> Admission:
    """A start (or attach, or exec) of a named sandbox, decided as its first start was
    (:func:`sbx.domain.sandbox.admission.admit`): its recorded host paths judged, opened and
    scanned for sockets again, the variables by the run's rules, its recorded user."""

    names = record.request.get("credential_names")
    if names is None and (env or env_files):
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{record.name} was created by an older sbx, which did not record the "
                       "variables its credentials hold, so -e/--env-file cannot be checked",
                       hint=f"Recreate it (`sbx rm {record.name}`, then `sbx run --name "
                            f"{record.name} ...`), or run the command without -e.")
    config = ctx.load_config()
    policy = MountPolicy.for_host(ctx.env, state_home=ctx.state_home,
                                  extra_blocked=config.mounts.blocked.value,
                                  allowed_roots=config.mounts.allowed_roots.value)
    pins = record.request.get("pins") or []
    paths = recorded_paths(pins, record.workspace)
    user = recorded_user(str(record.request.get("user") or ""), f"{record.name}'s record")
    start = StartRequest(paths=paths, workspace=record.workspace is not None,
                         env=tuple(env), env_files=tuple(env_files),
                         credential_names=frozenset(str(n) for n in names or ()))
    admission = admit(start, policy, host_env=ctx.env, cwd=ctx.cwd,
                      user=lambda _owner: (user, ()))
    assert admission is not None  # noqa: S101 - the recorded user never asks to plan again
    for pin, host in zip(admission.mounts.pins, paths, strict=False):
        if pin.source.path != host.path:
            admission.close()
            raise MountBlocked(f"{host.path} now resolves to {pin.source.path}; it changed "
                               "while the sandbox was stopped (rule source_changed)",
                               rule="source_changed", path=host.path,
                               hint=f"Put {host.path} back, or `sbx rm {record.name}` and "
                                    "create the sandbox again.")
    return admission
