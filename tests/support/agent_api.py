"""Stand-ins for the agents' APIs on the local "internet" (tests/support/origin.py).

Real agent clients (Claude Code, Codex, Gemini CLI) run in the sandbox under test; their first
requests cross sbx's egress proxy and the test's upstream proxy and land here, on the origin,
routed by host name (:meth:`Origin.route`). Each stand-in answers just well enough for the
client to show a reply, records every request it got (:attr:`StandIn.requests`, with headers and
body), and follows one small script (:class:`Script`):

- a user turn that contains :attr:`Script.probe_word` is answered with a *tool call*: run
  ``curl`` on :attr:`Script.probe_url` — a host outside the agent's network policy, so the
  agent's own request is refused by sbx with a 403 (the tool result comes back in the next
  request, where :meth:`StandIn.tool_results` finds it);
- a turn that carries a tool result is answered with :attr:`Script.done`;
- every other turn is answered with :attr:`Script.reply`.

:class:`OAuthServer` is an OAuth 2.0 token endpoint (refresh-token and authorization-code
grants) with rotating tokens; :class:`NpmRegistry` serves package documents and tarballs the
way registry.npmjs.org does, from files, for the kits' registry install path.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

from tests.support.origin import Origin, Reply, Seen

SSE = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")]
JSON = [("Content-Type", "application/json")]


@dataclass(frozen=True)
class Script:
    reply: str = "Hello from the sbx stand-in model."
    probe_word: str = "sbx-probe"
    probe_url: str = "https://example.org/sbx-agent-probe"
    done: str = "The sbx probe has finished."

    @property
    def probe_command(self) -> str:
        return f"curl -sS {self.probe_url}"


def _json_body(seen: Seen) -> Any:
    try:
        return json.loads(seen.body or b"{}")
    except ValueError:
        return {}


def _texts(value: Any) -> Iterable[str]:
    """Every string inside a JSON value, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, Sequence):
        for item in value:
            yield from _texts(item)


class StandIn:
    """A recorded, scripted API for one or more host names."""

    hosts: tuple[str, ...] = ()

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self._lock = threading.Lock()
        self.requests: list[Seen] = []
        self._ids = itertools.count(1)

    def install(self, origin: Origin) -> None:
        for host in self.hosts:
            origin.route(host, self)

    def uninstall(self, origin: Origin) -> None:
        for host in self.hosts:
            origin.unroute(host)

    def __call__(self, seen: Seen) -> Reply | None:
        with self._lock:
            self.requests.append(seen)
        return self.answer(seen)

    def answer(self, seen: Seen) -> Reply | None:
        raise NotImplementedError

    def recorded(self) -> list[Seen]:
        with self._lock:
            return list(self.requests)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def next_id(self) -> int:
        return next(self._ids)

    def tool_results(self) -> list[str]:
        """The text of every tool result the client sent back (the probe's output)."""
        found: list[str] = []
        for seen in self.recorded():
            found.extend(self.results_in(_json_body(seen)))
        return found

    def results_in(self, body: Any) -> list[str]:
        raise NotImplementedError

    def model_requests(self) -> list[Seen]:
        """The requests that asked the model for a turn."""
        raise NotImplementedError


def _sse(events: Sequence[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n")
    return "".join(out).encode("utf-8")


# -- Anthropic (Claude Code) -----------------------------------------------------------------


class AnthropicAPI(StandIn):
    """``api.anthropic.com``: the Messages API (streamed or not), count_tokens, models, and an
    empty ``{}`` for the account endpoints Claude Code reads."""

    hosts = ("api.anthropic.com",)

    def model_requests(self) -> list[Seen]:
        return [s for s in self.recorded() if s.method == "POST"
                and s.path.rstrip("/") == "/v1/messages"]

    def results_in(self, body: Any) -> list[str]:
        found: list[str] = []
        for message in body.get("messages", []) if isinstance(body, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append("\n".join(_texts(block.get("content"))))
        return found

    def answer(self, seen: Seen) -> Reply | None:
        path = seen.path.rstrip("/")
        if seen.method == "POST" and path == "/v1/messages/count_tokens":
            return Reply(200, JSON, b'{"input_tokens": 12}')
        if seen.method == "GET" and path == "/v1/models":
            return Reply(200, JSON, json.dumps({"data": [
                {"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet",
                 "created_at": "2025-01-01T00:00:00Z"}], "has_more": False,
                "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"}).encode())
        if path.startswith("/api/claude_code/"):
            # Managed settings and policy limits: none for an API-key account. An empty JSON
            # object here makes Claude Code warn that the answer could not be parsed.
            return Reply(404, JSON, json.dumps({"type": "error", "error": {
                "type": "not_found_error", "message": "Not found"}}).encode())
        if seen.method != "POST" or path != "/v1/messages":
            return Reply(200, JSON, b"{}")
        body = _json_body(seen)
        blocks = self._blocks(body)
        model = str(body.get("model") or "claude-sonnet-4-5")
        message_id = f"msg_sbx{self.next_id()}"
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        usage = {"input_tokens": 12, "output_tokens": 8, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        if not body.get("stream"):
            return Reply(200, JSON, json.dumps({
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": blocks, "stop_reason": stop, "stop_sequence": None,
                "usage": usage}).encode())
        events: list[tuple[str | None, Any]] = [("message_start", {
            "type": "message_start", "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {**usage, "output_tokens": 1}}})]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                events += [
                    ("content_block_start", {"type": "content_block_start", "index": index,
                                             "content_block": {"type": "text", "text": ""}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "text_delta",
                                                       "text": block["text"]}})]
            else:
                events += [
                    ("content_block_start", {"type": "content_block_start", "index": index,
                                             "content_block": {**block, "input": {}}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "input_json_delta",
                                                       "partial_json": json.dumps(
                                                           block["input"])}})]
            events.append(("content_block_stop", {"type": "content_block_stop",
                                                  "index": index}))
        events += [("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": 8}}),
                   ("message_stop", {"type": "message_stop"})]
        return Reply(200, SSE, _sse(events))

    def _blocks(self, body: Any) -> list[dict[str, Any]]:
        messages = body.get("messages") if isinstance(body, dict) else None
        # The turn being answered is the last user message: recent Claude Code versions put a
        # `system` message (the environment notes) after it.
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"] \
            if isinstance(messages, list) else []
        last = users[-1] if users else {}
        if self.results_in({"messages": [last]}):
            return [{"type": "text", "text": self.script.done}]
        asked = " ".join(_texts(last.get("content") if isinstance(last, dict) else ""))
        tools = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
        if self.script.probe_word in asked and "Bash" in tools:
            return [{"type": "tool_use", "id": f"toolu_sbx{self.next_id()}", "name": "Bash",
                     "input": {"command": self.script.probe_command,
                               "description": "Fetch the sbx probe URL"}}]
        return [{"type": "text", "text": self.script.reply}]


# -- OpenAI (Codex) --------------------------------------------------------------------------


class OpenAIAPI(StandIn):
    """``api.openai.com``: the Responses API, streamed (what Codex speaks), and model lists."""

    hosts = ("api.openai.com",)

    def model_requests(self) -> list[Seen]:
        return [s for s in self.recorded() if s.method == "POST"
                and s.path.rstrip("/").endswith("/responses")]

    def results_in(self, body: Any) -> list[str]:
        items = body.get("input") if isinstance(body, dict) else None
        return ["\n".join(_texts(item.get("output")))
                for item in items if isinstance(item, dict)
                and item.get("type") in ("function_call_output", "custom_tool_call_output")
                ] if isinstance(items, list) else []

    def answer(self, seen: Seen) -> Reply | None:
        path = seen.path.rstrip("/")
        if seen.method == "GET" and path.endswith("/models"):
            return Reply(200, JSON, json.dumps({"object": "list", "models": [], "data": [
                {"id": "gpt-5", "object": "model", "created": 0, "owned_by": "openai"}]
            }).encode())
        if seen.method != "POST" or not path.endswith("/responses"):
            return Reply(200, JSON, b"{}")
        body = _json_body(seen)
        item = self._item(body)
        response_id = f"resp_sbx{self.next_id()}"
        model = str(body.get("model") or "gpt-5")
        base = {"id": response_id, "object": "response", "created_at": 0, "model": model}
        events: list[tuple[str | None, Any]] = [
            ("response.created", {"type": "response.created",
                                  "response": {**base, "status": "in_progress", "output": []}}),
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0,
                                            "item": {**item, "status": "in_progress"}})]
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": item["id"],
                "output_index": 0, "content_index": 0, "delta": text}))
        usage = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 20}
        events += [
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": {
                **base, "status": "completed", "output": [item], "usage": usage}})]
        return Reply(200, SSE, _sse(events))

    def _item(self, body: Any) -> dict[str, Any]:
        items = body.get("input") if isinstance(body, dict) else None
        items = items if isinstance(items, list) else []
        last = items[-1] if items else {}
        if self.results_in({"input": [last]}):
            return self._message(self.script.done)
        user = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
        asked = " ".join(_texts(user[-1].get("content"))) if user else ""
        call = self._shell_call(body) if self.script.probe_word in asked else None
        return call or self._message(self.script.reply)

    def _message(self, text: str) -> dict[str, Any]:
        return {"type": "message", "id": f"msg_sbx{self.next_id()}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    @staticmethod
    def _tools(body: Any) -> dict[str, str]:
        """Tool name -> type, from ``tools`` and from ``additional_tools`` input items, through
        namespaces (how recent Codex versions offer them)."""
        found: dict[str, str] = {}

        def walk(tools: Any) -> None:
            for tool in tools if isinstance(tools, list) else []:
                if not isinstance(tool, dict):
                    continue
                if tool.get("type") == "namespace":
                    walk(tool.get("tools"))
                elif tool.get("name"):
                    found.setdefault(str(tool["name"]), str(tool.get("type")))

        walk(body.get("tools"))
        for item in body.get("input", []) if isinstance(body.get("input"), list) else []:
            if isinstance(item, dict) and item.get("type") == "additional_tools":
                walk(item.get("tools"))
        return found

    def _shell_call(self, body: Any) -> dict[str, Any] | None:
        """A call of whichever shell tool the client offered, in that tool's argument shape:
        Codex's JavaScript ``exec`` tool ("code mode", which reaches ``exec_command`` through
        the ``tools`` object) or a plain shell function."""
        tools = self._tools(body)
        command = self.script.probe_command
        if tools.get("exec") == "custom":
            source = (f"const r = await tools.exec_command({{cmd: {json.dumps(command)}}});\n"
                      "text(r.output);\n")
            return {"type": "custom_tool_call", "id": f"ctc_sbx{self.next_id()}",
                    "call_id": f"call_sbx{self.next_id()}", "name": "exec", "input": source,
                    "status": "completed"}
        for name, arguments in (
                ("shell_command", {"command": command}),
                ("exec_command", {"cmd": command}),
                ("shell", {"command": ["bash", "-lc", command]})):
            if name in tools:
                return {"type": "function_call", "id": f"fc_sbx{self.next_id()}",
                        "call_id": f"call_sbx{self.next_id()}", "name": name,
                        "arguments": json.dumps(arguments), "status": "completed"}
        return None


# -- Google (Gemini CLI) ---------------------------------------------------------------------


class GeminiAPI(StandIn):
    """``generativelanguage.googleapis.com``: generateContent / streamGenerateContent (SSE),
    countTokens, and model lists. A request for JSON output (Gemini CLI's routing and
    next-speaker checks) gets a JSON answer."""

    hosts = ("generativelanguage.googleapis.com",)

    def model_requests(self) -> list[Seen]:
        return [s for s in self.recorded() if s.method == "POST"
                and "enerateContent" in s.path and not self._wants_json(_json_body(s))]

    def results_in(self, body: Any) -> list[str]:
        found: list[str] = []
        for content in body.get("contents", []) if isinstance(body, dict) else []:
            for part in content.get("parts", []) if isinstance(content, dict) else []:
                if isinstance(part, dict) and "functionResponse" in part:
                    found.append("\n".join(_texts(part["functionResponse"])))
        return found

    @staticmethod
    def _wants_json(body: Any) -> bool:
        config = body.get("generationConfig") if isinstance(body, dict) else None
        return isinstance(config, dict) and config.get("responseMimeType") == "application/json"

    def answer(self, seen: Seen) -> Reply | None:
        path = unquote(seen.path)
        if seen.method == "GET" and path.rstrip("/").endswith("/models"):
            return Reply(200, JSON, b'{"models": []}')
        if seen.method == "POST" and path.endswith(":countTokens"):
            return Reply(200, JSON, b'{"totalTokens": 12}')
        if seen.method == "POST" and path.endswith(":embedContent"):
            return Reply(200, JSON, b'{"embedding": {"values": [0.0]}}')
        if seen.method != "POST" or "enerateContent" not in path:
            return Reply(200, JSON, b"{}")
        body = _json_body(seen)
        if self._wants_json(body):
            parts: list[dict[str, Any]] = [{"text": json.dumps({
                "reasoning": "The stand-in model answers plainly.", "next_speaker": "user",
                "model_choice": "flash", "complexity_reasoning": "simple",
                "complexity_score": 1})}]
        else:
            parts = self._parts(body)
        chunk = {"candidates": [{"content": {"role": "model", "parts": parts},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 8,
                                   "totalTokenCount": 20},
                 "modelVersion": "gemini-2.5-pro"}
        if ":streamGenerateContent" in path:
            return Reply(200, SSE, f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        return Reply(200, JSON, json.dumps(chunk).encode())

    def _parts(self, body: Any) -> list[dict[str, Any]]:
        contents = body.get("contents") if isinstance(body, dict) else None
        contents = contents if isinstance(contents, list) else []
        last = contents[-1] if contents else {}
        if self.results_in({"contents": [last]}):
            return [{"text": self.script.done}]
        user = [c for c in contents if isinstance(c, dict) and c.get("role") == "user"
                and not self.results_in({"contents": [c]})]
        asked = " ".join(_texts(user[-1].get("parts"))) if user else ""
        declared = {str(f.get("name")) for t in body.get("tools", []) if isinstance(t, dict)
                    for f in t.get("functionDeclarations", []) if isinstance(f, dict)}
        if self.script.probe_word in asked and "run_shell_command" in declared:
            return [{"functionCall": {"name": "run_shell_command",
                                      "args": {"command": self.script.probe_command,
                                               "description": "Fetch the sbx probe URL"}}}]
        return [{"text": self.script.reply}]


# -- OAuth 2.0 token endpoint ----------------------------------------------------------------


@dataclass
class TokenState:
    access_token: str
    refresh_token: str
    expires_in: int = 3600
    scope: str = "user:inference user:profile"
    generation: int = 0


@dataclass
class OAuthServer:
    """An OAuth 2.0 token endpoint at ``host`` + ``path``: the refresh-token grant (the refresh
    token must be the current one; each use rotates both tokens) and the authorization-code
    grant (``code`` must be :attr:`code`). JSON or form bodies (and query fields).

    It answers JSON, or as :attr:`answer_as` says: ``form`` (``access_token=...&...``, GitHub's
    answer unless asked for JSON), ``html`` (a page that shows the token). With
    :attr:`lenient` it also answers at the spellings of its path that lenient servers route to
    the same handler (any case, ``;`` parameters, a ``.json`` suffix, a trailing ``/``), and
    for any method. :attr:`extra_headers` are added to every answer."""

    host: str
    path: str
    state: TokenState
    code: str = "sbx-test-authorization-code"
    requests: list[Seen] = field(default_factory=list)
    answer_as: str = "json"
    lenient: bool = False
    extra_headers: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, origin: Origin, fallback: StandIn | None = None) -> None:
        def handler(seen: Seen) -> Reply | None:
            if self.routes_here(seen.path):
                return self(seen)
            return fallback(seen) if fallback is not None else None

        origin.route(self.host, handler)

    def routes_here(self, path: str) -> bool:
        if path.rstrip("/") == self.path.rstrip("/"):
            return True
        if not self.lenient:
            return False
        segments = [unquote(s).split(";", 1)[0].lower() for s in path.split("/") if s]
        if segments and segments[-1].endswith(".json"):
            segments[-1] = segments[-1][:-len(".json")]
        return segments == [s.lower() for s in self.path.split("/") if s]

    def __call__(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(seen)
            form = self.form(seen)
            grant = form.get("grant_type")
            refreshing = grant == "refresh_token" and \
                form.get("refresh_token") == self.state.refresh_token
            if refreshing or (grant == "authorization_code" and form.get("code") == self.code):
                self._rotate()
            else:
                return Reply(400, JSON, b'{"error": "invalid_grant"}')
            answer = {"token_type": "Bearer", "access_token": self.state.access_token,
                      "refresh_token": self.state.refresh_token,
                      "expires_in": self.state.expires_in, "scope": self.state.scope}
            headers = [(k, v) for k, v in self.extra_headers]
            if self.answer_as == "form":
                return Reply(200, [("Content-Type", "application/x-www-form-urlencoded; "
                                    "charset=utf-8"), *headers],
                             urlencode({k: str(v) for k, v in answer.items()}).encode())
            if self.answer_as == "html":
                return Reply(200, [("Content-Type", "text/html"), *headers],
                             f"<html><p>Your token: {self.state.access_token}</p>"
                             f"<p>{self.state.refresh_token}</p></html>".encode())
            return Reply(200, [*JSON, *headers], json.dumps(answer).encode())

    def _rotate(self) -> None:
        self.state.generation += 1
        n = self.state.generation
        self.state.access_token = f"real-access-token-{n}-{_digest(n)}"
        self.state.refresh_token = f"real-refresh-token-{n}-{_digest(-n)}"

    @staticmethod
    def form(seen: Seen) -> dict[str, str]:
        query = {k: v[0] for k, v in parse_qs(seen.target.partition("?")[2]).items()}
        kind = (seen.header("content-type") or "").lower()
        if "json" in kind:
            data = _json_body(seen)
            return {**query, **({str(k): str(v) for k, v in data.items()}
                                if isinstance(data, dict) else {})}
        return {**query, **{k: v[0] for k, v in
                            parse_qs(seen.body.decode("utf-8", "replace")).items()}}


# -- the npm registry ------------------------------------------------------------------------


class NpmRegistry(StandIn):
    """``registry.npmjs.org`` from files: ``GET /NAME/VERSION`` answers the version document
    (``dist.tarball`` and ``dist.integrity``) and ``GET /NAME/-/FILE`` the tarball itself, for
    every ``(name, version) -> tarball`` in :attr:`packages`."""

    hosts = ("registry.npmjs.org",)

    def __init__(self, packages: Mapping[tuple[str, str], Path]) -> None:
        super().__init__()
        self.packages = dict(packages)

    def model_requests(self) -> list[Seen]:
        return []

    def results_in(self, body: Any) -> list[str]:
        return []

    def answer(self, seen: Seen) -> Reply | None:
        path = unquote(seen.path)
        for (name, version), tarball in self.packages.items():
            base = f"/{name}"
            if path == f"{base}/{version}":
                digest = hashlib.sha512(tarball.read_bytes()).digest()
                return Reply(200, JSON, json.dumps({
                    "name": name, "version": version, "dist": {
                        "tarball": f"https://registry.npmjs.org{base}/-/{tarball.name}",
                        "integrity": "sha512-" + base64.b64encode(digest).decode()}}).encode())
            if path == f"{base}/-/{tarball.name}":
                return Reply(200, [("Content-Type", "application/octet-stream")],
                             tarball.read_bytes())
        return Reply(404, JSON, b'{"error": "Not found"}')


__all__ = ["AnthropicAPI", "GeminiAPI", "NpmRegistry", "OAuthServer", "OpenAIAPI", "Script",
           "StandIn", "TokenState"]


def _digest(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()[:16]
