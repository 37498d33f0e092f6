"""The pure decisions of --clone: the start commit from HEAD, and the refs a fetched bundle
may hold."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.clonegit import branch_of, bundle_commit, start_commit

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "89abcdef0123456789abcdef0123456789abcdef"


def test_branch_is_named_after_the_sandbox() -> None:
    assert branch_of("agent-1") == "sbx/agent-1"


def test_start_commit_is_head_attached_or_detached() -> None:
    assert start_commit("/r", 0, SHA + "\n") == SHA


@pytest.mark.parametrize(("status", "out"), [(1, ""), (0, ""), (0, "HEAD\n"), (0, "main")])
def test_unborn_or_odd_head_is_refused(status: int, out: str) -> None:
    with pytest.raises(SbxError) as caught:
        start_commit("/r", status, out)
    assert caught.value.reason is Reason.HEAD_UNBORN
    assert "commit --allow-empty" in (caught.value.hint or "")


def test_bundle_with_only_the_branch_gives_its_commit() -> None:
    assert bundle_commit("a", f"{SHA} refs/heads/sbx/a\n") == SHA


@pytest.mark.parametrize("heads", [
    "",
    f"{SHA} refs/heads/main\n",
    f"{SHA} refs/heads/sbx/b\n",
    f"{SHA} refs/heads/sbx/a\n{OTHER} refs/tags/planted\n",
    f"{SHA} HEAD\n{SHA} refs/heads/sbx/a\n",
    "nothex refs/heads/sbx/a\n",
])
def test_bundle_with_other_refs_is_refused(heads: str) -> None:
    with pytest.raises(SbxError) as caught:
        bundle_commit("a", heads)
    assert caught.value.reason is Reason.COPY_REFUSED
    assert caught.value.details["rule"] == "bundle_refs"
