"""Hook environments and the startup wrapper: exactly the declared names plus the baseline."""

from __future__ import annotations

import subprocess

from sbx.domain.kits.compose import Hook as ComposeHook
from sbx.domain.sandbox.lifecycle import (
    Accounts,
    hook_argv,
    hook_environment,
    parse_accounts,
    startup_script,
)


def Hook(kit: str, index: int, stage: str, position: int, command: str | tuple[str, ...],
         env: tuple[str, ...] = ()) -> ComposeHook:
    return ComposeHook(stage=stage, command=command, user=None, env=env,  # type: ignore[arg-type]
                       background=False, description=None, config={}, kit=kit, index=index,
                       position=position)


CONTAINER_ENV = {"PATH": "/usr/bin:/bin", "KIT_TOKEN": "sentinel", "SECRETISH": "image-only",
                 "GREETING": "hi there; $(touch /x)"}


def test_hook_environment_is_declared_names_plus_baseline() -> None:
    hook = Hook("kit", 0, "install", 0, "true", env=("KIT_TOKEN", "MISSING"))
    env = hook_environment(hook, container_env=CONTAINER_ENV, home="/root", workdir="/w")
    assert env == {"PATH": "/usr/bin:/bin", "HOME": "/root", "TERM": "dumb", "PWD": "/w",
                   "KIT_TOKEN": "sentinel"}


def test_hook_argv_clears_the_environment() -> None:
    hook = Hook("kit", 0, "install", 0, ("echo", "a b"))
    assert hook_argv(hook, {"HOME": "/h"}) == ["env", "-i", "HOME=/h", "echo", "a b"]
    shell = Hook("kit", 0, "install", 1, "echo $HOME")
    assert hook_argv(shell, {})[-3:] == ["/bin/sh", "-c", "echo $HOME"]


def test_startup_script_runs_hooks_then_execs_the_workload() -> None:
    hooks = [Hook("k1", 2, "startup", 0, "echo one:$GREETING", env=("GREETING",)),
             Hook("k2", 0, "startup", 0, "echo two >&2; exit 3")]
    script = startup_script(hooks, container_env=CONTAINER_ENV,
                            accounts=Accounts({"1000": "/home/agent"}), sandbox_user="1000",
                            workdir="/w")
    assert script.startswith("#!/bin/sh\n") and script.rstrip().endswith('exec "$@"')
    # Run it for real with the host's /bin/sh: values are quoted, never re-evaluated.
    result = subprocess.run(["/bin/sh", "-c", script, "sh", "echo", "workload"],
                            capture_output=True, text=True, check=False)
    assert "one:hi there; $(touch /x)" in result.stdout
    assert result.returncode == 126
    assert "k2 capabilities[0].config.startup[0] failed with status 3 (hook_failed)" \
        in result.stderr
    assert "workload" not in result.stdout


def test_startup_script_hook_sees_no_other_variable() -> None:
    hooks = [Hook("k", 0, "startup", 0, "env | sort")]
    script = startup_script(hooks, container_env=CONTAINER_ENV, accounts=Accounts(),
                            sandbox_user="1000", workdir="/w")
    result = subprocess.run(["/bin/sh", "-c", script, "sh", "true"], capture_output=True,
                            text=True, check=False, env={"LEAK": "host-value"})
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert "LEAK" not in names and "SECRETISH" not in names and "KIT_TOKEN" not in names
    assert {"PATH", "HOME", "TERM", "PWD", "HOSTNAME"} <= names
    assert result.returncode == 0


def test_parse_accounts() -> None:
    accounts = parse_accounts("root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh")
    assert accounts.home_of("agent") == accounts.home_of("1000") == "/home/agent"
    assert accounts.home_of("root:root") == "/root" and accounts.home_of("nobody") == "/"
