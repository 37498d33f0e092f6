"""The engine rules a run refuses by (and doctor reports): the same function for both."""

from __future__ import annotations

import dataclasses

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.requirements import check_engine
from sbx.seams.engine import EngineInfo

DOCKER = EngineInfo(version="20.10.24", api_version="1.41", os="linux", cgroup_version="1",
                    cgroup_driver="cgroupfs", rootless=False, security_options=())


def test_a_rootful_linux_docker_engine_passes() -> None:
    check_engine(DOCKER)


def test_podman_is_refused_by_name_with_a_docker_engine_as_the_fix() -> None:
    with pytest.raises(SbxError) as caught:
        check_engine(dataclasses.replace(DOCKER, version="4.3.1", product="podman"))
    error = caught.value
    assert error.reason is Reason.ENGINE_UNSUPPORTED
    assert "Podman 4.3.1" in error.message and "tmpfs" in error.message
    assert error.hint is not None and "DOCKER_HOST=unix:///var/run/docker.sock" in error.hint
    assert error.details == {"engine": "podman", "version": "4.3.1"}


def test_a_windows_engine_is_refused_before_its_product_is_judged() -> None:
    with pytest.raises(SbxError) as caught:
        check_engine(dataclasses.replace(DOCKER, os="windows", product="podman"))
    assert caught.value.reason is Reason.UNSUPPORTED_PLATFORM
