"""`sbx kit init`, `sbx kit validate`, `sbx kit inspect`, and "did you mean" for fields.

Validation is the strict loader's (never a second validator): these tests check the command
shapes and that the verdicts are the loader's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.descriptor import parse_descriptor_text
from sbx.usecases import kitinit

ROOT = Path(__file__).resolve().parents[3]


def _cli(sbx_cli: Any, *args: str, cwd: Path) -> Any:
    return sbx_cli(list(args), cwd=cwd)


def test_init_workload_writes_a_kit_that_validates(tmp_path: Path, sbx_cli: Any) -> None:
    done = _cli(sbx_cli, "kit", "init", "my-agent", "--from", "sbx-test/busybox:1",
                cwd=tmp_path)
    assert done.exit_code == 0, done.stderr
    kit = tmp_path / "my-agent"
    assert sorted(p.name for p in kit.iterdir()) == ["my-agent.dockerfile", "my-agent.yaml"]
    descriptor = (kit / "my-agent.yaml").read_text(encoding="utf-8")
    assert descriptor.startswith("# syntax=docker/sandbox-kit:3\n")
    assert 'provides: ["my-agent@0.1.0"]' in descriptor and "kind: workload" in descriptor
    assert (kit / "my-agent.dockerfile").read_text().splitlines()[2] == "FROM sbx-test/busybox:1"
    assert "sbx kit validate" in done.stdout and "sbx run" in done.stdout
    valid = _cli(sbx_cli, "kit", "validate", "--json", "my-agent", cwd=tmp_path)
    assert valid.exit_code == 0, valid.stderr
    assert valid.envelope()["data"] == {
        "reference": "my-agent", "kind": "workload", "valid": True, "errors": [],
        "warnings": [], "source": "local", "descriptor": str(kit / "my-agent.yaml")}


@pytest.mark.slow
def test_init_mixin_is_declaration_only_and_composes(tmp_path: Path, sbx_cli: Any) -> None:
    assert _cli(sbx_cli, "kit", "init", "app", cwd=tmp_path).exit_code == 0
    done = _cli(sbx_cli, "kit", "init", "--mixin", "--json", "extras", cwd=tmp_path)
    assert done.exit_code == 0, done.stderr
    data = done.envelope()["data"]
    assert (data["kind"], data["base_image"]) == ("mixin", None)
    assert [Path(f).name for f in data["files"]] == ["extras.yaml"]
    assert _cli(sbx_cli, "kit", "validate", "extras", cwd=tmp_path).exit_code == 0
    inspected = _cli(sbx_cli, "kit", "inspect", "--json", "app", "--kit", "extras",
                     cwd=tmp_path)
    assert inspected.exit_code == 0, inspected.stderr
    assert [k["name"] for k in inspected.envelope()["data"]["kits"]] == ["app", "extras"]


def test_init_default_base_image(tmp_path: Path) -> None:
    result = kitinit.init_kit("agent", cwd=tmp_path, mixin=False, base_image=None)
    assert result.base_image == kitinit.DEFAULT_BASE == "debian:bookworm-slim"
    assert f"FROM {kitinit.DEFAULT_BASE}\n" in (tmp_path / "agent" / "agent.dockerfile").read_text()


def test_the_commented_examples_validate_once_uncommented(tmp_path: Path) -> None:
    kitinit.init_kit("agent", cwd=tmp_path, mixin=False, base_image=None)
    text = (tmp_path / "agent" / "agent.yaml").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index("# capabilities:")
    enabled = lines[:start] + [line[2:] for line in lines[start:]]
    descriptor = parse_descriptor_text("\n".join(enabled) + "\n", "agent.yaml")
    types = [c["type"] for c in descriptor.capabilities]
    assert types == ["com.docker.sandbox/network-policy@1", "com.docker.sandbox/credential@1"]


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path, sbx_cli: Any) -> None:
    kit = tmp_path / "agent"
    kit.mkdir()
    (kit / "agent.dockerfile").write_text("FROM mine\n", encoding="utf-8")
    done = _cli(sbx_cli, "kit", "init", "agent", cwd=tmp_path)
    assert done.exit_code == 2 and "refusing to overwrite" in done.stderr
    assert "(invalid_argument)" in done.stderr
    assert sorted(p.name for p in kit.iterdir()) == ["agent.dockerfile"]
    assert (kit / "agent.dockerfile").read_text() == "FROM mine\n"


@pytest.mark.parametrize(("args", "fragment"), [
    (["Bad_Name"], "cannot name a kit"),
    (["--from", "debian\nRUN evil", "ok"], "is not an image reference"),
    (["--from", "", "ok"], "is not an image reference"),
    (["--mixin", "--from", "debian", "ok"], "a mixin"),
])
def test_init_refusals(tmp_path: Path, sbx_cli: Any, args: list[str], fragment: str) -> None:
    done = _cli(sbx_cli, "kit", "init", *args, cwd=tmp_path)
    assert done.exit_code == 2 and fragment in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_validate_reports_every_problem_with_did_you_mean(tmp_path: Path,
                                                          sbx_cli: Any) -> None:
    kit = tmp_path / "bad"
    kit.mkdir()
    (kit / "bad.yaml").write_text(
        "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: mixin\n"
        "capabilities:\n  - type: com.docker.sandbox/network-policy@1\n"
        "    config:\n      allow: [example.com]\n"
        "  - type: com.docker.sandbox/credential@1\n"
        "    config: {service: acme, phase: runtime, apiKey: {nmae: A}}\n", encoding="utf-8")
    done = _cli(sbx_cli, "kit", "validate", "bad", cwd=tmp_path)
    assert done.exit_code == 125, done.stderr
    assert "bad is not a valid kit" in done.stderr and "(invalid_kit)" in done.stderr
    assert ("capabilities[0].config.allow: unknown field 'allow'; did you mean "
            "'runtime.allow' or 'install.allow'?") in done.stderr
    assert "unknown field 'nmae'; did you mean 'name'?" in done.stderr
    as_json = _cli(sbx_cli, "kit", "validate", "--json", "bad", cwd=tmp_path)
    envelope = as_json.envelope()
    assert as_json.exit_code == 125 and envelope["reason"] == "invalid_kit"
    data = envelope["data"]
    assert (data["valid"], data["kind"]) == (False, None)
    paths = {e["path"] for e in data["errors"]}
    assert "capabilities[0].config.allow" in paths
    assert all({"path", "message", "file", "line", "col"} <= set(e) for e in data["errors"])


def test_validate_warns_about_what_sbx_will_not_give(tmp_path: Path, sbx_cli: Any) -> None:
    kit = tmp_path / "wants"
    kit.mkdir()
    (kit / "wants.yaml").write_text(
        "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: sandbox\n"
        "capabilities:\n"
        "  - type: com.example/thing@1\n    optional: true\n"
        "  - type: com.docker.sandbox/usb-device@1\n"
        "    config: {vendorId: \"1234\", productId: \"5678\"}\n",
        encoding="utf-8")
    (kit / "wants.dockerfile").write_text("FROM scratch\n", encoding="utf-8")
    done = _cli(sbx_cli, "kit", "validate", "--json", "wants", cwd=tmp_path)
    data = done.envelope()["data"]
    assert done.exit_code == 0 and data["valid"] and data["kind"] == "workload"
    warnings = "\n".join(data["warnings"])
    assert "`sandbox` is the old spelling" in warnings
    assert "capabilities[0] (com.example/thing@1) is optional" in warnings
    assert "capabilities[1] (com.docker.sandbox/usb-device@1) is required" in warnings


def test_a_workload_without_content_is_invalid(tmp_path: Path, sbx_cli: Any) -> None:
    kit = tmp_path / "empty"
    kit.mkdir()
    (kit / "empty.yaml").write_text(
        "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: workload\n",
        encoding="utf-8")
    done = _cli(sbx_cli, "kit", "validate", "empty", cwd=tmp_path)
    assert done.exit_code == 125 and "a workload must have content" in done.stderr


def test_validate_of_a_missing_directory_says_it_does_not_exist(tmp_path: Path,
                                                                 sbx_cli: Any) -> None:
    done = _cli(sbx_cli, "kit", "validate", "./not-here", cwd=tmp_path)
    assert done.exit_code == 2 and "(invalid_argument)" in done.stderr
    assert "does not exist" in done.stderr


def test_validate_a_registry_reference_from_its_manifest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sbx.seams import registry
    from sbx.usecases.kitvalidate import validate_kit

    seen: list[str] = []

    def fetch(ref: registry.Reference, **_kwargs: Any) -> registry.KitManifest:
        seen.append(ref.canonical)
        descriptor = json.dumps({"schemaVersion": "3", "kind": "workload",
                                 "provides": ["x@1.0.0"]})
        return registry.KitManifest(ref, "sha256:" + "1" * 64, registry.DOCKER_MANIFEST,
                                    {registry.DESCRIPTOR_ANNOTATION: descriptor})

    monkeypatch.setattr(registry, "fetch_kit_manifest", fetch)
    result = validate_kit("docker/sbx-kit-x:1", cwd=tmp_path, state_home=tmp_path / "s",
                          env={})
    assert seen == ["docker.io/docker/sbx-kit-x:1"]
    assert (result.valid, result.kind, result.source) == (True, "workload", "registry")
    assert not (tmp_path / "s" / "kits.lock.json").exists()  # nothing pinned


def test_inspect_is_explains_static_form(tmp_path: Path, sbx_cli: Any) -> None:
    from sbx.base.config import load_config
    from sbx.usecases import explain as core
    from sbx.usecases import explainsandbox

    examples = ROOT / "examples"
    inspected = _cli(sbx_cli, "kit", "inspect", "--json", str(examples / "hello"), "--kit",
                     str(examples / "gh"), cwd=tmp_path)
    assert inspected.exit_code == 0, inspected.stderr
    assert inspected.envelope()["command"] == "kit inspect"
    state = tmp_path / "state"
    kit_set = core.load(str(examples / "hello"), (str(examples / "gh"),), (), cwd=tmp_path,
                        state_home=state)
    bound, oauth = explainsandbox.stored_credentials(kit_set, state)
    static = explainsandbox.explain_sandbox(kit_set, load_config({"SBX_CONFIG": os.devnull}),
                                            bound=bound, oauth=oauth)
    assert inspected.envelope()["data"]["network"] == static.as_dict()["network"]
    assert inspected.envelope()["data"]["kits"] == static.as_dict()["kits"]
    human = _cli(sbx_cli, "kit", "inspect", str(examples / "hello"), cwd=tmp_path)
    assert "kits (composition order):" in human.stdout
    assert "hardening (value, source; change with):" in human.stdout


def test_nested_suggestions_follow_the_schema() -> None:
    from sbx.domain.kits.schema import _schema_roots, nested_suggestions

    policy = _schema_roots()["capabilities/network-policy@1.json"]
    assert nested_suggestions("allow", policy) == ["runtime.allow", "install.allow"]
    assert nested_suggestions("dney", policy) == ["runtime.deny", "install.deny"]
    assert nested_suggestions("unrelated", policy) == []


def test_init_refuses_a_directory_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(SbxError) as caught:
        kitinit.init_kit(str(blocker / "kit"), cwd=tmp_path, mixin=True, base_image=None)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
