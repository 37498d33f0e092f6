"""`sbx mcp serve` driven by the MCP SDK's own stdio client against the real engine: the
tools list, a one-shot run, a named sandbox's life, and a refusal as a tool error."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.sbxproc import SBX

from .conftest import BUSYBOX, user_owned

pytestmark = pytest.mark.docker

CALL_TIMEOUT_S = 180.0


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    import os

    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def _session(env: dict[str, str], steps: Any) -> Any:
    """Start `sbx mcp serve`, initialize, and run ``steps(session)``, bounded in time."""
    params = StdioServerParameters(command=str(SBX), args=["mcp", "serve"], env=env)

    async def go() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            initialized = await session.initialize()
            assert initialized.server_info.name == "sbx"
            return await steps(session)

    return asyncio.run(asyncio.wait_for(go(), timeout=4 * CALL_TIMEOUT_S))


def _data(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def test_tools_are_listed_with_their_input_schemas(env: dict[str, str]) -> None:
    async def steps(session: ClientSession) -> Any:
        return await session.list_tools()

    listed = _session(env, steps)
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"run", "create", "exec", "stop", "rm", "ls", "cp", "diff", "fetch"}
    assert tools["run"].input_schema["required"] == ["workload"]
    assert tools["exec"].input_schema["properties"]["command"]["type"] == "array"


def test_a_one_shot_run_returns_its_exit_code_and_output(
        env: dict[str, str], busybox_kit: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "note.txt").write_text("from the host\n")
    user_owned(workspace)

    async def steps(session: ClientSession) -> Any:
        return await session.call_tool("run", {
            "workload": str(busybox_kit), "workspace": str(workspace), "access": "ro",
            "command": ["sh", "-c", "cat note.txt; echo oops >&2; exit 3"]})

    result = _session(env, steps)
    data = _data(result)
    assert result.is_error is False
    assert data["exit_code"] == 3
    assert data["stdout"] == "from the host\n"
    assert data["stderr"] == "oops\n"


def test_a_named_sandbox_is_created_used_stopped_and_removed(
        env: dict[str, str], kit_factory: Callable[..., Path], cleanup: list[str]) -> None:
    name = f"mcp-{uuid.uuid4().hex[:8]}"
    cleanup.append(name)  # removed by the test itself; this is for when it fails halfway
    busybox_kit = kit_factory("sleeper", f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\n"
                                         'CMD ["sleep", "3600"]\n')

    async def steps(session: ClientSession) -> list[Any]:
        results = [await session.call_tool("create", {"name": name,
                                                      "workload": str(busybox_kit)})]
        results.append(await session.call_tool("exec", {
            "name": name, "command": ["sh", "-c", "echo hello > /tmp/x; cat /tmp/x; id -un"]}))
        results.append(await session.call_tool("ls", {}))
        results.append(await session.call_tool("stop", {"name": name}))
        results.append(await session.call_tool("rm", {"name": name}))
        results.append(await session.call_tool("ls", {}))
        return results

    created, executed, listed, stopped, removed, after = (_data(r) for r in _session(env, steps))
    assert created["name"] == name
    assert executed["exit_code"] == 0, executed
    assert executed["stdout"].split() == ["hello", "agent"]
    assert [s["name"] for s in listed["sandboxes"]] == [name]
    assert stopped["stopped"] == [name]
    assert removed["removed"] == [name]
    assert after["sandboxes"] == []


def test_a_refusal_is_a_tool_error_with_its_reason_and_fix(
        env: dict[str, str], tmp_path: Path) -> None:
    async def steps(session: ClientSession) -> list[Any]:
        return [await session.call_tool("run", {"workload": "no-such-kit",
                                                "command": ["true"]}),
                await session.call_tool("exec", {"name": "nobody-here", "command": ["true"]}),
                await session.call_tool("exec", {"name": "x", "command": "not a list"})]

    missing_kit, missing_sandbox, bad_argument = _session(env, steps)
    assert missing_kit.is_error is True
    assert _data(missing_kit)["reason"] == "kit_not_found"
    assert _data(missing_kit)["hint"]
    assert missing_sandbox.is_error is True
    assert _data(missing_sandbox)["reason"] == "invalid_argument"
    assert "nobody-here" in _data(missing_sandbox)["message"]
    assert bad_argument.is_error is True
    assert _data(bad_argument)["reason"] == "invalid_argument"


def test_a_clone_sandbox_is_diffed_and_fetched(env: dict[str, str],
                                                kit_factory: Callable[..., Path],
                                                tmp_path: Path, cleanup: list[str]) -> None:
    name = f"mcp-clone-{uuid.uuid4().hex[:8]}"
    cleanup.append(name)
    kit = kit_factory("gitsleeper", "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
                                    'CMD ["sleep", "3600"]\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    for argv in (["init", "-q", "-b", "main"], ["config", "user.email", "h@example.invalid"],
                 ["config", "user.name", "host"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, timeout=60)
    (repo / "README").write_text("base\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(repo), "add", "README"], check=True, timeout=60)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "base"], check=True, timeout=60)
    work = ("cd /workspace && git config user.email a@example.invalid && "
            "git config user.name agent && echo from-agent > agent.txt && git add agent.txt && "
            "git commit -q -m agent && echo more >> README")

    async def steps(session: ClientSession) -> list[Any]:
        return [await session.call_tool("create", {"name": name, "workload": str(kit),
                                                   "workspace": str(repo), "clone": True}),
                await session.call_tool("exec", {"name": name, "command": ["sh", "-c", work]}),
                await session.call_tool("diff", {"name": name}),
                await session.call_tool("fetch", {"name": name}),
                await session.call_tool("diff", {"name": "nobody-here"}),
                await session.call_tool("rm", {"name": name})]

    created, worked, diffed, fetched, refused, removed = _session(env, steps)
    assert created.is_error is False, _data(created)
    assert _data(worked)["exit_code"] == 0, _data(worked)
    diff = _data(diffed)["diff"]
    assert "+from-agent" in diff and "+more" in diff  # committed and uncommitted
    assert fetched.is_error is False, _data(fetched)
    shown = subprocess.run(["git", "-C", str(repo), "show", f"sbx/{name}:agent.txt"],
                           capture_output=True, check=True, timeout=60)
    assert shown.stdout == b"from-agent\n"
    assert (repo / "README").read_text(encoding="utf-8") == "base\n"  # work tree untouched
    assert refused.is_error is True and _data(refused)["reason"] == "invalid_argument"
    assert _data(removed)["removed"] == [name]
