"""What the egress proxy costs: throughput tunnelled and latency intercepted, vs direct.

Usage::

    .venv/bin/python bench/proxy.py [--mib 200] [--requests 200] [--rounds 3] [--json]

Everything runs on 127.0.0.1: the test origin (``tests/support/origin.py``: HTTPS with a test CA,
threads in this process) and the proxy as ``sbx run`` starts it (``python -m
sbx.domain.egress.proxy``,
its own process). The client is ``curl`` (C, so the client adds the same small cost to both
sides). Side by side in one run:

1. Throughput: ``GET /bytes/<MiB>`` over HTTPS, direct to the origin vs through the proxy as a
   CONNECT tunnel (an unbounded rule naming ``127.0.0.1:<port>``: no interception), ``--rounds``
   alternating rounds; ratios of the best and of the medians. Target: tunnelled >= 70 % of
   direct. The proxy's own CPU time per GiB (from /proc) is printed too: on a small machine
   the origin, curl and the kernel's second loopback hop share the cores, so the ratio
   measures the machine as much as the proxy.
2. Latency: ``--requests`` keep-alive GETs on one connection, direct vs through the proxy with
   TLS interception (a bounded rule: ``methods: [GET]``, so every request is decided, and its
   TLS terminated with the sbx CA and re-originated to the origin). Median per request.
   Target: <= 2 ms added.

Every loop is bounded (rounds <= 10, requests <= 2000, sizes <= 2048 MiB, every subprocess has a
timeout). Nothing is asserted: the numbers and ratios are printed (exit 0), or exit 1 when the
benchmark could not run. No traffic leaves loopback.
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

from sbx.domain.egress.proxyconfig import ProxyConfig  # noqa: E402
from sbx.domain.kits.compose import Network, NetworkPhase, Rule  # noqa: E402
from tests.support.origin import Origin, ProxyProcess, TestPKI  # noqa: E402

CURL_TIMEOUT = 300


def _network(host: str, *, bounded: bool) -> Network:
    rule = Rule(host, ("GET",) if bounded else (), (), "allow", "./bench", 0, "runtime")
    return Network(2, NetworkPhase(), NetworkPhase(allow=(rule,)), False, ())


def _proxy(work: Path, name: str, network: Network, origin_ca: Path) -> ProxyProcess:
    home = work / name
    config = ProxyConfig(run_id=f"bench-{name}", state_home=home, audit_log=home / "audit.jsonl",
                         network=network, explain_command="sbx explain",
                         upstream_ca_file=origin_ca)  # trusts the test origin; no upstream proxy
    return ProxyProcess(config, work / f"{name}.json")


def _curl(args: list[str]) -> str:
    done = subprocess.run(["curl", "-sS", "--fail", *args], capture_output=True, text=True,
                          timeout=CURL_TIMEOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"curl failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc; 0 elsewhere)."""
    import os

    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(url: str, cacert: Path, proxy: int | None) -> float:
    """Bytes per second of one download (curl's own measurement)."""
    args = ["-o", "/dev/null", "-w", "%{speed_download}", "--cacert", str(cacert)]
    if proxy is not None:
        args += ["--proxy", f"http://127.0.0.1:{proxy}"]
    return float(_curl([*args, url]))


def latencies(url: str, cacert: Path, proxy: int | None, count: int, work: Path) -> list[float]:
    """Seconds per request for ``count`` keep-alive requests on one connection."""
    config = work / "curl-requests.txt"
    config.write_text("".join(f'url = "{url}"\noutput = "/dev/null"\n' for _ in range(count)))
    args = ["-K", str(config), "-w", "%{time_total} %{num_connects}\n", "--cacert", str(cacert)]
    if proxy is not None:
        args += ["--proxy", f"http://127.0.0.1:{proxy}"]
    lines = _curl(args).split()
    times = [float(x) for x in lines[0::2]]
    connects = sum(int(x) for x in lines[1::2])
    if len(times) != count or connects != 1:
        raise RuntimeError(f"expected {count} requests on 1 connection, got {len(times)} "
                           f"requests and {connects} connections")
    return times[1:]  # the first one pays the handshakes


def run(mib: int, requests: int, rounds: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sbx-bench-proxy-"))
    try:
        pki = TestPKI.create(work / "pki")
        with Origin(pki) as origin:
            port = origin.https_port
            authority = f"127.0.0.1:{port}"
            big = f"https://{authority}/bytes/{mib * 1024 * 1024}"
            small = f"https://{authority}/hello"
            tunnel_net = _network(authority, bounded=False)
            intercept_net = _network(authority, bounded=True)
            with _proxy(work, "tunnel", tunnel_net, pki.ca_file) as tunnel, \
                    _proxy(work, "intercept", intercept_net, pki.ca_file) as intercept:
                both = work / "trust.pem"
                both.write_bytes(pki.ca_file.read_bytes() + intercept.ca_file.read_bytes())
                direct_bps: list[float] = []
                tunnel_bps: list[float] = []
                cpu_before = cpu_seconds(tunnel.proc.pid)
                for _ in range(rounds):
                    direct_bps.append(throughput(big, pki.ca_file, None))
                    tunnel_bps.append(throughput(big, pki.ca_file, tunnel.port))
                proxy_cpu = cpu_seconds(tunnel.proc.pid) - cpu_before
                direct_lat = latencies(small, pki.ca_file, None, requests, work)
                proxied_lat = latencies(small, both, intercept.port, requests, work)
                direct_lat += latencies(small, pki.ca_file, None, requests, work)
                proxied_lat += latencies(small, both, intercept.port, requests, work)
                seen = len(origin.requests())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    direct_best, tunnel_best = max(direct_bps), max(tunnel_bps)
    direct_median = statistics.median(direct_lat)
    proxied_median = statistics.median(proxied_lat)
    return {
        "download_mib": mib,
        "rounds": rounds,
        "direct_mib_s": [round(b / 2**20, 1) for b in direct_bps],
        "tunnel_mib_s": [round(b / 2**20, 1) for b in tunnel_bps],
        "tunnel_vs_direct": round(tunnel_best / direct_best, 3),
        "tunnel_vs_direct_median": round(statistics.median(tunnel_bps)
                                         / statistics.median(direct_bps), 3),
        "proxy_cpu_s_per_gib": round(proxy_cpu / (rounds * mib / 1024), 3),
        "requests": requests,
        "direct_median_ms": round(direct_median * 1000, 3),
        "intercepted_median_ms": round(proxied_median * 1000, 3),
        "intercepted_p90_ms": round(statistics.quantiles(proxied_lat, n=10)[-1] * 1000, 3),
        "direct_p90_ms": round(statistics.quantiles(direct_lat, n=10)[-1] * 1000, 3),
        "added_median_ms": round((proxied_median - direct_median) * 1000, 3),
        "origin_requests": seen,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (1 <= args.mib <= 2048 and 2 <= args.requests <= 2000 and 1 <= args.rounds <= 10):
        parser.error("--mib 1..2048, --requests 2..2000, --rounds 1..10")
    if shutil.which("curl") is None:
        print("bench/proxy.py needs curl on PATH", file=sys.stderr)
        return 1
    try:
        result = run(args.mib, args.requests, args.rounds)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        print(f"benchmark could not run: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    r = result
    print(f"throughput, {r['download_mib']} MiB over HTTPS, {r['rounds']} rounds (MiB/s)")
    print(f"  direct            best {max(r['direct_mib_s']):8.1f}   {r['direct_mib_s']}")
    print(f"  proxy, tunnelled  best {max(r['tunnel_mib_s']):8.1f}   {r['tunnel_mib_s']}")
    print(f"  ratio             best {r['tunnel_vs_direct']:8.1%}   median "
          f"{r['tunnel_vs_direct_median']:.1%}   (target >= 70%)")
    print(f"  proxy CPU         {r['proxy_cpu_s_per_gib']:.2f} s per GiB tunnelled")
    print(f"latency, {r['requests']} keep-alive GETs x 2 runs (ms per request)")
    print(f"  direct            median {r['direct_median_ms']:7.3f}   "
          f"p90 {r['direct_p90_ms']:7.3f}")
    print(f"  proxy, intercepted median {r['intercepted_median_ms']:7.3f}   "
          f"p90 {r['intercepted_p90_ms']:7.3f}")
    print(f"  added             median {r['added_median_ms']:7.3f}   (target <= 2 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
