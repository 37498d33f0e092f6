"""acp@1 on a real engine, driven by the Agent Client Protocol's own Python client
(agent-client-protocol, a dev-only dependency) exactly as an editor drives an agent command:
`sbx run KIT --acp` is spawned, speaks JSON-RPC on its stdio, and the adapter inside the
sandbox (a small stdlib ACP agent of the mixin) answers initialize, session/new and
session/prompt with the adapter's own variable, its user and the sandbox's read-only root.
Also a named sandbox (the adapter as a process of it), a large prompt byte-exact both ways,
and the refusals (no adapter for a composed agent, a terminal)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, cast

import acp
import pytest

from tests.support.kits import write_kit
from tests.support.sbxproc import SBX, run_sbx

pytestmark = pytest.mark.docker

ACP_TYPE = "com.docker.sandbox/acp@1"
# A minimal ACP agent on stdio (newline-delimited JSON-RPC 2.0): what an adapter such as
# claude-agent-acp does, with the agent's answer made of what the test checks.
ADAPTER = r'''
import json, os, sys
def send(message):
    sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    request = json.loads(line)
    method, rid, params = request.get("method"), request.get("id"), request.get("params", {})
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s-1"}})
    elif method == "session/prompt":
        text = "".join(b.get("text", "") for b in params.get("prompt", []))
        try:
            open("/probe", "w")
            root = "writable"
        except OSError:
            root = "read-only"
        facts = f"{os.environ.get('ADAPTER_MARK')}|{os.getuid()}|{root}|{len(text)}|"
        send({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": params["sessionId"], "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": facts + text}}}})
        send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
'''


class Collector:
    """The editor's side: what the agent streamed, and nothing it may ask granted."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        content = getattr(update, "content", None)
        if content is not None and getattr(content, "text", None) is not None:
            self.chunks.append(content.text)

    async def request_permission(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("the test agent asks for no permission")

    def on_connect(self, _conn: Any) -> None:
        return None


@pytest.fixture(scope="module")
def kits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("acpkits")
    workload = write_kit(root, "acpagent", """
        provides: ["acpagent@1.0.0"]
        """, recipe="FROM sbx-base/agent:1\nUSER agent\nWORKDIR /workspace\n"
                    "CMD [\"sleep\", \"3600\"]\n")
    adapter = write_kit(root, "acpadapter", f"""
        provides: ["acpagent-acp@1.0.0"]
        requires: ["acpagent"]
        capabilities:
          - type: {ACP_TYPE}
            optional: true
            config:
              agent: acpagent
              command: ["python3", "/usr/local/lib/adapter.py"]
              env: {{ADAPTER_MARK: "mark-7"}}
        """, kind="mixin", recipe="FROM scratch\nCOPY adapter.py /usr/local/lib/adapter.py\n",
                        files={"adapter.py": ADAPTER})
    stranger = write_kit(root, "strangeracp", f"""
        capabilities:
          - type: {ACP_TYPE}
            optional: true
            config: {{agent: nobody, command: ["true"]}}
        """, kind="mixin")
    return {"workload": workload, "adapter": adapter, "stranger": stranger}


async def _session(argv: list[str], env: dict[str, str], prompt: str) -> tuple[list[str], Any]:
    collector = Collector()
    client = cast(acp.Client, collector)  # the protocol's methods this agent never calls
    async with acp.spawn_agent_process(lambda _agent: client, str(SBX), *argv, env=env,
                                       transport_kwargs={"limit": 16 * 1024 * 1024}) \
            as (conn, process):
        init = await asyncio.wait_for(conn.initialize(protocol_version=1), 300)
        session = await asyncio.wait_for(conn.new_session(cwd="/workspace"), 60)
        answer = await asyncio.wait_for(conn.prompt(
            session_id=session.session_id, prompt=[acp.text_block(prompt)]), 60)
        assert process.stdin is not None
        process.stdin.close()  # the editor goes: the adapter's stdin ends, and so does sbx
        code = await asyncio.wait_for(process.wait(), 120)
    assert init.protocol_version == 1 and session.session_id == "s-1"
    assert answer.stop_reason == "end_turn"
    return collector.chunks, code


def test_an_acp_client_drives_the_adapter_in_a_one_shot_sandbox(
        kits: dict[str, Path], env: dict[str, str]) -> None:
    argv = ["run", str(kits["workload"]), "--kit", str(kits["adapter"]), "--acp"]
    prompt = "héllo " + "x" * 300_000  # far past one pipe buffer, both ways
    chunks, code = asyncio.run(_session(argv, env, prompt))
    assert code == 0
    assert chunks == [f"mark-7|1000|read-only|{len(prompt)}|{prompt}"]
    again, _ = asyncio.run(_session(argv, env, "second"))  # the cached plan: the same adapter
    assert again == ["mark-7|1000|read-only|6|second"]


def test_an_acp_client_drives_the_adapter_of_a_named_sandbox(
        kits: dict[str, Path], env: dict[str, str], cleanup: list[str]) -> None:
    named = f"acp-{uuid.uuid4().hex[:10]}"
    cleanup.append(named)
    argv = ["run", "--name", named, str(kits["workload"]), "--kit", str(kits["adapter"]),
            "--acp"]
    chunks, code = asyncio.run(_session(argv, env, "hi"))
    assert (chunks, code) == (["mark-7|1000|read-only|2|hi"], 0)
    listed = run_sbx(["ls", "--json"], env=env, timeout=60)
    assert named in listed.stdout.decode()  # the sandbox stays; its own workload runs on


def test_acp_is_refused_without_an_adapter_for_a_composed_agent_and_with_a_terminal(
        kits: dict[str, Path], env: dict[str, str]) -> None:
    for extra in ([], ["--kit", str(kits["stranger"])]):
        done = run_sbx(["run", str(kits["workload"]), *extra, "--acp", "--json"], env=env,
                       timeout=300)
        assert done.returncode != 0
        assert b'"acp_unavailable"' in done.stdout, (done.stdout, done.stderr)
    done = run_sbx(["run", str(kits["workload"]), "--kit", str(kits["adapter"]), "--acp",
                    "-t", "--json"], env=env, timeout=300)
    assert done.returncode != 0 and b'"invalid_argument"' in done.stdout, done.stdout
    explained = run_sbx(["explain", "acp_unavailable"], env=env, timeout=60)
    assert explained.returncode == 0 and b"--acp" in explained.stdout
