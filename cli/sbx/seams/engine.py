"""What sbx needs from an engine, whatever carries the calls: the role protocols (images,
distribution, containers, sessions, networks, inventory; :class:`Driver` is all of them), the
values they return, and the engine's create request for a :class:`ContainerSpec` (the one shape
every transport sends). No SDK and no socket here. Each consumer asks for the roles it uses.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.reasons import Reason
from sbx.seams.enginehost import ENGINE_NAME_ENV

if TYPE_CHECKING:

    from sbx.seams.containerspec import ContainerSpec
    from sbx.seams.session.stream import AttachedStream


MAX_IMAGE_FILE_BYTES: Final = 4 * 1024 * 1024


def first_file_of_archive(data: bytes) -> bytes | None:
    """The first regular file of a tar archive the engine sent (``GET …/archive``), or None when
    it holds none within :data:`MAX_IMAGE_FILE_BYTES`; shared by every transport."""
    import io
    import tarfile  # only reading a file out of an image needs it

    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.size <= MAX_IMAGE_FILE_BYTES:
                extracted = archive.extractfile(member)
                return extracted.read() if extracted else None
    return None


@dataclass(frozen=True)
class EngineInfo:
    version: str
    api_version: str
    os: str
    cgroup_version: str
    cgroup_driver: str
    rootless: bool
    security_options: tuple[str, ...]
    # The OCI runtimes registered with the engine (/info "Runtimes") and its default one.
    runtimes: tuple[str, ...] = ()
    default_runtime: str = ""
    # Who answers the Docker API: "docker", or "podman" (its /info alone carries BuildahVersion).
    product: str = "docker"
    # What the engine's host has (/info NCPU, MemTotal): where a fleet places a sandbox.
    cpus: int = 0
    memory_bytes: int = 0
    # Which daemon answers (/info ID, Name, DockerRootDir): two hosts reaching one daemon
    # answer the same. The ID alone is not enough: engine 20.10 derives it from
    # /etc/docker/key.json, which daemons sharing an /etc (or cloned machines) share; two
    # daemons on one host never share a data root.
    engine_id: str = ""
    host_name: str = ""
    data_root: str = ""


def engine_info(info: Mapping[str, Any], api_version: str) -> EngineInfo:
    """An :class:`EngineInfo` from the engine's ``/info`` answer; shared by every transport."""
    security = tuple(str(s) for s in info.get("SecurityOptions") or ())
    runtimes = info.get("Runtimes")
    return EngineInfo(
        version=str(info.get("ServerVersion", "")),
        api_version=api_version,
        os=str(info.get("OSType", "")),
        cgroup_version=str(info.get("CgroupVersion", "")),
        cgroup_driver=str(info.get("CgroupDriver", "")),
        rootless=any("rootless" in s for s in security),
        security_options=security,
        runtimes=tuple(sorted(str(name) for name in runtimes))
        if isinstance(runtimes, Mapping) else (),
        default_runtime=str(info.get("DefaultRuntime") or ""),
        product="podman" if "BuildahVersion" in info else "docker",
        cpus=_count(info.get("NCPU")),
        memory_bytes=_count(info.get("MemTotal")),
        engine_id=str(info.get("ID") or ""),
        host_name=str(info.get("Name") or ""),
        data_root=str(info.get("DockerRootDir") or ""),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True)
class Reservation:
    """What one running sandbox container holds of its engine: its limits (0: none set)."""

    container_id: str
    cpu_millis: int
    memory_bytes: int


@dataclass(frozen=True)
class EngineLocation:
    """Where an engine is, as far as a run cares: ``local`` when it shares this machine's file
    systems and network stack (a bind of a host path, the bridge's firewall and the egress
    proxy on its gateway mean there what they mean here)."""

    host: str  # as DOCKER_HOST spells it: unix:///var/run/docker.sock, ssh://me@box, ...
    local: bool


@dataclass(frozen=True)
class ImageProbe:
    """What one probe container showed of an image: file contents, directory modes (the
    permission bits with setuid/setgid/sticky, as in ``stat``) and, for ``stats``, any path's
    type and permission bits (``st_mode``, the last component not followed); None: absent, or
    for a mode, not a directory."""

    files: Mapping[str, bytes | None]
    modes: Mapping[str, int | None]
    stats: Mapping[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    user: str
    workdir: str
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    env: tuple[str, ...]
    labels: Mapping[str, str]


@dataclass(frozen=True)
class CachedImage:
    """An image found by its tags (``sbx gc``'s image cache pass), with when it was last
    tagged: sbx re-tags a cached image at each use, so that is its last use."""
    id: str
    tags: tuple[str, ...]
    last_tagged: float | None  # unix seconds; None: the engine did not say


@dataclass(frozen=True)
class ContainerActivity:
    """What a running container shows of its use: its live exec sessions (the engine lists
    only running ones) and its total CPU time (None: the engine's stats did not say)."""
    running: bool
    execs: int
    cpu_ns: int | None


@dataclass(frozen=True)
class OwnedObject:
    kind: str  # container | network | volume
    id: str
    name: str
    labels: Mapping[str, str]
    state: str  # containers: created/running/exited/dead...; others: ""


@dataclass(frozen=True)
class RawListing:
    """One label-filtered listing, entries exactly as the engine sent them (JSON objects).

    Kept unparsed on purpose: ``sbx gc`` parses every entry strictly itself and deletes nothing
    when one of them does not parse, which a lenient conversion here would hide.
    """

    containers: tuple[Any, ...]
    networks: tuple[Any, ...]
    volumes: tuple[Any, ...]


class Images(Protocol):
    """Local images: inspect, build, read and derive, commit a container, tag, remove."""

    def image(self, ref: str) -> ImageInfo | None: ...
    def build(self, context_tar: bytes, dockerfile: str, tag: str, labels: Mapping[str, str],
              on_line: Callable[[str], None],
              build_args: Mapping[str, str] | None = None) -> ImageInfo: ...
    def probe_image(self, image_id: str, *, files: Sequence[str], dirs: Sequence[str],
                    labels: Mapping[str, str], paths: Sequence[str] = ()) -> ImageProbe: ...
    def derive_image(self, image: ImageInfo, tar: bytes, tag: str, *,
                     image_labels: Mapping[str, str],
                     helper_labels: Mapping[str, str]) -> ImageInfo: ...
    def export_image(self, image_id: str,
                     labels: Mapping[str, str]) -> Generator[bytes, None, None]: ...
    def commit(self, container_id: str, tag: str, labels: Mapping[str, str],
               like: ImageInfo) -> ImageInfo: ...
    def import_image(self, tar: Any, tag: str, labels: Mapping[str, str],
                     like: ImageInfo) -> ImageInfo: ...
    def remove_image(self, ref: str) -> bool: ...
    def untag_image(self, ref: str) -> bool: ...
    def tag_image(self, image: str, ref: str) -> None: ...


class Distribution(Protocol):
    """Images between the engine and a registry."""

    def push_image(self, ref: str, on_line: Callable[[str], None]) -> None: ...
    def pull_image(self, ref: str, on_line: Callable[[str], None]) -> ImageInfo: ...


class Containers(Protocol):
    """A container's life: create, start, wait, stop, remove; its state and files."""

    def create(self, spec: ContainerSpec) -> str: ...
    def start(self, container_id: str) -> None: ...
    def wait(self, container_id: str, timeout_s: float) -> int | None: ...
    def stop(self, container_id: str, timeout_s: int) -> None: ...
    def kill(self, container_id: str) -> None: ...
    def send_signal(self, container_id: str, signal: str) -> None: ...
    def remove_container(self, container_id: str) -> bool: ...
    def container_state(self, container_id: str) -> str | None: ...
    def container_finished_at(self, container_id: str) -> float | None: ...
    def container_pid(self, container_id: str) -> int | None: ...
    def container_activity(self, container_id: str) -> ContainerActivity | None: ...
    def container_ip(self, container_id: str, network: str) -> str | None: ...
    def network_endpoint(self, container_id: str,
                         network: str) -> tuple[str, int] | None: ...
    def put_archive(self, container_id: str, path: str, tar: bytes) -> None: ...
    def path_exists(self, container_id: str, path: str) -> bool: ...


@dataclass(frozen=True)
class PathStat:
    """A path in a container as the engine's archive endpoint reports it (its
    ``X-Docker-Container-Path-Stat``): the engine resolves it inside the container's root."""

    name: str
    size: int
    mode: int  # unix type and permission bits (S_IFDIR, S_IFLNK, S_ISUID... as os.stat)
    link_target: str


@dataclass(frozen=True)
class SandboxMount:
    """One mount of a container: its target, whether the container may write it, and its
    kind (bind, volume, tmpfs)."""

    target: str
    writable: bool
    kind: str


@dataclass(frozen=True)
class SandboxFiles:
    """What a copy into or out of a container needs to know of it: its user (uid:gid), its
    root's writability, its mounts."""

    user: str
    read_only_root: bool
    mounts: tuple[SandboxMount, ...]
    image: str = ""  # the image's id (a helper of a stopped sandbox's runs it)


class Files(Protocol):
    """Files between the host and a container, through the engine's archive endpoint (which
    resolves every path inside the container's root, its mounts included, never tmpfs)."""

    def sandbox_files(self, container_id: str) -> SandboxFiles: ...
    def archive_stat(self, container_id: str, path: str) -> PathStat | None: ...
    def archive_read(self, container_id: str, path: str) -> Iterator[bytes]: ...
    def archive_write(self, container_id: str, path: str, tar: Any) -> None: ...
    def fill_volume(self, volume: str, image_id: str, tar: Any, *, target: str,
                    labels: Mapping[str, str]) -> None: ...


class Sessions(Protocol):
    """Streams into running containers: attach, logs, execs and their terminals."""

    def attach(self, container_id: str, *, stdin: bool,
               detach_keys: str | None = None) -> AttachedStream: ...
    def resize(self, container_id: str, *, rows: int, columns: int) -> None: ...
    def output(self, container_id: str, *, follow: bool = True,
               tail: int | None = None) -> Iterator[tuple[str, bytes]]: ...
    def exec_attach(self, container_id: str, argv: Sequence[str], *, user: str,
                    env: Mapping[str, str], workdir: str | None, tty: bool,
                    stdin: bool) -> tuple[AttachedStream, str]: ...
    def exec_exit_code(self, exec_id: str) -> int | None: ...
    def exec_resize(self, exec_id: str, *, rows: int, columns: int) -> None: ...
    def exec_stream(self, container_id: str, argv: Sequence[str], *, user: str,
                    workdir: str | None) -> tuple[Iterator[tuple[str, bytes]],
                                                  Callable[[], int]]: ...


class Networks(Protocol):
    """Per-run networks and volumes."""

    def create_network(self, name: str, labels: Mapping[str, str], *, bridge: str | None,
                       internal: bool, host_address: bool = True) -> str: ...
    def network_gateway(self, network_id: str) -> str: ...
    def find_network(self, name: str) -> str | None: ...
    def connect_network(self, network_id: str, container_id: str) -> None: ...
    def remove_network(self, network_id: str) -> bool: ...
    def create_volume(self, name: str, labels: Mapping[str, str]) -> str: ...
    def remove_volume(self, name: str) -> bool: ...


class Inventory(Protocol):
    """What the engine is and holds: its info, and the labelled objects gc and doctor list."""

    def info(self) -> EngineInfo: ...
    def location(self) -> EngineLocation: ...
    def list_owned(self, labels: Mapping[str, str]) -> list[OwnedObject]: ...
    def list_labelled(self, labels: Mapping[str, str]) -> RawListing: ...
    def list_labelled_images(self, labels: Mapping[str, str]) -> tuple[Any, ...]: ...
    def cached_images(self, repositories: Sequence[str], *,
                      inspect: Callable[[str, tuple[str, ...]], bool] | None = None,
                      ) -> list[CachedImage]: ...
    def local_images(self) -> list[tuple[str, int]]: ...
    def disk_usage(self) -> Mapping[str, Any]: ...
    def object_users(self, kind: str, ident: str) -> list[str]: ...
    def present(self, kind: str, idents: Sequence[str]) -> set[str]: ...
    def reservations(self, labels: Mapping[str, str]) -> list[Reservation]: ...


class Driver(Images, Distribution, Containers, Files, Sessions, Networks, Inventory, Protocol):
    """Every role: what one engine connection offers. Consumers ask for the roles they use;
    a second backend (e.g. Kubernetes) would implement the roles its consumers need."""


def situation_hint(env: Mapping[str, str], detail: str) -> str:
    """A hint that depends on what is actually wrong (STYLE item 9)."""
    host = env.get("DOCKER_HOST")
    entry = env.get(ENGINE_NAME_ENV)
    if host and entry:  # sbx.usecases.fleet set it from [engines], not the user
        return (f"Engine {entry} of [engines] is {host!r}: check that an engine answers "
                f"there (`docker -H {host} version`), or correct its entry.")
    if host:
        return (f"DOCKER_HOST is set to {host!r}: check that an engine listens there, or unset "
                "it to use the local socket.")
    lowered = detail.lower()
    if "permission denied" in lowered:
        return ("This user may not open /var/run/docker.sock: add it to the `docker` group "
                "(then log in again) or run the engine rootless.")
    if "no such file" in lowered or "filenotfound" in lowered:
        return ("No engine socket at /var/run/docker.sock: start the engine (`dockerd`, or "
                "`systemctl start docker`).")
    return "Start the engine and check that `docker version` answers."


def named_entry(env: Mapping[str, str], error: SbxError) -> SbxError:
    """An unreachable engine's ``error`` naming its [engines] entry, when the command was
    pointed at one (sbx.usecases.fleet): its host alone does not say which entry to check."""
    entry = env.get(ENGINE_NAME_ENV)
    if not entry or error.reason is not Reason.DOCKER_UNREACHABLE \
            or error.message.startswith(f"engine {entry}: "):
        return error
    return EngineUnavailable(f"engine {entry}: {error.message}", hint=error.hint,
                             details={**error.details, "engine": entry})


def create_body(spec: ContainerSpec) -> dict[str, Any]:
    """The body of ``POST /containers/create`` for ``spec``: what the SDK's
    ``create_container_config(host_config=create_host_config(...))`` makes of
    :func:`create_kwargs`, with its top-level nulls dropped (as its ``_post_json`` does)."""
    kwargs = create_kwargs(spec)
    options = kwargs["host_config"]
    host: dict[str, Any] = {
        "Memory": options["mem_limit"], "MemorySwap": options["memswap_limit"],
        "ReadonlyRootfs": options["read_only"], "NetworkMode": options["network_mode"] or "default",
    }
    if options["privileged"]:
        host["Privileged"] = True
    if options["runtime"]:
        host["Runtime"] = options["runtime"]
    if options["cap_drop"]:
        host["CapDrop"] = list(options["cap_drop"])
    host["SecurityOpt"] = list(options["security_opt"])
    log = options["log_config"]
    host["LogConfig"] = {"Type": log["type"], "Config": dict(log["config"])}
    if options["tmpfs"]:
        host["Tmpfs"] = dict(options["tmpfs"])
    if options["pids_limit"]:
        host["PidsLimit"] = options["pids_limit"]
    host["Init"] = options["init"]
    if options["nano_cpus"]:
        host["NanoCpus"] = options["nano_cpus"]
    host["Mounts"] = list(options["mounts"])
    if options.get("sysctls"):
        host["Sysctls"] = dict(options["sysctls"])
    stdin_open = bool(kwargs["stdin_open"])
    healthcheck = kwargs["healthcheck"]
    body: dict[str, Any] = {
        "User": kwargs["user"], "Tty": kwargs["tty"], "OpenStdin": stdin_open,
        # The SDK ties StdinOnce to stdin_open; SdkEngine.create then sets the spec's.
        "StdinOnce": bool(kwargs["stdin_once"]) if stdin_open else False,
        "AttachStdin": stdin_open, "AttachStdout": True, "AttachStderr": True,
        "Env": [f"{key}={value}" for key, value in kwargs["environment"].items()],
        "Cmd": kwargs["command"], "Image": kwargs["image"],
        "NetworkDisabled": kwargs["network_disabled"], "Entrypoint": kwargs["entrypoint"],
        "WorkingDir": kwargs["working_dir"], "HostConfig": host, "Labels": kwargs["labels"],
        "Healthcheck": None if healthcheck is None else {
            "Test": healthcheck["test"], "Interval": healthcheck["interval"],
            "Timeout": healthcheck["timeout"], "Retries": healthcheck["retries"],
            "StartPeriod": healthcheck["start_period"]},
    }
    return {key: value for key, value in body.items() if value is not None}


def path_stat(raw: Mapping[str, Any]) -> PathStat:
    """The engine's path stat (Go ``os.FileMode`` bits) as unix ``st_mode`` bits."""
    import stat

    go_mode = int(raw.get("mode", 0))
    mode = go_mode & 0o777
    if go_mode & (1 << 31):
        mode |= stat.S_IFDIR
    elif go_mode & (1 << 27):  # ModeSymlink
        mode |= stat.S_IFLNK
    elif go_mode & ((1 << 26) | (1 << 25) | (1 << 24) | (1 << 21)):  # device, pipe, socket
        mode |= stat.S_IFCHR
    else:
        mode |= stat.S_IFREG
    if go_mode & (1 << 23):
        mode |= stat.S_ISUID
    if go_mode & (1 << 22):
        mode |= stat.S_ISGID
    if go_mode & (1 << 20):  # ModeSticky
        mode |= stat.S_ISVTX
    return PathStat(name=str(raw.get("name", "")), size=int(raw.get("size", 0)), mode=mode,
                    link_target=str(raw.get("linkTarget", "")))


PATH_STAT_HEADER: Final = "x-docker-container-path-stat"  # lower case: how the socket keys it


def header_path_stat(header: str | None) -> Mapping[str, Any] | None:
    """The engine's path-stat header (base64 of a JSON object) decoded; None when it is absent
    or not that shape, so every transport reads the same answer the same way."""
    if not header:
        return None
    try:
        raw = json.loads(base64.b64decode(header))
    except (binascii.Error, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def probed_path(ok: bool, header: str | None) -> tuple[int | None, int | None]:
    """A probed path's (directory mode, ``st_mode``) from the engine's HEAD answer, the same
    on every transport; (None, None) when it is absent or the answer is not a stat."""
    stat = header_path_stat(header) if ok else None
    try:
        go_mode = int(stat["mode"]) if stat is not None else None
    except (KeyError, TypeError, ValueError):
        go_mode = None
    if stat is None or go_mode is None:
        return None, None
    return unix_mode(go_mode), path_stat({**stat, "mode": go_mode}).mode


def probed_paths(dirs: Sequence[str], paths: Sequence[str],
                 head: Callable[[str], tuple[bool, str | None]],
                 ) -> tuple[dict[str, int | None], dict[str, int | None]]:
    """Directory modes of ``dirs`` and ``st_mode`` of ``paths``, one HEAD per path however
    both ask for it: ``head(path)`` is a transport's (found, path-stat header)."""
    modes: dict[str, int | None] = {}
    stats: dict[str, int | None] = {}
    for path in dict.fromkeys((*dirs, *paths)):
        mode, st_mode = probed_path(*head(path))
        if path in dirs:
            modes[path] = mode
        if path in paths:
            stats[path] = st_mode
    return modes, stats


def unix_mode(go_mode: int) -> int | None:
    """A Go ``os.FileMode`` (as the engine reports it) → unix permission bits; None if it is
    not a directory."""
    if not go_mode & (1 << 31):  # ModeDir
        return None
    mode = go_mode & 0o777
    if go_mode & (1 << 23):  # ModeSetuid
        mode |= 0o4000
    if go_mode & (1 << 22):  # ModeSetgid
        mode |= 0o2000
    if go_mode & (1 << 20):  # ModeSticky
        mode |= 0o1000
    return mode


def split_tag(ref: str) -> tuple[str, str | None]:
    """``host:port/repo:tag`` → (``host:port/repo``, ``tag``); a digest reference stays whole."""
    if "@" in ref:
        return ref, None
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1:]
    return ref, "latest"


def registry_chunk(action: str, chunk: Mapping[str, Any],
                    on_line: Callable[[str], None]) -> None:
    if "error" in chunk:
        detail = " ".join(str(chunk.get("error", "")).split())
        raise SbxError(Reason.REGISTRY_UNREACHABLE, f"{action} failed: {detail}")
    status = str(chunk.get("status", "")).strip()
    if status:
        progress = str(chunk.get("progress", "")).strip()
        ident = str(chunk.get("id", "")).strip()
        on_line(" ".join(p for p in (ident, status, progress) if p))


def create_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """Translate the hardened spec into low-level ``create_container`` arguments (pure)."""
    host_config: dict[str, Any] = {
        "read_only": spec.read_only,
        "cap_drop": list(spec.cap_drop),
        "security_opt": list(spec.security_opt),
        "mem_limit": spec.memory_bytes,
        "memswap_limit": spec.memory_swap_bytes,
        "pids_limit": spec.pids_limit,
        "nano_cpus": spec.nano_cpus,
        "tmpfs": dict(spec.tmpfs),
        # Host paths go through the mounts API as typed binds: unlike the legacy Binds list,
        # the engine refuses a source that vanished instead of creating it (as root, on the
        # host). Named volumes go through it too, with nocopy: fresh and empty, never seeded
        # with the image's files at that path (volume@1: mounted empty before hooks).
        "mounts": [{"Target": m.target, "Source": m.source, "Type": "bind",
                    "ReadOnly": m.read_only, "BindOptions": {"Propagation": "rprivate"}}
                   for m in spec.binds if not m.volume]
                  + [{"Target": m.target, "Source": m.source, "Type": "volume",
                      "ReadOnly": m.read_only, "VolumeOptions": {"NoCopy": True}}
                     for m in spec.binds if m.volume],
        "network_mode": spec.network_mode,
        "privileged": spec.privileged,
        "runtime": spec.runtime,  # None: the engine's default runtime
        "init": spec.init,
        "log_config": {"type": spec.log_driver, "config": dict(spec.log_options)},
    }
    if spec.sysctls:
        host_config["sysctls"] = dict(spec.sysctls)
    healthcheck = None
    if spec.healthcheck is not None:
        test, interval = spec.healthcheck
        healthcheck = {"test": list(test), "interval": interval * 1_000_000_000,
                       "timeout": 10 * 1_000_000_000, "retries": 1, "start_period": 0}
    return {
        "healthcheck": healthcheck,
        "name": spec.name,
        "stdin_once": spec.stdin_once,
        # Never the proxies of the user's Docker client config: they would reach the sandbox's
        # environment, credentials in the URL included.
        "use_config_proxy": False,
        "image": spec.image,
        "command": list(spec.command) if spec.command is not None else None,
        "entrypoint": list(spec.entrypoint) if spec.entrypoint is not None else None,
        "user": spec.user,
        "working_dir": spec.working_dir,
        "environment": dict(spec.env),
        "labels": dict(spec.labels),
        "network_disabled": spec.network_mode == "none",
        "host_config": host_config,
        # stdin_open makes the SDK set AttachStdin and StdinOnce: the engine closes the
        # workload's stdin when the attached client half-closes its side (EOF propagates).
        "stdin_open": spec.stdin_open,
        "tty": spec.tty,
    }


def image_info(attrs: Mapping[str, Any]) -> ImageInfo:
    config: Mapping[str, Any] = attrs.get("Config") or {}
    entrypoint = config.get("Entrypoint")
    cmd = config.get("Cmd")
    return ImageInfo(
        id=str(attrs.get("Id", "")),
        tags=tuple(attrs.get("RepoTags") or ()),
        user=str(config.get("User") or ""),
        workdir=str(config.get("WorkingDir") or ""),
        entrypoint=tuple(entrypoint) if entrypoint else None,
        cmd=tuple(cmd) if cmd else None,
        env=tuple(config.get("Env") or ()),
        labels=dict(config.get("Labels") or {}),
    )


def short_error(exc: object) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."
