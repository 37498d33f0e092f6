"""The runtime image: this interpreter and sbx packed into an image with no base, built on the
real engine with nothing pulled, runs sbx's proxy code read-only, without capabilities or
network, as nobody; packing the same install twice names the same image."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sbx.seams.driver import SdkEngine
from sbx.seams.host.runtimepack import PROXY_DISTRIBUTIONS, build_context, runtime_pack

pytestmark = pytest.mark.docker

CHECK = ("import os, ssl, sbx.proxy.process, sbx.proxy.server, cryptography, h11; "
         "print(os.getuid(), ssl.OPENSSL_VERSION.split()[0], end='')")


def test_the_runtime_image_runs_the_proxy_code_locked_down(engine: SdkEngine) -> None:
    pack = runtime_pack()
    assert runtime_pack().tag == pack.tag  # the same install, the same image
    image = engine.build(build_context(pack), "Dockerfile", pack.tag, {}, on_line=lambda _: None)
    try:
        done = subprocess.run(
            ["docker", "run", "--rm", "--read-only", "--cap-drop", "ALL", "--security-opt",
             "no-new-privileges", "--network", "none", image.id, "-c", CHECK],
            capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "65534 OpenSSL"
    finally:
        engine.remove_image(image.id)


def test_the_packed_distributions_are_what_the_proxy_loads() -> None:
    probe = ("import sys, sbx.proxy.process, sbx.proxy.server, sbx.proxy.kitregistry, "
             "sbx.proxy.sshrelay; "
             "print(sorted({m.split('.')[0] for m, v in list(sys.modules.items()) "
             "if 'site-packages' in (getattr(v, '__file__', None) or '')}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    loaded = set(eval(done.stdout))  # noqa: S307 - our own child's repr of a list of names
    loaded -= {"_distutils_hack"}  # setuptools' import hook, present in every venv
    by_module = {"_cffi_backend": "cffi"}
    assert {by_module.get(m, m) for m in loaded} == set(PROXY_DISTRIBUTIONS)
