"""`lifecycle@1` and `agent-context@1` execution: the create step and the startup wrapper.

The runtime root filesystem stays read-only, so everything that must land in it happens in a
**create step** before the sandbox starts: a container from the assembled image (writable, root,
no network unless an install-phase policy opens it) receives the kit files and the profile files,
runs the install hooks once in dependency order, and is committed to a per-run image that the
hardened sandbox then runs read-only. Startup hooks run on every start from a generated script
baked into that image, before the workload's own command.

Hook environments are built here, never inherited: the declared names (values from the final
container environment) plus the baseline ``PATH HOME HOSTNAME TERM PWD`` derived from the image
and the sandbox — never a value from the host's environment (KIT-SPEC-V3 lifecycle@1).
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.compose import Hook
from sbx.domain.sandbox.hardening import ContainerSpec
from sbx.domain.sandbox.mountpoints import TMP_MODE, TMP_PATH
from sbx.seams.engine import Containers, ImageInfo, Images, Sessions
from sbx.seams.signals import deferred_interrupts

SBX_DIR: Final = "/.sbx"
STARTUP_SCRIPT: Final = f"{SBX_DIR}/startup.sh"
DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The create step needs to install software (chown, setuid bits of packages...), like a build's
# RUN step; it still drops what a build never needs and runs without network and privileges.
CREATE_STEP_CAP_DROP: Final = ("NET_RAW", "MKNOD", "AUDIT_WRITE", "SYS_CHROOT", "NET_BIND_SERVICE")
KEEPALIVE: Final = ("/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 1; done")


def hook_where(hook: Hook) -> str:
    """Where a hook was declared, for messages: kit and position in its lifecycle@1 entry.

    ``declared_at`` is the entry's declaration path (``capabilities[2]``, or a group member's
    ``capabilities[1].group.capabilities[0]``); ``index`` counts only the *selected* entries, so
    it names the wrong entry once selection skipped an earlier one or flattened a group.
    """
    entry = hook.declared_at or f"capabilities[{hook.index}]"
    return f"{hook.kit} {entry}.config.{hook.stage}[{hook.position}]"


@dataclass(frozen=True)
class KitFile:
    kit: str
    where: str  # e.g. capabilities[0].config.files[1], or agent-context
    path: str
    content: str
    mode: int | None = None
    overwrite: bool = True
    owner_is_sandbox_user: bool = True


@dataclass(frozen=True)
class LifecyclePlan:
    install: tuple[Hook, ...] = ()
    startup: tuple[Hook, ...] = ()
    files: tuple[KitFile, ...] = ()

    @property
    def needs_create_step(self) -> bool:
        return bool(self.install or self.startup or self.files)


@dataclass(frozen=True)
class Accounts:
    """Homes by user name and uid, from the image's /etc/passwd."""

    homes: Mapping[str, str] = field(default_factory=dict)

    def home_of(self, user: str) -> str:
        return self.homes.get(user.partition(":")[0], "/")


def hook_environment(hook: Hook, *, container_env: Mapping[str, str], home: str,
                     workdir: str, boundary_env: Mapping[str, str] | None = None,
                     ) -> dict[str, str]:
    """Declared names from the container environment plus the baseline; nothing from the host.

    ``boundary_env`` is part of the baseline the sandbox itself provides: the egress proxy and
    CA variables (without them a hook could not reach the hosts its phase allows).
    """
    env = {
        "PATH": container_env.get("PATH", DEFAULT_PATH),
        "HOME": home,
        "TERM": "dumb",
        "PWD": workdir,
        **(boundary_env or {}),
    }
    for name in hook.env:
        if name in container_env:
            env[name] = container_env[name]
    return env


def _command(hook: Hook) -> list[str]:
    return ["/bin/sh", "-c", hook.command] if isinstance(hook.command, str) \
        else list(hook.command)


def hook_argv(hook: Hook, env: Mapping[str, str]) -> list[str]:
    """`env -i K=V ... <command>`: the hook sees exactly ``env`` and nothing else."""
    return ["env", "-i", *(f"{k}={v}" for k, v in sorted(env.items())), *_command(hook)]


def startup_script(hooks: Sequence[Hook], *, container_env: Mapping[str, str],
                   accounts: Accounts, sandbox_user: str, workdir: str,
                   boundary_env: Mapping[str, str] | None = None,
                   home: str | None = None) -> str:
    """The wrapper the sandbox starts with: startup hooks in order, then ``exec "$@"``.

    ``home`` is the sandbox's own HOME (sbx gives every sandbox a writable one): startup hooks
    run in the sandbox, so they see that HOME, not the image user's read-only passwd home."""
    lines = [
        "#!/bin/sh",
        "# Generated by sbx: kit startup hooks, then the workload's own command.",
    ]
    for hook in hooks:
        env = hook_environment(hook, container_env=container_env,
                               home=home or accounts.home_of(sandbox_user), workdir=workdir,
                               boundary_env=boundary_env)
        # HOSTNAME is the sandbox's own, read when the hook runs (baseline, never the host's).
        # stdin stays the workload's: a hook that reads it would swallow what the user pipes
        # or types.
        line = 'env -i "HOSTNAME=$(cat /etc/hostname 2>/dev/null)" ' + " ".join(
            shlex.quote(a) for a in hook_argv(hook, env)[2:]) + " </dev/null"
        if hook.background:
            lines.append(f"{line} &")
            continue
        message = shlex.quote(f"sbx: startup hook {hook_where(hook)} failed with status")
        lines.append(f"{line} || {{ code=$?; echo {message} \"$code (hook_failed)\" >&2; "
                     "exit 126; }")
    lines.append('exec "$@"')
    return "\n".join(lines) + "\n"


def _tar(entries: Sequence[tuple[str, bytes | None, int, int, int]]) -> bytes:
    """(path, content or None for a directory, mode, uid, gid) → a tar archive rooted at /."""
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, content, mode, uid, gid in entries:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mode = mode
            info.uid, info.gid = uid, gid
            info.mtime = now
            if content is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
                continue
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


class CreateStepEngine(Containers, Images, Sessions, Protocol):
    """The roles the create step uses: a container, its files and hooks, its commit."""


@dataclass(frozen=True)
class CreateStep:
    driver: CreateStepEngine
    spec: ContainerSpec  # the create-step container (see build_create_step_spec)
    image_tag: str
    image_labels: Mapping[str, str]
    base: ImageInfo  # the image the step starts from; its run config is kept
    uid: int
    gid: int
    container_env: Mapping[str, str]
    accounts: Accounts
    workdir: str
    on_output: Callable[[str, bytes], None]
    boundary_env: Mapping[str, str] = field(default_factory=dict)
    after_install: Callable[[], None] | None = None  # closes the install phase
    home: str | None = None  # the sandbox's HOME, which startup hooks see
    # A template's saved HOME (sbx.domain.sandbox.templates.HOME_DIR): copied into the new
    # HOME, given to the sandbox user, and removed from the image.
    seed_home: str | None = None


def run_create_step(step: CreateStep, plan: LifecyclePlan,
                    owned_paths: Sequence[tuple[str, int | None]] = ()) -> ImageInfo:
    """Files, profiles, startup script and install hooks → a committed per-run image.

    ``owned_paths`` (fresh volumes) are handed to the sandbox user, with their mode, before any
    hook runs, so hooks and the workload can write there.
    """
    driver = step.driver
    container_id: str | None = None
    try:
        with deferred_interrupts():  # created and recorded together (sbx.seams.signals)
            container_id = driver.create(step.spec)
        _write_files(step, container_id, plan)
        if plan.install or owned_paths or step.seed_home:
            driver.start(container_id)
            for path, mode in owned_paths:
                _own_path(step, container_id, path, mode)
            if step.seed_home is not None and step.home is not None:
                _seed_home(step, container_id, step.seed_home, step.home)
            for hook in plan.install:
                _run_install_hook(step, container_id, hook)
        if step.after_install is not None:
            step.after_install()
            driver.kill(container_id)
            driver.wait(container_id, 30)
        return driver.commit(container_id, step.image_tag, step.image_labels, step.base)
    finally:
        if container_id is not None:
            # Held back from signals: an interrupted removal would leave the container, and
            # the run's volumes it uses, behind.
            with deferred_interrupts():
                driver.remove_container(container_id)


def _write_files(step: CreateStep, container_id: str, plan: LifecyclePlan) -> None:
    entries: list[tuple[str, bytes | None, int, int, int]] = []
    seen: set[str] = set()
    for kit_file in plan.files:
        if kit_file.path in seen:
            raise SbxError(Reason.KIT_INCOHERENT,
                           f"two kits write {kit_file.path} ({kit_file.kit} {kit_file.where})")
        seen.add(kit_file.path)
        if not kit_file.overwrite and step.driver.path_exists(container_id, kit_file.path):
            continue
        uid, gid = (step.uid, step.gid) if kit_file.owner_is_sandbox_user else (0, 0)
        mode = kit_file.mode if kit_file.mode is not None else 0o644
        entries.append((kit_file.path, kit_file.content.encode("utf-8"), mode, uid, gid))
    # The per-run image keeps /tmp a world-writable sticky directory whatever the kit files
    # did (the engine gives the /tmp tmpfs the mode of the directory it is mounted on).
    entries.insert(0, (TMP_PATH, None, TMP_MODE, 0, 0))
    if plan.startup:
        script = startup_script(plan.startup, container_env=step.container_env,
                                accounts=step.accounts, sandbox_user=f"{step.uid}",
                                workdir=step.workdir, boundary_env=step.boundary_env,
                                home=step.home)
        entries.append((STARTUP_SCRIPT, script.encode("utf-8"), 0o755, 0, 0))
    if entries:
        step.driver.put_archive(container_id, "/", _tar(entries))


def _own_path(step: CreateStep, container_id: str, path: str, mode: int | None) -> None:
    script = f"chown {step.uid}:{step.gid} {shlex.quote(path)}"
    if mode is not None:
        script += f" && chmod {mode:o} {shlex.quote(path)}"
    output, status = step.driver.exec_stream(container_id, ["/bin/sh", "-c", script],
                                             user="0:0", workdir=None)
    for stream, chunk in output:
        step.on_output(stream, chunk)
    if status() != 0:
        raise SbxError(Reason.CREATE_FAILED, f"could not prepare volume {path} for the sandbox "
                       "user", details={"path": path})


def _seed_home(step: CreateStep, container_id: str, source: str, home: str) -> None:
    script = ('set -e; if [ -d "$1" ]; then cp -a "$1/." "$2/"; chown -R "$3" "$2"; fi; '
              'rm -rf "$(dirname "$1")"')
    output, status = step.driver.exec_stream(
        container_id, ["/bin/sh", "-c", script, "sh", source, home, f"{step.uid}:{step.gid}"],
        user="0:0", workdir=None)
    for stream, chunk in output:
        step.on_output(stream, chunk)
    if status() != 0:
        raise SbxError(Reason.CREATE_FAILED, f"could not copy the template's HOME into {home}",
                       details={"path": home})


def _run_install_hook(step: CreateStep, container_id: str, hook: Hook) -> None:
    user = hook.user or "root"  # install hooks default to root (lifecycle@1 SHOULD)
    env = hook_environment(hook, container_env=step.container_env,
                           home=step.accounts.home_of(user), workdir=step.workdir,
                           boundary_env=step.boundary_env)
    output, status = step.driver.exec_stream(container_id, hook_argv(hook, env), user=user,
                                             workdir=step.workdir)
    for stream, chunk in output:
        step.on_output(stream, chunk)
    code = status()
    if code != 0:
        raise SbxError(
            Reason.HOOK_FAILED,
            f"install hook {hook_where(hook)} failed with status {code}",
            hint="Read the hook's output above; fix the kit's install command.",
            details={"kit": hook.kit, "capability_index": hook.index,
                     "path": hook.declared_at or f"capabilities[{hook.index}]",
                     "stage": hook.stage, "position": hook.position, "exit_code": code})


def parse_accounts(passwd: str) -> Accounts:
    homes: dict[str, str] = {}
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and fields[2].isdigit():
            homes.setdefault(fields[0], fields[5] or "/")
            homes.setdefault(fields[2], fields[5] or "/")
    return Accounts(homes)


__all__ = ["CREATE_STEP_CAP_DROP", "KEEPALIVE", "STARTUP_SCRIPT", "Accounts", "CreateStep",
           "KitFile", "hook_where", "LifecyclePlan", "hook_argv", "hook_environment",
           "parse_accounts", "run_create_step", "startup_script"]
