"""The one HTTP/1.1 head parser, as the engine's socket client and the registry client read it."""

from __future__ import annotations

import pytest

from sbx.seams import registry_http
from sbx.seams.http11 import parse_head, unchunk
from sbx.seams.registry_http import TransportError

HEAD = (b"HTTP/1.1 200 OK\r\nApi-Version: 1.45\r\nWWW-Authenticate: Bearer realm=\"a\"\r\n"
        b"www-authenticate: Basic realm=\"b\"\r\nContent-Length: 2\r\n\r\n")


def test_names_are_lower_cased_and_repeated_headers_joined_in_order() -> None:
    status, headers = parse_head(HEAD)
    assert status == 200
    assert headers == {"api-version": "1.45", "content-length": "2",
                       "www-authenticate": 'Bearer realm="a", Basic realm="b"'}


def test_engine_and_registry_read_the_same_head_alike() -> None:
    answer = registry_http._parse(HEAD + b"{}")
    assert (answer.status_code, dict(answer.headers)) == parse_head(HEAD)
    assert answer.content == b"{}"


def test_an_upgrade_head_without_its_blank_line_parses() -> None:
    status, headers = parse_head(b"HTTP/1.1 101 UPGRADED\r\nUpgrade: tcp\r\nConnection: Upgrade")
    assert status == 101 and headers["upgrade"] == "tcp"


@pytest.mark.parametrize("head", [b"garbage\r\n\r\n", b"HTTP/1.1 OK\r\n\r\n", b"SSH-2.0-x\r\n\r\n",
                                  b""])
def test_what_is_not_http_is_a_value_error_and_the_registrys_connection_error(
        head: bytes) -> None:
    with pytest.raises(ValueError, match="not an HTTP answer"):
        parse_head(head)
    with pytest.raises(TransportError) as raised:
        registry_http._parse(head + b"\r\n\r\n")
    assert raised.value.name == "ConnectionError"


def test_chunked_bodies_are_joined_and_a_cut_chunk_refused() -> None:
    assert unchunk(b"2;ext=1\r\n{}\r\n1\r\n\n\r\n0\r\n\r\n") == b"{}\n"
    with pytest.raises(ValueError, match="cut short"):
        unchunk(b"ff\r\n{}")
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert registry_http._parse(chunked + b"2\r\n{}\r\n0\r\n\r\n").content == b"{}"
    with pytest.raises(TransportError) as raised:
        registry_http._parse(chunked + b"zz\r\n{}")
    assert raised.value.name == "ChunkedEncodingError"


def test_a_registry_head_past_its_bound_is_refused() -> None:
    head = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"x" * (64 * 1024) + b"\r\n\r\n"
    with pytest.raises(TransportError) as raised:
        registry_http._parse(head)
    assert raised.value.name == "ConnectionError"
