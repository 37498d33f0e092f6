"""MCP framing and dispatch: each malformed message gets its JSON-RPC error, never a crash."""

from __future__ import annotations

import io
import json
from typing import Any

from sbx.seams import mcpwire

ECHO = mcpwire.Tool(name="echo", description="echo", input_schema={"type": "object"},
                    call=lambda arguments: {"content": [], "isError": False,
                                            "structuredContent": dict(arguments)})


def _session(*lines: bytes, limit: int = mcpwire.MAX_LINE_BYTES) -> list[dict[str, Any]]:
    out: list[str] = []
    server = mcpwire.Server("sbx", "1", [ECHO])
    for line in mcpwire.lines(io.BytesIO(b"".join(lines)), limit=limit):
        response = server.handle_line(line)
        if response is not None:
            out.append(json.dumps(response) + "\n")
    assert all(text.count("\n") == 1 for text in out)  # one message, one line
    return [json.loads(text) for text in out]


def _request(method: str, request_id: Any = 1, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                       "params": params}).encode() + b"\n"


def test_initialize_echoes_a_known_version_and_offers_the_newest_otherwise() -> None:
    known, unknown = _session(_request("initialize", 1, protocolVersion="2024-11-05"),
                              _request("initialize", 2, protocolVersion="1999-01-01"))
    assert known["result"]["protocolVersion"] == "2024-11-05"
    assert unknown["result"]["protocolVersion"] == mcpwire.PROTOCOL_VERSIONS[0]
    assert "tools" in known["result"]["capabilities"]


def test_notifications_are_never_answered_and_ping_is() -> None:
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    responses = _session(note + b"\n", _request("ping", "p"))
    assert responses == [{"jsonrpc": "2.0", "id": "p", "result": {}}]


def test_tools_list_and_call() -> None:
    listed, called = _session(_request("tools/list"),
                              _request("tools/call", 2, name="echo", arguments={"a": 1}))
    assert listed["result"]["tools"][0]["name"] == "echo"
    assert listed["result"]["tools"][0]["inputSchema"] == {"type": "object"}
    assert called["result"]["structuredContent"] == {"a": 1}


def test_malformed_input_gets_json_rpc_errors() -> None:
    responses = _session(
        b"{not json\n",
        b"[1, 2]\n",
        b'"a string"\n',
        b'{"jsonrpc": "1.0", "id": 3, "method": "ping"}\n',
        b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}\n',
        b'{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": [1]}\n',
        _request("no/such", 5),
        _request("tools/call", 6, name="nope"),
        _request("tools/call", 7, name="echo", arguments=[1]),
        b"[" * 100_000 + b"\n",
        b"\xff\xfe\n",
    )
    codes = [(r["id"], r["error"]["code"]) for r in responses]
    assert codes == [(None, -32700), (None, -32600), (None, -32600), (3, -32600),
                     (None, -32600), (4, -32602), (5, -32601), (6, -32602), (7, -32602),
                     (None, -32700), (None, -32700)]


def test_an_over_long_line_is_refused_once_and_the_next_one_is_read() -> None:
    responses = _session(b'{"x": "' + b"a" * 500 + b'"}\n', _request("ping", 9), limit=100)
    assert responses[0]["error"]["code"] == -32700
    assert "over" in responses[0]["error"]["message"]
    assert responses[1] == {"jsonrpc": "2.0", "id": 9, "result": {}}


def test_blank_lines_and_responses_to_us_are_ignored() -> None:
    stray = b'{"jsonrpc": "2.0", "id": 1, "result": {}}\n'
    assert _session(b"\n", b"   \r\n", stray) == []


def test_serve_writes_each_answer_through_the_writer() -> None:
    written: list[str] = []
    mcpwire.serve(io.BytesIO(_request("ping", 1) + _request("ping", 2)),
                  mcpwire.Server("sbx", "1", []), written.append)
    assert [json.loads(line)["id"] for line in written] == [1, 2]
