"""What a kit installs is what its author pinned, in a real sandbox: the agent kits' installer
(examples/agents/*/npm-fetch.sh) fetching from a stand-in npm registry on the tests' internet,
through sbx's egress proxy, in a kit's install hook. A registry that substitutes the tarball
(and answers the substitute's own ``dist.integrity``, as a TLS-intercepting proxy could) fails
the install; the pinned tarball installs."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_api import NpmRegistry
from tests.support.kits import capabilities, capability, network_policy, rule, write_kit
from tests.support.origin import Internet

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
AGENT = "sbx-base/agent:1"


def _tarball(path: Path, body: bytes) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo("package/index.js")
        info.size = len(body)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(body))
    return path


def _pinned_kit(root: Path) -> tuple[Path, bytes]:
    """A kit whose install hook runs the agent kits' npm-fetch.sh for tool@1.0.0, pinned in
    its packages.lock; and the genuine tarball's bytes."""
    genuine = _tarball(root / "genuine.tgz", b"console.log('the author pinned me')\n")
    pin = "sha512-" + base64.b64encode(hashlib.sha512(genuine.read_bytes()).digest()).decode()
    install = ("sh /opt/fetch/npm-fetch.sh --registry https://registry.npmjs.org "
               "--into /opt/tool --set version=1.0.0 /opt/fetch/packages.list")
    kit = write_kit(root, "pinned", capabilities(
        network_policy(version=2, install=[rule(["registry.npmjs.org"], methods=["GET"])]),
        capability("lifecycle@1", {"install": [{"command": install}]})),
        f"FROM {AGENT}\nCOPY npm-fetch.sh packages.list packages.lock /opt/fetch/\n"
        "USER agent\nWORKDIR /home/agent\n",
        files={"packages.list": "tool@{version}\n", "packages.lock": f"tool@1.0.0 {pin}\n"})
    shutil.copyfile(REPO / "examples" / "agents" / "codex" / "npm-fetch.sh",
                    kit / "npm-fetch.sh")
    return kit, genuine.read_bytes()


@pytest.mark.parametrize("substituted", [False, True])
def test_the_install_hook_installs_only_the_pinned_tarball(
        sbx_cli: Any, state_home: Path, tmp_path: Path, internet: Internet,
        substituted: bool) -> None:
    kit, genuine = _pinned_kit(tmp_path)
    served = tmp_path / "served"
    served.mkdir()
    tarball = served / "tool-1.0.0.tgz"
    if substituted:
        _tarball(tarball, b"console.log('someone else')\n")
    else:
        tarball.write_bytes(genuine)
    registry = NpmRegistry({("tool", "1.0.0"): tarball})
    registry.install(internet.origin)
    env = {**os.environ, "SBX_HOME": str(state_home), "NO_COLOR": "1",
           "SBX_CONFIG": str(internet.sbx_config(tmp_path / "config.toml"))}
    try:
        result = sbx_cli(["run", str(kit), "--timeout", "300", "--", "cat",
                          "/opt/tool/node_modules/tool/index.js"], env=env)
    finally:
        registry.uninstall(internet.origin)
    fetched = [r.path for r in registry.recorded()]
    assert fetched == ["/tool/1.0.0", "/tool/-/tool-1.0.0.tgz"]  # both from the registry
    if substituted:
        assert result.exit_code != 0
        assert "(hook_failed)" in result.stderr, result.stderr
        assert "tool@1.0.0 does not match the sha512 its kit pins" in result.stdout + result.stderr
        assert "someone else" not in result.stdout
    else:
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "console.log('the author pinned me')\n"
