"""The sandbox user of an image: resolved from its ``USER`` and its passwd and group files (probed
once per image, :mod:`sbx.domain.sandbox.imageprobe`), or a fallback when the image names none."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import imageprobe
from sbx.seams.engine import ImageInfo, Images

# -- the sandbox user ------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxUser:
    uid: int
    gid: int
    source: str  # "image USER agent" | "config [sandbox] user (...)"


def resolve_user(driver: Images, image: ImageInfo, *, fallback_uid: int, fallback_source: str,
                 cache_dir: Path, helper_labels: Mapping[str, str]) -> SandboxUser:
    """The image's USER when it is not uid/gid 0, else the configured fallback (SPEC §5).

    A named USER is resolved through the image's own /etc/passwd (and /etc/group when it
    names its group), read once per image id and cached, because a name can map to uid 0 and
    Docker would run it as root.
    """
    user = _resolve(image, fallback_uid, fallback_source,
                    lambda: _image_accounts(driver, image, cache_dir, helper_labels))
    assert user is not None  # noqa: S101 - the reader always answers
    return user


def known_user(image: ImageInfo, *, fallback_uid: int, fallback_source: str,
               cache_dir: Path) -> SandboxUser | None:
    """:func:`resolve_user` without reading the image (no helper container): None when the
    answer needs the image's accounts and an earlier run has not cached them yet."""
    return _resolve(image, fallback_uid, fallback_source,
                    lambda: _cached_accounts(image, cache_dir))


Accounts = tuple[dict[str, tuple[int, int]], dict[str, int]]


def _resolve(image: ImageInfo, fallback_uid: int, fallback_source: str,
             accounts: Callable[[], Accounts | None]) -> SandboxUser | None:
    if fallback_uid <= 0:
        raise SbxError(Reason.ROOT_USER, "the configured sandbox user is uid 0")
    raw = image.user.strip()
    if raw in ("", "root", "0", "0:0", "root:root"):
        return SandboxUser(fallback_uid, fallback_uid, fallback_source)
    user_part, _, group_part = raw.partition(":")
    if user_part.isdigit() and group_part.isdigit():
        # Both numeric: nothing to look up (the image's accounts cannot change the answer).
        uid, gid = int(user_part), int(group_part)
    else:
        found = accounts()
        if found is None:
            return None
        passwd, groups = found
        uid, primary_gid = _lookup_user(user_part, passwd, image)
        gid = _lookup_group(group_part, groups, image) if group_part else primary_gid
    if uid == 0:
        return SandboxUser(fallback_uid, fallback_uid, fallback_source)
    if gid == 0:
        raise SbxError(
            Reason.ROOT_USER,
            f"the image's USER {raw!r} runs with gid 0 (the root group)",
            hint="Give the image's user a non-root primary group, or set USER uid:gid.")
    return SandboxUser(uid, gid, f"image USER {raw}")


def _lookup_user(name: str, passwd: Mapping[str, tuple[int, int]],
                 image: ImageInfo) -> tuple[int, int]:
    if name.isdigit():
        uid = int(name)
        for entry_uid, entry_gid in passwd.values():
            if entry_uid == uid:
                return uid, entry_gid
        return uid, uid
    if name not in passwd:
        raise SbxError(Reason.INVALID_KIT,
                       f"the image's USER {name!r} does not exist in its /etc/passwd",
                       hint="Create the user in the dockerfile, or use a numeric uid:gid.",
                       details={"image": image.id})
    return passwd[name]


def _lookup_group(name: str, groups: Mapping[str, int], image: ImageInfo) -> int:
    if name.isdigit():
        return int(name)
    if name not in groups:
        raise SbxError(Reason.INVALID_KIT,
                       f"the image's USER group {name!r} does not exist in its /etc/group",
                       details={"image": image.id})
    return groups[name]


ACCOUNT_FILES = ("/etc/passwd", "/etc/group")


def _account_files(image: ImageInfo) -> tuple[str, ...]:
    """What :func:`_resolve` looks names up in: /etc/group only for a USER that names its
    group (``agent:staff``); ``agent`` takes its primary gid from /etc/passwd."""
    group_part = image.user.strip().partition(":")[2]
    return ACCOUNT_FILES if group_part and not group_part.isdigit() else ACCOUNT_FILES[:1]


def _cached_accounts(image: ImageInfo, cache_dir: Path) -> Accounts | None:
    found = imageprobe.cached(image, files=_account_files(image), cache_dir=cache_dir)
    return None if found is None else _accounts(found.files)


def _image_accounts(driver: Images, image: ImageInfo, cache_dir: Path,
                    helper_labels: Mapping[str, str]) -> Accounts:
    found = imageprobe.probed(driver, image, files=_account_files(image), cache_dir=cache_dir,
                              helper_labels=helper_labels)
    return _accounts(found.files)


def _accounts(files: Mapping[str, bytes | None]) -> Accounts:
    passwd: dict[str, tuple[int, int]] = {}
    for line in (files.get("/etc/passwd") or b"").decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit() and fields[3].isdigit():
            passwd.setdefault(fields[0], (int(fields[2]), int(fields[3])))
    groups: dict[str, int] = {}
    for line in (files.get("/etc/group") or b"").decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            groups.setdefault(fields[0], int(fields[2]))
    return passwd, groups


__all__ = ["SandboxUser", "known_user", "resolve_user"]
