"""The engine's listing and this home's run directories, parsed strictly (gc deletes nothing when
one entry does not parse)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.domain.sandbox.runrecord import OWNER_LOCK, RUN_RECORD, RUNS_DIR
from sbx.seams import owned
from sbx.seams.host import processes

if TYPE_CHECKING:
    from sbx.seams.engine import RawListing
    pass
from sbx.usecases.gc.result import FULL_ID, IMAGE_ID, short_id

MAX_RECORD_BYTES: Final = 64 * 1024
RUN_ID: Final = re.compile(r"^[0-9a-f]{32}$")
RUN_IMAGE_REPOSITORY: Final = "sbx-run/"
UNTAGGED: Final = "<none>:<none>"
CONTAINER_STATES: Final = frozenset(
    {"created", "running", "paused", "restarting", "removing", "exited", "dead"})


class ListingInvalid(Exception):
    """An entry of the engine's listing does not parse; gc then deletes nothing."""


@dataclass(frozen=True)
class ContainerEntry:
    id: str
    state: str
    run_id: str | None
    deadline_raw: str | None
    named: bool = False  # a named sandbox's (label dev.sbx.name): `sbx rm` removes it
    name: str | None = None  # the label's value; trusted only as :func:`trust_names` says


@dataclass(frozen=True)
class SharedEntry:
    """A network or a volume (``id`` is the network id or the volume name)."""

    kind: str
    id: str
    run_id: str | None
    deadline_raw: str | None
    named: bool = False
    name: str | None = None
    # The state home's egress network for proxies beside the engine: no run's, kept.
    shared: bool = False


@dataclass(frozen=True)
class ImageEntry:
    id: str  # sha256:<64 hex>
    tags: tuple[str, ...]
    run_id: str | None
    deadline_raw: str | None
    named: bool = False
    name: str | None = None
    template: bool = False  # an `sbx save` template: user data, never gc's


@dataclass(frozen=True)
class RunDirState:
    pid: int | None
    deadline: int | None
    proxy_pid: int | None
    named: bool = False  # the run that created a named sandbox: kept with it
    name: str | None = None  # that sandbox's name, as sbx recorded it
    # Whether the sbx process that owns the run still holds its owner lock (runs/<id>/
    # owner.lock): None for runs without one. Unlike a pid, a lock cannot be reused.
    owner_alive: bool | None = None


@dataclass(frozen=True)
class RunDir:
    name: str
    path: Path
    real_dir: bool
    age_s: float
    record: RunDirState | None  # None: missing or unreadable run.json


@dataclass(frozen=True)
class Listing:
    containers: tuple[ContainerEntry, ...]
    shared: tuple[SharedEntry, ...]


def parse_listing(raw: RawListing, home_hash: str) -> Listing:
    """Parse every entry strictly; raise :class:`ListingInvalid` naming the first bad one."""
    containers = tuple(_parse_container(entry, home_hash) for entry in raw.containers)
    networks = tuple(_parse_network(entry, home_hash) for entry in raw.networks)
    volumes = tuple(_parse_volume(entry, home_hash) for entry in raw.volumes)
    return Listing(containers, networks + volumes)


def _labels(entry: Mapping[str, Any], what: str, home_hash: str) -> Mapping[str, str]:
    labels = entry.get("Labels")
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ListingInvalid(f"{what} has no readable labels")
    # The engine filtered by these labels; an entry without them means the listing cannot be
    # trusted at all.
    if labels.get(label_keys.MANAGED) != "true" or labels.get(label_keys.HOME) != home_hash:
        raise ListingInvalid(f"{what} lacks this state home's labels")
    return labels


def _run_label(labels: Mapping[str, str]) -> str | None:
    value = labels.get(label_keys.RUN)
    return value if value is not None and RUN_ID.match(value) else None


def _parse_container(entry: object, home_hash: str) -> ContainerEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a container entry is not an object")
    ident = entry.get("Id")
    if not isinstance(ident, str) or not FULL_ID.match(ident):
        raise ListingInvalid(f"a container entry has no valid id ({clip(ident)})")
    state = entry.get("State")
    if not isinstance(state, str) or state not in CONTAINER_STATES:
        raise ListingInvalid(f"container {ident[:12]} has an unknown state ({clip(state)})")
    labels = _labels(entry, f"container {ident[:12]}", home_hash)
    return ContainerEntry(ident, state, _run_label(labels), labels.get(label_keys.DEADLINE),
                          name=label_keys.value(labels, label_keys.NAME))


def _parse_network(entry: object, home_hash: str) -> SharedEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a network entry is not an object")
    ident = entry.get("Id")
    if not isinstance(ident, str) or not FULL_ID.match(ident):
        raise ListingInvalid(f"a network entry has no valid id ({clip(ident)})")
    labels = _labels(entry, f"network {ident[:12]}", home_hash)
    run_id = _run_label(labels)
    return SharedEntry("network", ident, run_id, labels.get(label_keys.DEADLINE),
                       name=label_keys.value(labels, label_keys.NAME),
                       shared=run_id is None
                       and labels.get(label_keys.ROLE) == label_keys.ROLE_PROXY)


def parse_images(raw: Sequence[Any], home_hash: str) -> tuple[ImageEntry, ...]:
    """Parse every image entry strictly; raise :class:`ListingInvalid` on the first bad one."""
    return tuple(_parse_image(entry, home_hash) for entry in raw)


def _parse_image(entry: object, home_hash: str) -> ImageEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("an image entry is not an object")
    ident = entry.get("Id")
    if not isinstance(ident, str) or not IMAGE_ID.match(ident):
        raise ListingInvalid(f"an image entry has no valid id ({clip(ident)})")
    tags = entry.get("RepoTags")
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise ListingInvalid(f"image {short_id(ident)} has unreadable tags ({clip(tags)})")
    labels = _labels(entry, f"image {short_id(ident)}", home_hash)
    return ImageEntry(ident, tuple(tags), _run_label(labels), labels.get(label_keys.DEADLINE),
                      name=label_keys.value(labels, label_keys.NAME),
                      template=label_keys.value(labels, label_keys.TEMPLATE) == "1")


def _parse_volume(entry: object, home_hash: str) -> SharedEntry:
    if not isinstance(entry, dict):
        raise ListingInvalid("a volume entry is not an object")
    name = entry.get("Name")
    if not isinstance(name, str) or not name:
        raise ListingInvalid(f"a volume entry has no valid name ({clip(name)})")
    labels = _labels(entry, f"volume {name[:24]}", home_hash)
    return SharedEntry("volume", name, _run_label(labels), labels.get(label_keys.DEADLINE),
                       name=label_keys.value(labels, label_keys.NAME))


def clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def proc_cmdline(pid: int) -> str | None:
    """``pid``'s arguments, space-separated (None when they cannot be read)."""
    args = processes.cmdline(pid)
    return None if args is None else b" ".join(args).decode("utf-8", "replace")


def read_run_dirs(state_home: Path, now: float) -> list[RunDir]:
    """Every ``runs/<run id>`` entry; anything else under ``runs/`` is ignored, never touched."""
    root = state_home / RUNS_DIR
    owned.check_tree(root)  # what it finds there must be this user's to judge
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not RUN_ID.match(name):
            continue
        path = root / name
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue  # removed by its own run meanwhile
        real_dir = stat.S_ISDIR(info.st_mode)
        newest = info.st_mtime
        record = None
        if real_dir:
            newest = max(newest, _newest_entry(path))
            record = _read_record(path / RUN_RECORD)
            if record is None and owner_alive(path):
                # Its owner holds the lock but has not written the record yet (or it broke).
                record = RunDirState(None, None, None, owner_alive=True)
        found.append(RunDir(name, path, real_dir, max(0.0, now - newest), record))
    return found


def _newest_entry(path: Path) -> float:
    newest = 0.0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except FileNotFoundError:
                    continue
    except OSError:
        return newest
    return newest


def _read_record(path: Path) -> RunDirState | None:
    try:
        raw = owned.read_prefix(path, MAX_RECORD_BYTES + 1)  # this user's own record only
    except (OSError, SbxError):
        return None
    if raw is None:
        return None
    if len(raw) > MAX_RECORD_BYTES:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deep to read
        return None
    if not isinstance(data, dict):
        return None
    name = data.get("name") if isinstance(data.get("name"), str) and data.get("name") else None
    return RunDirState(_int(data.get("pid")), _int(data.get("deadline")),
                       _int(data.get("proxy_pid")), named=name is not None, name=name,
                       owner_alive=owner_alive(path.parent))


def owner_alive(run_dir: Path) -> bool | None:
    """Whether the run's owner holds ``owner.lock`` (None: the run has none)."""
    try:
        fd = owned.open_file(run_dir / OWNER_LOCK)
    except (OSError, SbxError):
        return None
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # releases what was just taken
    return False


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
