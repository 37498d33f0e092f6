"""What sbx records about a named sandbox: the options it was created with, the lock that
makes one of two concurrent creations win, and the check of its writable directories after a
session. Its record once it started is sbx.usecases.namedcreated's (which reads the kits'
composition: a start of an existing sandbox does not load it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord
from sbx.usecases import workspace_check
from sbx.usecases.context import AppContext
from sbx.usecases.idlestop import STOP_TIMEOUT_S
from sbx.usecases.run.request import RunRequest
from sbx.usecases.sandboxstore import SandboxStore

# Flags that shape a sandbox at its creation; given again for an existing one, they are
# refused by name (RunRequest field -> the flag the user typed).
CREATION_OPTIONS: Final = {
    "kits": "--kit", "args": "--arg", "workspace": "WORKSPACE", "access": "--access",
    "mounts": "--mount", "env": "--env", "env_files": "--env-file", "user": "--user",
    "timeout_s": "--timeout", "command": "-- ARGS", "allow_privileged": "--allow-privileged",
    "trust_workspace": "--trust-workspace", "tty": "--tty/--no-tty",
    "detach_keys": "--detach-keys", "memory_bytes": "--memory", "cpu_millis": "--cpus",
    "pids": "--pids", "runtime": "--runtime", "workspace_mode": "--workspace-mode",
    "publish": "--publish",
    "clone": "--clone", "clone_volume": "--clone", "idle_stop_s": "--idle-stop",
    "template": "--template",
}


_creating: dict[str, int] = {}  # name -> its lock, held while this process creates it


def hold_creation(store: SandboxStore, name: str) -> None:
    """Exactly one of two concurrent `run --name N` creates it: the name's lock is held from
    here until the new sandbox is recorded (sbx.usecases.namedcreated), or the creation
    failed."""
    _creating[name] = store.acquire(name)


def release_creation(name: str) -> None:
    fd = _creating.pop(name, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def creation_options(request: RunRequest) -> dict[str, Any]:
    """The creation-only options a request gave, as the record keeps them: values as given,
    except variables (``-e``/``--env-file``), of which only a digest is kept (never a value)."""
    defaults = RunRequest(workload=request.workload)
    options: dict[str, Any] = {}
    for field_name in CREATION_OPTIONS:
        value = getattr(request, field_name)
        if value == getattr(defaults, field_name):
            continue
        if field_name in ("env", "env_files"):
            value = hashlib.sha256(json.dumps(list(value)).encode()).hexdigest()
        options[field_name] = list(value) if isinstance(value, tuple) else value
    return options


def check_workspace(ctx: AppContext, record: SandboxRecord,
                    on_warning: Callable[[str], None], *, stopped: bool = False) -> None:
    """The after-run check of the sandbox's writable directories (sbx.usecases.workspace_check)
    against what they held when it last started."""
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    try:
        workspace_check.check_named(ctx, run_dir, record.run_id, on_warning, stopped=stopped)
    except (OSError, SbxError) as error:
        on_warning(f"{record.name}'s workspace could not be checked ({error}); review it "
                   "before you run git or other tools there")


__all__ = ["CREATION_OPTIONS", "STOP_TIMEOUT_S", "check_workspace", "creation_options",
           "hold_creation", "release_creation"]
