"""Tunnel throughput on the data plane beside the engine: the proxy as a container.

Usage::

    .venv/bin/python bench/dataplane.py [--mib 200] [--rounds 3] [--json]

Everything is a container on the local engine, on two networks this bench creates (internal,
with no host address, and egress; tests/support/proxycontainer.py): an origin on the egress
network that sends ``--mib`` MiB to every connection, and the client, timed from connect to
the last byte inside the container (so container start-up is not counted). Side by side, in
rotated order each round:

1. ``direct``: the client on the egress network, straight to the origin (what `docker run`
   gives a container with a route out);
2. ``sbx-proxy``: the client on the internal network, through the real sbx proxy in its
   container as a CONNECT tunnel (an unbounded rule naming the origin's address and port);
3. ``plain-relay``: the same shape without sbx: a 30-line asyncio CONNECT relay in the same
   image and networks, the floor a Python relay of this shape has here.

Ratios are of medians. Loops are bounded (rounds <= 10, size <= 2048 MiB, every call has a
timeout); nothing is asserted (exit 0 with results, 1 when it could not run). Traffic stays
inside the networks it made.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "cli"))

from sbx.domain.kits.compose import Network, NetworkPhase, Rule  # noqa: E402
from tests.support.proxycontainer import PORT, DataPlane, docker, proxy_config  # noqa: E402

ORIGIN_PORT = 9000
RELAY_PORT = 3129

ORIGIN = """\
import socket, sys, threading
size = int(sys.argv[1]) * 1024 * 1024
chunk = b"x" * (1024 * 1024)
server = socket.create_server(("0.0.0.0", 9000), backlog=16)
def send(conn):
    with conn:
        left = size
        while left:
            part = chunk[:min(left, len(chunk))]
            conn.sendall(part)
            left -= len(part)
while True:
    conn, _ = server.accept()
    threading.Thread(target=send, args=(conn,), daemon=True).start()
"""

RELAY = """\
import asyncio
async def pump(reader, writer):
    try:
        while data := await reader.read(262144):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
async def serve(reader, writer):
    head = await reader.readuntil(b"\\r\\n\\r\\n")
    host, port = head.split()[1].decode().rsplit(":", 1)
    up_reader, up_writer = await asyncio.open_connection(host, int(port))
    writer.write(b"HTTP/1.1 200 Connection established\\r\\n\\r\\n")
    await writer.drain()
    await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
async def main():
    server = await asyncio.start_server(serve, "0.0.0.0", 3129)
    await server.serve_forever()
asyncio.run(main())
"""

CLIENT = """\
import base64, socket, sys, time
mode, target, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]) * 1024 * 1024
host, port = target.rsplit(":", 1)
start = time.perf_counter()
if mode == "direct":
    conn = socket.create_connection((host, int(port)), timeout=60)
else:
    via, token = sys.argv[4], sys.argv[5]
    vhost, vport = via.rsplit(":", 1)
    conn = socket.create_connection((vhost, int(vport)), timeout=60)
    auth = base64.b64encode(f"sbx:{token}".encode()).decode()
    conn.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n"
                 f"Proxy-Authorization: Basic {auth}\\r\\n\\r\\n".encode())
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += conn.recv(1)
    assert b" 200 " in head.split(b"\\r\\n")[0], head
received = 0
buffer = bytearray(1024 * 1024)
while received < expected:
    count = conn.recv_into(buffer)
    if not count:
        break
    received += count
elapsed = time.perf_counter() - start
print(received, elapsed)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    mib, rounds = min(max(args.mib, 1), 2048), min(max(args.rounds, 1), 10)
    plane = DataPlane()
    try:
        plane.build_image()
        origin = plane.run_detached(f"origin-{plane.tag}", plane.egress, "-c", ORIGIN, str(mib))
        relay = plane.run_detached(f"relay-{plane.tag}", plane.internal, "-c", RELAY)
        docker("network", "connect", plane.egress, relay)
        target = f"{plane.address(origin, plane.egress)}:{ORIGIN_PORT}"
        token = secrets.token_hex(32)
        allow = Rule(target, (), (), "allow", "./bench", 0, "runtime")
        config = proxy_config(Network(2, NetworkPhase(), NetworkPhase((allow,), ()), False, ()),
                              plane.network_value("Subnet"))
        proxy = f"proxy-{plane.tag}"
        with tempfile.TemporaryDirectory() as ca_home:
            plane.start_proxy(proxy, config, token, Path(ca_home) / "state")
        sides = {
            "direct": (plane.egress, ["direct", target, str(mib)]),
            "sbx-proxy": (plane.internal, ["proxy", target, str(mib),
                                           f"{plane.address(proxy, plane.internal)}:{PORT}",
                                           token]),
            "plain-relay": (plane.internal, ["relay", target, str(mib),
                                             f"{plane.address(relay, plane.internal)}:"
                                             f"{RELAY_PORT}", token]),
        }
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        order = list(sides)
        for number in range(rounds):
            print(f"bench: round {number + 1}/{rounds}", file=sys.stderr)
            for name in order[number % 3:] + order[:number % 3]:
                network, argv = sides[name]
                received, elapsed = plane.run(network, "-c", CLIENT, *argv).split()
                if int(received) != mib * 1024 * 1024:
                    raise RuntimeError(f"{name} received {received} bytes")
                seconds[name].append(float(elapsed))
        rates = {name: mib / statistics.median(values) for name, values in seconds.items()}
        result = {
            "mib": mib, "rounds": rounds,
            "mib_per_s": {name: round(rate, 1) for name, rate in rates.items()},
            "sbx_proxy_vs_direct": round(rates["sbx-proxy"] / rates["direct"], 3),
            "plain_relay_vs_direct": round(rates["plain-relay"] / rates["direct"], 3),
            "sbx_proxy_vs_plain_relay": round(rates["sbx-proxy"] / rates["plain-relay"], 3),
        }
    except (RuntimeError, OSError, ValueError) as error:
        print(f"bench: could not run: {error}", file=sys.stderr)
        return 1
    finally:
        plane.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, rate in result["mib_per_s"].items():
            print(f"{name:<12} {rate:8.1f} MiB/s  (median of {rounds})")
        print(f"sbx proxy / direct      {result['sbx_proxy_vs_direct']:.3f} (goal >= 0.8)")
        print(f"plain relay / direct    {result['plain_relay_vs_direct']:.3f}")
        print(f"sbx proxy / plain relay {result['sbx_proxy_vs_plain_relay']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
