"""The reason registry: complete, unique, documented, and consistent with the exit statuses."""

from __future__ import annotations

import re

import pytest

from sbx.base.reasons import REGISTRY, ExitStatus, Reason

SPEC_CODES = {
    "docker_unreachable", "image_missing", "resource_limits_unenforced", "root_user",
    "unsupported_platform", "invalid_config", "invalid_kit", "kit_incoherent",
    "unsupported_capability", "credential_unbound", "mount_blocked", "permission_widened",
    "create_failed", "start_failed", "proxy_failed", "timeout", "egress_denied",
    "cleanup_failed",
}


def test_every_spec_code_exists_with_its_fixed_name() -> None:
    assert {r.value for r in Reason} >= SPEC_CODES


def test_every_code_is_documented_once() -> None:
    assert set(REGISTRY) == set(Reason)
    titles = [info.title for info in REGISTRY.values()]
    assert len(titles) == len(set(titles))
    for reason, info in REGISTRY.items():
        assert re.fullmatch(r"[a-z][a-z_]*[a-z]", reason.value)
        assert info.title and info.cause.endswith(".") and info.fix.endswith((".", ")"))
        assert isinstance(info.exit_status, ExitStatus)


def test_refusals_timeouts_and_failures_are_distinguishable() -> None:
    assert Reason.TIMEOUT.exit_status == 124
    assert Reason.MOUNT_BLOCKED.exit_status == Reason.INVALID_CONFIG.exit_status == 125
    assert Reason.CREATE_FAILED.exit_status == 126
    assert Reason.INTERRUPTED.exit_status == 130
    assert len({ExitStatus.USAGE, ExitStatus.REFUSED, ExitStatus.FAILED, ExitStatus.TIMEOUT,
                ExitStatus.INTERNAL, ExitStatus.INTERRUPTED}) == 6


@pytest.mark.slow
def test_every_detail_code_is_in_the_registry_and_explainable(tmp_path) -> None:
    """Every code a 403/407/502 body, the audit log, the request log or `explain --last` can
    carry: the proxy's (EgressCode), the policy's own decisions, and the reasons used as codes
    (credential_unbound, internal_error) — each explained by `sbx explain CODE`."""
    import ast
    import os
    from pathlib import Path

    from sbx.base.reasons import DETAILS, EgressCode
    from sbx.domain.egress.policy import CODES
    from tests.conftest import run_cli

    assert set(EgressCode) <= set(DETAILS)
    assert set(CODES) - {"allowed"} <= set(DETAILS)
    assert not set(DETAILS) & {r.value for r in Reason}  # one name, one meaning
    for info in DETAILS.values():
        assert info.title and info.cause.endswith(".") and info.fix.endswith((".", ")"))
    # Every code the proxy passes to a refusal is one of those (or a reason code).
    used: set[str] = set()
    proxy = Path(__file__).resolve().parents[3] / "cli" / "sbx" / "domain" / "egress"
    for source in proxy.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in ("EgressCode", "Reason"):
                used.add(getattr(EgressCode, node.attr, None) or getattr(Reason, node.attr))
    assert used - set(DETAILS) <= {r.value for r in Reason}
    env = {**os.environ, "SBX_HOME": str(tmp_path / "state"), "NO_COLOR": "1"}
    import io

    from sbx.base.render import Renderer

    for code in map(str, DETAILS):  # what `sbx explain CODE` prints, for each
        out = io.StringIO()
        Renderer(out, io.StringIO(), as_json=False).detail(code)
        assert out.getvalue().startswith(f"{code} — ") and "  fix:   " in out.getvalue()
    for code in ("destination_blocked", "dns_failed", "proxy_auth_missing", "default_deny"):
        done = run_cli(["explain", code], env=env, cwd=tmp_path)
        assert done.exit_code == 0 and done.stdout.startswith(f"{code} — "), done.stderr
        assert "fix:" in done.stdout and "see:   sbx explain " in done.stdout
    listed = run_cli(["explain", "--list", "--json"], env=env, cwd=tmp_path).envelope()
    assert {d["code"] for d in listed["data"]["details"]} == {str(c) for c in DETAILS}


def test_not_a_clone_explains_what_a_clone_is_and_how_to_make_one() -> None:
    info = REGISTRY[Reason.NOT_A_CLONE]
    assert "--clone" in info.cause and "sbx diff" in info.cause and "sbx fetch" in info.cause
    # the same command the refusal's hint gives (sbx.usecases.named.clone)
    assert "`sbx create --clone --name NAME-clone KIT REPO`" in info.fix
    # and the other refusal's (sbx.usecases.named.clonehelper): a stopped clone with no checkout
    assert "stopped" in info.cause and "`sbx rm -f NAME`" in info.fix
