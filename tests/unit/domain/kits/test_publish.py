"""The published form of a kit (sbx.domain.kits.publish) and the capabilities annotation:
build-phase
args expanded and create-phase ones kept, agent-context files staged and rewritten, the
kit-sources layer's context, group members in the annotation, kind: set refused by rule."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
from pathlib import Path

import pytest

from sbx.base.errors import KitError, SbxError
from sbx.domain.kits.args import expand_build_phase, validate_effective
from sbx.domain.kits.descriptor import parse_descriptor_text
from sbx.domain.kits.local import load_local_kit
from sbx.domain.kits.publish import STAGE_ROOT, publish_form, staging_context
from sbx.seams.registry import CAPABILITIES_ANNOTATION, kit_annotations
from sbx.usecases.pull import published_form_problems

HEAD = "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\n"


def _kit(tmp_path: Path, name: str, body: str, dockerfile: str | None = "FROM scratch\n",
         files: dict[str, str] | None = None) -> Path:
    kit = tmp_path / name
    kit.mkdir()
    (kit / f"{name}.yaml").write_text(HEAD + textwrap.dedent(body), encoding="utf-8")
    if dockerfile is not None:
        (kit / f"{name}.dockerfile").write_text(dockerfile, encoding="utf-8")
    for rel, text in (files or {}).items():
        (kit / rel).parent.mkdir(parents=True, exist_ok=True)
        (kit / rel).write_text(text, encoding="utf-8")
    return kit


VERSIONED = """\
    kind: mixin
    args:
      version: {default: "2.98.0", pattern: '^[0-9.]+$', buildArg: GH_VERSION}
      greeting: {default: "hi"}
    provides: ["x@${{ kit.args.version }}"]
    capabilities:
      - type: com.docker.sandbox/lifecycle@1
        config:
          files:
            - {path: /home/agent/g, content: "${{ kit.args.greeting }} ${{ kit.args.version }}"}
    """


def test_build_phase_args_are_expanded_and_create_phase_ones_kept(tmp_path: Path) -> None:
    kit = load_local_kit(str(_kit(tmp_path, "x", VERSIONED)), cwd=tmp_path)
    published = publish_form(kit, {})
    data = published.descriptor
    assert data["provides"] == ["x@2.98.0"]
    content = data["capabilities"][0]["config"]["files"][0]["content"]
    assert content == "${{ kit.args.greeting }} 2.98.0"
    assert data["args"]["version"]["buildArg"] == "GH_VERSION"  # declarations stay
    assert published.build_args == {"GH_VERSION": "2.98.0"}
    assert published_form_problems(data) == []  # what sbx pull checks

    supplied = publish_form(kit, {"version": "3.0.1"})
    assert supplied.descriptor["provides"] == ["x@3.0.1"]
    assert supplied.build_args == {"GH_VERSION": "3.0.1"}


def test_publish_refuses_bad_or_create_phase_values(tmp_path: Path) -> None:
    kit = load_local_kit(str(_kit(tmp_path, "x", VERSIONED)), cwd=tmp_path)
    for supplied, expected in (({"version": "v1"}, "does not match its pattern"),
                               ({"greeting": "yo"}, "is create-phase"),
                               ({"nope": "1"}, "declares no such arg")):
        with pytest.raises(KitError) as raised:
            publish_form(kit, supplied)
        assert expected in (raised.value.body or ""), raised.value.body


def test_expand_build_phase_leaves_unknown_create_refs_alone() -> None:
    data = {"schemaVersion": "3", "kind": "mixin",
            "args": {"v": {"default": "1", "buildArg": "V"}, "c": {}},
            "version": "${{ kit.args.v }}", "description": "${{ kit.args.c }}"}
    out = expand_build_phase(data, supplied={}, file="x.yaml").data
    assert out["version"] == "1"  # text fields stay text
    assert out["description"] == "${{ kit.args.c }}"  # create-phase, no value: not ours


def test_context_files_are_staged_and_rewritten(tmp_path: Path) -> None:
    kit_dir = _kit(tmp_path, "ctx", """\
        kind: mixin
        provides: ["ctx@1.0.0"]
        capabilities:
          - type: com.docker.sandbox/agent-context@1
            config: {directory: /home/agent, filename: NOTES.md, contentFile: ./docs/notes.md}
          - group:
              optional: true
              capabilities:
                - type: com.docker.sandbox/agent-context@1
                  config: {directory: /opt, filename: X.md, contentFile: other.md}
        """, dockerfile=None, files={"docs/notes.md": "notes\n", "other.md": "other\n"})
    published = publish_form(load_local_kit(str(kit_dir), cwd=tmp_path), {})
    caps = published.descriptor["capabilities"]
    assert caps[0]["config"]["contentFile"] == f"{STAGE_ROOT}/ctx/docs/notes.md"
    member = caps[1]["group"]["capabilities"][0]
    assert member["config"]["contentFile"] == f"{STAGE_ROOT}/ctx/other.md"
    assert published.staged["docs/notes.md"] == b"notes\n"
    assert set(published.staged) == {"docs/notes.md", "other.md", "kit.yaml"}  # no recipe
    assert json.loads(published.staged["kit.yaml"]) == published.descriptor
    # The published form parses as a published descriptor (an absolute contentFile is fine).
    parse_descriptor_text(json.dumps(published.descriptor), "published", authored=False)

    context, dockerfile = staging_context(published, None)
    with tarfile.open(fileobj=io.BytesIO(context)) as archive:
        names = {m.name: m for m in archive.getmembers()}
        recipe = archive.extractfile(names[dockerfile])
        assert recipe is not None
        text = recipe.read().decode()
    assert text.startswith("FROM scratch\n")
    assert f'"{STAGE_ROOT}/ctx/"' in text
    assert names["kit-sources/docs/notes.md"].mode == 0o644
    assert names["kit-sources/docs"].isdir()
    on_base, _ = staging_context(published, "sbx-kit/ctx:abc")
    with tarfile.open(fileobj=io.BytesIO(on_base)) as archive:
        recipe = archive.extractfile(dockerfile)
        assert recipe is not None and recipe.read().startswith(b"FROM sbx-kit/ctx:abc\n")


@pytest.mark.parametrize("content_file", ["../outside.md", "/etc/passwd", "missing.md",
                                          "kit.yaml"])
def test_context_files_outside_or_missing_are_refused(tmp_path: Path, content_file: str) -> None:
    (tmp_path / "outside.md").write_text("x", encoding="utf-8")
    kit_dir = _kit(tmp_path, "bad", f"""\
        kind: mixin
        provides: ["bad@1.0.0"]
        capabilities:
          - type: com.docker.sandbox/agent-context@1
            config: {{directory: /home/agent, filename: N.md, contentFile: "{content_file}"}}
        """)
    with pytest.raises(KitError) as raised:
        publish_form(load_local_kit(str(kit_dir), cwd=tmp_path), {})
    assert "capabilities[0].config.contentFile" in str(raised.value.details["diagnostics"])


def test_kind_set_is_refused_naming_the_rule(tmp_path: Path) -> None:
    kit_dir = _kit(tmp_path, "team", """\
        kind: set
        version: "1.0.0"
        kits:
          - ref: registry.example/kits/shell:1.0.0
        """, dockerfile=None)
    with pytest.raises(SbxError) as raised:
        publish_form(load_local_kit(str(kit_dir), cwd=tmp_path), {})
    assert "kind: set" in raised.value.message and "§3.4" in raised.value.message
    assert "sbx run WORKLOAD --kit" in (raised.value.hint or "")


def test_capabilities_annotation_lists_group_members() -> None:
    data = {"schemaVersion": "3", "kind": "mixin", "capabilities": [
        {"type": "com.docker.sandbox/network-policy@1", "config": {}},
        {"group": {"capabilities": [
            {"type": "com.docker.sandbox/volume@1", "config": {"path": "/a"}},
            {"type": "com.docker.sandbox/lifecycle@1", "config": {}}]}}]}
    assert kit_annotations(data)[CAPABILITIES_ANNOTATION] == (
        "com.docker.sandbox/lifecycle@1,com.docker.sandbox/network-policy@1,"
        "com.docker.sandbox/volume@1")


@pytest.mark.parametrize("fmt", ["json", "toml"])
def test_an_omitted_credential_file_structure_is_valid(fmt: str) -> None:
    data = {"schemaVersion": "3", "kind": "mixin", "capabilities": [
        {"type": "com.docker.sandbox/network-policy@1",
         "config": {"runtime": {"allow": ["auth.example.com", "api.example.com"]}}},
        {"type": "com.docker.sandbox/credential@1", "config": {
            "service": "example", "phase": "runtime",
            "oauth": {"tokenEndpoint": {"host": "auth.example.com"},
                      "credentialFile": {"path": "~/.example/creds", "format": fmt}}}}]}
    # Both the lenient (published) parse and the strict effective validation accept it.
    parse_descriptor_text(json.dumps(data), "x.json", authored=False)
    validate_effective(data, "x.json", text=json.dumps(data), authored=False)
    stated = json.loads(json.dumps(data))
    stated["capabilities"][1]["config"]["oauth"]["credentialFile"]["structure"] = {"a": None}
    if fmt == "toml":  # a stated null stays an error for TOML
        with pytest.raises(KitError) as raised:
            parse_descriptor_text(json.dumps(stated), "x.json", authored=False)
        assert "TOML cannot represent" in (raised.value.body or "")
    else:
        parse_descriptor_text(json.dumps(stated), "x.json", authored=False)
