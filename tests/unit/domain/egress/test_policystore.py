"""The user policy and the request log are state sbx trusts: read and written only through
sbx.seams.owned, so a planted link or a file someone else could change is refused, not used."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.egress import requestlog
from sbx.domain.egress.configfields import ProxyConfigError
from sbx.domain.egress.policystore import PolicyStore, rules_path
from sbx.domain.egress.userpolicy import UserRule, parse_target
from sbx.proxy.userrules import UserRules
from tests.unit.domain.egress.test_requestlog import record

RULES = '{"format": 1, "rules": []}'


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    """A rules file that is a link to a file someone else wrote."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(RULES)
    path = rules_path(tmp_path / "home")
    path.parent.mkdir(parents=True, mode=0o700)
    path.symlink_to(elsewhere)
    return path, elsewhere


def test_a_linked_rules_file_is_refused_by_the_cli_and_the_proxy(tmp_path: Path) -> None:
    path, elsewhere = _planted(tmp_path)
    store = PolicyStore(tmp_path / "home")
    with pytest.raises(SbxError) as caught:
        store.load()
    assert caught.value.reason is Reason.STATE_UNSAFE and "symlink" in caught.value.message
    with pytest.raises(SbxError) as editing, store.editing() as rules:
        rules.append(UserRule("0000000a", "allow", *parse_target("x.example"), (), "runtime",
                              None, 0.0, None))
    assert editing.value.reason is Reason.STATE_UNSAFE
    assert elsewhere.read_text() == RULES  # nothing written through the link
    with pytest.raises(ProxyConfigError, match="symlink"):
        UserRules(path, None, None, lambda _text: None)  # no proxy on rules it cannot trust


def test_a_rules_file_others_can_change_is_refused(tmp_path: Path) -> None:
    path = rules_path(tmp_path)
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_text(RULES)
    os.chmod(path, 0o622)  # noqa: S103 - the point of the test
    with pytest.raises(SbxError) as caught:
        PolicyStore(tmp_path).load()
    assert caught.value.reason is Reason.STATE_UNSAFE and "chmod go-w" in (caught.value.hint or "")
    os.chmod(path, 0o600)
    assert PolicyStore(tmp_path).load() == ()  # the legitimate file reads


def test_a_rules_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    path = rules_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(RULES)
    os.chmod(path.parent, 0o777)  # noqa: S103 - the point of the test
    with pytest.raises(SbxError) as caught:
        PolicyStore(tmp_path).load()
    assert caught.value.reason is Reason.STATE_UNSAFE


def test_the_log_writer_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("untouched\n")
    path = tmp_path / "log" / requestlog.LOG_FILE
    path.parent.mkdir(mode=0o700)
    path.symlink_to(target)
    said: list[str] = []
    sink = requestlog.JsonlSink(path, report=said.append)
    sink.write(record())
    sink.write(record())
    sink.close()
    assert target.read_text() == "untouched\n"
    assert len(said) == 1 and "symlink" in said[0]  # said once, the requests go on
    with pytest.raises(SbxError) as caught:
        requestlog.read_records(path.parent)
    assert caught.value.reason is Reason.STATE_UNSAFE


def test_a_log_others_could_have_written_is_refused_not_read(tmp_path: Path) -> None:
    path = tmp_path / "log" / requestlog.LOG_FILE
    sink = requestlog.JsonlSink(path)
    sink.write(record(host="real.example"))
    sink.close()
    assert [r["host"] for r in requestlog.read_records(path.parent).records] == ["real.example"]
    os.chmod(path, 0o666)  # noqa: S103 - anyone could have added records
    with pytest.raises(SbxError) as caught:
        requestlog.read_records(path.parent)
    assert caught.value.reason is Reason.STATE_UNSAFE
    follower = requestlog.Follower(path.parent)
    with pytest.raises(SbxError):
        follower.start_at_end()
