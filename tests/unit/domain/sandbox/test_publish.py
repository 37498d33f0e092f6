"""-p/--publish: Docker's syntax parsed, and everything sbx does not publish refused with a
reason code and a pasteable fix."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.publish import PublishSpec, parse_publish, parse_publishes


@pytest.mark.parametrize(("text", "expected"), [
    ("8080", PublishSpec(8080)),
    ("8080/tcp", PublishSpec(8080)),
    ("9000:8080", PublishSpec(8080, "127.0.0.1", 9000)),
    ("9000:8080/tcp", PublishSpec(8080, "127.0.0.1", 9000)),
    (":8080", PublishSpec(8080)),
    ("127.0.0.1:9000:8080", PublishSpec(8080, "127.0.0.1", 9000)),
    ("127.0.0.1::8080", PublishSpec(8080, "127.0.0.1", 0)),
    ("127.0.0.2::8080", PublishSpec(8080, "127.0.0.2", 0)),  # all of 127/8 is loopback
    ("::8080", PublishSpec(8080)),  # an empty address is the default one
    ("[::1]:9000:8080", PublishSpec(8080, "::1", 9000)),
    ("[::1]::8080/tcp", PublishSpec(8080, "::1", 0)),
    ("1", PublishSpec(1)),
    ("65535:65535", PublishSpec(65535, "127.0.0.1", 65535)),
    (" 8080 ", PublishSpec(8080)),
])
def test_the_forms_docker_takes(text: str, expected: PublishSpec) -> None:
    assert parse_publish(text) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("0", "from 1 to 65535 (got 0)"),
    ("65536", "from 1 to 65535 (got 65536)"),
    ("0:8080", "the host port must be a number from 1 to 65535 (got 0)"),
    ("70000:8080", "the host port must be a number from 1 to 65535"),
    ("", "the container port must be a number"),
    ("http", "the container port must be a number"),
    ("-1", "the container port must be a number"),
    ("8080:", "the container port must be a number"),
    ("8080/", "unknown transport ''"),
    ("8080/tcpx", "unknown transport 'tcpx'"),
    ("\uff18\uff10\uff18\uff10", "must be a number"),  # fullwidth digits: isdigit(), not ASCII
    ("8000-8010", "is a range (8000-8010)"),
    ("8000-8010:8000-8010", "is a range"),
    ("localhost:9000:8080", "must be an IP address (got 'localhost')"),
    ("127.0.0.256:9000:8080", "must be an IP address"),
    ("1:2:3:4", "too many ':'"),
    ("::1:9000:8080", "too many ':'"),
    ("[::1]8080", "an IPv6 address goes in brackets"),
    ("[::1:9000:8080", "an IPv6 address goes in brackets"),
    ("[::1]:8080", "an address needs a host port"),
    ("[]:9000:8080", "must be an IP address"),
    ("[nope]:9000:8080", "must be an IP address"),
])
def test_malformed_is_invalid_argument_with_the_forms(text: str, says: str) -> None:
    with pytest.raises(SbxError) as caught:
        parse_publish(text)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
    assert says in caught.value.message
    assert caught.value.message.startswith(f"-p {text}")
    assert caught.value.hint is not None and "[HOST_IP:][HOST_PORT:]PORT[/tcp]" in caught.value.hint


@pytest.mark.parametrize(("text", "fix"), [
    ("0.0.0.0:9000:8080", "-p 127.0.0.1:9000:8080"),
    ("0.0.0.0::8080", "-p 127.0.0.1::8080"),
    ("192.168.1.5:9000:8080", "-p 127.0.0.1:9000:8080"),
    ("[::]:9000:8080", "-p 127.0.0.1:9000:8080"),
    ("[2001:db8::1]::8080", "-p 127.0.0.1::8080"),
])
def test_beyond_loopback_is_refused_with_the_loopback_form(text: str, fix: str) -> None:
    with pytest.raises(SbxError) as caught:
        parse_publish(text)
    assert caught.value.reason is Reason.PUBLISH_REFUSED
    assert "loopback only" in caught.value.message
    assert caught.value.hint is not None and f"`{fix}`" in caught.value.hint
    assert parse_publish(fix.removeprefix("-p ")).host_ip == "127.0.0.1"  # the fix works


@pytest.mark.parametrize(("text", "fix"), [
    ("8080/udp", "-p 127.0.0.1::8080"),
    ("9000:53/udp", "-p 127.0.0.1:9000:53"),
    ("[::1]:9000:53/sctp", "-p [::1]:9000:53"),
])
def test_udp_and_sctp_are_refused_with_the_tcp_form(text: str, fix: str) -> None:
    with pytest.raises(SbxError) as caught:
        parse_publish(text)
    assert caught.value.reason is Reason.PUBLISH_REFUSED
    assert "only tcp" in caught.value.message
    assert caught.value.hint is not None and f"`{fix}`" in caught.value.hint
    assert parse_publish(fix.removeprefix("-p ")).transport == "tcp"


def test_the_same_host_port_twice_is_refused() -> None:
    with pytest.raises(SbxError) as caught:
        parse_publishes(["9000:8080", "127.0.0.1:9000:8081"])
    assert caught.value.reason is Reason.INVALID_ARGUMENT
    assert "host port 127.0.0.1:9000 is already published by -p 9000:8080" \
        in caught.value.message


def test_what_may_repeat() -> None:
    # Free host ports repeat; one container port on two host ports; one host port on two
    # loopback addresses.
    specs = parse_publishes(["8080", "8080", "9000:8080", "9001:8080", "[::1]:9000:8081"])
    assert [(s.host_ip, s.host_port, s.container_port) for s in specs] == [
        ("127.0.0.1", 0, 8080), ("127.0.0.1", 0, 8080), ("127.0.0.1", 9000, 8080),
        ("127.0.0.1", 9001, 8080), ("::1", 9000, 8081)]
    assert parse_publishes([]) == ()
