"""Raw CONNECT tunnels relayed by the proxy in-process on 127.0.0.1, with both relays: the
default one (asyncio protocols) and the spliced one (``splice(2)`` through a pipe per direction,
Linux, off by default). A local server behind a literal allow rule is the only destination.
Every transfer is checked byte for byte; every wait is bounded.

Also the shape of the proxy package (issue 13): reason codes only from :mod:`sbx.base.reasons`, no
module over 500 lines, no class name that another sbx module defines too."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sbx.base.reasons import EgressCode, Reason
from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from sbx.proxy import EgressProxy, relay

RELAYS = [pytest.param(True, id="splice"), pytest.param(False, id="default")]
needs_splice = pytest.mark.skipif(not relay.splice_available(), reason="no splice(2) here")
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _rule(host: str, phase: str) -> Rule:
    return Rule(host, (), (), "allow", "./kit", 0, phase)  # type: ignore[arg-type]


def _run(tmp_path: Path, handler: Handler, scenario: Callable[[EgressProxy, int], Awaitable[None]],
         *, use_splice: bool | None, phase: str = "runtime",
         limits: ProxyLimits | None = None) -> None:
    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        allow = NetworkPhase(allow=(_rule(f"127.0.0.1:{port}", phase),))
        net = Network(2, allow if phase == "install" else NetworkPhase(),
                      allow if phase == "runtime" else NetworkPhase(), False, ())
        config = ProxyConfig(run_id="run-1", state_home=tmp_path / "state",
                             audit_log=tmp_path / "state" / "audit.jsonl", network=net,
                             phase=phase, limits=limits or ProxyLimits())  # type: ignore[arg-type]
        proxy = EgressProxy(config, server_context=_no_certificates, secrets={},
                            use_splice=use_splice)
        await proxy.start()
        try:
            async with asyncio.timeout(60):
                await scenario(proxy, port)
        finally:
            await proxy.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def _no_certificates(host: str) -> Any:  # pragma: no cover - never reached
    raise AssertionError(f"no interception expected ({host})")


async def _open_tunnel(proxy: EgressProxy, port: int) -> tuple[asyncio.StreamReader,
                                                                asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    return reader, writer


async def _read_all(reader: asyncio.StreamReader, *, pause: float = 0.0) -> bytes:
    out = bytearray()
    while chunk := await reader.read(1 << 16):
        out += chunk
        if pause:
            await asyncio.sleep(pause)
    return bytes(out)


@pytest.mark.slow
@pytest.mark.parametrize("use_splice", RELAYS)
def test_both_directions_arrive_whole_with_half_close(tmp_path: Path, use_splice: bool) -> None:
    """8 MiB each way at once: the server answers with the digest of what it got after the
    client's half-close (so EOF crossed the tunnel), then its own 8 MiB, then closes."""
    if use_splice and not relay.splice_available():
        pytest.skip("no splice(2) here")
    upload = os.urandom(8 << 20)
    download = os.urandom(8 << 20)
    got: dict[str, bytes] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(download[:1 << 20])  # some of it before the client's bytes are all in
        received = await _read_all(reader)
        writer.write(hashlib.sha256(received).digest() + download[1 << 20:])
        await writer.drain()
        writer.close()

    async def scenario(proxy: EgressProxy, port: int) -> None:
        reader, writer = await _open_tunnel(proxy, port)

        async def send() -> None:
            writer.write(upload)
            await writer.drain()
            writer.write_eof()

        sending = asyncio.create_task(send())
        got["answer"] = await _read_all(reader)
        await sending
        writer.close()

    _run(tmp_path, handler, scenario, use_splice=use_splice)
    answer = got["answer"]
    assert answer[:1 << 20] == download[:1 << 20]
    assert answer[1 << 20:(1 << 20) + 32] == hashlib.sha256(upload).digest()
    assert answer[(1 << 20) + 32:] == download[1 << 20:]


@pytest.mark.slow
@pytest.mark.parametrize("use_splice", RELAYS)
def test_a_slow_reader_gets_every_byte(tmp_path: Path, use_splice: bool) -> None:
    """The client reads slowly, so the proxy's side to it backs up (the spliced relay then
    waits for it to be writable and stops reading the server) — nothing is lost or reordered."""
    if use_splice and not relay.splice_available():
        pytest.skip("no splice(2) here")
    payload = os.urandom(12 << 20)
    got: dict[str, bytes] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        writer.close()

    async def scenario(proxy: EgressProxy, port: int) -> None:
        reader, writer = await _open_tunnel(proxy, port)
        writer.write(b"go")  # not TLS: a tunnel carries any protocol once judged
        await asyncio.sleep(0.5)  # let every buffer on the way fill up
        got["data"] = await _read_all(reader, pause=0.001)
        writer.close()

    _run(tmp_path, handler, scenario, use_splice=use_splice)
    assert hashlib.sha256(got["data"]).digest() == hashlib.sha256(payload).digest()


@needs_splice
def test_the_spliced_relay_moves_the_bytes_and_the_portable_one_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved: list[int] = []
    real = os.splice

    def counting(src: int, dst: int, count: int, *args: Any, **kwargs: Any) -> int:
        done = real(src, dst, count, *args, **kwargs)
        moved.append(done)
        return done

    monkeypatch.setattr(os, "splice", counting)  # the os module relay calls

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.readexactly(5)
        writer.write(data.upper() * 1000)
        await writer.drain()
        writer.close()

    answers: list[bytes] = []

    async def scenario(proxy: EgressProxy, port: int) -> None:
        reader, writer = await _open_tunnel(proxy, port)
        writer.write(b"hello")
        answers.append(await _read_all(reader))
        writer.close()

    for use_splice in (True, False, None):  # None: the default, which does not splice
        moved.clear()
        answers.clear()
        _run(tmp_path, handler, scenario, use_splice=use_splice)
        assert answers == [b"HELLO" * 1000]
        # the first bytes went before the splice began (judged, then written by asyncio)
        assert (sum(moved) >= 2 * 5000) if use_splice else not moved


@pytest.mark.slow
@pytest.mark.parametrize("use_splice", RELAYS)
def test_a_silent_tunnel_ends_after_the_idle_timeout_and_traffic_keeps_it(
        tmp_path: Path, use_splice: bool) -> None:
    if use_splice and not relay.splice_available():
        pytest.skip("no splice(2) here")
    loop_times: dict[str, float] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)
        writer.close()

    async def scenario(proxy: EgressProxy, port: int) -> None:
        loop = asyncio.get_running_loop()
        reader, writer = await _open_tunnel(proxy, port)
        for _ in range(8):  # 2 s of traffic, every 0.25 s: more than the 1 s idle timeout
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
            await asyncio.sleep(0.25)
        start = loop.time()
        assert await asyncio.wait_for(reader.read(10), 15) == b""  # then silence: closed
        loop_times["closed_after"] = loop.time() - start
        writer.close()

    _run(tmp_path, handler, scenario, use_splice=use_splice,
         limits=ProxyLimits(idle_timeout=1.0))
    assert 0.5 <= loop_times["closed_after"] <= 8


@pytest.mark.parametrize("use_splice", RELAYS)
def test_closing_the_install_phase_ends_its_tunnels(tmp_path: Path, use_splice: bool) -> None:
    if use_splice and not relay.splice_available():
        pytest.skip("no splice(2) here")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)
        writer.close()

    async def scenario(proxy: EgressProxy, port: int) -> None:
        reader, writer = await _open_tunnel(proxy, port)
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        proxy.switch_to_runtime()
        tail = await asyncio.wait_for(reader.read(10), 5)
        assert tail == b""
        writer.close()

    _run(tmp_path, handler, scenario, use_splice=use_splice, phase="install")


def test_splice_is_probed_once() -> None:
    assert relay.splice_available() is relay.splice_available()
    assert isinstance(relay.splice_available(), bool)


# -- the package's shape ---------------------------------------------------------------------------

PACKAGE = Path(relay.__file__).parent
CLI = PACKAGE.parents[1]


def test_no_reason_code_is_written_as_a_string_literal() -> None:
    codes = {c.value for c in Reason} | {c.value for c in EgressCode}
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exported = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in a.targets)
                    for n in ast.walk(a.value)}  # names of functions, not codes
        for node in ast.walk(tree):
            if id(node) in exported:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value in codes:
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert found == []


def test_every_proxy_module_is_small() -> None:
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.glob("*.py")}
    assert len(sizes) >= 10
    assert {name: size for name, size in sizes.items() if size > 500} == {}


def test_the_proxy_defines_no_class_name_used_elsewhere_in_sbx() -> None:
    pattern = re.compile(r"^class (\w+)", re.MULTILINE)
    ours = {m for p in PACKAGE.glob("*.py") for m in pattern.findall(p.read_text("utf-8"))}
    others = {m for p in CLI.rglob("*.py") if PACKAGE not in p.parents
              for m in pattern.findall(p.read_text("utf-8"))}
    assert "EgressRefusal" in ours
    assert ours & others == set()
