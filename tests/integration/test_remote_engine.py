"""sbx on an engine of another host: a second engine host on this machine (its own network
namespace, dockerd and sshd; tests/support/enginehost.py), reached over ``ssh://`` and
``tcp://`` with TLS, exactly as a user's DOCKER_HOST names one.

Each run must create its container on the far engine and nothing on the local one, with the
same hardened shape; a terminal session with its detach keys and a large output cross the
tunnel as they cross the local socket; a host key ssh does not know, an engine nobody answers
for, and a run that needs this machine's disk are refused with their reasons.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sbx.seams.driver import SdkEngine
from tests.support.kits import capabilities, network_policy
from tests.support.sbxproc import SBX, read_some, run_digested, run_sbx

from .conftest import BUSYBOX, FarHost, owned, ssh_wrapper, user_owned
from .test_session_tty import BUSYBOX_PROMPT, Pane, pane  # noqa: F401 - the pane fixture

pytestmark = pytest.mark.docker

KIT = f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD ["sh"]\n'
SEQ_END = 24_600_000  # `seq 1 N` writes 210,288,897 bytes: a little over 200 MiB


@pytest.fixture
def kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("remote", KIT)


def _wait_for(probe: Callable[[], object], timeout: float = 60.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    return None


def test_a_run_over_ssh_is_on_the_far_engine_only_and_hardened(
        far_host: FarHost, kit: Path, state_home: Path, engine: SdkEngine) -> None:
    env = far_host.env(state_home)
    proc = subprocess.Popen([str(SBX), "run", str(kit), "--", "sh", "-c",
                             "echo ready; sleep 20; echo done"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = read_some(proc.stdout, len(b"ready\n"), timeout=120)
        assert first == b"ready\n", read_some(proc.stderr, 4096, timeout=5)
        far = far_host.containers(state_home)
        assert len(far) == 1
        assert owned(engine, state_home) == []  # nothing on this machine's engine
        inspected = json.loads(far_host.host.docker("inspect", far[0]).stdout)[0]
        host_config, config = inspected["HostConfig"], inspected["Config"]
        assert host_config["ReadonlyRootfs"] is True
        assert host_config["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in " ".join(host_config["SecurityOpt"] or [])
        assert host_config["NetworkMode"] == "none"
        assert host_config["Memory"] > 0 and host_config["PidsLimit"] > 0
        assert host_config["Binds"] in (None, [])
        assert config["User"].split(":")[0] not in ("", "0", "root")
        rest = proc.stdout.read()
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
    assert rest == b"done\n"
    assert far_host.containers(state_home) == []  # removed there too


def test_an_offline_one_shot_over_ssh(far_host: FarHost, kit: Path, state_home: Path,
                                      engine: SdkEngine) -> None:
    done = run_sbx(["run", str(kit), "--", "sh", "-c", "echo out; echo err >&2; exit 7"],
                   env=far_host.env(state_home), timeout=180)
    assert (done.returncode, done.stdout) == (7, b"out\n"), done.stderr
    assert done.stderr.endswith(b"err\n")
    assert far_host.containers(state_home) == []
    assert owned(engine, state_home) == []


def test_200_mib_of_output_arrive_byte_exact_over_ssh(far_host: FarHost, kit: Path,
                                                       state_home: Path) -> None:
    expected = hashlib.sha256()
    size = 0
    batch = 100_000
    for start in range(1, SEQ_END + 1, batch):
        piece = "".join(f"{i}\n" for i in range(start, min(start + batch, SEQ_END + 1)))
        data = piece.encode()
        expected.update(data)
        size += len(data)
    status, out, err = run_digested(["run", str(kit), "--", "seq", "1", str(SEQ_END)],
                                    env=far_host.env(state_home), timeout=600)
    assert status == 0, err.head
    assert (out.size, out.sha256) == (size, expected.hexdigest())
    assert size > 200 * 1024 * 1024


def test_a_terminal_session_and_its_detach_keys_over_ssh(
        far_host: FarHost, kit: Path, pane: Pane, state_home: Path) -> None:  # noqa: F811
    assert kit == pane.workdir / "kits" / "remote"  # kit_factory's place, the pane's cwd
    prefix = (f"DOCKER_HOST={far_host.host.ssh_host} PATH={far_host.ssh_bin}:$PATH")
    pane.sbx("a", "kits/remote", prefix=prefix)
    pane.wait(BUSYBOX_PROMPT, timeout=120)
    pane.ask("echo $((6 * 7)); stty size", r"^42$")
    assert pane.search(r"^\d+ \d+$") is not None  # the pane's size reached the far terminal
    assert len(far_host.containers(state_home)) == 1
    pane.keys("C-p", "C-q")
    assert pane.status("a", timeout=60) == 130
    pane.wait(r"\(detached\)")
    before, after = pane.settings("a")
    assert before == after
    assert _wait_for(lambda: far_host.containers(state_home) == [], timeout=60)


def test_tcp_with_tls_made_by_the_test(far_host: FarHost, kit: Path, state_home: Path,
                                       engine: SdkEngine, tmp_path: Path) -> None:
    tls = far_host.host.tls
    assert tls is not None
    env = far_host.env(state_home, DOCKER_HOST=far_host.host.tcp_host, DOCKER_TLS_VERIFY="1",
                       DOCKER_CERT_PATH=str(tls.directory))
    done = run_sbx(["run", str(kit), "--", "sh", "-c", "head -c 3000000 /dev/zero | wc -c"],
                   env=env, timeout=180)
    assert (done.returncode, done.stdout.strip()) == (0, b"3000000"), done.stderr
    assert far_host.containers(state_home) == []
    assert owned(engine, state_home) == []
    # Another CA: the engine's certificate is not trusted, and nothing is created.
    other = tmp_path / "other-ca"
    other.mkdir()
    for name in ("cert.pem", "key.pem"):
        (other / name).write_bytes((tls.directory / name).read_bytes())
    from tests.support.enginehost import _tls_files

    stranger = _tls_files(tmp_path / "stranger", far_host.host.address)
    (other / "ca.pem").write_bytes(stranger.ca.read_bytes())
    refused = run_sbx(["run", str(kit), "--", "true"], env={**env, "DOCKER_CERT_PATH": str(other)},
                      timeout=120)
    assert refused.returncode == 125, refused.stderr
    assert b"TLS" in refused.stderr and b"(docker_unreachable)" in refused.stderr
    assert far_host.containers(state_home) == []


def test_an_unknown_host_key_is_refused(far_host: FarHost, kit: Path, state_home: Path,
                                        tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    key = far_host.host.root / "ssh" / "id_ed25519"
    config.write_text(f"Host {far_host.host.address}\n  IdentityFile {key}\n"
                      f"  IdentitiesOnly yes\n  UserKnownHostsFile {empty}\n"
                      "  GlobalKnownHostsFile /dev/null\n")
    strict = ssh_wrapper(tmp_path / "bin", config)
    env = far_host.env(state_home, PATH=f"{strict}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    done = run_sbx(["run", str(kit), "--", "true"], env=env, timeout=120)
    assert done.returncode == 125, done.stderr
    text = done.stderr.decode()
    assert "(engine_host_key)" in text and far_host.host.address in text
    assert f"ssh root@{far_host.host.address} true" in text  # the fix, to paste
    assert empty.read_text() == ""  # sbx accepted nothing
    assert far_host.containers(state_home) == []


def test_an_unreachable_host_names_the_host_and_the_step(far_host: FarHost, kit: Path,
                                                         state_home: Path) -> None:
    # The far host's own address, on a port where nothing listens.
    host = f"ssh://root@{far_host.host.address}:2"
    done = run_sbx(["run", str(kit), "--", "true"], env=far_host.env(state_home, DOCKER_HOST=host),
                   timeout=120)
    assert done.returncode == 125, done.stderr
    text = done.stderr.decode()
    assert "(docker_unreachable)" in text
    assert f"{far_host.host.address}:2 (connecting)" in text
    assert f"ssh -p 2 root@{far_host.host.address} true" in text


def test_a_workspace_bind_is_refused_on_a_remote_engine(far_host: FarHost, kit: Path,
                                                        state_home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    user_owned(workspace)
    (workspace / "file").write_text("data")
    done = run_sbx(["run", str(kit), str(workspace), "--", "ls"],
                   env=far_host.env(state_home), timeout=180)
    assert done.returncode == 125, done.stderr
    text = done.stderr.decode()
    assert "(engine_not_local)" in text and str(workspace) in text
    assert "--workspace-mode copy" in text
    assert far_host.containers(state_home) == []
    explained = run_sbx(["explain", "engine_not_local"], env=far_host.env(state_home))
    assert explained.returncode == 0 and b"Needs an engine on this machine" in explained.stdout


def test_a_networked_kit_runs_on_a_remote_engine_and_explain_agrees(
        far_host: FarHost, kit_factory: Callable[..., Path], state_home: Path) -> None:
    """explain answers the policy question and predicts no refusal; the run runs there, its
    proxy beside it (tests/integration/test_remote_egress.py goes through it)."""
    networked = kit_factory("remote-net", KIT, capabilities(
        network_policy(runtime=["allowed.example"])))
    env = far_host.env(state_home)
    explained = run_sbx(["explain", str(networked), "GET", "https://allowed.example/",
                         "--json"], env=env, timeout=180)
    assert explained.returncode == 0, explained.stderr
    answer = json.loads(explained.stdout)
    assert answer["data"]["allowed"] is True, answer
    assert answer["data"].get("run_refusal") is None, answer
    done = run_sbx(["run", str(networked), "--", "sh", "-c", 'echo "$HTTPS_PROXY"'], env=env,
                   timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"http://sbx:") and b":3128" in done.stdout
    assert far_host.containers(state_home) == []
