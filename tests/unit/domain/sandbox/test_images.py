"""Base-image discovery (never pull implicitly) and sandbox-user resolution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.images import known_user, resolve_user
from sbx.domain.sandbox.kitimages import base_images
from sbx.seams.engine import ImageInfo, ImageProbe


@pytest.mark.parametrize(("dockerfile", "expected"), [
    ("FROM a/b:1\n", ["a/b:1"]),
    ("FROM --platform=linux/amd64 a/b:1 AS build\nFROM build\nFROM scratch\n", ["a/b:1"]),
    ("ARG BASE=img:2\nFROM ${BASE}\n", ["img:2"]),
    ("ARG V=3\nFROM img:$V AS one\nFROM one AS two\nFROM two\n", ["img:3"]),
    ("# FROM commented:1\nfrom lower:1\n", ["lower:1"]),
    ("FROM \\\n  continued:1\n", ["continued:1"]),
    ("FROM scratch\nCOPY x /x\n", []),
])
def test_base_images(dockerfile: str, expected: list[str]) -> None:
    assert base_images(dockerfile) == expected


def test_unresolvable_base_is_refused_not_pulled() -> None:
    with pytest.raises(SbxError) as raised:
        base_images("ARG BASE\nFROM ${BASE}\n")
    assert raised.value.reason is Reason.INVALID_KIT


class _Files:
    """A fake driver that serves /etc/passwd and /etc/group and counts reads."""

    def __init__(self, passwd: str, group: str) -> None:
        self.files = {"/etc/passwd": passwd.encode(), "/etc/group": group.encode()}
        self.reads = 0
        self.read_files: list[str] = []

    def probe_image(self, image_id: str, *, files: Sequence[str], dirs: Sequence[str],
                    labels: Mapping[str, str], paths: Sequence[str] = ()) -> ImageProbe:
        self.reads += 1  # one probe container, however many files
        self.read_files.extend(files)
        return ImageProbe({path: self.files.get(path) for path in files},
                          dict.fromkeys(dirs), dict.fromkeys(paths))


ACCOUNTS = "root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n" \
         "toor:x:0:0::/root:/bin/sh\nwheelie:x:1001:0::/:/bin/sh\n"
GROUP = "root:x:0:\nagent:x:1000:\nstaff:x:50:\n"


def _image(user: str) -> ImageInfo:
    return ImageInfo(id=f"sha256:{user or 'none'}", tags=(), user=user, workdir="",
                     entrypoint=None, cmd=None, env=(), labels={})


@pytest.mark.parametrize(("user", "uid", "gid", "from_image"), [
    ("", 4242, 4242, False),
    ("root", 4242, 4242, False),
    ("0", 4242, 4242, False),
    ("toor", 4242, 4242, False),
    ("agent", 1000, 1000, True),
    ("agent:staff", 1000, 50, True),
    ("1000", 1000, 1000, True),
    ("2000:2000", 2000, 2000, True),
])
def test_resolve_user(tmp_path: Path, user: str, uid: int, gid: int, from_image: bool) -> None:
    files = _Files(ACCOUNTS, GROUP)
    resolved = resolve_user(files, _image(user), fallback_uid=4242,  # type: ignore[arg-type]
                            fallback_source="config", cache_dir=tmp_path, helper_labels={})
    assert (resolved.uid, resolved.gid) == (uid, gid)
    assert resolved.source.startswith("image") is from_image


@pytest.mark.parametrize(("user", "reason"), [
    ("wheelie", Reason.ROOT_USER),
    ("agent:root", Reason.ROOT_USER),
    ("1000:0", Reason.ROOT_USER),
    ("ghost", Reason.INVALID_KIT),
    ("agent:nogroup", Reason.INVALID_KIT),
])
def test_resolve_user_refusals(tmp_path: Path, user: str, reason: Reason) -> None:
    with pytest.raises(SbxError) as raised:
        resolve_user(_Files(ACCOUNTS, GROUP), _image(user),  # type: ignore[arg-type]
                     fallback_uid=4242, fallback_source="config", cache_dir=tmp_path,
                     helper_labels={})
    assert raised.value.reason is reason


def test_accounts_are_read_once_per_image(tmp_path: Path) -> None:
    files = _Files(ACCOUNTS, GROUP)
    for _ in range(3):
        resolve_user(files, _image("agent"), fallback_uid=4242,  # type: ignore[arg-type]
                     fallback_source="config", cache_dir=tmp_path, helper_labels={})
    assert files.reads == 1  # passwd and group in one probe, then the cache


@pytest.mark.parametrize(("user", "read"), [
    ("agent", ["/etc/passwd"]),
    ("1000", ["/etc/passwd"]),
    ("agent:1000", ["/etc/passwd"]),
    ("agent:staff", ["/etc/passwd", "/etc/group"]),
    ("1000:staff", ["/etc/passwd", "/etc/group"]),
])
def test_the_group_database_is_read_only_for_a_named_group(tmp_path: Path, user: str,
                                                            read: list[str]) -> None:
    files = _Files(ACCOUNTS, GROUP)
    for _ in range(2):
        resolve_user(files, _image(user), fallback_uid=4242,  # type: ignore[arg-type]
                     fallback_source="config", cache_dir=tmp_path, helper_labels={})
    assert (files.reads, files.read_files) == (1, read)
    assert known_user(_image(user), fallback_uid=4242, fallback_source="config",
                      cache_dir=tmp_path) is not None
