"""A keeper watches the engine its sandbox's command chose (a fleet entry, --engine), not
whatever this process's environment names; nothing else of the caller's environment passes."""

from __future__ import annotations

from sbx.usecases.keeper import keeper_environment

PROCESS = {"PATH": "/usr/bin", "DOCKER_HOST": "unix:///local.sock", "HOME": "/root",
           "AWS_SECRET_ACCESS_KEY": "s3cr3t", "LANG": "C.UTF-8"}


def test_the_commands_engine_wins_and_nothing_else_leaks() -> None:
    far = {"DOCKER_HOST": "ssh://build@far", "XDG_RUNTIME_DIR": "/run/u", "OTHER": "x"}
    assert keeper_environment(PROCESS, far) == {
        "PATH": "/usr/bin", "LANG": "C.UTF-8", "DOCKER_HOST": "ssh://build@far",
        "XDG_RUNTIME_DIR": "/run/u"}


def test_a_command_on_the_local_engine_drops_this_process_docker_host() -> None:
    assert "DOCKER_HOST" not in keeper_environment(PROCESS, {"PATH": "/bin"})
    assert keeper_environment(PROCESS, None)["DOCKER_HOST"] == "unix:///local.sock"
