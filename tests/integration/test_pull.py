"""`sbx kit push` and `sbx pull` against a real registry (Debian's docker-registry on loopback):
annotations, digest pinning in the lock, the permission-widening gate, plain images, invalid
published descriptors and an unreachable registry."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.seams import audit
from sbx.seams.driver import SdkEngine
from sbx.seams.registry import (
    CAPABILITIES_ANNOTATION,
    DESCRIPTOR_ANNOTATION,
    OCI_INDEX,
    SCHEMA_VERSION_ANNOTATION,
    annotate,
    get_manifest,
    parse_reference,
    put_manifest,
)

from .conftest import BUSYBOX, make_kit
from .registry import Registry, free_port, registry

pytestmark = pytest.mark.docker
__all__ = ["registry"]  # the fixture, re-exported for pytest

SBX = str(Path(sys.executable).with_name("sbx"))
DOCKERFILE = f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD [\"true\"]\n"


def network(*hosts: str) -> str:
    allow = ", ".join(hosts)
    return ("capabilities:\n  - type: com.docker.sandbox/network-policy@1\n"
            f"    config: {{runtime: {{allow: [{allow}]}}}}\n")


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


@pytest.fixture
def clean_images(engine: SdkEngine, registry: Registry) -> Iterator[None]:
    yield
    remove_local(registry)


def remove_local(registry: Registry) -> None:
    """Untag every local name from the test registry (by name: a shared base image stays)."""
    import docker

    client = docker.from_env()
    try:
        for name in local_names(registry):
            with contextlib.suppress(docker.errors.NotFound):
                client.images.remove(name)
    finally:
        client.close()


def local_names(registry: Registry) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        return [str(n) for image in client.images.list()
                for n in [*(image.attrs.get("RepoTags") or []),
                          *(image.attrs.get("RepoDigests") or [])]
                if str(n).startswith(registry.host + "/")]
    finally:
        client.close()


def sbx(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, check=False)


def push(env: dict[str, str], root: Path, version: str, ref: str, extra: str) -> str:
    kit = make_kit(root / version, "probe", DOCKERFILE + f"LABEL kit.version={version}\n", extra)
    done = sbx(env, "kit", "push", "--json", str(kit), ref)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["data"]
    assert data["digest"].startswith("sha256:")
    return str(data["digest"])


def lock_of(state_home: Path) -> dict[str, Any]:
    return dict(json.loads((state_home / "kits.lock.json").read_text(encoding="utf-8")))


def events(state_home: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in audit.read_events(state_home) if e["event_type"] == kind]


@pytest.mark.usefixtures("clean_images")
def test_push_pull_pins_digest_and_surface(env: dict[str, str], state_home: Path,
                                           tmp_path: Path, registry: Registry,
                                           engine: SdkEngine) -> None:
    ref = registry.ref("kits/probe", "1")
    digest = push(env, tmp_path, "v1", ref, network("a.example.com"))
    manifest = get_manifest(parse_reference(ref))
    assert manifest.digest == digest
    annotations = manifest.data["annotations"]
    assert annotations[SCHEMA_VERSION_ANNOTATION] == "3"
    assert annotations[CAPABILITIES_ANNOTATION] == "com.docker.sandbox/network-policy@1"
    assert json.loads(annotations[DESCRIPTOR_ANNOTATION])["kind"] == "workload"
    remove_local(registry)

    # A first pull shows the kit's permissions and needs approval: no terminal, no --accept.
    unapproved = sbx(env, "pull", ref)
    assert unapproved.returncode == 125, unapproved.stderr
    assert "permission_unapproved" in unapproved.stderr
    assert "+ network.runtime.allow: a.example.com" in unapproved.stderr
    assert not (state_home / "kits.lock.json").exists() and local_names(registry) == []
    [event] = events(state_home, audit.KIT_WIDENING_REFUSED)
    assert event["details"]["first_pull"] is True

    done = sbx(env, "pull", "--json", "--accept", ref)
    assert done.returncode == 0, done.stderr
    item = json.loads(done.stdout)["data"]["pulled"][0]
    assert item["digest"] == digest and item["decision"] == "new"
    lock = lock_of(state_home)
    assert lock["version"] == 1
    [entry] = lock["kits"]
    assert entry["reference"] == ref and entry["digest"] == digest
    assert entry["image"] == f"{registry.host}/kits/probe@{digest}"
    assert entry["kind"] == "workload" and entry["args"] == {}
    assert entry["permissions"]["networkRuntimeAllow"] == ["a.example.com"]
    assert entry["permissions"]["networkRuntimeHTTPAllow"] == ["ANY a.example.com/**"]
    assert engine.image(entry["image"]) is not None
    assert engine.image(ref) is not None  # also tagged as written


@pytest.mark.usefixtures("clean_images")
def test_moved_tag_widening_is_gated_and_narrowing_is_silent(
        env: dict[str, str], state_home: Path, tmp_path: Path, registry: Registry) -> None:
    ref = registry.ref("kits/probe", "stable")
    first = push(env, tmp_path, "v1", ref, network("a.example.com"))
    assert sbx(env, "pull", "--accept", ref).returncode == 0
    locked = (state_home / "kits.lock.json").read_bytes()

    second = push(env, tmp_path, "v2", ref, network("a.example.com", "b.example.com"))
    assert second != first
    remove_local(registry)
    refused = sbx(env, "pull", ref)
    assert refused.returncode == 125, refused.stderr
    assert "permission_widened" in refused.stderr
    assert "+ network.runtime.allow: b.example.com" in refused.stderr
    assert (state_home / "kits.lock.json").read_bytes() == locked
    assert local_names(registry) == []  # nothing pulled
    [event] = events(state_home, audit.KIT_WIDENING_REFUSED)
    assert event["details"]["digest"] == second

    accepted = sbx(env, "pull", "--accept", ref)
    assert accepted.returncode == 0, accepted.stderr
    [entry] = lock_of(state_home)["kits"]
    assert entry["digest"] == second
    assert entry["permissions"]["networkRuntimeAllow"] == ["a.example.com", "b.example.com"]
    first_pull, event = events(state_home, audit.KIT_WIDENING_ACCEPTED)
    assert first_pull["details"]["first_pull"] is True  # the first pull's approval
    assert event["details"]["first_pull"] is False
    assert event["details"]["via"] == "accept-flag"
    assert event["details"]["widenings"] == [
        {"category": "network.runtime.allow", "detail": "b.example.com"}]

    third = push(env, tmp_path, "v3", ref, network("b.example.com"))
    narrowed = sbx(env, "pull", ref)
    assert narrowed.returncode == 0, narrowed.stderr
    assert "+ " not in narrowed.stderr
    [entry] = lock_of(state_home)["kits"]
    assert entry["digest"] == third
    assert entry["permissions"]["networkRuntimeAllow"] == ["b.example.com"]


def credential_at(domain: str) -> str:
    """Two allowed hosts; the user's github secret injected at ``domain``."""
    return (network("api.github.com", "example.com")
            + "  - type: com.docker.sandbox/credential@1\n"
            "    config: {service: github, phase: runtime, apiKey: {name: GH_TOKEN, "
            f"proxyManaged: true, inject: [{{domain: {domain}, header: Authorization}}]}}}}\n")


@pytest.mark.usefixtures("clean_images")
def test_a_credential_moved_to_another_allowed_host_is_a_widening(
        env: dict[str, str], state_home: Path, tmp_path: Path, registry: Registry) -> None:
    ref = registry.ref("kits/probe", "cred")
    push(env, tmp_path, "v1", ref, credential_at("api.github.com"))
    assert sbx(env, "pull", "--accept", ref).returncode == 0
    locked = (state_home / "kits.lock.json").read_bytes()
    assert lock_of(state_home)["kits"][0]["permissions"]["credentialDestinations"] == [
        "github runtime inject api.github.com header authorization"]
    # v2 allows the same hosts and asks for the same service: only where it goes moved.
    moved = push(env, tmp_path, "v2", ref, credential_at("example.com"))
    remove_local(registry)
    refused = sbx(env, "pull", ref)
    assert refused.returncode == 125, refused.stderr
    assert "permission_widened" in refused.stderr
    assert ("+ credentials.destinations: github runtime inject example.com header "
            "authorization") in refused.stderr
    assert (state_home / "kits.lock.json").read_bytes() == locked
    assert local_names(registry) == []
    [event] = events(state_home, audit.KIT_WIDENING_REFUSED)
    assert event["details"]["digest"] == moved


@pytest.mark.usefixtures("clean_images")
def test_plain_image_is_pulled_as_an_image(env: dict[str, str], state_home: Path,
                                           registry: Registry, engine: SdkEngine) -> None:
    ref = registry.ref("plain/busybox", "1")
    base = engine.image(BUSYBOX)
    assert base is not None
    engine.tag_image(base.id, ref)
    engine.push_image(ref, lambda _line: None)
    digest = get_manifest(parse_reference(ref)).digest
    remove_local(registry)

    done = sbx(env, "pull", "--json", ref)
    assert done.returncode == 0, done.stderr
    [item] = json.loads(done.stdout)["data"]["pulled"]
    assert item["kind"] == "image" and item["digest"] == digest
    assert engine.image(f"{registry.host}/plain/busybox@{digest}") is not None
    assert not (state_home / "kits.lock.json").exists()  # images are not kits


@pytest.mark.usefixtures("clean_images")
def test_invalid_published_descriptor_pulls_nothing(env: dict[str, str], state_home: Path,
                                                    tmp_path: Path, registry: Registry) -> None:
    good = registry.ref("kits/probe", "good")
    push(env, tmp_path, "v1", good, network("a.example.com"))
    assert sbx(env, "pull", "--accept", good).returncode == 0
    locked = (state_home / "kits.lock.json").read_bytes()

    bad = registry.ref("kits/probe", "bad")
    push(env, tmp_path, "v2", bad, network("a.example.com"))
    annotate(parse_reference(bad), {DESCRIPTOR_ANNOTATION: '{"schemaVersion":"3","kind":"nope"}'})
    remove_local(registry)
    done = sbx(env, "pull", bad)
    assert done.returncode == 125, done.stderr
    assert "invalid_kit" in done.stderr
    assert local_names(registry) == []
    assert (state_home / "kits.lock.json").read_bytes() == locked

    annotate(parse_reference(bad), {DESCRIPTOR_ANNOTATION: "{not json"})
    done = sbx(env, "pull", bad)
    assert done.returncode == 125 and "invalid_kit" in done.stderr, done.stderr
    assert (state_home / "kits.lock.json").read_bytes() == locked


@pytest.mark.usefixtures("clean_images")
def test_registry_down_is_a_clear_refusal(env: dict[str, str], state_home: Path,
                                          tmp_path: Path, registry: Registry) -> None:
    ref = registry.ref("kits/probe", "1")
    push(env, tmp_path, "v1", ref, network("a.example.com"))
    assert sbx(env, "pull", "--accept", ref).returncode == 0
    locked = (state_home / "kits.lock.json").read_bytes()
    registry.stop()
    done = sbx(env, "pull", ref)
    assert done.returncode == 125
    assert "registry_unreachable" in done.stderr and registry.host in done.stderr
    assert (state_home / "kits.lock.json").read_bytes() == locked

    dead = f"127.0.0.1:{free_port()}/kits/probe:1"
    done = sbx(env, "pull", "--json", dead)
    assert done.returncode == 125
    assert json.loads(done.stdout)["reason"] == "registry_unreachable"
    assert (state_home / "kits.lock.json").read_bytes() == locked


@pytest.mark.usefixtures("clean_images")
def test_run_of_a_locked_reference_uses_the_locked_digest(
        env: dict[str, str], state_home: Path, tmp_path: Path, registry: Registry,
        engine: SdkEngine) -> None:
    ref = registry.ref("kits/runnable", "1")
    first = push(env, tmp_path, "v1", ref, "")
    remove_local(registry)
    assert sbx(env, "pull", ref).returncode == 0
    locked = f"{registry.host}/kits/runnable@{first}"
    second = push(env, tmp_path, "v2", ref, "")  # the tag moves on the registry
    assert second != first

    done = sbx(env, "run", "--json", ref)
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout)
    assert envelope["data"]["image"] == locked  # not the moved tag's image
    assert envelope["data"]["image_built"] is False
    [entry] = lock_of(state_home)["kits"]
    assert entry["digest"] == first  # run never moves the lock

    remove_local(registry)
    missing = sbx(env, "run", ref)
    assert missing.returncode == 125
    assert "image_missing" in missing.stderr and f"sbx pull {ref}" in missing.stderr


@pytest.mark.usefixtures("clean_images")
def test_index_without_annotations_falls_back_to_the_platform_manifest(
        env: dict[str, str], state_home: Path, tmp_path: Path, registry: Registry) -> None:
    single = registry.ref("kits/multi", "single")
    platform_digest = push(env, tmp_path, "v1", single, network("a.example.com"))
    manifest = get_manifest(parse_reference(single))
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{
        "mediaType": manifest.media_type, "digest": platform_digest,
        "size": len(manifest.body), "platform": {"architecture": "amd64", "os": "linux"}}]}
    body = json.dumps(index).encode("utf-8")
    ref = registry.ref("kits/multi", "index")
    index_digest = put_manifest(parse_reference(ref), OCI_INDEX, body)
    remove_local(registry)

    done = sbx(env, "pull", "--json", "--accept", ref)
    assert done.returncode == 0, done.stderr
    [item] = json.loads(done.stdout)["data"]["pulled"]
    assert item["kind"] == "workload"
    [entry] = lock_of(state_home)["kits"]
    assert entry["digest"] == index_digest  # the index digest is what is pinned
    assert entry["permissions"]["networkRuntimeAllow"] == ["a.example.com"]


def credential_helper_env(env: dict[str, str], tmp_path: Path, registry: Registry,
                          helper: str) -> tuple[dict[str, str], Path]:
    """A DOCKER_CONFIG naming ``docker-credential-<helper>`` for the registry host, and a fake
    ``docker-credential-sbxtest`` that records each host it was asked about."""
    config = tmp_path / "docker-config"
    bindir = config / "bin"
    bindir.mkdir(parents=True)
    (config / "config.json").write_text(
        json.dumps({"credHelpers": {registry.host: helper}}), encoding="utf-8")
    marker = tmp_path / "helper-calls"
    script = bindir / "docker-credential-sbxtest"
    script.write_text(
        "#!/bin/sh\nread host\n"
        f"echo \"$1 $host\" >> {marker}\n"
        "echo '{\"Username\":\"sbx\",\"Secret\":\"not-checked-by-an-anonymous-registry\"}'\n",
        encoding="utf-8")
    script.chmod(0o755)
    return {**env, "DOCKER_CONFIG": str(config),
            "PATH": f"{bindir}{os.pathsep}{env.get('PATH', os.defpath)}"}, marker


@pytest.mark.usefixtures("clean_images")
def test_push_and_pull_pass_the_credential_helpers_answer(
        env: dict[str, str], tmp_path: Path, registry: Registry) -> None:
    """The engine gets the user's credentials (an anonymous registry ignores them; a registry
    with htpasswd auth is not tested here: generating its bcrypt entry needs `bcrypt`)."""
    helper_env, marker = credential_helper_env(env, tmp_path, registry, "sbxtest")
    ref = registry.ref("kits/probe", "auth")
    digest = push(helper_env, tmp_path, "v1", ref, "")
    remove_local(registry)
    done = sbx(helper_env, "pull", "--json", ref)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["data"]["pulled"][0]["digest"] == digest
    calls = marker.read_text(encoding="utf-8").splitlines()
    assert len(calls) >= 2 and set(calls) == {f"get {registry.host}"}


@pytest.mark.usefixtures("clean_images")
def test_missing_credential_helper_is_a_clear_error(
        env: dict[str, str], tmp_path: Path, registry: Registry) -> None:
    helper_env, _ = credential_helper_env(env, tmp_path, registry, "sbxmissing")
    kit = make_kit(tmp_path / "kit", "probe", DOCKERFILE, "")
    done = sbx(helper_env, "kit", "push", str(kit), registry.ref("kits/probe", "1"))
    assert done.returncode != 0
    assert "docker-credential-sbxmissing" in done.stderr and registry.host in done.stderr
