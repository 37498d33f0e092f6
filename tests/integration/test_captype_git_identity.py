"""git-identity@1 in a real sandbox: the host's global pair is git's default inside, a
repository's own config still wins, and the hardened shape is untouched."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
DOCKERFILE = f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]

PROBE = r"""
echo "name=$(git config --get user.name)"
echo "email=$(git config --get user.email)"
echo "author_env=$(env | grep -c '^GIT_\(AUTHOR\|COMMITTER\)_' || true)"
cd /tmp && git init -q fresh && cd fresh && git commit -q --allow-empty -m one
echo "commit=$(git log -1 --format='%an <%ae>')"
git config user.name 'Repo Local' && git commit -q --allow-empty -m two
echo "local=$(git log -1 --format='%an')"
git config --global user.name 'Sandbox Global'
echo "global=$(cd /tmp && git config --get user.name)"
touch /root-write 2>/dev/null && echo root=writable || echo root=readonly
echo "capeff=$(grep CapEff /proc/self/status | cut -f2)"
echo "nnp=$(grep NoNewPrivs /proc/self/status | cut -f2)"
"""


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "GIT_CONFIG_GLOBAL": str(tmp_path / "host-gitconfig")}


def _kit(kit_factory: KitMaker, optional: bool = False) -> Path:
    flag = "\n    optional: true" if optional else ""
    return kit_factory("gitid", DOCKERFILE,
                       f"capabilities:\n  - type: com.docker.sandbox/git-identity@1{flag}\n")


def _values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_host_identity_is_the_sandbox_s_git_default(kit_factory: KitMaker,
                                                        sbx_cli: Runner, env: dict[str, str],
                                                        tmp_path: Path) -> None:
    Path(env["GIT_CONFIG_GLOBAL"]).write_text(
        "[user]\n\tname = Ada \\\"The\\\" Lovelace\n\temail = ada@example.com\n"
        "[alias]\n\tst = status\n", encoding="utf-8")
    result = sbx_cli(["run", "--json", str(_kit(kit_factory)), "--", "sh", "-c", PROBE],
                     env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    seen = _values(envelope["data"]["stdout"])
    assert seen["name"] == 'Ada "The" Lovelace' and seen["email"] == "ada@example.com"
    assert seen["commit"] == 'Ada "The" Lovelace <ada@example.com>'
    assert seen["author_env"] == "0"  # a default, not an override
    assert seen["local"] == "Repo Local"  # the repository's own config keeps precedence
    assert seen["global"] == "Sandbox Global"  # the sandbox's ~/.gitconfig stays its own
    # The type lifts nothing: read-only root, no capabilities, no new privileges.
    assert seen["root"] == "readonly"
    assert seen["capeff"] == "0000000000000000" and seen["nnp"] == "1"


def test_only_the_identity_crosses_not_the_rest_of_the_host_config(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    Path(env["GIT_CONFIG_GLOBAL"]).write_text(
        "[user]\n\tname = Host\n\temail = host@example.com\n[alias]\n\tleak = !echo leaked\n"
        "[url \"https://secret.example/\"]\n\tinsteadOf = gh:\n", encoding="utf-8")
    result = sbx_cli(["run", "--json", str(_kit(kit_factory)), "--", "sh", "-c",
                      "git config --list --show-origin"], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    listed = envelope["data"]["stdout"]
    assert "user.name=Host" in listed and "user.email=host@example.com" in listed
    assert "leak" not in listed and "secret.example" not in listed


def test_required_without_a_host_identity_refuses_before_anything_starts(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    result = sbx_cli(["run", str(_kit(kit_factory)), "--", "echo", "workload-ran"], env=env)
    assert result.exit_code == 125
    assert "(git_identity_missing)" in result.stderr
    assert "git config --global user.name" in result.stderr
    assert "workload-ran" not in result.stdout
    explained = sbx_cli(["explain", "git_identity_missing"], env=env)
    assert explained.exit_code == 0 and "git config --global user.email" in explained.stdout


def test_optional_without_a_host_identity_runs_without_one_and_records_it(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    result = sbx_cli(["run", "--json", str(_kit(kit_factory, optional=True)), "--", "sh", "-c",
                      "git config --get user.name || echo unset"], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    assert envelope["data"]["stdout"] == "unset\n"
    skipped = [s for s in envelope["data"]["selection"]["skipped"]
               if s["type"] == "com.docker.sandbox/git-identity@1"]
    assert skipped and "no usable user.name" in skipped[0]["reason"], envelope["data"]
