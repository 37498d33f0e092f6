"""The MCP tool table's own decisions: schemas, refusals as tool errors, bounded output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.usecases import mcptools
from sbx.usecases.context import AppContext


def _app(tmp_path: Path) -> AppContext:
    import io

    return AppContext(env={"SBX_HOME": str(tmp_path / "state")}, cwd=tmp_path,
                      renderer=Renderer(io.StringIO(), io.StringIO(), as_json=True))


def test_every_tool_has_an_object_schema_naming_its_required_fields(tmp_path: Path) -> None:
    for tool in mcptools.tools(_app(tmp_path)):
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert set(schema["required"]) <= set(schema["properties"])
        assert tool.description


def test_a_refusal_carries_its_reason_and_fix() -> None:
    result = mcptools.refusal(SbxError(Reason.KIT_NOT_FOUND, "no kit x", hint="sbx kit ls"))
    assert result["isError"] is True
    assert json.loads(result["content"][0]["text"])["reason"] == "kit_not_found"
    assert result["structuredContent"]["hint"] == "sbx kit ls"


def test_bad_arguments_are_refused_before_any_engine_call(tmp_path: Path) -> None:
    tools = {tool.name: tool for tool in mcptools.tools(_app(tmp_path))}
    cases: list[tuple[str, dict[str, Any]]] = [
        ("run", {}), ("run", {"workload": "k", "command": "sh"}),
        ("run", {"workload": "k", "timeout_s": -1}), ("run", {"workload": "k", "timeout_s": True}),
        ("exec", {"name": "n", "command": []}), ("rm", {"name": 3})]
    for name, arguments in cases:
        result = tools[name].call(arguments)
        assert result["isError"] is True, (name, arguments)
        assert result["structuredContent"]["reason"] == "invalid_argument"


def test_output_is_bounded_per_stream() -> None:
    collected = mcptools._Collected()
    collected.on_output("stdout", b"a" * (mcptools.MAX_OUTPUT_BYTES - 1))
    collected.on_output("stdout", b"bcd")
    collected.on_output("stderr", b"e")
    assert len(collected.output["stdout"]) == mcptools.MAX_OUTPUT_BYTES
    assert collected.truncated
    assert collected.output["stderr"] == b"e"
