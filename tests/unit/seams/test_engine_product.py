"""Who answers the Docker API: Podman's /info is told apart from Docker's by its BuildahVersion."""

from __future__ import annotations

from sbx.seams.engine import engine_info

DOCKER_INFO = {"ServerVersion": "20.10.24+dfsg1", "OSType": "linux", "InitBinary": "docker-init"}
# The keys Debian's podman 4.3.1 answered /v1.41/info with, of those sbx reads.
PODMAN_INFO = {"ServerVersion": "4.3.1", "OSType": "linux", "InitBinary": "",
               "BuildahVersion": "1.28.2", "Runtimes": {"crun": {"path": "/usr/bin/crun"}}}


def test_docker_is_docker() -> None:
    assert engine_info(DOCKER_INFO, "1.41").product == "docker"


def test_podman_is_told_apart_by_its_buildah_version() -> None:
    info = engine_info(PODMAN_INFO, "1.41")
    assert info.product == "podman" and info.version == "4.3.1"


def test_which_daemon_answers_is_its_id_host_and_data_root() -> None:
    ident = "ZQ3M:KX7A:2MUX:Y3NE:3LQZ:4HTB:SFYG:XWMR:4CXH:YV4O:3R5I:JJXS"
    info = engine_info({**DOCKER_INFO, "ID": ident, "Name": "vm",
                        "DockerRootDir": "/var/lib/docker"}, "1.41")
    assert (info.engine_id, info.host_name, info.data_root) == (ident, "vm", "/var/lib/docker")
    assert engine_info(DOCKER_INFO, "1.41").engine_id == ""  # none given: told apart by none
