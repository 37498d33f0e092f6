"""The kit registry a ``kit-registry@1`` grant routes a sandbox to: its announced name, which
requests of the OCI distribution API it answers, and the namespace it is scoped to.

The proxy answers the name itself (:mod:`sbx.proxy.kitregistry`); without the grant the same
name is refused at the boundary, so no request ever reaches a registry it was not given. What it
serves is kit content only: repositories under ``kits/``, never the rest of any image store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

# The announced name and variable belong to the capability type, which plans them.
from sbx.domain.kits.captypes.kit_registry import ENV_NAME, HOST

STORE_DIR: Final = "kit-registry"  # under the state home
NAMESPACE: Final = "kits"
MAX_MANIFEST_BYTES: Final = 4 * 1024 * 1024
MAX_STORE_BYTES: Final = 8 * 1024 ** 3  # the store as a whole, every sandbox's pushes together
MIN_FREE_BYTES: Final = 512 * 1024 ** 2  # a push never takes the state home's disk below this
MAX_OPEN_UPLOADS: Final = 16  # per proxy

OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX: Final = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST: Final = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST: Final = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES: Final = frozenset({OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST})
INDEX_TYPES: Final = frozenset({OCI_INDEX, DOCKER_LIST})

_COMPONENT: Final = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
NAME_PATTERN: Final = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
TAG_PATTERN: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
DIGEST_PATTERN: Final = re.compile(r"sha256:[a-f0-9]{64}")
UPLOAD_PATTERN: Final = re.compile(r"[a-f0-9]{32}")
MAX_NAME: Final = 255

Kind = Literal["ping", "catalog", "tags", "manifest", "blob", "upload_start", "upload"]


@dataclass(frozen=True)
class Route:
    kind: Kind
    name: str = ""
    reference: str = ""  # a tag or digest (manifest), a digest (blob), an upload id (upload)


@dataclass(frozen=True)
class RegistryError(Exception):
    """A distribution-API error answer: HTTP status, its error code and message."""

    status: int
    code: str
    message: str

    def body(self) -> bytes:
        return json.dumps({"errors": [{"code": self.code, "message": self.message,
                                       "detail": None}]}).encode("utf-8")


def in_namespace(name: str) -> bool:
    return name.startswith(NAMESPACE + "/")


def valid_name(name: str) -> bool:
    return len(name) <= MAX_NAME and NAME_PATTERN.fullmatch(name) is not None


def route(method: str, path: str) -> Route:
    """The request ``method path`` as one of the answered routes; raises
    :class:`RegistryError` (404/400/403/405) for any other."""
    if "%" in path or "\\" in path:
        raise RegistryError(400, "NAME_INVALID", "percent-encoded or backslashed paths are "
                            "not part of this registry's API")
    if path in ("/v2", "/v2/"):
        return _method(Route("ping"), method, ("GET", "HEAD"))
    if not path.startswith("/v2/"):
        raise RegistryError(404, "NOT_FOUND", "this host serves only the registry API (/v2/)")
    rest = path[len("/v2/"):]
    if rest == "_catalog":
        return _method(Route("catalog"), method, ("GET",))
    parts = rest.split("/")
    for tail, kind, methods in (
            (("tags", "list"), "tags", ("GET",)),
            (("blobs", "uploads", ""), "upload_start", ("POST",)),
            (("blobs", "uploads"), "upload_start", ("POST",))):
        if len(parts) > len(tail) and tuple(parts[-len(tail):]) == tail:
            name = _name("/".join(parts[:-len(tail)]))
            return _method(Route(kind, name), method, methods)  # type: ignore[arg-type]
    if len(parts) >= 4 and parts[-3:-1] == ["blobs", "uploads"]:
        upload = parts[-1]
        if UPLOAD_PATTERN.fullmatch(upload) is None:
            raise RegistryError(404, "BLOB_UPLOAD_UNKNOWN", "no such upload")
        return _method(Route("upload", _name("/".join(parts[:-3])), upload), method,
                       ("GET", "PATCH", "PUT", "DELETE"))
    if len(parts) >= 3 and parts[-2] in ("manifests", "blobs"):
        name, reference = _name("/".join(parts[:-2])), parts[-1]
        if parts[-2] == "blobs":
            if DIGEST_PATTERN.fullmatch(reference) is None:
                raise RegistryError(400, "DIGEST_INVALID", "a blob is named by its sha256 digest")
            return _method(Route("blob", name, reference), method, ("GET", "HEAD"))
        if DIGEST_PATTERN.fullmatch(reference) is None \
                and TAG_PATTERN.fullmatch(reference) is None:
            raise RegistryError(400, "MANIFEST_INVALID", "a manifest is named by a tag or a "
                                "sha256 digest")
        return _method(Route("manifest", name, reference), method, ("GET", "HEAD", "PUT"))
    raise RegistryError(404, "NOT_FOUND", "not an endpoint of this registry")


def _name(name: str) -> str:
    if not valid_name(name):
        raise RegistryError(400, "NAME_INVALID", "not a repository name")
    if not in_namespace(name):
        raise RegistryError(403, "DENIED", f"this registry serves kit content only: repositories "
                            f"under {NAMESPACE}/ (not {name})")
    return name


def _method(found: Route, method: str, allowed: tuple[str, ...]) -> Route:
    if method not in allowed:
        raise RegistryError(405, "UNSUPPORTED", f"{method} is not answered here (only "
                            f"{', '.join(allowed)}); content is removed on the host with "
                            "`sbx kit registry rm`")
    return found


def manifest_references(media_type: str, body: bytes) -> tuple[list[str], list[str]]:
    """The blobs and the child manifests a manifest names (each must already be in the
    repository); raises :class:`RegistryError` for a manifest this registry will not store."""
    if media_type not in MANIFEST_TYPES:
        raise RegistryError(400, "MANIFEST_INVALID", f"media type {media_type!r} is not an OCI "
                            "or Docker image manifest or index")
    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise RegistryError(400, "MANIFEST_INVALID", "the manifest is not JSON") from None
    if not isinstance(data, Mapping):
        raise RegistryError(400, "MANIFEST_INVALID", "the manifest is not a JSON object")
    declared = data.get("mediaType")
    if declared is not None and declared != media_type:
        raise RegistryError(400, "MANIFEST_INVALID", f"the manifest says it is {declared!r}, "
                            f"the request says {media_type!r}")
    if media_type in INDEX_TYPES:
        return [], [_digest_of(item) for item in _entries(data, "manifests")]
    config = data.get("config")
    return [_digest_of(config), *(_digest_of(item) for item in _entries(data, "layers"))], []


def _entries(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise RegistryError(400, "MANIFEST_INVALID", f"the manifest has no {key} list")
    return value


def _digest_of(item: Any) -> str:
    digest = item.get("digest") if isinstance(item, Mapping) else None
    if not isinstance(digest, str) or DIGEST_PATTERN.fullmatch(digest) is None:
        raise RegistryError(400, "MANIFEST_INVALID", "a descriptor of the manifest has no "
                            "sha256 digest")
    return digest


__all__ = [
    "DIGEST_PATTERN", "ENV_NAME", "HOST", "INDEX_TYPES", "MANIFEST_TYPES", "MAX_MANIFEST_BYTES",
    "MAX_OPEN_UPLOADS", "MAX_STORE_BYTES", "MIN_FREE_BYTES", "NAMESPACE", "STORE_DIR",
    "TAG_PATTERN", "RegistryError", "Route", "in_namespace", "manifest_references", "route",
    "valid_name",
]
