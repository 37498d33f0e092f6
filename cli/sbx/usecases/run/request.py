"""What a run is asked: the request as typer parsed it, and the checks of its own words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.sessions import SessionAsk
from sbx.seams.session.mode import HostStreams
from sbx.usecases.workload import WorkloadRequest

ACCESS_MODES: Final = ("none", "ro", "rw")
# bind: the host directory is mounted; copy: copied into a volume of the sandbox at creation
# (an engine that cannot see this disk; nothing is ever written back to the host)
WORKSPACE_MODES: Final = ("bind", "copy")
NO_HOST_STREAMS: Final = HostStreams(stdin_fd=None, stdin_is_terminal=False,
                                     stdout_is_terminal=False)
NO_DEADLINE_S: Final = 10 * 365 * 24 * 3600.0  # a named sandbox without --timeout

OutputSink = Callable[[str, bytes | memoryview], None]
ProgressFactory = Callable[[str], Any]


@dataclass(frozen=True)
class RunRequest:
    workload: str
    workspace: str | None = None
    access: str | None = None
    mounts: tuple[str, ...] = ()
    timeout_s: float | None = None
    command: tuple[str, ...] | None = None
    capture_output: bool = False
    kits: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    allow_privileged: bool = False
    interactive: bool | None = None  # -i; None = decided from the host streams
    tty: bool | None = None  # -t True, --no-tty False, None = decided from the host streams
    env: tuple[str, ...] = ()  # -e NAME[=VALUE]
    env_files: tuple[str, ...] = ()  # --env-file FILE
    user: str | None = None  # --user UID[:GID]
    detach_keys: str | None = None  # --detach-keys (else [sandbox] detach_keys)
    trust_workspace: bool = False  # --trust-workspace: no read-only .git in a rw workspace
    name: str | None = None  # --name: a named sandbox that persists (sbx.usecases.named)
    detach: bool = False  # -d: start it and do not attach
    # --accept: approve the kits' permission widenings (usecases.kitgate), and a named
    # sandbox's kits asking for more at its start (usecases.namedkits)
    accept: bool = False
    # --terminal-passthrough (else [sandbox] terminal_passthrough): every terminal sequence
    # reaches the user's terminal, those acting outside the screen included
    terminal_passthrough: bool = False
    recreate: bool = False  # --recreate: a new container for a named sandbox, HOME kept
    clone: bool = False  # --clone: its own git checkout of WORKSPACE's repository
    # set by --clone's creation: the workspace is a volume of the sandbox's own, as a copied
    # one's, made empty (the checkout is cloned into it), so it survives a stop
    clone_volume: bool = False
    # --idle-stop: a named sandbox idle this long is stopped (else [sandbox] idle_stop)
    idle_stop_s: float | None = None
    # --keep True, --rm False, None: [sandbox] keep decides (sbx.domain.sandbox.keep)
    keep: bool | None = None
    # --memory/--cpus/--pids, parsed (sbx.domain.sandbox.limitflags); None: not given
    memory_bytes: int | None = None
    cpu_millis: int | None = None
    pids: int | None = None
    runtime: str | None = None  # --runtime NAME (else [sandbox] runtime): the OCI runtime
    publish: tuple[str, ...] = ()  # -p/--publish, as typed (sbx.domain.sandbox.publish)
    host: HostStreams = NO_HOST_STREAMS
    # --prompt / --resume ID / --continue: the workload's session verb (sbx.domain.kits.sessions)
    session: SessionAsk | None = None
    workspace_mode: str = "bind"  # --workspace-mode (WORKSPACE_MODES)
    template: str | None = None  # --template TAG: started from a template (`sbx save`)
    engine: str | None = None  # --engine NAME: an [engines] entry (sbx.usecases.fleet)


def session_ask(prompt: str | None, resume: str | None, *,
                continue_: bool, acp: bool = False) -> SessionAsk | None:
    """The session verb the flags ask for (at most one: the spec defines no combination);
    ``--acp`` (the agent's ACP adapter instead of the agent) is one of them."""
    given = [ask for ask in (SessionAsk("prompt", prompt) if prompt is not None else None,
                             SessionAsk("resume", resume) if resume is not None else None,
                             SessionAsk("continue") if continue_ else None,
                             SessionAsk("acp") if acp else None) if ask is not None]
    if len(given) > 1:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       " and ".join(a.flag for a in given) + " cannot be combined: each is "
                       "its own session verb",
                       hint="Give one of --prompt, --resume, --continue, --acp.")
    return given[0] if given else None


def access_of(request: RunRequest) -> str:
    """The workspace access this request asks for ("none" without a workspace)."""
    if request.access is not None and request.access not in ACCESS_MODES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--access must be one of none, ro, rw (got {request.access!r})")
    if request.workspace is None:
        if request.access in ("ro", "rw"):
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"--access {request.access} needs a WORKSPACE directory",
                           hint="Pass the directory after the workload, e.g. `sbx run ./kit .`.")
        return "none"
    return request.access or "rw"


def has_workspace_volume(request: RunRequest) -> bool:
    """Whether the workspace is a volume the sandbox owns: copied in, or --clone's checkout."""
    return request.clone_volume or (copies_workspace(request)
                                    and access_of(request) != "none")


def copies_workspace(request: RunRequest) -> bool:
    """Whether the workspace is copied in (``--workspace-mode copy``) instead of bound."""
    if request.workspace_mode not in WORKSPACE_MODES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"--workspace-mode must be bind or copy (got {request.workspace_mode!r})",
                       hint="sbx run WORKLOAD WORKSPACE --workspace-mode copy")
    if request.workspace_mode == "bind":
        return False
    if request.workspace is None:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       "--workspace-mode copy needs a WORKSPACE directory to copy in",
                       hint="Pass the directory after the workload, e.g. "
                            "`sbx run ./kit . --workspace-mode copy`.")
    return True


def workload_request(request: RunRequest) -> WorkloadRequest:
    """The part of a run request that explain and doctor share (sbx.usecases.workload)."""
    return WorkloadRequest(workload=request.workload, kits=request.kits, args=request.args,
                           allow_privileged=request.allow_privileged,
                           timeout_s=request.timeout_s, detach_keys=request.detach_keys,
                           runtime=request.runtime, named=request.name is not None,
                           template=request.template)


__all__ = ["ACCESS_MODES", "NO_DEADLINE_S", "NO_HOST_STREAMS", "WORKSPACE_MODES", "OutputSink",
           "ProgressFactory", "RunRequest", "access_of", "copies_workspace", "has_workspace_volume",
           "session_ask",
           "workload_request"]
