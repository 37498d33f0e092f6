"""Registry references are normalised as Docker normalises them, so `docker/sbx-kit-x:1`,
`docker.io/docker/sbx-kit-x:1` and `index.docker.io/docker/sbx-kit-x:1` are one kit in the lock,
and a loopback registry's references stay as written."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.registry import DOCKER_HUB_API, normalize_reference, parse_reference

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(("written", "normal"), [
    ("docker/sbx-kit-x:1", "docker.io/docker/sbx-kit-x:1"),
    ("docker/sbx-kit-x", "docker.io/docker/sbx-kit-x:latest"),
    ("docker.io/docker/sbx-kit-x:1", "docker.io/docker/sbx-kit-x:1"),
    ("index.docker.io/docker/sbx-kit-x:1", "docker.io/docker/sbx-kit-x:1"),
    ("ubuntu", "docker.io/library/ubuntu:latest"),
    ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
    ("docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
    (f"docker/sbx-kit-x@{DIGEST}", f"docker.io/docker/sbx-kit-x@{DIGEST}"),
    (f"docker/sbx-kit-x:1@{DIGEST}", f"docker.io/docker/sbx-kit-x:1@{DIGEST}"),
    ("127.0.0.1:5000/kits/x:1", "127.0.0.1:5000/kits/x:1"),
    ("127.0.0.1:5000/kits/x", "127.0.0.1:5000/kits/x:latest"),
    ("localhost/x", "localhost/x:latest"),
    ("ghcr.io/o/r:2", "ghcr.io/o/r:2"),
])
def test_references_normalise_as_docker_does(written: str, normal: str) -> None:
    assert normalize_reference(written) == normal
    assert normalize_reference(normal) == normal  # idempotent


def test_docker_hub_short_names_are_read_from_hubs_registry_api() -> None:
    ref = parse_reference("docker/sbx-kit-x:1")
    assert (ref.host, ref.repository, ref.tag) == ("docker.io", "docker/sbx-kit-x", "1")
    assert ref.canonical == "docker.io/docker/sbx-kit-x:1"
    assert ref.api_host == DOCKER_HUB_API == "registry-1.docker.io"
    assert parse_reference("127.0.0.1:5000/kits/x:1").api_host == "127.0.0.1:5000"


@pytest.mark.parametrize("text", ["", " docker/x:1", "docker/x:1 ", "docker/X:1", "docker/x:a b"])
def test_malformed_references_are_invalid_arguments(text: str) -> None:
    with pytest.raises(SbxError) as caught:
        parse_reference(text)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
