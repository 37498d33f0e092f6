"""The kit registry, answered by the proxy itself for a sandbox granted ``kit-registry@1``: the
OCI distribution API over the state home's kit store (:mod:`sbx.usecases.kitstore`), scoped to
``kits/`` (:mod:`sbx.domain.egress.kitregistry` decides every route). Nothing is dialled: the
registry is this process, so the grant is reachability and nothing more."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import h11

from sbx.domain.egress.kitregistry import (
    DIGEST_PATTERN,
    MAX_MANIFEST_BYTES,
    MAX_OPEN_UPLOADS,
    RegistryError,
    Route,
    in_namespace,
    manifest_references,
    route,
    valid_name,
)
from sbx.proxy.context import ProxyContext
from sbx.proxy.dialing import Site
from sbx.proxy.recorder import Traffic, mark_start
from sbx.proxy.streams import Stream, flush, next_event
from sbx.usecases.kitstore import CHUNK, KitStore, StoreFull

API_VERSION = (b"docker-distribution-api-version", b"registry/2.0")
JSON = (b"content-type", b"application/json")


@dataclass
class Upload:
    name: str
    path: Path
    size: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)


class KitRegistry:
    def __init__(self, ctx: ProxyContext, store: KitStore) -> None:
        self.ctx = ctx
        self.store = store
        self.uploads: dict[str, Upload] = {}
        self._upload_dir: Path | None = None

    def close(self) -> None:
        """Drop this proxy's unfinished uploads (its sessions die with it)."""
        self.uploads.clear()
        if self._upload_dir is not None:
            shutil.rmtree(self._upload_dir, ignore_errors=True)

    async def answer(self, conn: h11.Connection, client: Stream, request: h11.Request,
                     site: Site, method: str, path: str, query: str | None) -> bool:
        """One request to the registry; True when the connection may carry another."""
        started = mark_start()
        traffic = Traffic()
        try:
            if conn.they_are_waiting_for_100_continue:
                await client.write(conn.send(h11.InformationalResponse(
                    status_code=100, headers=[])) or b"")
            await self._dispatch(conn, client, request, route(method, path),
                                 parse_qs(query or "", keep_blank_values=True), traffic)
        except RegistryError as error:
            await self._error(conn, client, error, traffic)
        except StoreFull as error:
            await self._error(conn, client, RegistryError(507, "DENIED", str(error)), traffic)
        self.ctx.recorder.request(scheme=site.scheme, host=site.host, port=site.port,
                                  method=method, path=path, rule=None, code="kit_registry",
                                  credentials=(), traffic=traffic, started=started)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    # -- answers -------------------------------------------------------------------------

    async def _dispatch(self, conn: h11.Connection, client: Stream, request: h11.Request,
                        found: Route, query: dict[str, list[str]], traffic: Traffic) -> None:
        method = request.method.decode("ascii").upper()
        store, name = self.store, found.name
        if found.kind == "ping":
            await self._discard(conn, client)
            await self._json(conn, client, 200, {}, traffic, head=method == "HEAD")
        elif found.kind == "catalog":
            await self._discard(conn, client)
            names = [n for n in store.repositories() if in_namespace(n)]
            await self._json(conn, client, 200, {"repositories": names}, traffic)
        elif found.kind == "tags":
            await self._discard(conn, client)
            await self._json(conn, client, 200, {"name": name, "tags": store.tags(name)},
                             traffic)
        elif found.kind == "manifest" and method == "PUT":
            await self._put_manifest(conn, client, request, found, traffic)
        elif found.kind == "manifest":
            await self._discard(conn, client)
            manifest = store.manifest(name, found.reference)
            if manifest is None:
                raise RegistryError(404, "MANIFEST_UNKNOWN", f"{name} has no manifest "
                                    f"{found.reference}")
            digest, media_type, body = manifest
            await self._send(conn, client, 200, [
                (b"content-type", media_type.encode("ascii")),
                (b"docker-content-digest", digest.encode("ascii")),
                (b"etag", f'"{digest}"'.encode("ascii"))], body, traffic,
                head=method == "HEAD")
        elif found.kind == "blob":
            await self._discard(conn, client)
            await self._blob(conn, client, found, traffic, head=method == "HEAD")
        elif found.kind == "upload_start":
            await self._start_upload(conn, client, found, query, traffic)
        else:
            await self._upload(conn, client, request, found, query, traffic, method)

    async def _blob(self, conn: h11.Connection, client: Stream, found: Route,
                    traffic: Traffic, *, head: bool) -> None:
        path = self.store.blob_path(found.name, found.reference)
        handle = None
        if path is not None:
            try:
                handle = open(path, "rb")  # noqa: SIM115 - streamed below, closed in finally
            except OSError:
                handle = None
        if handle is None:
            raise RegistryError(404, "BLOB_UNKNOWN", f"{found.name} has no blob "
                                f"{found.reference}")
        try:
            size = os.fstat(handle.fileno()).st_size
            traffic.status = 200
            await client.write(conn.send(h11.Response(status_code=200, headers=[
                API_VERSION, (b"content-type", b"application/octet-stream"),
                (b"content-length", str(size).encode("ascii")),
                (b"docker-content-digest", found.reference.encode("ascii"))])) or b"")
            if not head:
                while chunk := handle.read(CHUNK):
                    traffic.down += len(chunk)
                    await client.write(conn.send(h11.Data(data=chunk)) or b"")
            await client.write(conn.send(h11.EndOfMessage()) or b"")
            await flush(client)
        finally:
            handle.close()

    async def _put_manifest(self, conn: h11.Connection, client: Stream,
                            request: h11.Request, found: Route, traffic: Traffic) -> None:
        body = await self._read_small(conn, client, MAX_MANIFEST_BYTES, traffic)
        media_type = _header(request, b"content-type").split(";", 1)[0].strip().lower()
        blobs, children = manifest_references(media_type, body)
        store, name = self.store, found.name
        for digest in blobs:
            if not store.linked(name, digest):
                raise RegistryError(400, "MANIFEST_BLOB_UNKNOWN", f"blob {digest} is not in "
                                    f"{name}; push it first")
        for digest in children:
            if store.manifest(name, digest) is None:
                raise RegistryError(400, "MANIFEST_UNKNOWN", f"manifest {digest} is not in "
                                    f"{name}; push it first")
        store.room(len(body))
        digest = store.put_manifest(name, found.reference, media_type, body)
        await self._send(conn, client, 201, [
            (b"location", f"/v2/{name}/manifests/{digest}".encode("ascii")),
            (b"docker-content-digest", digest.encode("ascii"))], b"", traffic)

    async def _start_upload(self, conn: h11.Connection, client: Stream, found: Route,
                            query: dict[str, list[str]], traffic: Traffic) -> None:
        store, name = self.store, found.name
        mount, source = _one(query, "mount"), _one(query, "from")
        if mount is not None and source is not None and DIGEST_PATTERN.fullmatch(mount) \
                and valid_name(source) and in_namespace(source) and store.linked(source, mount):
            await self._discard(conn, client)
            store.link(name, mount)
            await self._created_blob(conn, client, name, mount, traffic)
            return
        upload = self._new_upload(name)
        digest = _one(query, "digest")
        try:
            await self._receive(conn, client, upload, traffic)
            if digest is not None:
                await self._finish(conn, client, upload, digest, traffic)
                return
        except BaseException:
            self._drop(upload)
            raise
        await self._accepted(conn, client, upload, traffic)

    async def _upload(self, conn: h11.Connection, client: Stream, request: h11.Request,
                      found: Route, query: dict[str, list[str]], traffic: Traffic,
                      method: str) -> None:
        upload = self.uploads.get(found.reference)
        if upload is None or upload.name != found.name:
            raise RegistryError(404, "BLOB_UPLOAD_UNKNOWN", "no such upload")
        if method == "GET":
            await self._discard(conn, client)
            await self._send(conn, client, 204, _progress(upload, found.reference), b"",
                             traffic)
        elif method == "DELETE":
            await self._discard(conn, client)
            self._drop(upload)
            await self._send(conn, client, 204, [], b"", traffic)
        else:
            start = _header(request, b"content-range").split("-", 1)[0].strip()
            if start and start.isdigit() and int(start) != upload.size:
                raise RegistryError(416, "BLOB_UPLOAD_INVALID", f"the upload has "
                                    f"{upload.size} bytes; a chunk must start there")
            try:
                await self._receive(conn, client, upload, traffic)
            except BaseException:
                self._drop(upload)
                raise
            if method == "PATCH":
                await self._accepted(conn, client, upload, traffic)
                return
            digest = _one(query, "digest")
            if digest is None:
                raise RegistryError(400, "DIGEST_INVALID", "finish an upload with ?digest=")
            await self._finish(conn, client, upload, digest, traffic)

    # -- uploads -------------------------------------------------------------------------

    def _new_upload(self, name: str) -> Upload:
        if len(self.uploads) >= MAX_OPEN_UPLOADS:
            raise RegistryError(429, "TOOMANYREQUESTS", f"at most {MAX_OPEN_UPLOADS} uploads "
                                "may be open at once")
        if self._upload_dir is None:
            self.store.ensure()
            self._upload_dir = self.store.upload_dir(self.ctx.config.run_id)
        upload_id = secrets.token_hex(16)
        path = self._upload_dir / upload_id
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600))
        upload = Upload(name, path)
        self.uploads[upload_id] = upload
        return upload

    def _drop(self, upload: Upload) -> None:
        for key, value in list(self.uploads.items()):
            if value is upload:
                del self.uploads[key]
        upload.path.unlink(missing_ok=True)

    async def _receive(self, conn: h11.Connection, client: Stream, upload: Upload,
                       traffic: Traffic) -> None:
        """Append the request body to the upload, within the store's bound and the disk's."""
        budget = self._budget()
        idle = self.ctx.limits.idle_timeout
        fd = os.open(upload.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            while True:
                event = await next_event(conn, client, idle)
                if isinstance(event, h11.EndOfMessage):
                    return
                if not isinstance(event, h11.Data):
                    raise ConnectionError("the client went away during the upload")
                data = bytes(event.data)
                budget -= len(data)
                if budget < 0:
                    raise StoreFull("the kit registry is full (its bound, or the state "
                                    "home's disk)")
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                except OSError as error:
                    raise StoreFull(f"cannot write the upload: {error.strerror}") from None
                upload.hasher.update(data)
                upload.size += len(data)
                traffic.up += len(data)
        finally:
            os.close(fd)

    def _budget(self) -> int:
        store = self.store
        room = store.max_bytes - store.used_bytes()
        with contextlib.suppress(OSError):
            room = min(room, shutil.disk_usage(store.root).free - store.min_free)
        if room <= 0:
            raise StoreFull("the kit registry is full (its bound, or the state home's disk)")
        return room

    async def _finish(self, conn: h11.Connection, client: Stream, upload: Upload, digest: str,
                      traffic: Traffic) -> None:
        if DIGEST_PATTERN.fullmatch(digest) is None:
            self._drop(upload)
            raise RegistryError(400, "DIGEST_INVALID", "a blob is named by its sha256 digest")
        actual = "sha256:" + upload.hasher.hexdigest()
        if actual != digest:
            self._drop(upload)
            raise RegistryError(400, "DIGEST_INVALID", f"the upload's digest is {actual}, "
                                f"not {digest}")
        for key, value in list(self.uploads.items()):
            if value is upload:
                del self.uploads[key]
        self.store.commit_blob(upload.name, upload.path, digest)
        await self._created_blob(conn, client, upload.name, digest, traffic)

    async def _created_blob(self, conn: h11.Connection, client: Stream, name: str,
                            digest: str, traffic: Traffic) -> None:
        await self._send(conn, client, 201, [
            (b"location", f"/v2/{name}/blobs/{digest}".encode("ascii")),
            (b"docker-content-digest", digest.encode("ascii"))], b"", traffic)

    async def _accepted(self, conn: h11.Connection, client: Stream, upload: Upload,
                        traffic: Traffic) -> None:
        upload_id = next(k for k, v in self.uploads.items() if v is upload)
        await self._send(conn, client, 202, _progress(upload, upload_id), b"", traffic)

    # -- wire ----------------------------------------------------------------------------

    async def _read_small(self, conn: h11.Connection, client: Stream, limit: int,
                          traffic: Traffic) -> bytes:
        body = bytearray()
        idle = self.ctx.limits.idle_timeout
        while True:
            event = await next_event(conn, client, idle)
            if isinstance(event, h11.EndOfMessage):
                return bytes(body)
            if not isinstance(event, h11.Data):
                raise ConnectionError("the client went away during the request body")
            body += event.data
            traffic.up += len(event.data)
            if len(body) > limit:
                raise RegistryError(413, "SIZE_INVALID", f"a manifest is at most {limit} bytes")

    async def _discard(self, conn: h11.Connection, client: Stream) -> None:
        """A body on a request that takes none: refused unread, the connection then closes."""
        event = await next_event(conn, client, self.ctx.limits.idle_timeout)
        if isinstance(event, h11.Data) and event.data:
            raise RegistryError(400, "UNSUPPORTED", "this request takes no body")
        if isinstance(event, h11.Data):
            await self._discard(conn, client)
        elif not isinstance(event, h11.EndOfMessage):
            raise ConnectionError("the client went away")

    async def _json(self, conn: h11.Connection, client: Stream, status: int, value: Any,
                    traffic: Traffic, *, head: bool = False) -> None:
        await self._send(conn, client, status, [JSON], json.dumps(value).encode("utf-8"),
                         traffic, head=head)

    async def _error(self, conn: h11.Connection, client: Stream, error: RegistryError,
                     traffic: Traffic) -> None:
        if conn.our_state is not h11.SEND_RESPONSE:
            raise ConnectionError("the answer had begun")
        closing = conn.their_state is not h11.DONE  # its body unread: this connection ends
        await self._send(conn, client, error.status,
                         [JSON, *([(b"connection", b"close")] if closing else [])],
                         error.body(), traffic)

    async def _send(self, conn: h11.Connection, client: Stream, status: int,
                    headers: list[tuple[bytes, bytes]], body: bytes, traffic: Traffic, *,
                    head: bool = False) -> None:
        traffic.status = status
        length = [] if status == 204 else [(b"content-length", str(len(body)).encode("ascii"))]
        await client.write(conn.send(h11.Response(status_code=status, headers=[
            API_VERSION, *headers, *length])) or b"")
        if body and not head and status != 204:
            traffic.down += len(body)
            await client.write(conn.send(h11.Data(data=body)) or b"")
        await client.write(conn.send(h11.EndOfMessage()) or b"")
        await flush(client)


def _progress(upload: Upload, upload_id: str) -> list[tuple[bytes, bytes]]:
    end = max(upload.size - 1, 0)
    return [(b"location", f"/v2/{upload.name}/blobs/uploads/{upload_id}".encode("ascii")),
            (b"range", f"0-{end}".encode("ascii")),
            (b"docker-upload-uuid", upload_id.encode("ascii"))]


def _header(request: h11.Request, name: bytes) -> str:
    for key, value in request.headers:
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


def _one(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values and len(values) == 1 else None


__all__ = ["KitRegistry"]
