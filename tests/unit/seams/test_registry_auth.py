"""Registry credentials from Docker's config.json and credential helpers (resolved by the
docker SDK's own code), and the registry's Basic / Bearer challenge flow against a loopback
HTTP server."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sbx.base.errors import SbxError
from sbx.seams.registry import fetch_token, get_manifest, parse_challenge, parse_reference
from sbx.seams.registry_auth import Credentials, config_path, resolve
from sbx.seams.registry_http import SWITCH_ENV

HOST = "registry.example.test:5000"
SECRET = "s3cret-Value-42"  # noqa: S105 (a test value)


@pytest.fixture(autouse=True)
def _helpers_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK looks credential helpers up on the process's PATH (as the docker CLI does).
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")


def write_config(directory: Path, config: dict[str, Any]) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return {"DOCKER_CONFIG": str(directory), "PATH": str(directory / "bin")}


def helper(directory: Path, name: str, script: str) -> None:
    bindir = directory / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / f"docker-credential-{name}"
    path.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    path.chmod(0o755)


def login(user: str, password: str) -> str:
    """An auths entry's `auth` field, as `docker login` writes it."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_plain_username_password_fields_are_not_read(tmp_path: Path) -> None:
    # The docker SDK reads an auths entry's `auth` field only (what `docker login` writes).
    env = write_config(tmp_path, {"auths": {HOST: {"username": "u", "password": "p"}}})
    assert resolve(HOST, env) is None


ECHO_HELPER = (  # answers for the host it read on stdin
    'read host\n[ "$1" = get ] || exit 3\n'
    f'printf \'{{"ServerURL":"%s","Username":"helper-user","Secret":"{SECRET}"}}\' "$host"\n')


def test_config_path_prefers_docker_config() -> None:
    assert config_path({"DOCKER_CONFIG": "/c", "HOME": "/h"}) == Path("/c/config.json")
    assert config_path({"HOME": "/h"}) == Path("/h/.docker/config.json")
    assert config_path({}) is None


def test_home_docker_config(tmp_path: Path) -> None:
    write_config(tmp_path / ".docker", {"auths": {HOST: {"auth": login("u", "p")}}})
    assert resolve(HOST, {"HOME": str(tmp_path)}) == Credentials("u", "p")


def test_no_config_is_anonymous(tmp_path: Path) -> None:
    assert resolve(HOST, {"HOME": str(tmp_path)}) is None
    env = write_config(tmp_path, {"auths": {"other.test": {"auth": "eDp5"}}})
    assert resolve(HOST, env) is None


def test_auths_base64(tmp_path: Path) -> None:
    encoded = base64.b64encode(f"alice:{SECRET}:with-colon".encode()).decode()
    env = write_config(tmp_path, {"auths": {HOST: {"auth": encoded}}})
    found = resolve(HOST, env)
    assert found == Credentials("alice", f"{SECRET}:with-colon")
    assert SECRET not in repr(found)
    assert found is not None and found.auth_config() == {
        "username": "alice", "password": f"{SECRET}:with-colon"}


def test_auths_url_key_and_identity_token(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"auths": {f"https://{HOST}/v1/": {
        "username": "bob", "identitytoken": SECRET}}})
    found = resolve(HOST, env)
    # The SDK keeps only the token of an identity-token entry (the refresh grant needs no user).
    assert found == Credentials("", "", SECRET)
    assert found is not None and found.auth_config() == {"username": "",
                                                          "identitytoken": SECRET}


def test_auths_invalid_base64_names_host_not_value(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"auths": {HOST: {"auth": SECRET + "!!"}}})
    with pytest.raises(SbxError) as caught:
        resolve(HOST, env)
    text = str(caught.value.message) + str(caught.value.hint) + repr(caught.value)
    assert HOST in caught.value.message
    assert SECRET not in text


def test_cred_helper_wins_over_auths_and_store(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "sbxtest"}, "credsStore": "missing",
                                  "auths": {HOST: {"auth": login("u", "p")}}})
    helper(tmp_path, "sbxtest", ECHO_HELPER)
    assert resolve(HOST, env) == Credentials("helper-user", SECRET)


def test_creds_store(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credsStore": "sbxtest"})
    helper(tmp_path, "sbxtest", ECHO_HELPER)
    assert resolve(HOST, env) == Credentials("helper-user", SECRET)


def test_creds_store_not_found_falls_back_to_auths(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credsStore": "sbxtest",
                                  "auths": {HOST: {"auth": login("u", "p")}}})
    helper(tmp_path, "sbxtest", "echo 'credentials not found in native keychain'; exit 1\n")
    assert resolve(HOST, env) == Credentials("u", "p")


def test_helper_identity_token(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "sbxtest"}})
    helper(tmp_path, "sbxtest",
           f'cat >/dev/null; echo \'{{"Username":"<token>","Secret":"{SECRET}"}}\'\n')
    assert resolve(HOST, env) == Credentials("", "", SECRET)


def test_missing_helper_is_a_clear_error(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "sbxtest"}})
    with pytest.raises(SbxError) as caught:
        resolve(HOST, env)
    assert HOST in caught.value.message
    assert "docker-credential-sbxtest" in caught.value.message
    assert "not on PATH" in caught.value.message


def test_failing_helper_leaks_nothing(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "sbxtest"}})
    helper(tmp_path, "sbxtest", f"echo '{SECRET}'; echo '{SECRET}' >&2; exit 7\n")
    with pytest.raises(SbxError) as caught:
        resolve(HOST, env)
    error = caught.value
    assert "docker-credential-sbxtest" in error.message and HOST in error.message
    assert SECRET not in f"{error.message} {error.hint} {error.body} {error.details!r}"
    helper(tmp_path, "sbxtest", f"echo 'not json {SECRET}'\n")
    with pytest.raises(SbxError) as caught:
        resolve(HOST, env)
    assert SECRET not in f"{caught.value.message} {caught.value.hint} {caught.value.body}"


def test_bad_helper_name_is_refused(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "../evil"}})
    with pytest.raises(SbxError, match="not valid"):
        resolve(HOST, env)


def test_parse_challenge() -> None:
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull"')
    assert scheme == "bearer"
    assert params == {"realm": "https://auth.example/token", "service": "reg",
                      "scope": "repository:a/b:pull"}
    assert parse_challenge('Basic realm="x"') == ("basic", {"realm": "x"})


def test_token_realm_must_be_https_off_loopback() -> None:
    ref = parse_reference("127.0.0.1:1/kits/x:1")
    with pytest.raises(SbxError, match="not https"):
        fetch_token(ref, {"realm": "http://auth.example.test/token"}, Credentials("u", SECRET))


# -- a tiny registry with a token service on loopback -------------------------------------------

MANIFEST = json.dumps({"schemaVersion": 2, "mediaType":
                       "application/vnd.oci.image.manifest.v1+json", "layers": []}).encode()
TOKEN = "tok-123"  # noqa: S105 (a test value)


class Handler(BaseHTTPRequestHandler):
    expected_basic: ClassVar[str | None] = None  # None: the token service is anonymous
    scheme: ClassVar[str] = "bearer"
    seen: ClassVar[list[tuple[str, str | None]]] = []
    agents: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization")
        Handler.seen.append((self.path, auth))
        Handler.agents.append(self.headers.get("User-Agent", ""))
        address = self.server.server_address
        assert isinstance(address, tuple)  # a TCP server's (host, port)
        port = address[1]
        if self.path.startswith("/token"):
            if self.expected_basic is not None and auth != self.expected_basic:
                self._send(401, b"{}", {})
                return
            assert "service=reg" in self.path and "scope=repository" in self.path
            self._send(200, json.dumps({"token": TOKEN}).encode(), {})
            return
        wanted = "Bearer " + TOKEN if self.scheme == "bearer" else self.expected_basic
        if auth != wanted:
            challenge = (f'Bearer realm="http://127.0.0.1:{port}/token",service="reg",'
                         'scope="repository:kits/x:pull"') if self.scheme == "bearer" else \
                'Basic realm="reg"'
            self._send(401, b"{}", {"WWW-Authenticate": challenge})
            return
        self._send(200, MANIFEST,
                   {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})


@pytest.fixture
def server() -> Iterator[str]:
    Handler.seen, Handler.agents = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(params=["small", "requests"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment that picks the registry client: sbx's small one (it needs a HOME to
    rule out a .netrc) or requests."""
    home = {"HOME": str(tmp_path / "home")}
    return home if request.param == "small" else {**home, SWITCH_ENV: "requests"}


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_bearer_flow_with_credentials(server: str, client: dict[str, str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Handler, "scheme", "bearer")
    monkeypatch.setattr(Handler, "expected_basic", basic("alice", SECRET))
    env = {**write_config(tmp_path, {"auths": {server: {"auth": login("alice", SECRET)}}}),
           **client}
    manifest = get_manifest(parse_reference(f"{server}/kits/x:1"), env=env)
    assert manifest.body == MANIFEST
    paths = [p.split("?")[0] for p, _ in Handler.seen]
    assert paths == ["/v2/kits/x/manifests/1", "/token", "/v2/kits/x/manifests/1"]
    # The password went to the token service only; the registry saw the token.
    assert Handler.seen[0][1] is None
    assert Handler.seen[1][1] == basic("alice", SECRET)
    assert Handler.seen[2][1] == "Bearer " + TOKEN


def test_bearer_flow_anonymous(server: str, client: dict[str, str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Handler, "scheme", "bearer")
    monkeypatch.setattr(Handler, "expected_basic", None)
    manifest = get_manifest(parse_reference(f"{server}/kits/x:1"), env=client)
    assert manifest.body == MANIFEST
    assert Handler.seen[1][1] is None
    small = SWITCH_ENV not in client  # the client asked is the one that spoke
    assert {a.startswith("python-requests") for a in Handler.agents} == {not small}


def test_bearer_wrong_password_is_refused_without_leaking(
        server: str, client: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Handler, "scheme", "bearer")
    monkeypatch.setattr(Handler, "expected_basic", basic("alice", "right"))
    env = {**write_config(tmp_path, {"auths": {server: {"auth": login("alice", SECRET)}}}),
           **client}
    with pytest.raises(SbxError) as caught:
        get_manifest(parse_reference(f"{server}/kits/x:1"), env=env)
    assert "token service" in caught.value.message and server in caught.value.message
    assert SECRET not in f"{caught.value.message} {caught.value.hint}"
    assert len(Handler.seen) == 2  # one try, no loop


@pytest.mark.slow
def test_basic_challenge(server: str, client: dict[str, str], tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Handler, "scheme", "basic")
    monkeypatch.setattr(Handler, "expected_basic", basic("alice", SECRET))
    env = {**write_config(tmp_path, {"auths": {server: {"auth": login("alice", SECRET)}}}),
           **client}
    assert get_manifest(parse_reference(f"{server}/kits/x:1"), env=env).body == MANIFEST
    assert [a for _, a in Handler.seen] == [None, basic("alice", SECRET)]


@pytest.mark.slow
def test_basic_challenge_without_credentials_is_refused(
        server: str, client: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Handler, "scheme", "basic")
    monkeypatch.setattr(Handler, "expected_basic", basic("alice", SECRET))
    with pytest.raises(SbxError, match="HTTP 401"):
        get_manifest(parse_reference(f"{server}/kits/x:1"), env=client)
    assert len(Handler.seen) == 1


@pytest.mark.slow
def test_docker_hub_keys(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credsStore": "sbxtest"})
    helper(tmp_path, "sbxtest", 'read host\n[ "$host" = https://index.docker.io/v1/ ] || exit 9\n'
                                f'echo \'{{"Username":"hub","Secret":"{SECRET}"}}\'\n')
    assert resolve("docker.io", env) == Credentials("hub", SECRET)
    encoded = base64.b64encode(b"hub:pw").decode()
    hub = {"https://index.docker.io/v1/": {"auth": encoded}}
    env = write_config(tmp_path / "b", {"auths": hub})
    assert resolve("docker.io", env) == Credentials("hub", "pw")
