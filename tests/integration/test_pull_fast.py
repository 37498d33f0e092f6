"""`sbx pull` from typer's remembered parse (sbx.commands.pull_fast) against a real registry
and engine: the same stdout, stderr, exit status, lock and audit records as the typer path on
the same pulls; no typer, requests or docker SDK imported; the small registry client and
requests read the same manifests and refuse alike, with and without a bearer-token dance; the
socket's engine pull lands the image the SDK's does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import audit
from sbx.seams.enginesocket import SocketEngine
from sbx.seams.registry import (
    OCI_INDEX,
    fetch_kit_manifest,
    get_manifest,
    parse_reference,
    put_manifest,
)
from sbx.seams.transports import open_engine

from .registry import Registry, free_port, registry
from .test_pull import env, local_names, network, push, remove_local

pytestmark = pytest.mark.docker
__all__ = ["env", "registry"]  # fixtures, re-exported for pytest

SBX = str(Path(sys.executable).with_name("sbx"))
TYPER = {"SBX_FAST_PULL": "0"}
REQUESTS = {"SBX_REGISTRY_HTTP": "requests"}


@pytest.fixture
def clean_images(registry: Registry) -> Iterator[None]:
    yield
    remove_local(registry)


def sbx(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, check=False)


def both_paths(env: dict[str, str], state_home: Path, args: tuple[str, ...], *,
               before: Callable[[], None] = lambda: None,
               parsed: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``sbx ARGS`` through typer, then from typer's remembered parse, from the same state
    (the state home is restored in between but for the parses, ``before`` readies the image
    store each time); assert the two agree on stdout, stderr, exit status, the lock and the
    audit records' kinds and details."""
    state_home.mkdir(parents=True, exist_ok=True)
    saved = state_home.parent / f"{state_home.name}.saved"
    parses = state_home.parent / f"{state_home.name}.parses"
    words = state_home / "cache" / "words"
    for stale in (saved, parses):
        shutil.rmtree(stale, ignore_errors=True)
    shutil.copytree(state_home, saved, symlinks=True)
    outcomes = []
    for extra in (TYPER, {}):
        if words.is_dir():
            shutil.copytree(words, parses, symlinks=True)
        shutil.rmtree(state_home)
        shutil.copytree(saved, state_home, symlinks=True)
        if parses.is_dir():
            shutil.rmtree(words, ignore_errors=True)
            shutil.copytree(parses, words, symlinks=True)
            shutil.rmtree(parses)
        before()
        done = sbx({**env, **extra}, *args)
        if extra is TYPER:  # typer's parse is kept exactly when it parsed the words
            assert (words.is_dir() and any(words.iterdir())) is parsed, args
        lock = state_home / "kits.lock.json"
        records = [(e["event_type"], e["details"]) for e in audit.read_events(state_home)]
        outcomes.append((done, lock.read_text(encoding="utf-8") if lock.exists() else None,
                         records))
    (typer, typer_lock, typer_audit), (fast, fast_lock, fast_audit) = outcomes
    assert (fast.stdout, fast.stderr, fast.returncode) == \
        (typer.stdout, typer.stderr, typer.returncode), args
    assert fast_lock == typer_lock
    assert fast_audit == typer_audit
    return fast


@pytest.mark.usefixtures("clean_images")
def test_both_parsers_answer_alike(env: dict[str, str], state_home: Path, tmp_path: Path,
                                   registry: Registry) -> None:
    ref = registry.ref("kits/probe", "1")
    push(env, tmp_path, "v1", ref, network("a.example.com"))
    plain = registry.ref("plain/busybox", "1")
    subprocess.run(["docker", "tag", "sbx-test/busybox:1", plain], check=True, timeout=60)
    subprocess.run(["docker", "push", plain], check=True, capture_output=True, timeout=120)
    remove_local(registry)
    absent = lambda: remove_local(registry)  # noqa: E731 (a one-line callback)
    args: tuple[str, ...]

    # A first pull without approval: the refusal, its audit record, nothing locked.
    for args in (("pull", ref), ("pull", "--json", ref)):
        refused = both_paths(env, state_home, args, before=absent)
        assert refused.returncode == 125 and "permission_unapproved" in refused.stderr + \
            refused.stdout
    # Approved (the flags in either order), then re-pulls with the images absent and present
    # (-v shows the engine's progress lines, which vary with timing: only with nothing to pull).
    for args in (("pull", "--accept", ref), ("pull", ref, "--json", "--accept"),
                 ("pull", "--accept", ref, plain)):
        done = both_paths(env, state_home, args, before=absent)
        assert done.returncode == 0, done.stderr
    for args in (("-v", "pull", ref, plain), ("pull", "--traceback", ref),
                 ("pull", "--verbose", "--json", ref)):
        done = both_paths(env, state_home, args)
        assert done.returncode == 0 and "unchanged" in done.stdout, done.stderr
    for args in (("pull", ref), ("pull", "--json", ref, plain)):
        done = both_paths(env, state_home, args, before=absent)
        assert done.returncode == 0 and "unchanged" in done.stdout, done.stderr
    # A moved tag that widens: refused without --accept, human and JSON.
    push(env, tmp_path, "v2", ref, network("a.example.com", "b.example.com"))
    for args in (("pull", ref), ("pull", "--json", ref)):
        widened = both_paths(env, state_home, args, before=absent)
        assert widened.returncode == 125
        assert "permission_widened" in widened.stderr + widened.stdout
    # Refusals that are not the gate's: a missing tag, a path, a bad reference, no registry.
    down = f"127.0.0.1:{free_port()}/kits/x:1"
    for args in (("pull", registry.ref("kits/none", "1")), ("pull", "./nowhere"),
                 ("pull", "Not A Reference"), ("pull", "--json", down), ("pull", down)):
        refused = both_paths(env, state_home, args)
        assert refused.returncode != 0
    assert local_names(registry) == []  # nothing above pulled anything


def test_words_typer_must_read_still_reach_typer(env: dict[str, str], state_home: Path) -> None:
    for args in (("pull",), ("pull", "--help"), ("pull", "--acept", "x/y:1"),
                 ("pull", "--accept=yes", "x/y:1"), ("--json", "pull", "x/y:1")):
        done = both_paths(env, state_home, args, parsed=False)
        assert done.returncode in (0, 2), done.stderr


IMPORT_PROBE = """
import json, sys
from sbx.__main__ import cli
status = cli(sys.argv[1:])
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'requests',
               'urllib3', 'docker', 'rich', 'yaml', 'jsonschema'})
handlers = sorted(m.rsplit('.', 1)[1] for m in sys.modules
                  if m.startswith('sbx.domain.kits.captypes.'))
unneeded = sorted({m for m in sys.modules} & {'subprocess', 'tarfile', 'sbx.seams.host.processes',
                  'sbx.seams.driver.registry_credentials', 'sbx.domain.kits.local'})
print(json.dumps({'status': status, 'heavy': heavy, 'handlers': handlers, 'unneeded': unneeded}))
"""


@pytest.mark.usefixtures("clean_images")
def test_a_pull_by_hand_imports_no_typer_requests_or_sdk(
        env: dict[str, str], tmp_path: Path, registry: Registry) -> None:
    ref = registry.ref("kits/probe", "1")
    push(env, tmp_path, "v1", ref, network("a.example.com"))
    assert sbx(env, "pull", "--accept", ref).returncode == 0  # locked, verdict cached
    for present in (False, True):  # the engine pulls, then finds it held
        if not present:
            remove_local(registry)
        done = subprocess.run([sys.executable, "-c", IMPORT_PROBE, "pull", "--accept", ref],
                              env=env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        # The descriptor was checked by the first pull: its surface is read back from the
        # cache, so no capability handler is loaded; no child process, credential helper or
        # kit archive is needed.
        assert result == {"status": 0, "heavy": [], "handlers": [],
                          "unneeded": []}, done.stderr


# -- the registry clients side by side -------------------------------------------------------


def manifests(ref: str, env: dict[str, str]) -> Any:
    """What each reading gives, or the refusal (reason, message, hint)."""
    try:
        kit = fetch_kit_manifest(parse_reference(ref), env=env)
        raw = get_manifest(parse_reference(ref), env=env)
    except SbxError as error:
        return ("refused", error.reason, error.message, error.hint)
    return (kit, raw.media_type, raw.body, raw.digest)


class Gate(BaseHTTPRequestHandler):
    """A bearer-token front for the real registry: /token hands out a token (anonymously, or
    for Basic alice:secret), /v2/... needs it and is then forwarded to the registry."""

    upstream: ClassVar[str] = ""
    need_basic: ClassVar[bool] = False
    seen: ClassVar[list[tuple[str, str | None, str | None]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization")
        Gate.seen.append((self.path.split("?")[0], auth, self.headers.get("User-Agent")))
        if self.path.startswith("/token"):
            if Gate.need_basic and auth != "Basic YWxpY2U6c2VjcmV0":  # alice:secret
                self._answer(401, b"{}", {})
                return
            self._answer(200, b'{"token": "t0k"}', {"Content-Type": "application/json"})
            return
        if auth != "Bearer t0k":
            address = self.server.server_address
            assert isinstance(address, tuple)  # a TCP server's (host, port)
            port = address[1]
            self._answer(401, b"{}", {"WWW-Authenticate":
                         f'Bearer realm="http://127.0.0.1:{port}/token",service="gate",'
                         'scope="repository:kits/probe:pull"'})
            return
        request = urllib.request.Request(f"http://{Gate.upstream}{self.path}",
                                         headers={"Accept": self.headers.get("Accept", "")})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                self._answer(response.status, response.read(),
                             {"Content-Type": response.headers.get("Content-Type", "")})
        except urllib.error.HTTPError as error:
            self._answer(error.code, error.read(), {})


@pytest.fixture
def gate(registry: Registry) -> Iterator[str]:
    Gate.upstream, Gate.need_basic, Gate.seen = registry.host, False, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Gate)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.mark.usefixtures("clean_images")
def test_small_client_and_requests_read_alike(env: dict[str, str], tmp_path: Path,
                                              registry: Registry, gate: str) -> None:
    ref = registry.ref("kits/probe", "1")
    push(env, tmp_path, "v1", ref, network("a.example.com"))
    single = get_manifest(parse_reference(ref))
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{
        "mediaType": single.media_type, "digest": single.digest, "size": len(single.body),
        "platform": {"architecture": "amd64", "os": "linux"}}]}).encode()
    put_manifest(parse_reference(registry.ref("kits/probe", "index")), OCI_INDEX, index)
    down = f"127.0.0.1:{free_port()}/kits/probe:1"
    refs = [ref, registry.ref("kits/probe", "index"), f"{registry.host}/kits/probe@{single.digest}",
            registry.ref("kits/probe", "absent"), registry.ref("kits/none", "1"), down,
            f"{gate}/kits/probe:1", f"{gate}/kits/probe:index", f"{gate}/kits/none:1"]
    small_env = {**env, "HOME": str(tmp_path)}
    for target in refs:
        Gate.seen = []
        small = manifests(target, small_env)
        small_agents = {agent for _, _, agent in Gate.seen}
        Gate.seen = []
        assert small == manifests(target, {**small_env, **REQUESTS}), target
        if target.startswith(gate):  # the dance happened, once each, by the client asked
            assert small_agents == {"sbx"}
            assert {agent.split("/")[0] for _, _, agent in Gate.seen if agent} == \
                {"python-requests"}
            assert [path for path, _, _ in Gate.seen][:3] == [
                f"/v2/kits/{target.split('/kits/')[1].split(':')[0]}/manifests/"
                f"{target.rsplit(':', 1)[1]}", "/token",
                f"/v2/kits/{target.split('/kits/')[1].split(':')[0]}/manifests/"
                f"{target.rsplit(':', 1)[1]}"]
    assert manifests(down, small_env)[1] is Reason.REGISTRY_UNREACHABLE
    # A token service that refuses anonymous access: the same refusal from both.
    Gate.need_basic = True
    refused = manifests(f"{gate}/kits/probe:1", small_env)
    assert refused[0] == "refused" and "token service" in refused[2]
    assert refused == manifests(f"{gate}/kits/probe:1", {**small_env, **REQUESTS})


@pytest.mark.usefixtures("clean_images")
def test_a_pull_through_the_gate_by_hand(env: dict[str, str], state_home: Path,
                                         tmp_path: Path, registry: Registry, gate: str) -> None:
    """The bearer dance on the pull path itself, by hand and through typer alike (the engine
    pulls from the registry behind it; the gate only guards the manifest reads)."""
    ref = registry.ref("kits/probe", "1")
    push(env, tmp_path, "v1", ref, network("a.example.com"))
    gated = f"{gate}/kits/probe:1"
    done = both_paths({**env, "HOME": str(tmp_path)}, state_home, ("pull", "--json", gated))
    assert done.returncode == 125 and "permission_unapproved" in done.stdout
    assert "/token" in [path for path, _, _ in Gate.seen]


# -- the engine's pull over the socket vs the SDK's ----------------------------------------------


@pytest.mark.usefixtures("clean_images")
def test_socket_pull_lands_what_the_sdk_pull_lands(env: dict[str, str], tmp_path: Path,
                                                   registry: Registry) -> None:
    ref = registry.ref("kits/probe", "1")
    digest = push(env, tmp_path, "v1", ref, network("a.example.com"))
    pinned = f"{registry.host}/kits/probe@{digest}"
    socket, sdk = open_engine(dict(os.environ)), open_engine({**os.environ,
                                                                "SBX_ENGINE_SOCKET": "0"})
    assert isinstance(socket, SocketEngine) and not isinstance(sdk, SocketEngine)
    pulled: dict[str, Any] = {}
    for name, driver in (("socket", socket), ("sdk", sdk)):
        remove_local(registry)
        lines: list[str] = []
        pulled[name] = (driver.pull_image(pinned, lines.append), lines)
        assert any("Pull complete" in line or "Downloaded newer" in line
                   or "Status:" in line for line in lines), lines
    assert pulled["socket"][0] == pulled["sdk"][0]
    for name, driver in (("socket", socket), ("sdk", sdk)):
        with pytest.raises(SbxError) as missing:
            driver.pull_image(f"{registry.host}/kits/probe@sha256:{'0' * 64}", lambda _line: None)
        pulled[f"{name}-refusal"] = missing.value.reason
        with pytest.raises(SbxError) as down:
            driver.pull_image(f"127.0.0.1:{free_port()}/kits/x:1", lambda _line: None)
        pulled[f"{name}-down"] = down.value.reason
    assert pulled["socket-refusal"] == pulled["sdk-refusal"]
    assert pulled["socket-down"] == pulled["sdk-down"] == Reason.REGISTRY_UNREACHABLE
