"""sbx explain's core: target grammar, and explain agreeing with enforcement's decide()."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.domain.egress.policy import decide
from sbx.domain.kits.kitset import effective_composition
from sbx.domain.sandbox.capabilities import SUPPORTED
from sbx.usecases import explain as core
from tests.support.kits import api_key_credential, capabilities, network_policy, rule

WORKLOAD = """\
schemaVersion: "3"
displayName: W
description: explain test workload
kind: workload
provides: ["w@1.0.0"]
capabilities:
  - type: com.docker.sandbox/network-policy@2
    config:
      install:
        allow: [pypi.org, "files.example.com:8443"]
      runtime:
        allow:
          - example.com
          - "*.cdn.example.com"
          - hosts: [httpbin.org]
            methods: [GET, POST]
            paths: [/get, /post/**]
  - type: com.docker.sandbox/not-a-real-thing@1
    optional: true
"""

GH = """\
schemaVersion: "3"
displayName: GH
description: explain test mixin
kind: mixin
provides: ["gh@2.0.0"]
""" + capabilities(
    network_policy(version=2, runtime=[
        "github.com",
        rule(["api.github.com"], methods=["GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"]),
    ], deny=[rule(["api.github.com"], methods=["DELETE"], paths=["/repos/**"])]),
    api_key_credential("github", "GH_TOKEN", "api.github.com", phase=["runtime"],
                       optional=True))

LOCKDOWN = """\
schemaVersion: "3"
displayName: Lockdown
description: explain test deny mixin
kind: mixin
provides: ["lockdown@1.0.0"]
capabilities:
  - type: com.docker.sandbox/network-policy@2
    config:
      runtime:
        deny: [example.com, github.com]
"""


def write_kits(root: Path, recipe: str | None = None) -> Path:
    """The kits ./w, ./gh and ./lockdown under ``root``; ``recipe``: the workload's dockerfile
    (explain WORKLOAD plans as `sbx run` does, which builds it)."""
    for name, text in (("w", WORKLOAD), ("gh", GH), ("lockdown", LOCKDOWN)):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / f"{name}.yaml").write_text(text, encoding="utf-8")
    if recipe is not None:
        (root / "w" / "w.dockerfile").write_text(recipe, encoding="utf-8")
    return root


# (mixins, phase, method, target)
CASES: list[tuple[tuple[str, ...], str, str | None, str]] = [
    ((), "runtime", None, "example.com"),
    ((), "runtime", None, "example.com:8080"),
    ((), "runtime", "GET", "https://example.com/anything"),
    ((), "runtime", None, "evil.example"),
    ((), "runtime", None, "a.cdn.example.com"),
    ((), "runtime", None, "a.b.cdn.example.com"),
    ((), "runtime", None, "cdn.example.com"),
    ((), "runtime", "GET", "https://httpbin.org/get"),
    ((), "runtime", "POST", "https://httpbin.org/post/x/y"),
    ((), "runtime", "DELETE", "https://httpbin.org/get"),
    ((), "runtime", "GET", "https://httpbin.org/status/200"),
    ((), "runtime", None, "httpbin.org"),
    ((), "runtime", "GET", "https://httpbin.org/%2e%2e/get"),
    ((), "install", None, "pypi.org"),
    ((), "install", None, "example.com"),
    ((), "runtime", None, "pypi.org"),
    ((), "install", None, "files.example.com:8443"),
    ((), "install", None, "files.example.com"),
    (("./gh",), "runtime", None, "github.com"),
    (("./gh",), "runtime", "GET", "https://api.github.com/user"),
    (("./gh",), "runtime", "DELETE", "https://api.github.com/repos/a/b"),
    (("./gh",), "runtime", "DELETE", "https://api.github.com/user/keys/1"),
    (("./gh",), "runtime", None, "api.github.com"),
    (("./gh",), "runtime", "DELETE", "api.github.com"),
    (("./gh", "./lockdown"), "runtime", None, "example.com"),
    (("./gh", "./lockdown"), "runtime", "GET", "https://github.com/"),
    (("./gh", "./lockdown"), "runtime", "GET", "https://api.github.com/user"),
    (("./lockdown",), "runtime", "get", "http://example.com/"),
    (("./lockdown",), "runtime", None, "EXAMPLE.COM."),
    ((), "runtime", None, "[::1]:443"),
    ((), "runtime", None, "127.0.0.1"),
]


def expected_decision(root: Path, mixins: tuple[str, ...], phase: str, method: str | None,
                      target: str) -> dict[str, Any]:
    """What enforcement decides: the run path's composition (kit.env expanded), then decide().
    (tests/integration/test_explain_requests.py drives `sbx explain` through this table.)"""
    kit_set = core.load("./w", mixins, (), cwd=root, state_home=root / "state")
    composition, _ = effective_composition(kit_set, {}, SUPPORTED)
    parsed = core.parse_target(target, method)
    decision = decide(composition.network, parsed.request(phase))  # type: ignore[arg-type]
    return {"allowed": decision.allowed, "code": decision.code}


@pytest.mark.slow
@pytest.mark.parametrize(("mixins", "phase", "method", "target"), CASES)
def test_explain_request_is_decide_on_the_composition(tmp_path: Path, mixins: tuple[str, ...],
                                                      phase: str, method: str | None,
                                                      target: str) -> None:
    root = write_kits(tmp_path)
    kit_set = core.load("./w", mixins, (), cwd=root, state_home=root / "state")
    composition, _ = effective_composition(kit_set, {}, SUPPORTED)
    result = core.explain_request(composition, [k.reference for k in kit_set.kits],
                                  core.parse_target(target, method), phase)  # type: ignore[arg-type]
    expected = expected_decision(root, mixins, phase, method, target)
    assert {"allowed": result.allowed, "code": result.decision.code} == expected


def test_agreement_table_is_large_enough() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize(("text", "method", "expected"), [
    ("example.com", None, ("example.com", 443, "https", None, None)),
    ("example.com:22", None, ("example.com", 22, "https", None, None)),
    ("https://example.com", None, ("example.com", 443, "https", "GET", "/")),
    ("http://example.com/a?b=1", "post", ("example.com", 80, "http", "POST", "/a?b=1")),
    ("https://example.com:8443/x", "GET", ("example.com", 8443, "https", "GET", "/x")),
    ("[::1]:8080", None, ("::1", 8080, "https", None, None)),
    ("::1", None, ("::1", 443, "https", None, None)),
    ("api.github.com", "DELETE", ("api.github.com", 443, "https", "DELETE", None)),
])
def test_parse_target(text: str, method: str | None,
                      expected: tuple[str, int, str, str | None, str | None]) -> None:
    target = core.parse_target(text, method)
    assert (target.host, target.port, target.scheme, target.method, target.path) == expected


@pytest.mark.parametrize("text", ["ftp://example.com/", "example.com:0", "example.com:x",
                                  "example.com/path", "https://:80/", "[::1", "https://h:99999/"])
def test_parse_target_refuses(text: str) -> None:
    with pytest.raises(SbxError) as caught:
        core.parse_target(text)
    assert caught.value.reason.value == "invalid_argument"


def test_split_request() -> None:
    assert core.split_request([]) == (None, None)
    assert core.split_request(["h"]) == (None, "h")
    assert core.split_request(["GET", "h"]) == ("GET", "h")
    with pytest.raises(SbxError):
        core.split_request(["GET"])
    with pytest.raises(SbxError):
        core.split_request(["a", "b", "c"])


def test_env_reference_is_reported_not_guessed(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    pending = "          - example.com\n          - ${{ kit.env.API_HOST }}\n"
    (tmp_path / "e" / "e.yaml").write_text(
        WORKLOAD.replace("          - example.com\n", pending), encoding="utf-8")
    kit_set = core.load("./e", (), (), cwd=tmp_path, state_home=tmp_path / "state")
    result = core.explain_request(core.static_composition(kit_set), ["./e"],
                                  core.parse_target("api.internal"), "runtime")
    assert not result.allowed
    assert [r.host for r in result.pending] == ["${{ kit.env.API_HOST }}"]
    assert result.as_dict()["pending_env"][0]["host"] == "${{ kit.env.API_HOST }}"
