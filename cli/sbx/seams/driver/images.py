"""The images role through the docker SDK: look-up, build, files read from an image, derived
and committed images, tags."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any

from sbx.base.errors import EngineUnavailable, SbxError
from sbx.base.labels import own_labels
from sbx.base.reasons import Reason
from sbx.seams.engine import (
    PATH_STAT_HEADER,
    ImageInfo,
    ImageProbe,
    first_file_of_archive,
    image_info,
    probed_paths,
    short_error,
    situation_hint,
    split_tag,
)
from sbx.seams.enginebounds import (
    json_lines,
    stream,
    transfer,
)
from sbx.seams.signals import deferred_interrupts

if TYPE_CHECKING:


    pass

from sbx.seams.driver.containers import SdkContainers


class SdkImages(SdkContainers):
    """Images (:class:`sbx.seams.engine.Images`); reading files out of an image and deriving one
    go through a probe container, hence built on the containers role."""

    def image(self, ref: str) -> ImageInfo | None:
        import docker

        with self._engine_errors(f"inspecting image {ref}", Reason.IMAGE_MISSING):
            try:
                attrs: dict[str, Any] = self._api.inspect_image(ref)
            except docker.errors.ImageNotFound:
                return None
            except docker.errors.APIError as exc:
                # A malformed reference is "not present" as far as a run is concerned.
                if exc.status_code in (400, 404):
                    return None
                raise
        return image_info(attrs)


    def build(self, context_tar: bytes, dockerfile: str, tag: str, labels: Mapping[str, str],
              on_line: Callable[[str], None],
              build_args: Mapping[str, str] | None = None) -> ImageInfo:
        log: list[str] = []
        # Long by nature (a RUN step may be silent for long): bounded in idle time and
        # message size, not in total.
        with self._engine_errors(f"building {tag}", Reason.BUILD_FAILED, stream(self._env)):
            chunks = self._api.build(
                fileobj=io.BytesIO(context_tar), custom_context=True,
                dockerfile=dockerfile, tag=tag, labels=dict(labels),
                buildargs=dict(build_args or {}),
                rm=True, forcerm=True, pull=False, decode=False, nocache=False,
                # A kit's RUN steps get no network: the default bridge would give them a route
                # out and the host's resolver, outside any policy. What needs the network
                # belongs in an install-phase hook, which goes through the egress proxy.
                network_mode="none",
            )
            with closing(chunks):
                for chunk in json_lines(chunks):
                    if not isinstance(chunk, dict):
                        continue
                    if "error" in chunk:
                        detail = str(chunk.get("error", "")).strip()
                        raise SbxError(
                            Reason.BUILD_FAILED, f"building {tag} failed: {detail}",
                            hint="Fix the dockerfile; its base image must be present locally.",
                            details={"log_tail": log[-20:]})
                    text = str(chunk.get("stream", "")).strip()
                    if text:
                        log.append(text)
                        on_line(text)
        image = self.image(tag)
        if image is None:
            raise SbxError(Reason.BUILD_FAILED, f"building {tag} produced no image",
                           details={"log_tail": log[-20:]})
        return image

    def probe_image(self, image_id: str, *, files: Sequence[str], dirs: Sequence[str],
                    labels: Mapping[str, str], paths: Sequence[str] = ()) -> ImageProbe:
        """Files and directory modes of an image without starting anything: one container is
        created, each file copied out and each directory stat'ed (HEAD on the archive
        endpoint), and it is removed."""
        import docker

        action = f"reading {', '.join((*files, *dirs, *paths))} from image {image_id[:19]}"
        found: dict[str, bytes | None] = {}
        with self._probe_container(image_id, labels, action) as cid, \
                self._engine_errors(action):
            for path in files:
                try:
                    chunks, _stat = self._api.get_archive(cid, path)
                except docker.errors.NotFound:
                    found[path] = None
                    continue
                found[path] = first_file_of_archive(b"".join(chunks))

            def head(path: str) -> tuple[bool, str | None]:
                response = self._api.head(self._api._url("/containers/{0}/archive", cid),
                                          params={"path": path})
                return response.status_code == 200, response.headers.get(PATH_STAT_HEADER)

            modes, stats = probed_paths(dirs, paths, head)
        return ImageProbe(found, modes, stats)

    @contextmanager
    def _probe_container(self, image_id: str, labels: Mapping[str, str],
                         action: str, binds: Sequence[str] = ()) -> Iterator[str]:
        """A container of ``image_id`` that is never started, removed on the way out; created
        and handed over with interrupts held back, so a signal cannot orphan it. None of the
        image's ``dev.sbx.*`` labels passes for sbx's (:func:`own_labels`)."""
        image = self.image(image_id)
        labels = own_labels(image.labels if image is not None else {}, labels)
        cid: str | None = None
        try:
            # A signal during the create is raised at the end of this block, inside the try,
            # so the container is removed whatever happens.
            with deferred_interrupts(), self._engine_errors(action):
                cid = str(self._api.create_container(
                    image_id, command=["/nonexistent-sbx-probe"], labels=dict(labels),
                    network_disabled=True,
                    host_config=self._api.create_host_config(binds=list(binds))
                    if binds else None)["Id"])
            yield cid
        finally:
            if cid is not None:
                with deferred_interrupts():
                    self.remove_container(cid)

    def derive_image(self, image: ImageInfo, tar: bytes, tag: str, *,
                     image_labels: Mapping[str, str],
                     helper_labels: Mapping[str, str]) -> ImageInfo:
        """``image`` plus the files (and directory modes) in ``tar``, committed as ``tag`` with
        ``image``'s run configuration. Nothing is started; the helper container carries
        ``helper_labels`` so a crash leaves nothing ``sbx gc`` cannot find."""
        with self._probe_container(image.id, helper_labels, f"preparing image {tag}") as cid:
            self.put_archive(cid, "/", tar)
            return self.commit(cid, tag, {**image.labels, **own_labels(image.labels,
                                                                         image_labels)}, image)


    if TYPE_CHECKING:  # the files role's (sbx.seams.driver.files), beside this one in SdkEngine
        def archive_write(self, container_id: str, path: str, tar: Any) -> None: ...

    def fill_volume(self, volume: str, image_id: str, tar: Any, *, target: str,
                    labels: Mapping[str, str]) -> None:
        """Extract ``tar`` (top entry: ``target``'s name) into ``volume``, mounted at
        ``target`` in a helper container of ``image_id`` that is never started. The top
        entry gives the volume's root its owner and mode, which an archive written onto the
        sandbox's own mount point cannot: the engine skips a ``.`` entry."""
        with self._probe_container(image_id, labels, f"filling volume {volume}",
                                   binds=[f"{volume}:{target}:rw"]) as cid:
            self.archive_write(cid, "/", tar)

    def export_image(self, image_id: str,
                     labels: Mapping[str, str]) -> Generator[bytes, None, None]:
        """An image's filesystem as a tar stream, in chunks, without running anything.

        A helper container labelled ``labels`` is created (never started), exported and removed
        when the stream ends or is closed: close it when stopping early
        (``contextlib.closing``). Besides the image's own files the tar holds what the engine
        adds to every container (``/.dockerenv``, ``/etc/hostname``, ``/etc/hosts``,
        ``/etc/resolv.conf``, ``/etc/mtab``, ``/dev/console``, ``/dev/pts``, ``/dev/shm``).
        """
        import urllib3

        action = f"exporting the files of image {image_id[:19]}"
        with self._probe_container(image_id, labels, action) as cid, \
                self._engine_errors(action, Reason.BUILD_FAILED, transfer(self._env)):
            try:
                yield from self._api.export(cid)
            except urllib3.exceptions.HTTPError as exc:
                # The SDK streams the body through urllib3, whose errors requests never
                # wraps once the response has started.
                raise EngineUnavailable(f"{action}: the stream broke: {short_error(exc)}",
                                        hint=situation_hint(self._env, str(exc))) from exc


    def commit(self, container_id: str, tag: str, labels: Mapping[str, str],
               like: ImageInfo) -> ImageInfo:
        """Commit the container's filesystem with the run config of ``like`` (not the
        container's own: the create step ran a keepalive as root)."""
        repository, _, version = tag.partition(":")
        changes = run_config_changes(like, labels, env=False)
        # Held back from signals: the engine finishes a commit whose client went away, so an
        # interrupted request would leave an image the run's cleanup already looked for.
        with deferred_interrupts(), \
                self._engine_errors("saving the prepared sandbox image", Reason.CREATE_FAILED):
            self._api.commit(container_id, repository=repository, tag=version or "latest",
                             changes=changes)
        image = self.image(tag)
        if image is None:
            raise SbxError(Reason.CREATE_FAILED, f"committing {tag} produced no image")
        return image

    def import_image(self, tar: Any, tag: str, labels: Mapping[str, str],
                     like: ImageInfo) -> ImageInfo:
        """A one-layer image from the file system in ``tar`` (a file), with the run
        configuration of ``like`` (its entrypoint, command, user, workdir and variables) and
        ``labels``: what `sbx save` makes, so no lower layer holds what it left out."""
        repository, _, version = tag.partition(":")
        changes = run_config_changes(like, labels, env=True)
        with deferred_interrupts(), self._engine_errors(
                f"importing the files of {tag}", Reason.CREATE_FAILED, transfer(self._env)):
            self._api.import_image(src=tar, repository=repository, tag=version or "latest",
                                   changes=changes)
        image = self.image(tag)
        if image is None:
            raise SbxError(Reason.CREATE_FAILED, f"importing {tag} produced no image")
        return image

    def remove_image(self, ref: str) -> bool:
        import docker

        with self._engine_errors(f"removing image {ref}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_image(ref, force=True, noprune=False)
            except docker.errors.ImageNotFound:
                return True
        return True

    def untag_image(self, ref: str) -> bool:
        """Remove the tag ``ref``, never by force: the image itself goes only with its last
        tag, and not while a container uses it. False when the engine refused (in use)."""
        import docker

        with self._engine_errors(f"removing the tag {ref}", Reason.CLEANUP_FAILED):
            try:
                self._api.remove_image(ref, force=False, noprune=False)
            except docker.errors.ImageNotFound:
                return True
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # a container (or a child image) uses it
                    return False
                raise
        return True

    def tag_image(self, image: str, ref: str) -> None:
        """Tag a local image as ``ref`` (``host:port/repo:tag``)."""
        repository, tag = split_tag(ref)
        with self._engine_errors(f"tagging {image[:19]} as {ref}", Reason.IMAGE_MISSING):
            self._api.tag(image, repository, tag=tag, force=True)


def run_config_changes(like: ImageInfo, labels: Mapping[str, str], *,
                       env: bool) -> list[str]:
    """The dockerfile changes that give a committed or imported image the run configuration
    of ``like`` (with its variables when ``env``: an import starts from none) and ``labels``."""
    return [
        f"ENTRYPOINT {json.dumps(list(like.entrypoint or []))}",
        f"CMD {json.dumps(list(like.cmd or []))}",
        f"USER {like.user}" if like.user else "USER 0",
        f"WORKDIR {like.workdir or '/'}",
        *((f"ENV {key}={json.dumps(value)}" for key, _, value
           in (item.partition("=") for item in like.env) if key) if env else ()),
        *(f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in sorted(labels.items())),
    ]


__all__ = ["SdkImages", "run_config_changes"]
