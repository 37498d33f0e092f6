"""MCP's stdio transport: JSON-RPC 2.0, one message per line, bounded; no runtime dependency.

The framing and the method dispatch live here; the tools are a table handed in
(sbx.usecases.mcptools), so this module knows nothing of sandboxes. Malformed input gets a
JSON-RPC error object, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Final

# Newest first: the answer to a client asking for one we do not know.
PROTOCOL_VERSIONS: Final = ("2025-06-18", "2025-03-26", "2024-11-05")
MAX_LINE_BYTES: Final = 1 << 20  # one request: far more than any tool's arguments need

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    call: Callable[[Mapping[str, Any]], dict[str, Any]]  # arguments -> MCP CallToolResult


class TooLong(Exception):
    """A line over MAX_LINE_BYTES: answered with a parse error, the rest of it skipped."""


def lines(stream: IO[bytes], *, limit: int = MAX_LINE_BYTES) -> Iterator[bytes | TooLong]:
    """Each line of ``stream`` (newline stripped), read at most ``limit`` bytes at a time: an
    over-long line is yielded as :class:`TooLong` once and skipped to its end."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = stream.readline(limit + 1)
            yield TooLong()
            continue
        yield line.rstrip(b"\r\n")


def error_response(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


class Server:
    """Answers one message at a time; ``handle`` returns the response, or None for a
    notification (which is never answered)."""

    def __init__(self, name: str, version: str, tools: list[Tool]) -> None:
        self.name = name
        self.version = version
        self.tools = {tool.name: tool for tool in tools}

    def handle_line(self, line: bytes | TooLong) -> dict[str, Any] | None:
        if isinstance(line, TooLong):
            return error_response(None, PARSE_ERROR, f"message over {MAX_LINE_BYTES} bytes")
        if not line.strip():
            return None
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return error_response(None, PARSE_ERROR, "not JSON")
        if isinstance(message, list):
            return error_response(None, INVALID_REQUEST, "batches are not supported")
        return self.handle(message)

    def handle(self, message: Any) -> dict[str, Any] | None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" \
                or not isinstance(message.get("method"), str):
            request_id = message.get("id") if isinstance(message, dict) else None
            if isinstance(message, dict) and "method" not in message \
                    and ("result" in message or "error" in message):
                return None  # a response to us: we send no requests, so nothing to match
            return error_response(_valid_id(request_id), INVALID_REQUEST,
                                  "not a JSON-RPC 2.0 request")
        is_notification = "id" not in message
        request_id = message.get("id")
        if not is_notification and _valid_id(request_id) is None and request_id is not None:
            return error_response(None, INVALID_REQUEST, "id must be a string or a number")
        params = message.get("params", {})
        if not isinstance(params, dict):
            return None if is_notification else error_response(
                request_id, INVALID_PARAMS, "params must be an object")
        if is_notification:
            return None  # notifications/initialized, cancelled: nothing to answer
        method = message["method"]
        if method == "initialize":
            result: dict[str, Any] = self._initialize(params)
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": [{"name": t.name, "description": t.description,
                                 "inputSchema": dict(t.input_schema)}
                                for t in self.tools.values()]}
        elif method == "tools/call":
            tool_name = params.get("name")
            tool = self.tools.get(tool_name) if isinstance(tool_name, str) else None
            arguments = params.get("arguments", {})
            if tool is None:
                return error_response(request_id, INVALID_PARAMS,
                                      f"unknown tool {tool_name!r}")
            if not isinstance(arguments, dict):
                return error_response(request_id, INVALID_PARAMS, "arguments must be an object")
            result = tool.call(arguments)
        else:
            return error_response(request_id, METHOD_NOT_FOUND, f"no method {method!r}")
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _initialize(self, params: Mapping[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        return {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.name, "version": self.version}}


def _valid_id(request_id: Any) -> Any:
    if isinstance(request_id, bool):
        return None
    return request_id if isinstance(request_id, (str, int)) else None


def serve(stream: IO[bytes], server: Server, write: Callable[[str], None]) -> None:
    """Read requests from ``stream`` until it ends; each answer is one line through ``write``."""
    for line in lines(stream):
        response = server.handle_line(line)
        if response is not None:
            write(json.dumps(response, separators=(",", ":")) + "\n")


__all__ = ["MAX_LINE_BYTES", "PROTOCOL_VERSIONS", "Server", "Tool", "TooLong", "error_response",
           "lines", "serve"]
