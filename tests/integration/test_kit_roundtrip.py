"""Kit-spec round trip (issue #13 item 3): `sbx kit push` to a real registry (Debian's
docker-registry on loopback), then `sbx pull` and `sbx run` of what was pushed, on the real
engine: examples/gh (agent-context contentFile), a provide versioned by a build arg with
lifecycle files and a group, a declaration-only mixin, an OAuth credentialFile without
structure; and a kind: set refused by its rule."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.seams.driver import SdkEngine
from sbx.seams.registry import (
    CAPABILITIES_ANNOTATION,
    DESCRIPTOR_ANNOTATION,
    get_manifest,
    parse_reference,
)

from .conftest import BUSYBOX
from .registry import Registry, registry

pytestmark = pytest.mark.docker
__all__ = ["registry"]  # the fixture, re-exported for pytest

SBX = str(Path(sys.executable).with_name("sbx"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HEAD = "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\n"
WORKLOAD = f"FROM {BUSYBOX}\nUSER agent\nWORKDIR /home/agent/workspace\nCMD [\"true\"]\n"


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull,
            "NO_COLOR": "1"}


@pytest.fixture
def clean_images(engine: SdkEngine, registry: Registry) -> Iterator[None]:
    yield
    remove_local(registry)


def remove_local(registry: Registry) -> None:
    """Untag every local name from the test registry. One listing call (no per-image
    inspect), so an image another session removes meanwhile cannot fail the teardown."""
    import docker

    client = docker.from_env()
    try:
        names = [str(n) for image in client.api.images()
                 for n in [*(image.get("RepoTags") or []), *(image.get("RepoDigests") or [])]
                 if str(n).startswith(registry.host + "/")]
        for name in names:
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_image(name)
    finally:
        client.close()


def sbx(env: dict[str, str], *args: str, cwd: Path | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SBX, *args], env=env, capture_output=True, text=True, cwd=cwd,
                          stdin=subprocess.DEVNULL, timeout=300, check=False)


def kit(root: Path, name: str, body: str, dockerfile: str | None,
        files: dict[str, str] | None = None) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / f"{name}.yaml").write_text(HEAD + textwrap.dedent(body), encoding="utf-8")
    if dockerfile is not None:
        (directory / f"{name}.dockerfile").write_text(dockerfile, encoding="utf-8")
    for rel, text in (files or {}).items():
        (directory / rel).write_text(text, encoding="utf-8")
    return directory


def push_and_pull(env: dict[str, str], directory: Path, ref: str, registry: Registry,
                  *extra: str) -> dict[str, str]:
    """Push, forget every local copy, pull (accepting its permissions); the annotations."""
    pushed = sbx(env, "kit", "push", "--json", *extra, str(directory), ref)
    assert pushed.returncode == 0, pushed.stderr
    remove_local(registry)
    pulled = sbx(env, "pull", "--accept", ref)
    assert pulled.returncode == 0, pulled.stderr
    return dict(get_manifest(parse_reference(ref)).data["annotations"])


@pytest.mark.usefixtures("clean_images")
def test_examples_gh_runs_after_push_and_pull(env: dict[str, str], registry: Registry,
                                              tmp_path: Path) -> None:
    ref = registry.ref("kits/gh", "2.100.0")
    annotations = push_and_pull(env, EXAMPLES / "gh", ref, registry)
    descriptor = json.loads(annotations[DESCRIPTOR_ANNOTATION])
    staged = "/usr/share/sandbox/kit/gh/gh-context.md"
    assert descriptor["capabilities"][2]["config"]["contentFile"] == staged
    done = sbx(env, "run", str(EXAMPLES / "hello"), "--kit", ref, "--", "sh", "-c",
               f"cat /home/agent/AGENTS.md; echo ---; cat {staged}; echo ---; "
               "cat /usr/share/sandbox/kit/gh/kit.dockerfile; command -v gh")
    assert done.returncode == 0, done.stderr
    profile, context, recipe = done.stdout.split("---\n")[:3]
    assert f"Read `{staged}`" in profile  # the index points at the staged file
    assert context.startswith("# GitHub (gh)")
    assert "COPY gh.sh /usr/local/bin/gh" in recipe
    assert done.stdout.rstrip().endswith("/usr/local/bin/gh")


@pytest.mark.usefixtures("clean_images")
def test_build_arg_provides_lifecycle_files_and_groups_round_trip(
        env: dict[str, str], registry: Registry, tmp_path: Path) -> None:
    directory = kit(tmp_path, "versioned", """\
        kind: workload
        args:
          version: {default: "1.2.3", pattern: '^[0-9.]+$', buildArg: KIT_VERSION}
          greeting: {default: "hello"}
        provides: ["versioned@${{ kit.args.version }}"]
        capabilities:
          - type: com.docker.sandbox/lifecycle@1
            config:
              files:
                - path: /home/agent/greeting
                  content: "${{ kit.args.greeting }} from ${{ kit.args.version }}"
          - group:
              optional: true
              capabilities:
                - type: com.docker.sandbox/port@1
                  config: {container: 8080}
        """, WORKLOAD.replace("USER agent", "ARG KIT_VERSION=0\nLABEL built=$KIT_VERSION\n"
                                            "USER agent"))
    ref = registry.ref("kits/versioned", "1")
    annotations = push_and_pull(env, directory, ref, registry, "--arg", "version=2.0.1")
    descriptor = json.loads(annotations[DESCRIPTOR_ANNOTATION])
    assert descriptor["provides"] == ["versioned@2.0.1"]
    assert annotations[CAPABILITIES_ANNOTATION] == (
        "com.docker.sandbox/lifecycle@1,com.docker.sandbox/port@1")  # the group's member too
    done = sbx(env, "run", ref, "--arg", "greeting=hi", "--", "cat", "/home/agent/greeting")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hi from 2.0.1"
    labels = sbx(env, "run", "--json", ref, "--", "true")
    assert labels.returncode == 0, labels.stderr


@pytest.mark.usefixtures("clean_images")
def test_declaration_only_mixin_is_one_staged_layer(env: dict[str, str], registry: Registry,
                                                    tmp_path: Path) -> None:
    mixin = kit(tmp_path, "notes", """\
        kind: mixin
        provides: ["notes@1.0.0"]
        capabilities:
          - type: com.docker.sandbox/agent-context@1
            config: {directory: /home/agent, filename: NOTES.md, contentFile: ./notes.md}
        """, None, {"notes.md": "declared-only notes\n"})
    workload = kit(tmp_path, "base", "kind: workload\n", WORKLOAD)
    ref = registry.ref("kits/notes", "1")
    push_and_pull(env, mixin, ref, registry)
    manifest = get_manifest(parse_reference(ref)).data
    assert len(manifest["layers"]) == 1  # SPEC: exactly the staged descriptor's layer
    done = sbx(env, "run", str(workload), "--kit", ref, "--", "sh", "-c",
               "cat /home/agent/NOTES.md /usr/share/sandbox/kit/notes/notes.md "
               "/usr/share/sandbox/kit/notes/kit.yaml")
    assert done.returncode == 0, done.stderr
    assert "Read `/usr/share/sandbox/kit/notes/notes.md`" in done.stdout
    assert "declared-only notes" in done.stdout
    assert '"provides": [\n    "notes@1.0.0"' in done.stdout


@pytest.mark.usefixtures("clean_images")
def test_credential_file_without_structure_round_trips(env: dict[str, str],
                                                       registry: Registry,
                                                       tmp_path: Path) -> None:
    directory = kit(tmp_path, "oauthkit", """\
        kind: workload
        version: "1.0.0"
        provides: [oauthkit]
        capabilities:
          - type: com.docker.sandbox/network-policy@1
            config: {runtime: {allow: [auth.example.com]}}
          - type: com.docker.sandbox/credential@1
            optional: true
            config:
              service: oauthkit
              phase: runtime
              oauth:
                tokenEndpoint: {host: auth.example.com}
                credentialFile: {path: ~/.oauthkit/creds.toml, format: toml}
        """, WORKLOAD)
    ref = registry.ref("kits/oauthkit", "1")
    annotations = push_and_pull(env, directory, ref, registry)
    credential = json.loads(annotations[DESCRIPTOR_ANNOTATION])["capabilities"][1]
    assert "structure" not in credential["config"]["oauth"]["credentialFile"]
    done = sbx(env, "run", ref, "--", "true")
    assert done.returncode == 0, done.stderr


def test_kind_set_is_refused_by_its_rule(env: dict[str, str], registry: Registry,
                                         tmp_path: Path) -> None:
    directory = kit(tmp_path, "team", """\
        kind: set
        version: "1.0.0"
        kits:
          - ref: registry.example/kits/shell:1.0.0
        """, None)
    done = sbx(env, "kit", "push", str(directory), registry.ref("kits/team", "1"))
    assert done.returncode == 125 and "(invalid_kit)" in done.stderr
    assert "kind: set" in done.stderr and "SPEC-v3 §3.4" in done.stderr
    assert "sbx run WORKLOAD --kit" in done.stderr
