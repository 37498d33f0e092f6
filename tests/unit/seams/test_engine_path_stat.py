"""The engine's path-stat header, read one way by every transport."""

from __future__ import annotations

import base64
import json

import pytest

from sbx.seams.engine import header_path_stat, unix_mode


def _header(value: object) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def test_a_directory_stat_decodes_to_its_mode() -> None:
    go_dir_0755 = (1 << 31) | 0o755
    stat = header_path_stat(_header({"name": "work", "mode": go_dir_0755}))
    assert stat is not None and unix_mode(int(stat["mode"])) == 0o755


@pytest.mark.parametrize("header", [None, "", "not base64!", _header([1, 2]),
                                    base64.b64encode(b"{not json").decode()])
def test_an_absent_or_malformed_header_is_no_stat(header: str | None) -> None:
    assert header_path_stat(header) is None
