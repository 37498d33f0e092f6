"""The run request's own words: --workspace-mode is bind or copy, and a copy needs a
workspace to copy."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.usecases.run.request import RunRequest, copies_workspace


@pytest.mark.parametrize("request_", [RunRequest(workload="k", workspace_mode="copy"),
                                      RunRequest(workload="k", workspace=".",
                                                 workspace_mode="sync")])
def test_the_workspace_mode_is_bind_or_copy_and_copy_needs_a_workspace(
        request_: RunRequest) -> None:
    assert copies_workspace(RunRequest(workload="k", workspace=".")) is False
    assert copies_workspace(RunRequest(workload="k", workspace=".", workspace_mode="copy"))
    with pytest.raises(SbxError) as raised:
        copies_workspace(request_)
    assert raised.value.reason is Reason.INVALID_ARGUMENT
    assert "--workspace-mode" in str(raised.value)
