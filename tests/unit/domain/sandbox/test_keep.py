"""Which run is kept, and the name a kept sandbox gets (sbx.domain.sandbox.keep)."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.keep import keeps, kept_base, kept_name
from sbx.domain.sandbox.records import NAME_PATTERN


@pytest.mark.parametrize(("mode", "short", "workspace", "flag", "expected"), [
    ("agents", True, True, None, True),     # `sbx run claude .`
    ("agents", False, True, None, False),   # a kit path stays one-shot by default
    ("agents", True, False, None, False),   # no workspace: nothing to keep it for
    ("always", False, True, None, True),
    ("never", True, True, None, False),
    ("never", False, True, True, True),     # --keep beats the config
    ("always", True, True, False, False),   # --rm beats it too
    ("agents", True, False, False, False),
])
def test_the_keep_decision(mode: str, short: bool, workspace: bool, flag: bool | None,
                           expected: bool) -> None:
    assert keeps(mode=mode, short_name=short, workspace=workspace, flag=flag,
                 named=False) is expected


def test_a_name_is_kept_by_its_own_path_and_rm_with_a_name_is_refused() -> None:
    assert keeps(mode="always", short_name=True, workspace=True, flag=True, named=True) is False
    with pytest.raises(SbxError) as refused:
        keeps(mode="agents", short_name=True, workspace=True, flag=False, named=True)
    assert refused.value.reason is Reason.INVALID_ARGUMENT
    assert "Drop --rm" in (refused.value.hint or "")


def test_keep_without_a_workspace_is_refused_with_the_way_out() -> None:
    with pytest.raises(SbxError) as refused:
        keeps(mode="agents", short_name=False, workspace=False, flag=True, named=False)
    assert refused.value.reason is Reason.INVALID_ARGUMENT
    assert "sbx run --keep KIT ." in (refused.value.hint or "")


@pytest.mark.parametrize(("workload", "workspace", "expected"), [
    ("claude", "/home/me/myproject", "claude-myproject"),
    ("codex", "/home/me/My Project_2", "codex-my-project-2"),
    ("shell", "/", "shell-root"),
    ("./kits/agent/", "/srv/.hidden", "agent-hidden"),
    ("agent.yaml", "/srv/x", "agent-x"),
    ("claude", "/home/me/проект", "claude-root"),
])
def test_the_readable_name(workload: str, workspace: str, expected: str) -> None:
    assert kept_base(workload, workspace) == expected


def test_a_long_directory_name_is_cut_to_the_name_pattern() -> None:
    name = kept_base("claude", "/x/" + "a" * 100)
    assert len(name) == 63 and NAME_PATTERN.fullmatch(name)


def test_the_same_workspace_gets_the_same_name_and_another_one_a_hashed_name() -> None:
    held = {"claude-app": "/a/app"}
    assert kept_name("claude", "/a/app", held.get) == "claude-app"
    assert kept_name("claude", "/new/app", lambda _name: None) == "claude-app"
    other = kept_name("claude", "/b/app", held.get)
    assert other.startswith("claude-app-") and len(other) == len("claude-app-") + 6
    assert NAME_PATTERN.fullmatch(other)
    # stable: the second workspace finds its own sandbox again, and the first keeps its name
    held[other] = "/b/app"
    assert kept_name("claude", "/b/app", held.get) == other
    assert kept_name("claude", "/a/app", held.get) == "claude-app"
    assert kept_name("claude", "/c/app", held.get) not in (other, "claude-app")


def test_a_hashed_long_name_still_fits() -> None:
    long = "/a/" + "b" * 80
    held = {kept_base("claude", long): "/elsewhere"}
    name = kept_name("claude", long, held.get)
    assert len(name) <= 63 and NAME_PATTERN.fullmatch(name)


def test_both_names_taken_by_others_is_refused_with_a_name_hint() -> None:
    with pytest.raises(SbxError) as refused:
        kept_name("claude", "/z/app", lambda _name: "/other")
    assert refused.value.reason is Reason.INVALID_ARGUMENT
    assert "--name NAME" in (refused.value.hint or "")
