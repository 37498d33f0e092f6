"""`sbx save NAME TAG` and `--template TAG` on a real engine with the local "internet": a named
sandbox with egress, a secret, an install hook and a startup hook is saved while it runs; the
template's files (read back through the engine's export) hold HOME's file and the install
hook's result but neither the run's proxy token nor the secret; the sandbox is removed and a
new one made from the template sees both files, with the kits' egress policy and no install
hook run again; gc keeps the template; what is not a template, or other kits, are refused; a
token an install hook wrote refuses the save; the OAuth credential file sbx writes into HOME is
left out and written again by the new sandbox, the agent's own files beside it kept.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.domain.credentials.oauth import Tokens
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.sandbox import runrecord
from sbx.seams.driver import SdkEngine
from tests.support.kits import (
    api_key_credential,
    capabilities,
    capability,
    network_policy,
    rule,
)
from tests.support.origin import Internet
from tests.support.sbxproc import Finished, run_sbx

from .conftest import BUSYBOX, make_kit

pytestmark = pytest.mark.docker

SECRET = "ghp_template_secret_value_" + "q" * 14
CURL = 'curl -sS -m 20 -o /dev/null -w "%{http_code}" https://api.github.com/user'
LIFECYCLE = {"install": [{"command": "echo INSTALL-RAN; date +%s%N > /opt/installed"}],
             "startup": [{"command": "true"}]}
KIT = capabilities(
    network_policy(version=2, runtime=[rule(["api.github.com"], methods=["GET"])]),
    api_key_credential("github", "GH_TOKEN", "api.github.com", value_format="token %s"),
    capability("lifecycle@1", LIFECYCLE))
RECIPE = ("FROM sbx-base/bookworm:1\nRUN mkdir -p /opt && chmod 777 /opt\nUSER agent\n"
          "WORKDIR /workspace\nCMD [\"bash\"]\n")


@pytest.fixture(scope="module")
def kits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kits")
    leaky = capabilities(
        network_policy(version=2, runtime=[rule(["api.github.com"], methods=["GET"])]),
        capability("lifecycle@1", {"install": [{"command": "env > /opt/install-env"}]}))
    return {"agent": make_kit(root, "tplagent", RECIPE, KIT),
            "other": make_kit(root, "tplother", RECIPE, KIT),
            "leaky": make_kit(root, "tplleaky", RECIPE, leaky)}


@pytest.fixture
def env(tmp_path: Path, state_home: Path, internet: Internet) -> dict[str, str]:
    internet.origin.clear()
    config = internet.sbx_config(tmp_path / "config.toml")
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": str(config),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
            "SBX_TEST_GH_VALUE": SECRET}


@pytest.fixture
def tags(engine: SdkEngine) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for tag in made:
        with contextlib.suppress(Exception):
            engine.remove_image(tag)


def sbx(env: dict[str, str], *args: str) -> Finished:
    return run_sbx(list(args), env=env, timeout=240)


def _files(engine: SdkEngine, image_id: str, tmp_path: Path) -> Path:
    """The image's filesystem as the engine exports it, in a tar file."""
    path = tmp_path / f"export-{uuid.uuid4().hex[:6]}.tar"
    with path.open("wb") as out:
        for chunk in engine.export_image(image_id, {"dev.sbx.test": "export"}):
            out.write(chunk)
    return path


def _contains(tar_path: Path, needle: bytes) -> list[str]:
    found: list[str] = []
    with tarfile.open(tar_path) as archive:
        for entry in archive:
            if entry.isfile():
                data = archive.extractfile(entry)
                if data is not None and needle in data.read():
                    found.append(entry.name)
    return found


def test_a_saved_sandbox_comes_back_from_its_template_without_its_boundary(
        kits: dict[str, Path], env: dict[str, str], cleanup: list[str], tags: list[str],
        engine: SdkEngine, state_home: Path, tmp_path: Path, internet: Internet) -> None:
    assert sbx(env, "secret", "set", "github", "--from-env", "SBX_TEST_GH_VALUE").returncode == 0
    first, second = f"tp-{uuid.uuid4().hex[:8]}", f"tq-{uuid.uuid4().hex[:8]}"
    cleanup.extend([first, second])
    tag = f"sbx-test-template-{uuid.uuid4().hex[:8]}:1"
    tags.append(tag)
    made = sbx(env, "run", "--name", first, "-d", str(kits["agent"]), "--", "sleep", "600")
    assert made.returncode == 0, made.stderr.decode()
    assert b"INSTALL-RAN" in made.stderr
    wrote = sbx(env, "exec", first, "--", "bash", "-c",
                'echo home-content > ~/note.txt && mkdir -p ~/.cfg && echo x > ~/.cfg/y '
                '&& cat /opt/installed')
    assert wrote.returncode == 0, wrote.stderr.decode()
    installed = wrote.stdout.strip()
    record = json.loads((state_home / "sandboxes" / first / "sandbox.json").read_text())
    token = (runrecord.run_dir(state_home, record["run_id"]) / "proxy.token").read_bytes().strip()
    assert len(token) >= 16
    # What save has to leave out: the sandbox's own image holds the token (its startup
    # script names the proxy URL) and the CA.
    own = _files(engine, record["image"], tmp_path)
    assert ".sbx/startup.sh" in _contains(own, token)

    saved = sbx(env, "save", first, tag, "--json")  # it is running: saved as it is
    assert saved.returncode == 0, saved.stderr.decode()
    data = json.loads(saved.stdout)["data"]
    assert data["tag"] == tag and data["was_running"] is True
    image = engine.image(tag)
    assert image is not None and image.labels["dev.sbx.template"] == "1"
    assert json.loads(image.labels["dev.sbx.template.kits"])["workload"] == str(kits["agent"])
    exported = _files(engine, image.id, tmp_path)
    assert _contains(exported, token) == []
    assert _contains(exported, SECRET.encode()) == []
    with tarfile.open(exported) as archive:
        listed = set(archive.getnames())
    assert ".sbx-template/home/note.txt" in listed and ".sbx-template/home/.cfg/y" in listed
    assert not any(n == ".sbx" or n.startswith((".sbx/", "etc/sbx")) for n in listed)
    assert all(token.decode() not in item for item in image.env)
    # Not in a lower layer either: the template is one layer of its own (docker save: the
    # image as it would leave this machine).
    exported_image = subprocess.run(["docker", "save", tag], capture_output=True, check=True,
                                    timeout=300).stdout
    with tarfile.open(fileobj=io.BytesIO(exported_image)) as saved_tar:
        layers = [n for n in saved_tar.getnames() if n.endswith("layer.tar")]
        assert len(layers) == 1
        blob = saved_tar.extractfile(layers[0])
        assert blob is not None and token not in blob.read()
    assert not [item for item in image.env if item.startswith(("SBX_RUN_ID=", "HTTP_PROXY=",
                                                               "HTTPS_PROXY=", "GH_TOKEN="))]

    assert sbx(env, "rm", "-f", first).returncode == 0
    cleanup.remove(first)
    # No kits named: the template's own; its install hook does not run again.
    again = sbx(env, "create", "--template", tag, "--name", second)
    assert again.returncode == 0, again.stderr.decode()
    assert b"INSTALL-RAN" not in again.stderr
    seen = sbx(env, "exec", second, "--", "bash", "-c",
               "cat ~/note.txt ~/.cfg/y /opt/installed; ls -ld ~/note.txt | cut -d' ' -f3; "
               "test -e /.sbx-template && echo LEFT || true")
    assert seen.returncode == 0, seen.stderr.decode()
    lines = seen.stdout.decode().split()
    assert lines[:3] == ["home-content", "x", installed.decode()]
    assert lines[3] != "root" and "LEFT" not in lines
    internet.origin.clear()
    called = sbx(env, "exec", second, "--", "bash", "-c", CURL)
    assert called.stdout.decode() == "200", called.stderr.decode()
    assert [r.header("authorization") for r in internet.origin.requests()
            if r.path == "/user"] == [f"token {SECRET}"]
    denied = sbx(env, "exec", second, "--", "bash", "-c",
                 'curl -sS -m 20 -o /dev/null -w "%{http_code}" -X POST '
                 "https://api.github.com/user")
    assert denied.stdout.decode() == "403"  # the kit's policy: GET only

    listed_json = json.loads(sbx(env, "template", "ls", "--json").stdout)
    assert tag in [t["tag"] for t in listed_json["data"]["templates"]]
    usage = json.loads(sbx(env, "df", "--json").stdout)["data"]
    assert [u["detail"].split(",")[0] for u in usage["images"] if u["name"] == tag] == [
        "template"]
    assert tag not in [u["name"] for u in usage["reclaimable"]]
    assert sbx(env, "rm", "-f", second).returncode == 0
    cleanup.remove(second)
    dry = json.loads(sbx(env, "gc", "--dry-run", "--grace", "0", "--json").stdout)["data"]
    assert {"kind": "image", "why": "template"} in [
        {"kind": k["kind"], "why": k["why"]} for k in dry["kept"] if k["id"] == image.id]
    cleaned = sbx(env, "gc", "--grace", "0")
    assert cleaned.returncode == 0, cleaned.stderr.decode()
    assert engine.image(tag) is not None  # user data: gc never removes a template
    removed = sbx(env, "template", "rm", tag)
    assert removed.returncode == 0, removed.stderr.decode()
    assert engine.image(tag) is None


def test_what_is_not_a_template_or_not_its_kits_is_refused(
        kits: dict[str, Path], env: dict[str, str], cleanup: list[str], tags: list[str],
        engine: SdkEngine) -> None:
    name, other = f"tr-{uuid.uuid4().hex[:8]}", f"ts-{uuid.uuid4().hex[:8]}"
    cleanup.extend([name, other])
    plain = sbx(env, "create", "--template", BUSYBOX, "--name", other)
    assert plain.returncode == 125 and b"not_a_template" in plain.stderr, plain.stderr
    assert sbx(env, "template", "rm", BUSYBOX).returncode == 125
    assert engine.image(BUSYBOX) is not None
    assert sbx(env, "secret", "set", "github", "--from-env", "SBX_TEST_GH_VALUE").returncode == 0
    made = sbx(env, "run", "--name", name, "-d", str(kits["agent"]), "--", "sleep", "600")
    assert made.returncode == 0, made.stderr.decode()
    wrote = sbx(env, "exec", name, "--", "bash", "-c", "echo kept-while-stopped > ~/stopped.txt")
    assert wrote.returncode == 0, wrote.stderr.decode()
    assert sbx(env, "stop", name).returncode == 0
    tag = f"sbx-test-template-{uuid.uuid4().hex[:8]}:1"
    tags.append(tag)
    saved = sbx(env, "save", name, tag)  # stopped this time
    assert saved.returncode == 0, saved.stderr.decode()
    mismatch = sbx(env, "create", "--template", tag, "--name", other, str(kits["other"]))
    assert mismatch.returncode == 125 and b"template_mismatch" in mismatch.stderr
    assert sbx(env, "explain", "template_mismatch").returncode == 0
    # `sbx run` takes it as `sbx create` does (the template's kits, named explicitly here)
    ran = sbx(env, "run", "--template", tag, "--name", other, "-d", str(kits["agent"]))
    assert ran.returncode == 0, ran.stderr.decode()
    again = sbx(env, "run", "--template", tag, "--name", other, "-d")  # the same: re-entered
    assert again.returncode == 0, again.stderr.decode()
    seen = sbx(env, "exec", other, "--", "cat", "/home/sbx/stopped.txt")
    assert seen.stdout == b"kept-while-stopped\n", seen.stderr.decode()  # HOME of a stopped one
    one_shot = sbx(env, "run", "--rm", "--template", tag, str(kits["agent"]))
    assert one_shot.returncode == 2 and b"--template makes a kept or named" in one_shot.stderr
    own_repository = sbx(env, "save", name, "sbx-run/x:1")
    assert own_repository.returncode == 2 and b"sbx's own repositories" in own_repository.stderr


def test_a_token_written_into_the_image_refuses_the_save(
        kits: dict[str, Path], env: dict[str, str], cleanup: list[str], tags: list[str],
        engine: SdkEngine) -> None:
    name = f"tl-{uuid.uuid4().hex[:8]}"
    cleanup.append(name)
    made = sbx(env, "run", "--name", name, "-d", str(kits["leaky"]), "--", "sleep", "600")
    assert made.returncode == 0, made.stderr.decode()
    tag = f"sbx-test-template-{uuid.uuid4().hex[:8]}:1"
    tags.append(tag)
    refused = sbx(env, "save", name, tag)
    assert refused.returncode == 125 and b"template_leak" in refused.stderr, refused.stderr
    assert b"/opt/install-env" in refused.stderr
    assert engine.image(tag) is None


OAUTH_KIT = """
capabilities:
  - type: com.docker.sandbox/network-policy@1
    config:
      runtime:
        allow: [api.anthropic.com, console.anthropic.com]
  - type: com.docker.sandbox/credential@1
    config:
      service: anthropic
      phase: runtime
      oauth:
        tokenEndpoint: {host: console.anthropic.com, path: /v1/oauth/token}
        resourceHosts: [api.anthropic.com]
        sentinels:
          accessToken: sk-ant-oat01-proxy-managed
          refreshToken: sk-ant-ort01-proxy-managed
        credentialFile:
          path: ~/.claude/.credentials.json
          structure:
            claudeAiOauth:
              accessToken: "{{.AccessToken}}"
              refreshToken: "{{.RefreshToken}}"
"""
REAL_ACCESS = "real-access-token-template-0123456789"


def test_the_credential_file_sbx_puts_in_home_is_left_out_and_written_again(
        env: dict[str, str], cleanup: list[str], tags: list[str], engine: SdkEngine,
        state_home: Path, tmp_path: Path) -> None:
    kit = make_kit(tmp_path / "kits", "tploauth",
                   "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\nCMD [\"bash\"]\n",
                   OAUTH_KIT)
    OAuthStore(state_home).set("anthropic", Tokens(REAL_ACCESS, "real-refresh-token-tpl-0123"))
    first, second = f"to-{uuid.uuid4().hex[:8]}", f"tu-{uuid.uuid4().hex[:8]}"
    cleanup.extend([first, second])
    made = sbx(env, "run", "--name", first, "-d", str(kit), "--", "sleep", "600")
    assert made.returncode == 0, made.stderr.decode()
    shown = sbx(env, "exec", first, "--", "bash", "-c",
                "cat ~/.claude/.credentials.json; echo mine > ~/.claude/settings.json")
    assert b"sk-ant-oat01-proxy-managed" in shown.stdout, shown.stderr.decode()
    tag = f"sbx-test-template-{uuid.uuid4().hex[:8]}:1"
    tags.append(tag)
    assert sbx(env, "save", first, tag).returncode == 0
    image = engine.image(tag)
    assert image is not None
    exported = _files(engine, image.id, tmp_path)
    with tarfile.open(exported) as archive:
        listed = set(archive.getnames())
    assert ".sbx-template/home/.claude/settings.json" in listed  # the agent's own file stays
    assert ".sbx-template/home/.claude/.credentials.json" not in listed  # sbx's goes
    assert _contains(exported, b"sk-ant-oat01-proxy-managed") == []
    assert _contains(exported, REAL_ACCESS.encode()) == []
    assert sbx(env, "rm", "-f", first).returncode == 0
    cleanup.remove(first)
    again = sbx(env, "create", "--template", tag, "--name", second)
    assert again.returncode == 0, again.stderr.decode()
    seen = sbx(env, "exec", second, "--", "bash", "-c",
               "cat ~/.claude/settings.json ~/.claude/.credentials.json")
    assert seen.stdout.startswith(b"mine\n") and b"sk-ant-oat01-proxy-managed" in seen.stdout
