"""One in-memory engine for unit tests: implements every role of :class:`sbx.seams.engine.Driver`.

Unit tests of pure decisions (gc, doctor, run preparation and cleanup, image assembly, pull)
use this fake instead of the Docker engine. It keeps:

- **state**: containers, networks and volumes as the engine lists them (JSON objects, so
  ``sbx gc``'s strict parsing sees what it would see), images by reference and id, image
  filesystems as tars, and what each created container was created from;
- **a call log**: every driver call, in order, as ``(method, key arguments)``
  (:attr:`FakeEngine.calls`, :meth:`FakeEngine.called`, :meth:`FakeEngine.names`);
- **failures**: :meth:`FakeEngine.fail` makes a named method raise a given error, on every
  call, on its Nth call only, or only for one key argument (an object id, a reference).

The fake subclasses each role protocol, so mypy reports any drift between a role and the fake.
It never filters listings by label: a test puts in exactly what the engine would list.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import socket
import struct
import tarfile
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.containerspec import ContainerSpec
from sbx.seams.engine import (
    CachedImage,
    Containers,
    Distribution,
    Driver,
    EngineInfo,
    EngineLocation,
    Files,
    ImageInfo,
    ImageProbe,
    Images,
    Inventory,
    Networks,
    OwnedObject,
    PathStat,
    RawListing,
    Reservation,
    SandboxFiles,
    Sessions,
)
from sbx.seams.session.stream import AttachedStream

Call = tuple[str, tuple[Any, ...]]

DEFAULT_INFO = EngineInfo("20.10.99", "1.41", "linux", "2", "systemd", False, (), ("runc",), "runc")
DEFAULT_GATEWAY = "172.30.0.1"
DEFAULT_CONTAINER_IP = "172.30.0.2"


@dataclass
class _Failure:
    error: SbxError
    nth: int | None  # 1-based count of the method's calls; None: every call
    key: object | None  # only calls whose first argument equals this; None: any


def image_info(image_id: str, *, tags: Sequence[str] = (), user: str = "", workdir: str = "",
               entrypoint: Sequence[str] | None = None, cmd: Sequence[str] | None = None,
               env: Sequence[str] = (), labels: Mapping[str, str] | None = None) -> ImageInfo:
    """An :class:`ImageInfo` with the fields a test does not care about left empty."""
    return ImageInfo(id=image_id, tags=tuple(tags), user=user, workdir=workdir,
                     entrypoint=tuple(entrypoint) if entrypoint is not None else None,
                     cmd=tuple(cmd) if cmd is not None else None, env=tuple(env),
                     labels=dict(labels or {}))


def fake_id(*parts: object) -> str:
    """A stable 64-hex id derived from ``parts`` (distinct inputs, distinct ids)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def tar_of(files: Mapping[str, bytes]) -> bytes:
    """An image filesystem as a tar: path (relative or absolute) → content."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, content in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _member(archive_bytes: bytes, path: str) -> bytes | None:
    with tarfile.open(fileobj=io.BytesIO(archive_bytes)) as archive:
        try:
            member = archive.extractfile(path.lstrip("/"))
        except KeyError:
            return None
        return member.read() if member is not None else None


class FakeEngine(Images, Distribution, Containers, Files, Sessions, Networks, Inventory):
    """An engine held in memory; see the module docstring."""

    def __init__(self, *, info: EngineInfo = DEFAULT_INFO) -> None:
        self.calls: list[Call] = []
        self.engine_info = info
        self.engine_location = EngineLocation("unix:///var/run/docker.sock", local=True)
        # What the engine lists (raw JSON objects, as sbx.seams.driver.RawListing holds them).
        self.containers: list[Any] = []
        self.networks: list[Any] = []
        self.volumes: list[Any] = []
        self.labelled_images: list[Any] = []  # what list_labelled_images answers
        # Images by reference (tag) and by id, what image() answers.
        self.images: dict[str, ImageInfo] = {}
        # When set, image() answers every unknown reference with this (tags set to the ref):
        # for runs whose kit image tags are computed by sbx.
        self.fallback_image: ImageInfo | None = None
        self.sizes: dict[str, int] = {}  # local_images(): reference → bytes
        self.filesystems: dict[str, bytes] = {}  # image id → its filesystem as a tar
        self.path_modes: dict[str, int | None] = {"/tmp": 0o1777}  # probe_image()'s modes
        self.path_stats: dict[str, int | None] = {"/bin/bash": 0o100755}  # and its stats
        self.cached: list[CachedImage] = []  # cached_images()
        self.untag_refused: set[str] = set()  # tags untag_image() keeps (an image in use)
        self.users: dict[str, list[str]] = {}  # object_users(): id → container ids
        self.sticky: set[str] = set()  # ids a removal "removes" that stay listed afterwards
        self.specs: dict[str, ContainerSpec] = {}  # container id → what it was created from
        # (kind, id) of every object created through this fake, in order: kind is container,
        # network, volume or image (committed, built or derived: its tag).
        self.created: list[tuple[str, str]] = []
        # What a container does once started: its output (stdout) and exit status.
        self.stdout = b""
        self.exit_status: int | None = 0  # wait(); None: it did not finish in time
        self.exec_status = 0  # exec_stream()'s status
        self.gateway = DEFAULT_GATEWAY
        self.container_address: str | None = DEFAULT_CONTAINER_IP
        self.open_exports = 0  # export_image() generators not yet closed
        # The files role: each container's user and mounts, the stat and the tar of each
        # (container id, path), and the tars written (container id, path, bytes).
        self.sandbox_mounts: dict[str, SandboxFiles] = {}
        self.stats: dict[tuple[str, str], PathStat] = {}
        self.archives: dict[tuple[str, str], bytes] = {}
        self.written: list[tuple[str, str, bytes]] = []
        # disk_usage(): GET /system/df as the engine answers it
        self.usage: dict[str, Any] = {"Images": [], "Containers": [], "Volumes": []}
        self._failures: dict[str, list[_Failure]] = {}
        self._hooks: dict[str, Callable[[], object]] = {}
        self._counts: dict[str, int] = {}
        self._serial = itertools.count(1)
        self._peers: list[socket.socket] = []

    # -- what tests configure and read -----------------------------------------------------

    def fail(self, method: str, error: SbxError, *, nth: int | None = None,
             key: object | None = None) -> None:
        """Make ``method`` raise ``error``: on every call, only on its ``nth`` call (from 1),
        and/or only when its first argument is ``key``. The call is logged before it fails."""
        if not hasattr(self, method):
            raise AttributeError(f"FakeEngine has no method {method!r}")
        self._failures.setdefault(method, []).append(_Failure(error, nth, key))

    def on_call(self, method: str, hook: Callable[[], object]) -> None:
        """Run ``hook`` at each call of ``method`` (after logging it), e.g. to block."""
        self._hooks[method] = hook

    def called(self, name: str) -> list[tuple[Any, ...]]:
        """The arguments of each call of ``name``, in order."""
        return [args for call, args in self.calls if call == name]

    def names(self) -> list[str]:
        """The methods called, in order."""
        return [name for name, _ in self.calls]

    def add_image(self, ref: str, *, image_id: str | None = None, size: int = 0,
                  filesystem: bytes | None = None, **fields: Any) -> ImageInfo:
        """A local image under ``ref`` (and its id); ``fields`` as for :func:`image_info`."""
        image = image_info(image_id or "sha256:" + fake_id("image", ref), tags=(ref,),
                           **fields)
        self.images[ref] = image
        self.images.setdefault(image.id, image)
        self.sizes[ref] = size
        if filesystem is not None:
            self.filesystems[image.id] = filesystem
        return image

    def close(self) -> None:
        """Close the engine ends of attach streams (tests that run sessions call this)."""
        for peer in self._peers:
            peer.close()
        self._peers.clear()

    # -- plumbing --------------------------------------------------------------------------

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        count = self._counts[name] = self._counts.get(name, 0) + 1
        hook = self._hooks.get(name)
        if hook is not None:
            hook()
        for failure in self._failures.get(name, ()):
            if failure.nth is not None and failure.nth != count:
                continue
            if failure.key is not None and (not args or args[0] != failure.key):
                continue
            raise failure.error

    def _new_id(self, kind: str) -> str:
        return fake_id(kind, next(self._serial))

    def _remove(self, pool: list[Any], key: str, ident: str) -> bool:
        if ident in self.sticky:
            return True
        pool[:] = [e for e in pool if not (isinstance(e, dict) and e.get(key) == ident)]
        return True  # as the engine driver: True also when it was gone already

    def _container(self, container_id: str) -> dict[str, Any] | None:
        for entry in self.containers:
            if isinstance(entry, dict) and entry.get("Id") == container_id:
                return entry
        return None

    def _set_state(self, container_id: str, state: str) -> None:
        entry = self._container(container_id)
        if entry is not None:
            entry["State"] = state

    def _filesystem(self, image_id: str) -> bytes:
        data = self.filesystems.get(image_id)
        if data is None:
            raise SbxError(Reason.IMAGE_MISSING, f"image {image_id} has no filesystem here")
        return data

    # -- queries ---------------------------------------------------------------------------

    def info(self) -> EngineInfo:
        self._call("info")
        return self.engine_info

    def location(self) -> EngineLocation:
        return self.engine_location

    def image(self, ref: str) -> ImageInfo | None:
        self._call("image", ref)
        found = self.images.get(ref)
        if found is None and self.fallback_image is not None:
            return replace(self.fallback_image, tags=(ref,))
        return found

    def local_images(self) -> list[tuple[str, int]]:
        self._call("local_images")
        return [(ref, size) for ref, size in self.sizes.items() if ref in self.images]

    def probe_image(self, image_id: str, *, files: Sequence[str], dirs: Sequence[str],
                    labels: Mapping[str, str], paths: Sequence[str] = ()) -> ImageProbe:
        self._call("probe_image", image_id, tuple(files), tuple(dirs), dict(labels))
        data = self.filesystems.get(image_id)
        return ImageProbe({p: None if data is None else _member(data, p) for p in files},
                          {p: self.path_modes.get(p) for p in dirs},
                          {p: self.path_stats.get(p) for p in paths})

    def export_image(self, image_id: str,
                     labels: Mapping[str, str]) -> Generator[bytes, None, None]:
        self._call("export_image", image_id, dict(labels))
        data = self._filesystem(image_id)
        return self._chunks(data)

    def _chunks(self, data: bytes) -> Generator[bytes, None, None]:
        self.open_exports += 1
        try:
            for start in range(0, len(data), 700):  # odd chunk sizes exercise the readers
                yield data[start:start + 700]
        finally:
            self.open_exports -= 1

    # -- images ----------------------------------------------------------------------------

    def build(self, context_tar: bytes, dockerfile: str, tag: str, labels: Mapping[str, str],
              on_line: Callable[[str], None],
              build_args: Mapping[str, str] | None = None) -> ImageInfo:
        self._call("build", tag, dict(labels), context_tar, dockerfile,
                   dict(build_args or {}))
        on_line(f"Successfully tagged {tag}")
        image = image_info("sha256:" + self._new_id("build"), tags=(tag,), labels=labels)
        self.images[tag] = self.images[image.id] = image
        self.created.append(("image", tag))
        return image

    def derive_image(self, image: ImageInfo, tar: bytes, tag: str, *,
                     image_labels: Mapping[str, str],
                     helper_labels: Mapping[str, str]) -> ImageInfo:
        self._call("derive_image", image.id, tar, tag, dict(image_labels))
        derived = replace(image, id="sha256:" + fake_id("derive", image.id, tar, tag),
                          tags=(tag,), labels={**image.labels, **image_labels})
        self.images[tag] = self.images[derived.id] = derived
        self.created.append(("image", tag))
        return derived

    def import_image(self, tar: Any, tag: str, labels: Mapping[str, str],
                     like: ImageInfo) -> ImageInfo:
        self._call("import_image", tag, dict(labels))
        image = replace(like, id="sha256:" + self._new_id("import"), tags=(tag,),
                        labels=dict(labels))
        self.images[tag] = self.images[image.id] = image
        self.created.append(("image", tag))
        return image

    def commit(self, container_id: str, tag: str, labels: Mapping[str, str],
               like: ImageInfo) -> ImageInfo:
        self._call("commit", container_id, tag, dict(labels))
        image = replace(like, id="sha256:" + self._new_id("commit"), tags=(tag,),
                        labels=dict(labels))
        self.images[tag] = self.images[image.id] = image
        self.created.append(("image", tag))
        return image

    def tag_image(self, image: str, ref: str) -> None:
        self._call("tag_image", image, ref)
        found = self.images.get(image)
        if found is not None:
            self.images[ref] = found

    def untag_image(self, ref: str) -> bool:
        self._call("untag_image", ref)
        if ref in self.untag_refused:
            return False
        self.cached = [replace(image, tags=tuple(t for t in image.tags if t != ref))
                       for image in self.cached]
        self.cached = [image for image in self.cached if image.tags]
        return True

    def remove_image(self, ref: str) -> bool:
        self._call("remove_image", ref)
        if ref in self.sticky:
            return True
        image = self.images.pop(ref, None)
        if image is not None:
            for other in [r for r, i in self.images.items() if i.id == image.id]:
                del self.images[other]
        return self._remove(self.labelled_images, "Id", ref)

    def pull_image(self, ref: str, on_line: Callable[[str], None]) -> ImageInfo:
        self._call("pull_image", ref)
        on_line("Pull complete")
        image = image_info("sha256:" + fake_id("pull", ref))
        self.images[ref] = self.images[image.id] = image
        return image

    def push_image(self, ref: str, on_line: Callable[[str], None]) -> None:
        self._call("push_image", ref)
        on_line("Pushed")

    def cached_images(self, repositories: Sequence[str], *,
                      inspect: Callable[[str, tuple[str, ...]], bool] | None = None,
                      ) -> list[CachedImage]:
        self._call("cached_images", tuple(repositories))
        return [image if inspect is None or inspect(image.id, image.tags)
                else CachedImage(image.id, image.tags, None) for image in self.cached]

    # -- containers ------------------------------------------------------------------------

    def create(self, spec: ContainerSpec) -> str:
        self._call("create", spec)
        ident = self._new_id("container")
        self.specs[ident] = spec
        # As the engine: the image's labels, then the container's own over them.
        image = self.images.get(spec.image)
        merged = {**(image.labels if image is not None else {}), **spec.labels}
        self.containers.append({"Id": ident, "State": "created", "Image": spec.image,
                                "Labels": merged})
        self.created.append(("container", ident))
        return ident

    def start(self, container_id: str) -> None:
        self._call("start", container_id)
        self._set_state(container_id, "running")

    def attach(self, container_id: str, *, stdin: bool,
               detach_keys: str | None = None) -> AttachedStream:
        """A socket whose other end sends :attr:`stdout` (framed unless the container has a
        TTY) and then closes, as a workload that wrote that and exited."""
        self._call("attach", container_id, stdin)
        ours, theirs = socket.socketpair()
        spec = self.specs.get(container_id)
        data = self.stdout
        if data and not (spec is not None and spec.tty):
            data = struct.pack(">BxxxL", 1, len(data)) + data
        theirs.sendall(data)
        theirs.shutdown(socket.SHUT_WR)
        self._peers.append(theirs)
        return AttachedStream(ours)

    def output(self, container_id: str, *, follow: bool = True,
               tail: int | None = None) -> Iterator[tuple[str, bytes]]:
        self._call("output", container_id)
        return iter([("stdout", self.stdout)])

    def wait(self, container_id: str, timeout_s: float) -> int | None:
        self._call("wait", container_id, timeout_s)
        if self.exit_status is not None:
            self._set_state(container_id, "exited")
        return self.exit_status

    def kill(self, container_id: str) -> None:
        self._call("kill", container_id)
        self._set_state(container_id, "exited")

    def send_signal(self, container_id: str, signal: str) -> None:
        self._call("send_signal", container_id, signal)

    def stop(self, container_id: str, timeout_s: int) -> None:
        self._call("stop", container_id, timeout_s)
        self._set_state(container_id, "exited")

    def remove_container(self, container_id: str) -> bool:
        self._call("remove_container", container_id)
        return self._remove(self.containers, "Id", container_id)

    def container_state(self, container_id: str) -> str | None:
        self._call("container_state", container_id)
        entry = self._container(container_id)
        return str(entry.get("State")) if entry is not None else None

    def container_finished_at(self, container_id: str) -> float | None:
        self._call("container_finished_at", container_id)
        return None

    def container_ip(self, container_id: str, network: str) -> str | None:
        self._call("container_ip", container_id, network)
        return self.container_address

    def network_endpoint(self, container_id: str, network: str) -> tuple[str, int] | None:
        self._call("network_endpoint", container_id, network)
        return None if self.container_address is None else (self.container_address, 24)

    def container_pid(self, container_id: str) -> int | None:
        self._call("container_pid", container_id)
        return None

    def container_activity(self, container_id: str) -> None:
        self._call("container_activity", container_id)

    def resize(self, container_id: str, *, rows: int, columns: int) -> None:
        self._call("resize", container_id, rows, columns)

    def put_archive(self, container_id: str, path: str, tar: bytes) -> None:
        self._call("put_archive", container_id, path, tar)

    def sandbox_files(self, container_id: str) -> SandboxFiles:
        self._call("sandbox_files", container_id)
        return self.sandbox_mounts.get(container_id, SandboxFiles("1000:1000", True, ()))

    def archive_stat(self, container_id: str, path: str) -> PathStat | None:
        self._call("archive_stat", container_id, path)
        return self.stats.get((container_id, path))

    def archive_read(self, container_id: str, path: str) -> Iterator[bytes]:
        self._call("archive_read", container_id, path)
        data = self.archives.get((container_id, path), b"")
        yield from (data[i:i + 4096] for i in range(0, len(data), 4096))

    def archive_write(self, container_id: str, path: str, tar: Any) -> None:
        self._call("archive_write", container_id, path)
        self.written.append((container_id, path, tar if isinstance(tar, bytes) else tar.read()))

    def fill_volume(self, volume: str, image_id: str, tar: Any, *, target: str,
                    labels: Mapping[str, str]) -> None:
        self._call("fill_volume", volume, image_id, target)
        self.written.append((volume, target, tar if isinstance(tar, bytes) else tar.read()))

    def path_exists(self, container_id: str, path: str) -> bool:
        self._call("path_exists", container_id, path)
        return False

    def exec_stream(self, container_id: str, argv: Sequence[str], *, user: str,
                    workdir: str | None) -> tuple[Iterator[tuple[str, bytes]],
                                                  Callable[[], int]]:
        self._call("exec_stream", container_id, tuple(argv), user)
        status = self.exec_status
        return iter(()), lambda: status

    def exec_attach(self, container_id: str, argv: Sequence[str], *, user: str,
                    env: Mapping[str, str], workdir: str | None, tty: bool,
                    stdin: bool) -> tuple[AttachedStream, str]:
        self._call("exec_attach", container_id, tuple(argv), user)
        ours, theirs = socket.socketpair()
        theirs.shutdown(socket.SHUT_WR)
        self._peers.append(theirs)
        return AttachedStream(ours), self._new_id("exec")

    def exec_exit_code(self, exec_id: str) -> int | None:
        self._call("exec_exit_code", exec_id)
        return self.exec_status

    def exec_resize(self, exec_id: str, *, rows: int, columns: int) -> None:
        self._call("exec_resize", exec_id, rows, columns)

    # -- networks and volumes --------------------------------------------------------------

    def create_network(self, name: str, labels: Mapping[str, str], *, bridge: str | None,
                       internal: bool, host_address: bool = True) -> str:
        self._call("create_network", name, bridge, internal)
        ident = self._new_id("network")
        self.networks.append({"Id": ident, "Name": name, "Labels": dict(labels)})
        self.created.append(("network", ident))
        return ident

    def network_gateway(self, network_id: str) -> str:
        self._call("network_gateway", network_id)
        return self.gateway

    def find_network(self, name: str) -> str | None:
        self._call("find_network", name)
        found = [n["Id"] for n in self.networks if n["Name"] == name]
        return str(found[0]) if found else None

    def connect_network(self, network_id: str, container_id: str) -> None:
        self._call("connect_network", network_id, container_id)

    def remove_network(self, network_id: str) -> bool:
        self._call("remove_network", network_id)
        return self._remove(self.networks, "Id", network_id)

    def create_volume(self, name: str, labels: Mapping[str, str]) -> str:
        self._call("create_volume", name)
        self.volumes.append({"Name": name, "Labels": dict(labels)})
        self.created.append(("volume", name))
        return name

    def remove_volume(self, name: str) -> bool:
        self._call("remove_volume", name)
        return self._remove(self.volumes, "Name", name)

    # -- gc and doctor ---------------------------------------------------------------------

    def list_labelled(self, labels: Mapping[str, str]) -> RawListing:
        self._call("list_labelled", dict(labels))
        return RawListing(tuple(self.containers), tuple(self.networks), tuple(self.volumes))

    def list_labelled_images(self, labels: Mapping[str, str]) -> tuple[Any, ...]:
        self._call("list_labelled_images", dict(labels))
        return tuple(self.labelled_images)

    def list_owned(self, labels: Mapping[str, str]) -> list[OwnedObject]:
        self._call("list_owned", dict(labels))
        wanted = dict(labels).items()
        owned: list[OwnedObject] = []
        for kind, pool in (("container", self.containers), ("network", self.networks),
                           ("volume", self.volumes)):
            for entry in pool:
                entry_labels = entry.get("Labels") or {} if isinstance(entry, dict) else {}
                if wanted <= entry_labels.items():
                    ident = str(entry.get("Id") or entry.get("Name"))
                    owned.append(OwnedObject(kind, ident, str(entry.get("Name", ident)),
                                             entry_labels, str(entry.get("State", ""))))
        return owned

    def disk_usage(self) -> Mapping[str, Any]:
        self._call("disk_usage")
        return self.usage

    def object_users(self, kind: str, ident: str) -> list[str]:
        self._call("object_users", kind, ident)
        return list(self.users.get(ident, []))

    def present(self, kind: str, idents: Sequence[str]) -> set[str]:
        self._call("present", kind, tuple(idents))
        pool = {"container": self.containers, "network": self.networks,
                "volume": self.volumes}[kind]
        key = "Name" if kind == "volume" else "Id"
        return {e[key] for e in pool if isinstance(e, dict)} & set(idents)

    def reservations(self, labels: Mapping[str, str]) -> list[Reservation]:
        """The running listed containers carrying ``labels``, with the limits of the spec
        each was created from (none: 0)."""
        self._call("reservations", dict(labels))
        found = []
        for entry in self.containers:
            held = entry.get("Labels") or {}
            if entry.get("State") != "running" or any(held.get(k) != v
                                                      for k, v in labels.items()):
                continue
            spec = self.specs.get(entry["Id"])
            found.append(Reservation(entry["Id"], spec.nano_cpus // 1_000_000 if spec else 0,
                                     spec.memory_bytes if spec else 0))
        return found


# The fake must stay a Driver: mypy checks this assignment against the Protocol.
_DRIVER: type[Driver] = FakeEngine

__all__ = ["DEFAULT_CONTAINER_IP", "DEFAULT_GATEWAY", "DEFAULT_INFO", "Call", "FakeEngine",
           "fake_id", "image_info", "tar_of"]
