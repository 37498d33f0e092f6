"""`sbx run`, `sbx explain WORKLOAD` and `sbx doctor WORKLOAD` agree (issue #13, item 1).

One matrix of kits, each driven through all three commands of the real binary against the real
engine: every refusal `sbx run` can make before anything starts, for the request the three
share (workload, `--kit`, `--arg`, `--allow-privileged`, the config, the engine), gives the same
reason code from all three; the valid kits succeed in all three. Refusals that only a run's own
arguments can cause (WORKSPACE, `--access`, `--mount`, `--user`, `-e`, `--timeout`, the command
after `--`, a terminal) are the run's alone and are tested with run (test_run.py and others).

Explain and doctor plan without creating anything: the engine's own event log must show no
container this state home created while they ran (doctor's limit probe aside, which is its own
check, not the plan).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from sbx.base.reasons import REGISTRY, Reason
from sbx.domain.credentials.secrets import SecretStore
from tests.support import kits
from tests.support.kits import (
    api_key_credential,
    capabilities,
    capability,
    network_policy,
    port,
    volume,
)
from tests.support.sbxproc import Finished, run_sbx

from .conftest import BUSYBOX

pytestmark = pytest.mark.docker

OK_RECIPE = f'FROM {BUSYBOX}\nUSER agent\nCMD ["true"]\n'
NETWORK = network_policy(runtime=["api.example.com"])


def credential(*, optional: bool) -> str:
    return api_key_credential("examplesvc", "EXAMPLE_TOKEN", "api.example.com",
                              optional=optional)


def write_kit(root: Path, name: str, descriptor: str, recipe: str | None = OK_RECIPE, *,
              kind: str = "workload", files: dict[str, str] | None = None) -> Path:
    return kits.write_kit(root, name, descriptor, recipe, kind=kind, files=files)


@dataclass(frozen=True)
class Case:
    """One kit of the matrix: how to make it, how to call it, and the verdict (None: runs)."""

    id: str
    expected: Reason | None
    descriptor: str = ""
    recipe: str | None = OK_RECIPE
    files: dict[str, str] = field(default_factory=dict)
    # (root, the kit's path) -> the arguments after WORKLOAD (mixins, args, consent)
    after: Callable[[Path, Path], list[str]] = lambda _root, _kit: []
    workload: Callable[[Path, Path], str] = lambda _root, kit: str(kit)
    config: str | None = None
    docker_host: str | None = None
    secret: bool = False


def _mixin(root: Path, name: str, descriptor: str) -> str:
    return str(write_kit(root, name, descriptor, recipe=None, kind="mixin"))


CASES: tuple[Case, ...] = (
    # -- the valid ones: all three succeed
    Case("ok", None),
    Case("ok-optional-unknown-capability", None, capabilities(
        "- type: com.example/not-a-real-thing@1\n  optional: true")),
    Case("ok-arg-in-pattern", None, """
        args:
          flavour: {default: a, pattern: '^[a-c]$'}
        """, after=lambda _r, _k: ["--arg", "flavour=b"]),
    Case("ok-network-bound-credential", None,
         capabilities(NETWORK, credential(optional=False)), secret=True),
    Case("ok-optional-unbound-credential", None, capabilities(NETWORK, credential(optional=True))),
    Case("ok-optional-udp-port", None, capabilities(
        capability("port@1", {"container": 5353, "transport": "udp"}, optional=True))),
    Case("ok-privileged-with-consent", None, capabilities(
        "- type: com.docker.sandbox/privileged@1"),
        after=lambda _r, _k: ["--allow-privileged"]),
    # -- config (stage 1)
    Case("invalid-config", Reason.INVALID_CONFIG, config="[sandbox]\nmemory_bytes = -5\n"),
    Case("invalid-config-detach-keys", Reason.INVALID_CONFIG,
         config='[sandbox]\ndetach_keys = "not keys"\n'),
    # -- kits: decode, args, selection, resolution (stage 1)
    # Written as a name: neither a kit directory, a pulled kit nor a bundled short name.
    Case("kit-not-found", Reason.KIT_NOT_FOUND,
         workload=lambda _root, _kit: "no-such-kit-anywhere"),
    # Written as a registry reference that was never pulled (never a registry fetch).
    Case("kit-not-pulled", Reason.IMAGE_MISSING,
         workload=lambda _root, _kit: "registry.invalid/no-such-kit:1"),
    # Written as a path: a kit directory that does not exist.
    Case("kit-path-missing", Reason.INVALID_ARGUMENT,
         workload=lambda root, _kit: str(root / "no-such-kit")),
    Case("kit-path-unusable", Reason.INVALID_ARGUMENT,
         workload=lambda root, _kit: str(root / ("x" * 300))),
    Case("descriptor-invalid", Reason.INVALID_KIT, "capabilities: [{typ: x}]\n"),
    Case("same-kit-twice", Reason.KIT_INCOHERENT, after=lambda _r, kit: ["--kit", str(kit)]),
    Case("arg-undeclared", Reason.INVALID_ARGUMENT, after=lambda _r, _k: ["--arg", "nope=1"]),
    Case("arg-outside-enum", Reason.INVALID_KIT, """
        args:
          flavour: {default: a, enum: [a, b]}
        """, after=lambda _r, _k: ["--arg", "flavour=c"]),
    Case("arg-outside-pattern", Reason.INVALID_KIT, """
        args:
          flavour: {default: a, pattern: '^[a-c]$'}
        """, after=lambda _r, _k: ["--arg", "flavour=zz"]),
    Case("required-capability-unsupported", Reason.UNSUPPORTED_CAPABILITY, capabilities(
        "- type: com.example/needs-this@3")),
    Case("mixin-requirement-missing", Reason.KIT_INCOHERENT, after=lambda root, _k: [
        "--kit", _mixin(root, "needy", 'requires: ["nothing-provides-this"]\n')]),
    Case("two-workloads", Reason.KIT_INCOHERENT, after=lambda root, _k: [
        "--kit", str(write_kit(root, "other", ""))]),
    # -- engine (stage 2)
    Case("engine-unreachable", Reason.DOCKER_UNREACHABLE,
         docker_host="unix:///nonexistent/sbx-agreement.sock"),
    # -- the image: never pulled, built from the kit directory (stage 2)
    Case("base-image-missing", Reason.IMAGE_MISSING, recipe="FROM sbx-test/not-here:9\n"),
    Case("workload-without-recipe", Reason.INVALID_KIT, recipe=None),
    Case("base-image-unknowable", Reason.INVALID_KIT, recipe="FROM ${BASE}\nUSER agent\n"),
    Case("build-fails", Reason.BUILD_FAILED, recipe=f"FROM {BUSYBOX}\nRUN exit 3\n"),
    # -- the effective form: ${{ kit.* }} expanded, validated strictly (stage 2)
    Case("arg-expanded-form-invalid", Reason.INVALID_KIT, textwrap.dedent("""
        args:
          dir: {default: /data}
        """) + capabilities(
        "- type: com.docker.sandbox/volume@1\n  config: {path: '${{ kit.args.dir }}'}"),
        after=lambda _r, _k: ["--arg", "dir=relative"]),
    Case("kit-env-effective-form-invalid", Reason.INVALID_KIT, capabilities(
        "- type: com.docker.sandbox/volume@1\n  config: {path: '${{ kit.env.DATA_DIR }}'}"),
        recipe=f'FROM {BUSYBOX}\nENV DATA_DIR=relative/data\nUSER agent\nCMD ["true"]\n'),
    # -- capabilities within the config's bounds (stage 2)
    Case("resources-over-bound", Reason.UNSUPPORTED_CAPABILITY, capabilities(
        "- type: com.docker.sandbox/resources@1\n  config: {memory: 128g}")),
    Case("resources-below-the-tmpfs-mounts", Reason.UNSUPPORTED_CAPABILITY, capabilities(
        "- type: com.docker.sandbox/resources@1\n  config: {memory: 256m}")),
    Case("resources-gpu", Reason.UNSUPPORTED_CAPABILITY, capabilities(
        "- type: com.docker.sandbox/resources@1\n  config: {gpu: all}")),
    Case("udp-port-required", Reason.UNSUPPORTED_CAPABILITY, capabilities(
        port(5353, transport="udp"))),
    Case("tmpfs-volume-over-memory", Reason.UNSUPPORTED_CAPABILITY, capabilities(
        volume("/data", tmpfs=True, size="8g"))),
    Case("privileged-without-consent", Reason.CONSENT_REQUIRED, capabilities(
        "- type: com.docker.sandbox/privileged@1")),
    Case("agent-context-file-missing", Reason.INVALID_KIT, capabilities(
        "- type: com.docker.sandbox/agent-context@1\n  config: {contentFile: ./missing.md}")),
    # -- credentials (stage 2)
    Case("required-credential-unbound", Reason.CREDENTIAL_UNBOUND, capabilities(
        NETWORK, credential(optional=False))),
    Case("oauth-passthrough", Reason.UNSUPPORTED_CAPABILITY, capabilities(
        network_policy(runtime=["api.anthropic.com", "console.anthropic.com"]), """
        - type: com.docker.sandbox/credential@1
          config:
            service: anthropic
            phase: runtime
            oauth:
              passthrough: true
              tokenEndpoint: {host: console.anthropic.com, path: /v1/oauth/token}
              resourceHosts: [api.anthropic.com]
              sentinels: {accessToken: sk-ant-oat01-proxy-managed,
                          refreshToken: sk-ant-ort01-proxy-managed}
        """)),
    # -- the sandbox user (the image's USER, never uid/gid 0)
    Case("image-user-in-root-group", Reason.ROOT_USER,
         recipe=f'FROM {BUSYBOX}\nUSER 1000:0\nCMD ["true"]\n'),
)


@dataclass(frozen=True)
class Verdicts:
    run: str | None
    explain: str | None
    doctor: str | None


def _message(result: Finished, command: str) -> str | None:
    """The refusal's message (doctor's on one line), to see that it is the same refusal."""
    envelope = json.loads(result.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    if command == "doctor":
        workload = {c["id"]: c for c in envelope["data"]["checks"]}["workload"]
        return str(workload["detail"]) if workload["status"] == "fail" else None
    refusal = _run_refusal(envelope) if command == "explain" else None
    if refusal is not None:
        return str(refusal["message"]).replace("\n", " ")
    message = envelope.get("message")
    return str(message).replace("\n", " ") if message and envelope["status"] not in (
        "ok", "denied") else None


def _run_refusal(envelope: dict[str, Any]) -> dict[str, Any] | None:
    """What explain says `sbx run` would refuse: it still answers from the kits, the config
    and the user policy, and names run's reason beside its answer."""
    data = envelope.get("data")
    refusal = data.get("run_refusal") if isinstance(data, dict) else None
    return refusal if envelope["status"] in ("ok", "denied") and refusal else None


def _reason(result: Finished, command: str) -> str | None:
    lines = result.stdout.decode("utf-8", "replace").strip().splitlines()
    assert lines, f"{command}: no JSON envelope (stderr: {result.stderr[-2000:]!r})"
    envelope = json.loads(lines[-1])
    if command == "doctor":
        checks = {c["id"]: c for c in envelope["data"]["checks"]}
        workload = checks["workload"]
        if workload["status"] != "fail":
            assert result.returncode == 0, f"doctor failed elsewhere: {envelope['data']}"
            return None
        assert result.returncode == 1
        return str(workload["reason"])
    if envelope["status"] in ("ok", "denied"):
        assert result.returncode in (0, 1)
        refusal = _run_refusal(envelope) if command == "explain" else None
        return None if refusal is None else str(refusal["reason"])
    # A refusal: the reason's own exit status, from run and explain alike.
    assert result.returncode == REGISTRY[Reason(envelope["reason"])].exit_status, envelope
    return str(envelope["reason"])


def _container_creates(home: Path, since: float, until: float) -> list[dict[str, Any]]:
    """Containers the engine created for this state home between ``since`` and ``until``."""
    selector = labels.home_selector(home_hash(home))
    filters = [a for key, value in selector.items()
               for a in ("--filter", f"label={key}={value}")]
    listed = subprocess.run(
        ["docker", "events", "--since", f"{since:.3f}", "--until", f"{until:.3f}",
         "--filter", "type=container", "--filter", "event=create", *filters,
         "--format", "{{json .}}"], capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_run_explain_and_doctor_agree(case: Case, tmp_path: Path, state_home: Path) -> None:
    root = tmp_path / "kits"
    kit = write_kit(root, "subject", case.descriptor, case.recipe, files=case.files)
    workload = case.workload(root, kit)
    after = case.after(root, kit)
    config = tmp_path / "config.toml"
    config.write_text(case.config or "", encoding="utf-8")
    env = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
           "NO_COLOR": "1"}
    if case.docker_host is not None:
        env["DOCKER_HOST"] = case.docker_host
    if case.secret:
        SecretStore(state_home).set("examplesvc", "agreement-secret-value-1234")
    elsewhere = tmp_path / "elsewhere"  # not the kits' directory: paths are absolute
    elsewhere.mkdir()

    started = time.time()
    explained = run_sbx(["explain", "--json", workload, *after], env=env, cwd=elsewhere)
    explained_at = time.time()
    doctored = run_sbx(["doctor", "--json", workload, *after], env=env, cwd=elsewhere)
    doctored_at = time.time()
    ran = run_sbx(["run", "--json", workload, *after], env=env, cwd=elsewhere)

    verdicts = Verdicts(_reason(ran, "run"), _reason(explained, "explain"),
                        _reason(doctored, "doctor"))
    expected = case.expected.value if case.expected is not None else None
    assert verdicts == Verdicts(expected, expected, expected), (
        ran.stderr[-1500:], explained.stderr[-1500:])
    # The same refusal, not only the same code (a build's message names its own log lines).
    if case.expected not in (None, Reason.BUILD_FAILED):
        assert _message(ran, "run") == _message(explained, "explain") == _message(
            doctored, "doctor")
    if case.docker_host is None:
        time.sleep(1.0)  # the engine's event log is written asynchronously
        assert _container_creates(state_home, started, explained_at) == [], "explain created"
        during_doctor = _container_creates(state_home, explained_at, doctored_at)
        # Only doctor's limit probe (its own check, removed again), never the plan.
        assert all(e["Actor"]["Attributes"].get(labels.KITS) == "doctor-probe"
                   for e in during_doctor), during_doctor


def test_the_matrix_covers_every_refusal_of_the_shared_request() -> None:
    """Every reason code `sbx run` can refuse the shared request with before anything starts
    has a kit here. Enumerated from the prepare path (``raise SbxError`` in sbx.usecases.pipeline
    and what it calls, then sbx.usecases.run.plan.assemble):

    - covered here: config; kit lookup, path, descriptor, duplicates, args (undeclared, enum,
      pattern, expanded form), unsupported required types, resolution; the engine unreachable;
      base image missing or unknowable, no recipe, build failure; the effective form
      (``kit.env``); resources@1 (over the bound, under the tmpfs mounts, gpu), a required udp
      port, a tmpfs volume over memory, privileged@1 without consent, agent-context files;
      a required unbound credential, OAuth passthrough; the image's USER in the root group;
    - unit-tested with a fake engine (a real one cannot be made so): a non-unix host, a
      non-Linux engine, a rootless engine on cgroup v1 (tests/unit/test_agreement_rules.py);
    - not in the matrix: registry kits (locked image missing; a registry is needed); a sized
      volume@1 when sbx is not root (these tests run as root); a named USER missing from the
      image's /etc/passwd (explain and doctor create no container to read it, so until a run
      has cached the image's accounts they report the user as "resolved by sbx run"); a
      dynamic secret source (keyring, command) that fails (explain and doctor never read
      values); an unwritable state home (run's record, written after planning);
    - the run's own arguments (not part of the shared request): WORKSPACE, --access,
      --mount, --user, -e/--env-file, --timeout, --detach-keys, -t, the command after `--`
      (an image without ENTRYPOINT/CMD needs one), a HOME path all kits' storage occupies.
    """
    covered = {c.expected for c in CASES if c.expected is not None}
    assert covered >= {
        Reason.INVALID_CONFIG, Reason.IMAGE_MISSING, Reason.INVALID_ARGUMENT,
        Reason.INVALID_KIT, Reason.KIT_INCOHERENT, Reason.UNSUPPORTED_CAPABILITY,
        Reason.DOCKER_UNREACHABLE, Reason.BUILD_FAILED, Reason.CONSENT_REQUIRED,
        Reason.CREDENTIAL_UNBOUND, Reason.ROOT_USER}
    assert sum(c.expected is None for c in CASES) >= 5


def test_the_403_bodys_explain_command_reproduces_the_run(tmp_path: Path,
                                                          state_home: Path) -> None:
    """The command in a refusal's body carries the run's --arg values and absolute kit paths:
    run from any directory, it plans the same kits and judges the request as the proxy did."""
    kit = write_kit(tmp_path / "kits", "egress", textwrap.dedent("""
        args:
          host: {required: true}
        """) + capabilities(
        "- type: com.docker.sandbox/network-policy@1\n"
        "  config: {runtime: {allow: ['${{ kit.args.host }}']}}"),
        recipe='FROM sbx-base/bookworm:1\nUSER agent\n')
    env = {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull, "NO_COLOR": "1"}
    script = ('curl -sS -m 10 -o /tmp/body -w "%{http_code}\\n" http://denied.example/x; '
              "cat /tmp/body")
    ran = run_sbx(["run", "egress", "--arg", "host=allowed.example", "--", "sh", "-c", script],
                  env=env, cwd=kit.parent)
    out = ran.stdout.decode("utf-8", "replace")
    assert ran.returncode == 0 and out.startswith("403"), (out, ran.stderr[-2000:])
    (line,) = [x for x in out.splitlines() if x.startswith("explain: ")]
    command = line.removeprefix("explain: ")
    assert command == (f"sbx explain {kit} --arg host=allowed.example GET "
                       "http://denied.example/x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    import shlex

    argv = shlex.split(command)[1:]
    explained = run_sbx([*argv[:1], "--json", *argv[1:]], env=env, cwd=elsewhere)
    envelope = json.loads(explained.stdout.decode().strip().splitlines()[-1])
    assert explained.returncode == 1 and envelope["status"] == "denied", envelope
    assert envelope["data"]["decision"]["code"] == "default_deny"
    allowed = run_sbx([*argv[:-2], "GET", "http://allowed.example/x"], env=env, cwd=elsewhere)
    assert allowed.returncode == 0, allowed.stderr
