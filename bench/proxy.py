"""What the egress proxy costs: throughput tunnelled and latency intercepted, vs direct.

Usage::

    .venv/bin/python bench/proxy.py [--mib 200] [--requests 200] [--rounds 5] [--json]

Everything runs on 127.0.0.1: the test origin (``tests/support/origin.py``: HTTPS with a test CA,
threads in this process) and the proxy as ``sbx run`` starts it (``python -m
sbx.proxy``,
its own process). The client is ``curl`` (C, so the client adds the same small cost to both
sides). Side by side in one run:

1. Throughput: ``GET /bytes/<MiB>`` over HTTPS, direct to the origin vs through the proxy as a
   CONNECT tunnel (an unbounded rule naming ``127.0.0.1:<port>``: no interception), and through
   a second proxy whose raw tunnels are relayed with ``splice(2)`` (off by default; the same
   code with ``SPLICE_BY_DEFAULT`` set), ``--rounds`` interleaved rounds (the order rotates
   each round); ratios of the best and of the medians. Target: tunnelled >= 80 % of direct.
   The CPU seconds per GiB of every party (the origin: this process; curl; the proxy, from
   /proc) are printed too, and the ratio they predict where the cores are the limit (direct's
   CPU per byte over the side's): other work on a shared machine moves the throughput ratio
   a lot and the CPU per byte hardly at all.
2. Latency: ``--requests`` keep-alive GETs on one connection, direct vs through the proxy with
   TLS interception (a bounded rule: ``methods: [GET]``, so every request is decided, and its
   TLS terminated with the sbx CA and re-originated to the origin). Median per request.
   Target: <= 2 ms added.
3. Memory: each proxy's resident set (VmRSS from /proc) once ready and idle, its peak (VmHWM)
   after the transfers or requests, and what it holds after them.

Every loop is bounded (rounds <= 10, requests <= 2000, sizes <= 2048 MiB, every subprocess has a
timeout). Nothing is asserted: the numbers and ratios are printed (exit 0), or exit 1 when the
benchmark could not run. No traffic leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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


# The proxy process with its raw tunnels spliced (off by default: bench/README.md says why).
SPLICED = ("-c", "import sys; from sbx.proxy import relay; "
                 "relay.SPLICE_BY_DEFAULT = True; "
                 "from sbx.proxy.process import main; sys.exit(main())")


def _proxy(work: Path, name: str, network: Network, origin_ca: Path, *,
           spliced: bool = False) -> ProxyProcess:
    home = work / name
    config = ProxyConfig(run_id=f"bench-{name}", state_home=home, audit_log=home / "audit.jsonl",
                         network=network, explain_command="sbx explain",
                         upstream_ca_file=origin_ca)  # trusts the test origin; no upstream proxy
    if spliced:
        return ProxyProcess(config, work / f"{name}.json", python_args=SPLICED)
    return ProxyProcess(config, work / f"{name}.json")


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of a process, in KiB (Linux /proc; empty elsewhere)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


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


def throughput(url: str, cacert: Path, proxy: int | None,
               proxy_pid: int | None = None) -> tuple[float, dict[str, float]]:
    """Bytes per second of one download (curl's own measurement), and the CPU seconds each
    party spent on it: the origin (this process: its TLS threads), curl, the proxy."""
    args = ["-o", "/dev/null", "-w", "%{speed_download}", "--cacert", str(cacert)]
    if proxy is not None:
        args += ["--proxy", f"http://127.0.0.1:{proxy}"]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = time.process_time()
    proxy_cpu = cpu_seconds(proxy_pid) if proxy_pid is not None else 0.0
    speed = float(_curl([*args, url]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {"origin": time.process_time() - own,
           "curl": (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime),
           "proxy": cpu_seconds(proxy_pid) - proxy_cpu if proxy_pid is not None else 0.0}
    return speed, cpu


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
                    _proxy(work, "spliced", tunnel_net, pki.ca_file, spliced=True) as spliced, \
                    _proxy(work, "intercept", intercept_net, pki.ca_file) as intercept:
                both = work / "trust.pem"
                both.write_bytes(pki.ca_file.read_bytes() + intercept.ca_file.read_bytes())
                idle = {name: memory_kib(p.proc.pid) for name, p in
                        (("tunnel", tunnel), ("spliced", spliced), ("intercept", intercept))}
                sides: dict[str, ProxyProcess | None] = {"direct": None, "tunnel": tunnel,
                                                         "spliced": spliced}
                bps: dict[str, list[float]] = {name: [] for name in sides}
                cpu: dict[str, dict[str, float]] = {
                    name: {"origin": 0.0, "curl": 0.0, "proxy": 0.0} for name in sides}
                order = list(sides)
                for _ in range(rounds):
                    for name in order:
                        side = sides[name]
                        speed, spent = throughput(big, pki.ca_file,
                                                  side.port if side else None,
                                                  side.proc.pid if side else None)
                        bps[name].append(speed)
                        for party, seconds in spent.items():
                            cpu[name][party] += seconds
                    order = order[1:] + order[:1]  # rotate: no side always goes first
                after = {"tunnel": memory_kib(tunnel.proc.pid),
                         "spliced": memory_kib(spliced.proc.pid)}
                direct_lat = latencies(small, pki.ca_file, None, requests, work)
                proxied_lat = latencies(small, both, intercept.port, requests, work)
                direct_lat += latencies(small, pki.ca_file, None, requests, work)
                proxied_lat += latencies(small, both, intercept.port, requests, work)
                after["intercept"] = memory_kib(intercept.proc.pid)
                seen = len(origin.requests())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    direct_bps, tunnel_bps, spliced_bps = bps["direct"], bps["tunnel"], bps["spliced"]
    direct_median = statistics.median(direct_lat)
    proxied_median = statistics.median(proxied_lat)
    gib = rounds * mib / 1024

    def mib_of(kib: int | None) -> float | None:
        return None if kib is None else round(kib / 1024, 1)

    memory = {name: {"idle_rss_mib": mib_of(idle[name].get("VmRSS")),
                     "peak_rss_mib": mib_of(after[name].get("VmHWM")),
                     "rss_after_mib": mib_of(after[name].get("VmRSS"))} for name in idle}
    return {
        "download_mib": mib,
        "rounds": rounds,
        "direct_mib_s": [round(b / 2**20, 1) for b in direct_bps],
        "tunnel_mib_s": [round(b / 2**20, 1) for b in tunnel_bps],
        "spliced_mib_s": [round(b / 2**20, 1) for b in spliced_bps],
        "tunnel_vs_direct": round(max(tunnel_bps) / max(direct_bps), 3),
        "tunnel_vs_direct_median": round(statistics.median(tunnel_bps)
                                         / statistics.median(direct_bps), 3),
        "spliced_vs_direct": round(max(spliced_bps) / max(direct_bps), 3),
        "spliced_vs_direct_median": round(statistics.median(spliced_bps)
                                           / statistics.median(direct_bps), 3),
        "tunnel_vs_direct_per_round": [round(t / d, 3) for t, d in zip(tunnel_bps, direct_bps,
                                                                       strict=True)],
        "proxy_cpu_s_per_gib": round(cpu["tunnel"]["proxy"] / gib, 3),
        "spliced_cpu_s_per_gib": round(cpu["spliced"]["proxy"] / gib, 3),
        # CPU seconds per GiB of every party, and what they predict for a machine where the
        # cores are the limit: direct's total over the side's total (other work on the
        # machine slows everyone but hardly changes CPU time per byte)
        "cpu_s_per_gib": {name: {party: round(v / gib, 3) for party, v in parties.items()}
                          for name, parties in cpu.items()},
        "cpu_bound_ratio": {name: round(sum(cpu["direct"].values())
                                        / sum(cpu[name].values()), 3)
                            for name in ("tunnel", "spliced")},
        "requests": requests,
        "direct_median_ms": round(direct_median * 1000, 3),
        "intercepted_median_ms": round(proxied_median * 1000, 3),
        "intercepted_p90_ms": round(statistics.quantiles(proxied_lat, n=10)[-1] * 1000, 3),
        "direct_p90_ms": round(statistics.quantiles(direct_lat, n=10)[-1] * 1000, 3),
        "added_median_ms": round((proxied_median - direct_median) * 1000, 3),
        "memory": memory,
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
    print(f"throughput, {r['download_mib']} MiB over HTTPS, {r['rounds']} interleaved rounds "
          "(MiB/s)")
    print(f"  direct            best {max(r['direct_mib_s']):8.1f}   {r['direct_mib_s']}")
    print(f"  proxy, tunnelled  best {max(r['tunnel_mib_s']):8.1f}   {r['tunnel_mib_s']}")
    print(f"  proxy, spliced    best {max(r['spliced_mib_s']):8.1f}   {r['spliced_mib_s']}")
    print(f"  ratio, tunnelled  best {r['tunnel_vs_direct']:8.1%}   median "
          f"{r['tunnel_vs_direct_median']:.1%}   (target >= 80%)")
    print(f"  ratio, spliced    best {r['spliced_vs_direct']:8.1%}   median "
          f"{r['spliced_vs_direct_median']:.1%}")
    print("  CPU s per GiB     origin / curl / proxy")
    for name, parties in r["cpu_s_per_gib"].items():
        print(f"    {name:15s} {parties['origin']:.2f} / {parties['curl']:.2f} / "
              f"{parties['proxy']:.2f}")
    print(f"  CPU-bound ratio   tunnelled {r['cpu_bound_ratio']['tunnel']:.1%}   spliced "
          f"{r['cpu_bound_ratio']['spliced']:.1%}   (direct's CPU per byte / the side's)")
    print(f"latency, {r['requests']} keep-alive GETs x 2 runs (ms per request)")
    print(f"  direct            median {r['direct_median_ms']:7.3f}   "
          f"p90 {r['direct_p90_ms']:7.3f}")
    print(f"  proxy, intercepted median {r['intercepted_median_ms']:7.3f}   "
          f"p90 {r['intercepted_p90_ms']:7.3f}")
    print(f"  added             median {r['added_median_ms']:7.3f}   (target <= 2 ms)")
    print("memory of the proxy process (MiB resident: idle / peak / after)")
    for name, m in r["memory"].items():
        print(f"  {name:17s} {m['idle_rss_mib']} / {m['peak_rss_mib']} / {m['rss_after_mib']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
