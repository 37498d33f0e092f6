"""Egress on an engine of another host: the proxy runs as a container beside the sandbox on the
far engine (sbx.usecases.run.engineproxy), reached over ``ssh://``.

The test "internet" listens on this machine's loopback; the far proxy reaches it as its
upstream proxy through a relay whose listener lives in the far host's own network namespace
(tests/support/farrelay.py). A listener on every address of the far host shows that the
sandbox reaches none of that host's services, nor the relay, directly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbx.base import labels
from sbx.base.paths import home_hash
from sbx.domain.credentials.secrets import SecretStore
from sbx.seams.driver import SdkEngine
from tests.support.farrelay import Relay, listen_in_netns
from tests.support.kits import api_key_credential, capabilities, network_policy, port
from tests.support.origin import Internet
from tests.support.sbxproc import SBX, read_some, run_sbx

from .conftest import FarHost, owned

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
SECRET = "ghp-far-secret-value-stays-in-the-proxy"  # noqa: S105 - a test value
POLICY = capabilities(network_policy(runtime=["example.com", "api.github.com"]),
                      api_key_credential("github", "GH_TOKEN", "api.github.com"))
KIT = f'FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\nCMD ["sh"]\n'


@pytest.fixture(scope="module")
def far(far_host: FarHost) -> FarHost:
    if far_host.host.docker("image", "inspect", BOOKWORM).returncode != 0:
        far_host.host.load_image(BOOKWORM, timeout=600)
    return far_host


@pytest.fixture
def upstream(far: FarHost, internet: Internet) -> Iterator[Relay]:
    with Relay(listen_in_netns(far.host.netns, far.host.address),
               internet.upstream.port) as relay:
        yield relay


@pytest.fixture
def far_services(far: FarHost) -> Iterator[Relay]:
    """A service on every address of the far host (a relay to nowhere): what the sandbox must
    not reach. Its count of accepted connections is the proof."""
    with Relay(listen_in_netns(far.host.netns, "0.0.0.0"), 1) as listener:  # noqa: S104
        yield listener


@pytest.fixture
def env(far: FarHost, state_home: Path, tmp_path: Path, internet: Internet,
        upstream: Relay) -> Iterator[dict[str, str]]:
    config = tmp_path / "config.toml"
    config.write_text(f'[network]\nupstream_proxy = "http://{upstream.address}:{upstream.port}"'
                      f'\nupstream_ca_file = "{internet.pki.ca_file}"\n', encoding="utf-8")
    internet.origin.clear()
    SecretStore(state_home).set("github", SECRET)
    yield far.env(state_home, SBX_CONFIG=str(config))
    _clear_far(far, state_home)


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("far-net", KIT, POLICY)


def _far_objects(far: FarHost, state_home: Path, kind: str) -> list[str]:
    selector = f"label={labels.HOME}={home_hash(state_home)}"
    argv = ["ps", "-aq"] if kind == "container" else [kind, "ls", "-q"]
    return far.host.docker(*argv, "--filter", selector).stdout.decode().split()


def _network_name(far: FarHost, ident: str) -> str:
    return far.host.docker("network", "inspect", ident, "--format",
                           "{{.Name}}").stdout.decode().strip()


def _clear_far(far: FarHost, state_home: Path) -> None:
    for ident in _far_objects(far, state_home, "container"):
        far.host.docker("rm", "-f", ident)
    for ident in _far_objects(far, state_home, "network"):
        far.host.docker("network", "rm", ident)


SCRIPT = r"""
echo "GH_TOKEN=$GH_TOKEN"
echo "allowed=$(curl -s -o /tmp/a -w '%{http_code}' -m 30 https://api.github.com/v1/user)"
cat /tmp/a; echo
echo "denied=$(curl -s -o /dev/null -w '%{http_code}' -m 30 http://elsewhere.example.org/)"
bare="${HTTPS_PROXY##*@}"
echo "proxy=${bare%%:*}"
for target in "$@"; do
  if curl -s -o /dev/null --noproxy '*' -m 5 "http://$target/"; then
    echo "direct $target reached"
  else
    echo "direct $target unreachable"
  fi
done
"""


def test_egress_over_ssh_goes_through_the_proxy_beside_the_far_engine(
        far: FarHost, kit: Path, env: dict[str, str], state_home: Path, internet: Internet,
        upstream: Relay, far_services: Relay, engine: SdkEngine) -> None:
    targets = [f"{far.host.address}:{upstream.port}", f"{far.host.address}:{far_services.port}",
               f"10.202.0.1:{far_services.port}"]  # the relay, and the host by both addresses
    proc = subprocess.Popen([str(SBX), "run", str(kit), "--", "bash", "-c", SCRIPT, "x",
                             *targets], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = read_some(proc.stdout, len(b"GH_TOKEN="), timeout=300)  # type: ignore[arg-type]
        assert first == b"GH_TOKEN=", read_some(proc.stderr, 4096, timeout=5)  # type: ignore[arg-type]
        proxies = [c for c in _far_objects(far, state_home, "container")
                   if far.host.docker("inspect", c, "--format",
                                      f'{{{{index .Config.Labels "{labels.ROLE}"}}}}')
                   .stdout.decode().strip() == labels.ROLE_PROXY]
        assert len(proxies) == 1
        inspected = json.loads(far.host.docker("inspect", proxies[0]).stdout)[0]
        forwarding = far.host.docker(
            "exec", proxies[0], inspected["Config"]["Entrypoint"][0], "-c",
            "print(open('/proc/sys/net/ipv4/ip_forward').read().strip())").stdout
        # While the proxy holds the secret: nothing of it on the far host's disk.
        found = subprocess.run(["grep", "-rlsF", SECRET, str(far.host.root / "data")],
                               capture_output=True, timeout=300, check=False)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    text = (first + out).decode()
    assert proc.returncode == 0, err.decode()
    said = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert said["GH_TOKEN"] and SECRET not in said["GH_TOKEN"]  # the sandbox has a sentinel
    assert said["allowed"] == "200" and said["denied"] == "403", text
    for target in targets:
        assert f"direct {target} unreachable" in text, text
    assert upstream.accepted >= 1 and far_services.accepted == 0
    seen = [s for s in internet.origin.requests() if s.sni == "api.github.com"]
    assert seen and seen[-1].header("Authorization") == f"Bearer {SECRET}"
    # The proxy container: locked as a sandbox is; nothing of the run's secrets in its
    # environment, labels or arguments, and nothing of them on the far host's disk.
    host_config, config = inspected["HostConfig"], inspected["Config"]
    assert host_config["ReadonlyRootfs"] is True and host_config["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in " ".join(host_config["SecurityOpt"] or [])
    assert config["User"] == "65534:65534"
    assert forwarding == b"0\n"  # on two networks, it routes nothing between them
    shown = json.dumps([config["Env"], config["Labels"], config["Cmd"], inspected["Args"]])
    assert SECRET not in shown and said["proxy"] in json.dumps(inspected["NetworkSettings"])
    assert found.returncode == 1 and found.stdout == b"", found.stdout
    # The records came back: the request log, the audit log and explain, as for a local run.
    explained = run_sbx(["explain", "--last"], env=env, timeout=60)
    assert b"elsewhere.example.org" in explained.stdout, explained.stderr
    logged = run_sbx(["policy", "log", "--json"], env=env, timeout=60)
    hosts = {json.loads(line).get("host") for line in logged.stdout.splitlines()}
    assert {"api.github.com", "elsewhere.example.org"} <= hosts, logged.stdout
    assert _far_objects(far, state_home, "container") == []
    # Only the state home's egress network stays, for its next run's proxy.
    assert [_network_name(far, n) for n in _far_objects(far, state_home, "network")] == [
        f"sbx-egress-{home_hash(state_home)[:16]}"]
    assert owned(engine, state_home) == []  # nothing on this machine's engine


LOOP = r"""
for i in $(seq 1 60); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 http://later.example.net/)
  echo "try $i $code"
  [ "$code" = 200 ] && exit 0
  sleep 0.5
done
exit 1
"""


def test_a_policy_change_reaches_a_running_sandbox_on_the_far_engine(
        far: FarHost, kit: Path, env: dict[str, str], state_home: Path) -> None:
    proc = subprocess.Popen([str(SBX), "run", str(kit), "--", "bash", "-c", LOOP],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = read_some(proc.stdout, len(b"try 1 403\n"), timeout=300)  # type: ignore[arg-type]
        assert first == b"try 1 403\n", read_some(proc.stderr, 4096, timeout=5)  # type: ignore[arg-type]
        allowed = run_sbx(["policy", "allow", "later.example.net", "--yes"], env=env,
                          timeout=60)
        assert allowed.returncode == 0, allowed.stderr
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == 0, (first + out, err)
    assert out.decode().splitlines()[-1].endswith(" 200")


def test_killing_the_cli_closes_the_far_sandboxs_way_out(
        far: FarHost, kit: Path, env: dict[str, str], state_home: Path) -> None:
    proc = subprocess.Popen([str(SBX), "run", str(kit), "--", "bash", "-c",
                             "echo up; sleep 600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = read_some(proc.stdout, len(b"up\n"), timeout=300)  # type: ignore[arg-type]
        assert first == b"up\n", read_some(proc.stderr, 4096, timeout=5)  # type: ignore[arg-type]
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)

        def proxy_states() -> list[str]:
            return [far.host.docker("inspect", c, "--format", "{{.State.Status}}")
                    .stdout.decode().strip()
                    for c in _far_objects(far, state_home, "container")
                    if far.host.docker("inspect", c, "--format",
                                       f'{{{{index .Config.Labels "{labels.ROLE}"}}}}')
                    .stdout.decode().strip() == labels.ROLE_PROXY]

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proxy_states() != ["exited"]:
            time.sleep(0.5)
        assert proxy_states() == ["exited"]  # the proxy ended with its owner: no way out
        swept = run_sbx(["gc"], env=env, timeout=120)
        assert swept.returncode == 0, swept.stderr
        assert proxy_states() == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        _clear_far(far, state_home)


def test_what_only_this_machine_serves_is_refused_on_a_far_engine(
        far: FarHost, kit_factory: Callable[..., Path], env: dict[str, str],
        state_home: Path) -> None:
    """A published port still needs this machine: run and explain refuse it alike."""
    published = kit_factory("far-port", KIT, capabilities(
        network_policy(runtime=["example.com"]), port(8080)))
    explained = run_sbx(["explain", str(published), "GET", "https://example.com/", "--json"],
                        env=env, timeout=180)
    assert explained.returncode == 0, explained.stderr
    answer = json.loads(explained.stdout)["data"]
    assert answer["allowed"] is True and answer["run_refusal"]["reason"] == "engine_not_local"
    assert "published ports" in json.dumps(answer["run_refusal"])
    done = run_sbx(["run", str(published), "--", "true"], env=env, timeout=180)
    assert done.returncode == 125 and b"(engine_not_local)" in done.stderr, done.stderr
    assert _far_objects(far, state_home, "container") == []


def test_doctor_probes_the_far_hosts_services_from_a_network_like_a_sandboxs(
        far: FarHost, kit: Path, env: dict[str, str], state_home: Path) -> None:
    """Once the runtime image is on the far engine (a networked run built it), doctor runs a
    probe there that finds nothing of that host at a sandbox network's gateway."""
    assert run_sbx(["run", str(kit), "--", "true"], env=env, timeout=300).returncode == 0
    done = run_sbx(["doctor", "--json"], env=env, timeout=300)
    checks = {c["id"]: c for c in json.loads(done.stdout)["data"]["checks"]}
    proxy, services = checks["egress-proxy"], checks["egress-host-services"]
    assert proxy["status"] == "ok" and proxy["data"]["image"].startswith("sbx-runtime/")
    assert services["status"] == "ok", services
    assert services["data"]["probed"] is True and services["data"]["closed"] is True
    assert services["data"]["answer"].startswith("silent")
    assert _far_objects(far, state_home, "container") == []  # the probe went


def test_egress_over_tcp_with_tls_goes_through_the_proxy_beside_the_far_engine(
        far: FarHost, kit: Path, env: dict[str, str], state_home: Path,
        internet: Internet) -> None:
    """The same data plane over the other transport: the secret injected there, a host
    outside the policy refused by the proxy, nothing left but the shared egress network."""
    tls = far.host.tls
    assert tls is not None
    over_tcp = {**env, "DOCKER_HOST": far.host.tcp_host, "DOCKER_TLS_VERIFY": "1",
                "DOCKER_CERT_PATH": str(tls.directory)}
    done = run_sbx(["run", str(kit), "--", "bash", "-c", SCRIPT, "x"], env=over_tcp,
                   timeout=300)
    assert done.returncode == 0, done.stderr
    said = dict(line.split("=", 1) for line in done.stdout.decode().splitlines() if "=" in line)
    assert said["allowed"] == "200" and said["denied"] == "403", done.stdout
    seen = [s for s in internet.origin.requests() if s.sni == "api.github.com"]
    assert seen and seen[-1].header("Authorization") == f"Bearer {SECRET}"
    assert _far_objects(far, state_home, "container") == []
