"""``-p/--publish [HOST_IP:][HOST_PORT:]PORT[/tcp]``: Docker's syntax, parsed and checked.

A published port goes through the same forwarder as a kit's ``port@1`` (sbx.seams.ports), so
it has the same bounds: tcp only, and a loopback address only (127.0.0.1 when none is given;
``::1`` in brackets). An empty or omitted host port is any free one. Nothing here touches a
socket: whether a host port is free is the forwarder's to find out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

DEFAULT_HOST_IP: Final = "127.0.0.1"
FORMS: Final = "[HOST_IP:][HOST_PORT:]PORT[/tcp], e.g. 8080, 9000:8080 or 127.0.0.1::8080"


@dataclass(frozen=True)
class PublishSpec:
    """One ``-p``: the container port, and where on the host it is published (port 0: any
    free one)."""

    container_port: int
    host_ip: str = DEFAULT_HOST_IP
    host_port: int = 0
    transport: str = "tcp"

    def as_dict(self) -> dict[str, object]:
        return {"container": self.container_port, "host": self.host_ip,
                "host_port": self.host_port, "transport": self.transport}


def parse_publish(text: str) -> PublishSpec:
    """One ``-p`` value; ``invalid_argument`` when malformed, ``publish_refused`` when well
    formed but outside what sbx publishes (udp, an address beyond loopback)."""
    body, slash, transport = text.strip().partition("/")
    if slash and transport not in ("tcp", "udp", "sctp"):
        raise _invalid(text, f"unknown transport {transport!r}")
    host_ip, host_port_text, port_text = _split(text, body)
    container_port = _port(text, port_text, "the container port")
    host_port = 0 if host_port_text == "" else _port(text, host_port_text, "the host port")
    address = _address(text, host_ip) if host_ip else DEFAULT_HOST_IP
    transport = transport or "tcp"
    if transport != "tcp":
        raise SbxError(Reason.PUBLISH_REFUSED,
                       f"-p {text}: only tcp ports can be published ({transport} cannot be "
                       "forwarded)",
                       hint=f"Publish it over tcp: `-p {_shown(address, host_port_text)}"
                            f"{container_port}`.",
                       details={"publish": text, "transport": transport})
    if not ipaddress.ip_address(address).is_loopback:
        raise SbxError(Reason.PUBLISH_REFUSED,
                       f"-p {text}: sbx publishes ports on loopback only ({address} is not a "
                       "loopback address), so nothing beyond this machine reaches the sandbox",
                       hint=f"Publish it on loopback: `-p {_shown(DEFAULT_HOST_IP, host_port_text)}"
                            f"{container_port}`.",
                       details={"publish": text, "address": address})
    return PublishSpec(container_port, address, host_port, transport)


def parse_publishes(texts: Sequence[str]) -> tuple[PublishSpec, ...]:
    """Every ``-p`` of a request; the same host address and port twice is refused."""
    specs = tuple(parse_publish(text) for text in texts)
    seen: dict[tuple[str, int], str] = {}
    for text, spec in zip(texts, specs, strict=True):
        if spec.host_port == 0:
            continue
        key = (spec.host_ip, spec.host_port)
        if key in seen:
            raise SbxError(Reason.INVALID_ARGUMENT,
                           f"-p {text}: host port {_hostport(spec)} is already published by "
                           f"-p {seen[key]}",
                           hint="Give each -p its own host port, or leave the host port out "
                                f"(`-p {spec.container_port}`) for a free one.",
                           details={"publish": text, "host_port": spec.host_port})
        seen[key] = text
    return specs


def _split(text: str, body: str) -> tuple[str, str, str]:
    """(host ip, host port, container port) of ``[IP:][HOST_PORT:]PORT``; ``[v6]`` in
    brackets."""
    if body.startswith("["):
        address, bracket, rest = body[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise _invalid(text, "an IPv6 address goes in brackets: [::1]:HOST_PORT:PORT")
        host_port, colon, port = rest[1:].partition(":")
        if not colon:
            raise _invalid(text, "an address needs a host port (or none: [::1]::PORT)")
        return address or "-", host_port, port
    parts = body.split(":")
    if len(parts) == 1:
        return "", "", parts[0]
    if len(parts) == 2:
        return "", parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise _invalid(text, "too many ':' (an IPv6 address goes in brackets: [::1]::PORT)")


def _port(text: str, value: str, what: str) -> int:
    first, dash, last = value.partition("-")
    if dash and first.isdigit() and last.isdigit():
        raise _invalid(text, f"{what} is a range ({value}); publish each port with its own -p")
    if not value.isdigit() or not value.isascii():
        raise _invalid(text, f"{what} must be a number from 1 to 65535 (got {value!r})")
    port = int(value)
    if not 1 <= port <= 65535:
        raise _invalid(text, f"{what} must be a number from 1 to 65535 (got {port})")
    return port


def _address(text: str, value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise _invalid(text, f"the host address must be an IP address (got {value!r})") from None


def _shown(address: str, host_port: str) -> str:
    shown = f"[{address}]" if ":" in address else address
    return f"{shown}:{host_port}:"


def _hostport(spec: PublishSpec) -> str:
    return f"{_shown(spec.host_ip, str(spec.host_port))[:-1]}"


def _invalid(text: str, why: str) -> SbxError:
    return SbxError(Reason.INVALID_ARGUMENT, f"-p {text}: {why}",
                    hint=f"Write it as {FORMS}.", details={"publish": text})


__all__ = ["DEFAULT_HOST_IP", "PublishSpec", "parse_publish", "parse_publishes"]
