"""What the egress request log costs per intercepted request: the same proxy with and without
its log, side by side.

Usage::

    .venv/bin/python bench/requestlog.py [--requests 200] [--rounds 7] [--json]

Everything runs on 127.0.0.1: the test origin (``tests/support/origin.py``: HTTPS with a test
CA, threads in this process) and two proxies as ``sbx run`` starts them (``python -m
sbx.proxy``, each its own process) with the same bounded rule (``methods: [GET]``,
so every request is intercepted, decided and forwarded), one writing the request log
(``request_log``, one JSONL record per request, its host and path scrubbed of the needles a
credential gives), one not. The client is ``curl``: ``--requests`` keep-alive GETs on one
connection through each proxy, ``--rounds`` interleaved rounds (the order alternates each
round). Reported: the median per request of each side, their difference (what the log adds;
target <= 0.2 ms), the ratio, the log's bytes per record, and — steadier on a shared machine,
where end-to-end medians move by more than the log costs — the proxy's own time per record
(building it and appending it), measured in this process over 5000 records. Nothing is
asserted (exit 0 with the numbers, 1 when the benchmark could not run). Every loop is bounded
(rounds <= 15, requests <= 2000, every subprocess has a timeout). No traffic leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "cli"))

from bench.proxy import latencies  # noqa: E402

from sbx.domain.credentials.secrets import SecretStore  # noqa: E402
from sbx.domain.egress import requestlog  # noqa: E402
from sbx.domain.egress.proxyconfig import ProxyConfig  # noqa: E402
from sbx.domain.egress.proxycreds import CredentialSpec, Inject  # noqa: E402
from sbx.domain.kits.compose import Network, NetworkPhase, Rule  # noqa: E402
from tests.support.origin import Origin, ProxyProcess, TestPKI  # noqa: E402


def _proxy(work: Path, name: str, host: str, origin_ca: Path, *,
           logged: bool) -> ProxyProcess:
    rule = Rule(host, ("GET",), (), "allow", "./bench", 0, "runtime")
    network = Network(2, NetworkPhase(), NetworkPhase(allow=(rule,)), False, ())
    home = work / name
    # A credential on another host: its secret and sentinel are needles the log scrubs.
    SecretStore(home).set("bench", "bench-secret-value-0123456789")
    config = ProxyConfig(
        run_id=f"bench-{name}", state_home=home, audit_log=home / "audit.jsonl",
        network=network, explain_command="sbx explain", upstream_ca_file=origin_ca,
        credentials=(CredentialSpec("bench", "runtime", (Inject("other.example"),),
                                    sentinel="sbx-proxy-managed-bench", env="BENCH_TOKEN"),),
        request_log=(work / f"{name}-log" / requestlog.LOG_FILE) if logged else None)
    return ProxyProcess(config, work / f"{name}.json")


def record_cost(work: Path, count: int = 5000) -> float:
    """Seconds the proxy spends per record, measured in this process: building an allowed
    request's record (the rule's text, the scrub of host and path, the time) and appending it
    to the log (what an intercepted request pays for its record; no network in it)."""
    import time

    from sbx.proxy.context import ProxyContext
    from sbx.proxy.recorder import Recorder, Traffic

    rule = Rule("api.example.com", ("GET",), (), "allow", "./bench", 0, "runtime")
    config = ProxyConfig(run_id="bench-record", state_home=work / "rec",
                         audit_log=work / "rec" / "audit.jsonl", network=None, sandbox="dev")
    ctx = ProxyContext(config, "runtime", lambda _m: None)
    sink = requestlog.JsonlSink(work / "rec-log" / requestlog.LOG_FILE)
    needles = ["bench-secret-value-0123456789", "sbx-proxy-managed-bench"]
    recorder = Recorder(ctx, sink, lambda: needles)
    started = time.perf_counter()
    for i in range(count):
        recorder.request(scheme="https", host="api.example.com", port=443, method="GET",
                         path=f"/repos/o/r/{i}", rule=rule, code="allowed",
                         credentials=["github"], traffic=Traffic(12, 3400, 200),
                         started=started)
    elapsed = time.perf_counter() - started
    sink.close()
    return elapsed / count


def run(requests: int, rounds: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sbx-bench-requestlog-"))
    try:
        pki = TestPKI.create(work / "pki", hosts=("localhost",), addresses=("127.0.0.1",))
        with Origin(pki) as origin:
            host = f"127.0.0.1:{origin.https_port}"
            url = f"https://127.0.0.1:{origin.https_port}/bench"
            proxies = {"logged": _proxy(work, "logged", host, pki.ca_file, logged=True),
                       "plain": _proxy(work, "plain", host, pki.ca_file, logged=False)}
            cacert = work / "trust.pem"
            cacert.write_bytes(pki.ca_file.read_bytes()
                               + proxies["logged"].ca_file.read_bytes()
                               + proxies["plain"].ca_file.read_bytes())
            times: dict[str, list[float]] = {"logged": [], "plain": []}
            medians: dict[str, list[float]] = {"logged": [], "plain": []}
            try:
                for proxy in proxies.values():  # warm-up: imports, CA leaves, threads
                    latencies(url, cacert, proxy.port, 20, work)
                for round_index in range(rounds):
                    order = ["logged", "plain"] if round_index % 2 == 0 else ["plain", "logged"]
                    for name in order:
                        got = latencies(url, cacert, proxies[name].port, requests, work)
                        times[name] += got
                        medians[name].append(statistics.median(got))
            finally:
                for proxy in proxies.values():
                    proxy.stop()
            log_dir = work / "logged-log"
            records = requestlog.read_records(log_dir).records
            log_bytes = sum(p.stat().st_size for p in log_dir.iterdir())
            per_record = record_cost(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    logged = statistics.median(times["logged"])
    plain = statistics.median(times["plain"])
    per_round = [round((a - b) * 1000, 3) for a, b in zip(medians["logged"], medians["plain"],
                                                          strict=True)]
    return {
        "requests": requests, "rounds": rounds,
        "logged_median_ms": round(logged * 1000, 3),
        "unlogged_median_ms": round(plain * 1000, 3),
        "added_median_ms": round((logged - plain) * 1000, 3),
        "added_median_ms_per_round": per_round,
        "added_median_of_rounds_ms": round(statistics.median(per_round), 3),
        "ratio": round(logged / plain, 3),
        "record_cost_ms": round(per_record * 1000, 4),
        "records": len(records),
        "bytes_per_record": round(log_bytes / max(1, len(records)), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (2 <= args.requests <= 2000 and 1 <= args.rounds <= 15):
        parser.error("--requests 2..2000, --rounds 1..15")
    if shutil.which("curl") is None:
        print("bench/requestlog.py needs curl on PATH", file=sys.stderr)
        return 1
    try:
        result = run(args.requests, args.rounds)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        print(f"benchmark could not run: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    r = result
    print(f"{r['requests']} intercepted keep-alive GETs per side, {r['rounds']} interleaved "
          "rounds")
    print(f"  median per request: logged {r['logged_median_ms']} ms, unlogged "
          f"{r['unlogged_median_ms']} ms (ratio {r['ratio']})")
    print(f"  added by the log: {r['added_median_ms']} ms per request (median of rounds "
          f"{r['added_median_of_rounds_ms']} ms; per round {r['added_median_ms_per_round']}); "
          "target <= 0.2 ms")
    print(f"  in-process cost of one record (build + append): {r['record_cost_ms']} ms")
    print(f"  {r['records']} records, {r['bytes_per_record']} bytes each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
