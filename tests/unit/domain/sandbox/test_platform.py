"""sbx@1's launch: the agent's argv through bash unchanged element by element, only for the
workload's own declaration, and an image without a USER or a bash refused before anything
starts."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.types import SBX
from sbx.domain.sandbox.platform import (
    agent_launch,
    check_platform_bash,
    check_platform_image,
    declares_platform,
)


@dataclass(frozen=True)
class _Origin:
    kit: str


@dataclass(frozen=True)
class _Entry:
    type: str
    origins: tuple[_Origin, ...]


@dataclass(frozen=True)
class _Composition:
    others: tuple[_Entry, ...]


def test_the_agent_runs_through_bash_with_each_argument_as_given() -> None:
    hostile = ["printf", "%s|", "a b", "$(id)", "'q'", "", "-c"]
    launched = agent_launch(hostile)
    assert launched[0] == "/bin/bash"
    done = subprocess.run(launched, capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == "a b|$(id)|'q'||-c|"


def test_only_the_workloads_declaration_counts() -> None:
    mine = _Composition((_Entry(SBX, (_Origin("wl"),)),))
    assert declares_platform(mine, "wl")
    assert not declares_platform(mine, "other")
    assert not declares_platform(_Composition(()), "wl")


def test_an_image_without_a_user_is_refused() -> None:
    check_platform_image("agent", "wl")
    for user in ("", "  "):
        with pytest.raises(SbxError) as caught:
            check_platform_image(user, "wl")
        assert caught.value.reason is Reason.PLATFORM_UNMET
        assert "USER agent" in (caught.value.hint or "")


def test_an_image_without_an_executable_bash_is_refused() -> None:
    for fine in (0o100755, 0o100500, 0o120777):  # a file with an x bit; a link, on trust
        check_platform_bash(fine, "wl")
    for bad in (None, 0o100644, 0o040755):  # absent, not executable, a directory
        with pytest.raises(SbxError) as caught:
            check_platform_bash(bad, "wl")
        assert caught.value.reason is Reason.PLATFORM_UNMET
        assert "/bin/bash" in caught.value.message and "bash" in (caught.value.hint or "")
