"""The request log's file side: the writer (append, rotate, fail quietly), the readers (every
record in order, a live follow across rotations), pruning, and `sbx policy log` over records
written as the proxy writes them — plus the in-process proxy's record of a DNS failure."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from sbx.domain.egress import requestlog
from sbx.domain.egress.proxyconfig import ProxyConfig
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from sbx.proxy import EgressProxy
from sbx.usecases import policylog
from tests.conftest import run_cli


def record(host: str = "api.example.com", *, decision: str = "allowed", when: str | None = None,
           sandbox: str | None = "dev", run_id: str = "a" * 32, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict.fromkeys(requestlog.FIELDS)
    base.update(v=1, time=when or requestlog.timestamp(), sandbox=sandbox, run_id=run_id,
                phase="runtime", mode="intercepted", method="GET", scheme="https", host=host,
                port=443, path="/x", decision=decision,
                status=200 if decision == "allowed" else 403,
                code="allowed" if decision == "allowed" else "default_deny", credentials=[])
    base.update(extra)
    return base


def test_writer_appends_and_rotates_within_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "log" / requestlog.LOG_FILE
    sink = requestlog.JsonlSink(path, segment_bytes=2048, segments=3)
    for i in range(100):
        sink.write(record(path=f"/{i}"))
    sink.close()
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == [requestlog.LOG_FILE, f"{requestlog.LOG_FILE}.1", f"{requestlog.LOG_FILE}.2"]
    assert all(p.stat().st_size <= 2048 for p in path.parent.iterdir())
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    got = requestlog.read_records(path.parent).records
    assert [r["path"] for r in got] == [f"/{i}" for i in range(100 - len(got), 100)]


def test_writer_failure_is_said_once_and_drops_records(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    said: list[str] = []
    sink = requestlog.JsonlSink(blocker / requestlog.LOG_FILE, report=said.append)
    sink.write(record())
    sink.write(record())
    assert len(said) == 1 and "cannot write the request log" in said[0]


def test_reader_skips_what_is_not_a_record(tmp_path: Path) -> None:
    path = tmp_path / requestlog.LOG_FILE
    path.write_bytes(b"\n".join([
        json.dumps(record()).encode(), b"{torn", b"\xff\xfe", b"[1, 2]",
        json.dumps({"v": 1, "host": "x", "decision": "maybe", "time": "t"}).encode(),
        json.dumps(record("b.example")).encode(), b""]))
    result = requestlog.read_records(tmp_path)
    assert [r["host"] for r in result.records] == ["api.example.com", "b.example"]
    assert result.skipped == 4


def test_follower_reads_across_a_rotation(tmp_path: Path) -> None:
    path = tmp_path / requestlog.LOG_FILE
    sink = requestlog.JsonlSink(path, segment_bytes=1024, segments=2)
    sink.write(record(path="/before"))
    follower = requestlog.Follower(tmp_path)
    follower.start_at_end()
    seen: list[str] = []
    for i in range(12):  # rotates a few times between polls
        sink.write(record(path=f"/{i}"))
        if i % 5 == 0:
            seen += [r["path"] for r in follower.poll()]
    seen += [r["path"] for r in follower.poll()]
    # Every record written into a file the follower had open or opened is seen, in order;
    # a rotated file it never opened may be lost (the bound on disk wins over the tail).
    assert seen == sorted(seen, key=lambda p: int(p[1:]))
    assert seen[-1] == "/11" and "/before" not in seen
    follower.close()


def test_prune_keeps_the_newest_and_the_protected(tmp_path: Path) -> None:
    for i in range(6):
        directory = tmp_path / f"run{i}"
        directory.mkdir()
        requestlog.log_path(directory).write_text("{}\n")
        os.utime(directory, (1000 + i, 1000 + i))
    requestlog.prune(tmp_path, keep=2, protected=["run0"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run0", "run4", "run5"]


def test_policy_log_summary_json_and_filters(tmp_path: Path) -> None:
    home = tmp_path / "state"
    run = "b" * 32
    sink = requestlog.JsonlSink(home / requestlog.LOG_DIR / run / requestlog.LOG_FILE)
    old = requestlog.timestamp(time.time() - 7200)
    sink.write(record("old.example", when=old, sandbox=None, run_id=run))
    sink.write(record(sandbox=None, run_id=run))
    sink.write(record(sandbox=None, run_id=run, decision="denied", path="/y",
                      rule={"source": "kit", "text": "./k capabilities[0] runtime.deny: x"}))
    sink.write(record("evil.example", sandbox=None, run_id=run, decision="denied"))
    sink.close()
    env = {**os.environ, "SBX_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    summary = run_cli(["policy", "log", run[:10]], env=env)
    assert summary.exit_code == 0, summary.stderr
    rows = {line.split()[1]: line.split() for line in summary.stdout.splitlines()[1:]}
    assert rows["api.example.com:443"][2:4] == ["1", "1"]
    assert rows["evil.example:443"][2:4] == ["0", "1"]
    assert "deny by default" in summary.stdout
    every = run_cli(["policy", "log", "--json"], env=env)
    assert [json.loads(line)["host"] for line in every.stdout.splitlines()] == [
        "old.example", "api.example.com", "api.example.com", "evil.example"]
    recent = run_cli(["policy", "log", "--json", "--since", "10m", "--denied", run], env=env)
    assert [(json.loads(line)["host"], json.loads(line)["path"])
            for line in recent.stdout.splitlines()] == [("api.example.com", "/y"),
                                                        ("evil.example", "/x")]
    unknown = run_cli(["policy", "log", "nosuchsandbox"], env=env)
    assert unknown.exit_code == 2 and "(invalid_argument)" in unknown.stderr
    assert run_cli(["policy", "log", "--since", "soon"], env=env).exit_code == 2


def test_follow_ends_with_the_one_shot_run(tmp_path: Path) -> None:
    home = tmp_path / "state"
    run = "c" * 32
    (home / "runs" / run).mkdir(parents=True)
    sink = requestlog.JsonlSink(home / requestlog.LOG_DIR / run / requestlog.LOG_FILE)
    sink.write(record(path="/first", run_id=run))
    seen: list[str] = []
    polls = [0]

    class Ctx:
        state_home = home

    def on_record(r: dict[str, Any]) -> None:
        seen.append(r["path"])

    def stop() -> bool:
        polls[0] += 1
        if polls[0] == 2:
            sink.write(record(path="/second", run_id=run))
        if polls[0] == 4:
            sink.write(record(path="/last", run_id=run))
            (home / "runs" / run).rmdir()  # the run ended
        return polls[0] > 50

    policylog.follow(Ctx(), run, since=None, denied=False,  # type: ignore[arg-type]
                     on_record=on_record, poll_s=0.01, stop=stop)
    assert seen == ["/first", "/second", "/last"]
    assert polls[0] < 10


def _no_tls(host: str) -> Any:  # pragma: no cover - never reached
    raise AssertionError(f"no interception expected ({host})")


def test_a_dns_failure_is_a_failed_record_with_its_cause(tmp_path: Path) -> None:
    rule = Rule("api.example.com", (), (), "allow", "./k", 0, "runtime")
    network = Network(2, NetworkPhase(), NetworkPhase(allow=(rule,)), False, ())
    log = tmp_path / "log" / requestlog.LOG_FILE
    config = ProxyConfig(run_id="r1", state_home=tmp_path / "state",
                         audit_log=tmp_path / "state" / "audit.jsonl", network=network,
                         request_log=log)

    async def resolver(host: str, port: int) -> list[str]:
        raise OSError("test: no such name")

    async def main() -> bytes:
        proxy = EgressProxy(config, server_context=_no_tls, secrets={}, resolver=resolver)
        await proxy.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            async with asyncio.timeout(10):
                answer = await reader.read(65536)
            writer.close()
            return answer
        finally:
            await proxy.close()

    answer = asyncio.run(main())
    assert answer.startswith(b"HTTP/1.1 502") and b"explain: sbx explain dns_failed" in answer
    [failed] = requestlog.read_records(log.parent).records
    assert (failed["decision"], failed["code"], failed["cause"]["kind"], failed["mode"]) == \
        ("failed", "dns_failed", "dns", "connect")
    assert "no such name" in failed["cause"]["detail"]
    audited = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text()
               .splitlines()]
    assert [(e["event_type"], e["details"]["code"]) for e in audited] == [
        ("egress_failed", "dns_failed")]
