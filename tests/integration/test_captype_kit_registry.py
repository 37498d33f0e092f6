"""kit-registry@1 in a real sandbox: a kit that declares it (a mixin is enough) finds the
registry as $SBX_KIT_REGISTRY and pushes an image there with curl through the proxy; the user
sees it with `sbx kit registry` and removes it there; a sandbox without the grant is refused
at the boundary although its network policy is open."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
DOCKERFILE = f"FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]
REGISTRY = "com.docker.sandbox/kit-registry@1"

PUSH = r"""
R="http://$SBX_KIT_REGISTRY"
echo "announced=$SBX_KIT_REGISTRY"
cd /tmp
printf 'a kit layer, byte for byte' > layer
printf '{"os":"linux","architecture":"amd64"}' > config
L=$(sha256sum layer | cut -d' ' -f1); C=$(sha256sum config | cut -d' ' -f1)
curl -s -o /dev/null -w 'config=%{http_code}\n' --data-binary @config \
  -H 'Content-Type: application/octet-stream' "$R/v2/kits/demo/blobs/uploads/?digest=sha256:$C"
curl -s -o /dev/null -w 'layer=%{http_code}\n' --data-binary @layer \
  -H 'Content-Type: application/octet-stream' "$R/v2/kits/demo/blobs/uploads/?digest=sha256:$L"
M=application/vnd.oci.image.manifest.v1+json
{ printf '{"schemaVersion":2,"mediaType":"%s",' "$M"
  printf '"config":{"mediaType":"application/vnd.oci.image.config.v1+json",'
  printf '"digest":"sha256:%s","size":%s},' "$C" "$(wc -c < config)"
  printf '"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar",'
  printf '"digest":"sha256:%s","size":%s}]}' "$L" "$(wc -c < layer)"; } > manifest
curl -s -o /dev/null -w 'manifest=%{http_code}\n' -X PUT --data-binary @manifest \
  -H "Content-Type: $M" "$R/v2/kits/demo/manifests/v1"
echo "read=$(curl -s "$R/v2/kits/demo/blobs/sha256:$L")"
curl -s -o /dev/null -w 'outside=%{http_code}\n' "$R/v2/library/alpine/tags/list"
"""

PROBE = r"""
echo "announced=${SBX_KIT_REGISTRY:-unset}"
curl -s -D - -o /dev/null http://kit-registry.sbx.internal/v2/ | tr -d '\r' \
  | grep -i '^x-sbx-rule:\|^HTTP/'
"""


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def _values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _mixin(root: Path) -> Path:
    kit = root / "registry-mixin"
    kit.mkdir(parents=True)
    (kit / "registry-mixin.yaml").write_text(
        "# syntax=docker/sandbox-kit:3\nschemaVersion: \"3\"\nkind: mixin\n"
        f"capabilities:\n  - type: {REGISTRY}\n", encoding="utf-8")
    return kit


def test_a_granted_sandbox_pushes_and_the_user_sees_it(kit_factory: KitMaker, sbx_cli: Runner,
                                                       env: dict[str, str],
                                                       tmp_path: Path) -> None:
    workload = kit_factory("builder", DOCKERFILE)
    result = sbx_cli(["run", "--json", str(workload), "--kit", str(_mixin(tmp_path)), "--",
                      "sh", "-c", PUSH], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    seen = _values(envelope["data"]["stdout"])
    assert seen["announced"] == "kit-registry.sbx.internal"
    assert (seen["config"], seen["layer"], seen["manifest"]) == ("201", "201", "201")
    assert seen["read"] == "a kit layer, byte for byte"
    assert seen["outside"] == "403"  # kit content only, even for a granted sandbox
    listed = sbx_cli(["kit", "registry", "--json"], env=env).envelope()["data"]["tags"]
    assert [(t["name"], t["tag"]) for t in listed] == [("kits/demo", "v1")]
    assert listed[0]["reference"] == "kit-registry.sbx.internal/kits/demo:v1"
    assert listed[0]["digest"].startswith("sha256:") and listed[0]["size"] > 0
    removed = sbx_cli(["kit", "registry", "--rm", "kits/demo:v1", "--json"], env=env)
    assert removed.envelope()["data"]["tags"][0]["reference"].endswith("kits/demo:v1")
    assert sbx_cli(["kit", "registry", "--json"], env=env).envelope()["data"]["tags"] == []
    again = sbx_cli(["kit", "registry", "--rm", "kits/demo:v1", "--json"], env=env)
    assert again.exit_code == 2 and again.envelope()["reason"] == "invalid_argument"


def test_without_the_grant_the_registry_is_refused_at_the_boundary(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    open_kit = kit_factory("open", DOCKERFILE, (
        "capabilities:\n  - type: com.docker.sandbox/network-policy@1\n"
        "    config:\n      runtime:\n        allow: [example.com]\n"))
    result = sbx_cli(["run", "--json", str(open_kit), "--", "sh", "-c", PROBE], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", (envelope, result.stderr)
    out = envelope["data"]["stdout"]
    assert "announced=unset" in out
    assert "HTTP/1.1 403" in out and "kit-registry-not-granted" in out.lower()
    explained = sbx_cli(["explain", "kit_registry_not_granted"], env=env)
    assert explained.exit_code == 0 and "kit-registry@1" in explained.stdout
