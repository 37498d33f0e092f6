"""The registry HTTP API v2, for what the docker SDK does not expose: manifests and their
annotations (KIT-SPEC-V3 §6.3). Layers are never fetched here; the engine pulls them by digest.

Plain HTTP for loopback registries (``127.0.0.0/8``, ``localhost``, which the engine also treats
as insecure), HTTPS otherwise. Authentication: anonymous first; on a 401 the user's Docker
credentials (:mod:`sbx.seams.registry_auth`, resolved only then, from the injected environment)
answer
a ``Basic`` challenge directly, or a ``Bearer`` one through a token from the realm the registry
named (https only, unless the realm is on loopback), and the request is retried once.

References are read as Docker reads them (:func:`normalize_reference`): a first component that
is not a host (no ``.`` or ``:``, not ``localhost``) means Docker Hub, so ``docker/sbx-kit-x:1``
is ``docker.io/docker/sbx-kit-x:1`` and ``ubuntu`` is ``docker.io/library/ubuntu:latest``;
Docker Hub's API is ``registry-1.docker.io``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams import registry_http
from sbx.seams.registry_auth import Credentials, resolve
from sbx.seams.registry_http import Answer, TransportError

DESCRIPTOR_ANNOTATION: Final = "vnd.docker.sandbox.kit.descriptor"
SCHEMA_VERSION_ANNOTATION: Final = "vnd.docker.sandbox.kit.schema-version"
CAPABILITIES_ANNOTATION: Final = "vnd.docker.sandbox.kit.capabilities"

DOCKER_MANIFEST: Final = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST: Final = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX: Final = "application/vnd.oci.image.index.v1+json"
INDEX_TYPES: Final = frozenset({DOCKER_LIST, OCI_INDEX})
ACCEPT: Final = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
TIMEOUT_S: Final = 30.0
MAX_MANIFEST_BYTES: Final = 4 * 1024 * 1024

_REFERENCE = re.compile(
    r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?)/"
    r"(?P<repo>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")
DOCKER_HUB: Final = "docker.io"
DOCKER_HUB_API: Final = "registry-1.docker.io"  # where Docker Hub's registry API answers
_HUB_ALIASES: Final = frozenset({"docker.io", "index.docker.io"})
DEFAULT_TAG: Final = "latest"


@dataclass(frozen=True)
class Reference:
    host: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        """``host/repo`` (what ``repo@digest`` pulls start from)."""
        return f"{self.host}/{self.repository}"

    @property
    def canonical(self) -> str:
        """The normalised reference (``docker.io/library/ubuntu:latest``): what the lock keys
        kits by, so every spelling of one reference finds the same entry."""
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.name}{tag}{digest}"

    @property
    def target(self) -> str:
        """The manifest to GET: the digest when given, else the tag (default ``latest``)."""
        return self.digest or self.tag or "latest"

    def pinned(self, digest: str) -> str:
        return f"{self.name}@{digest}"

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.host == DOCKER_HUB else self.host

    @property
    def base_url(self) -> str:
        loopback = _loopback(self.host.rsplit(":", 1)[0])
        return f"{'http' if loopback else 'https'}://{self.api_host}/v2/{self.repository}"


def _loopback(hostname: str) -> bool:
    return hostname in ("localhost", "[::1]", "::1") or hostname.startswith("127.")


def normalize_reference(text: str) -> str:
    """``text`` as Docker normalises a reference (``reference.ParseNormalizedNamed``): a
    first component that is no host (no ``.`` or ``:``, not ``localhost``, all lowercase) means
    Docker Hub, whose single-name repositories live under ``library/``; ``index.docker.io`` is
    ``docker.io``; without a tag or a digest the tag is ``latest``. Not validated here."""
    rest, at, digest = text.partition("@")
    slash = rest.find("/")
    first = rest[:slash] if slash >= 0 else ""
    if slash < 0 or ("." not in first and ":" not in first and first != "localhost"
                     and first == first.lower()):
        host, path = DOCKER_HUB, rest
    else:
        host, path = first, rest[slash + 1:]
    if host in _HUB_ALIASES:
        host = DOCKER_HUB
        if "/" not in path.rsplit(":", 1)[0]:
            path = f"library/{path}"
    last = path.rsplit("/", 1)[-1]
    if ":" not in last and not at:
        path = f"{path}:{DEFAULT_TAG}"
    return f"{host}/{path}{at}{digest}"


def parse_reference(text: str) -> Reference:
    """A registry reference as users write them (``ubuntu``, ``docker/kit:1``,
    ``host[:port]/repo[:tag][@sha256:…]``), normalised as Docker does."""
    match = _REFERENCE.match(normalize_reference(text)) if text and text.strip() == text \
        else None
    if match is None:
        raise SbxError(
            Reason.INVALID_ARGUMENT,
            f"{text!r} is not a registry reference of the form [host[:port]/]repo[:tag][@digest]",
            hint="e.g. 127.0.0.1:5000/kits/shell:1, or docker/sbx-kit-x:1 for Docker Hub.")
    return Reference(match["host"], match["repo"], match["tag"], match["digest"])


def canonical_reference(text: str) -> str:
    """The normalised form of a registry reference, or ``text`` itself when it is none (a
    local path, say)."""
    try:
        return parse_reference(text).canonical
    except SbxError:
        return text


@dataclass(frozen=True)
class Manifest:
    media_type: str
    body: bytes
    digest: str

    @property
    def data(self) -> dict[str, Any]:
        parsed = json.loads(self.body)
        if not isinstance(parsed, dict):
            raise ValueError("a manifest is a JSON object")
        return parsed


@dataclass(frozen=True)
class KitManifest:
    """What one preflight found: the digest to pin and the kit annotations (if any)."""

    reference: Reference
    digest: str  # the top-level digest (the index digest for a multi-platform image)
    media_type: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def descriptor_text(self) -> str | None:
        return self.annotations.get(DESCRIPTOR_ANNOTATION)


def _unreachable(ref: Reference, detail: str) -> SbxError:
    return SbxError(Reason.REGISTRY_UNREACHABLE,
                    f"registry {ref.host} is unreachable: {detail}",
                    hint=f"Check that a registry listens on {ref.host}, then retry; nothing was "
                         "pulled and the lock is unchanged.")


_CHALLENGE_PARAM = re.compile(r'([A-Za-z_]+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="…",service="…",scope="…"`` → (``bearer``, params)."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m[1].lower(): m[2] if m[2] is not None else m[3]
              for m in _CHALLENGE_PARAM.finditer(rest)}
    return scheme.lower(), params


def _request(ref: Reference, method: str, url: str, env: Mapping[str, str] | None,
             **kwargs: Any) -> Answer:
    """One request; on a 401 answer the challenge with the user's credentials (resolved only
    now) and retry exactly once. Transport failures become ``registry_unreachable``."""
    headers: dict[str, str] = dict(kwargs.pop("headers", {}))
    try:
        response = _send(method, url, env, headers=headers, **kwargs)
        if response.status_code != 401:
            return response
        credentials = resolve(ref.host, env) if env is not None else None
        authorization = _authorization(ref, response.header("WWW-Authenticate"), credentials,
                                       env)
        if authorization is None:
            return response
        # requests drops the Authorization header on a redirect to another host.
        return _send(method, url, env, headers={**headers, "Authorization": authorization},
                     **kwargs)
    except TransportError as exc:
        raise _unreachable(ref, exc.name) from None


def _send(method: str, url: str, env: Mapping[str, str] | None, *, headers: Mapping[str, str],
          params: Mapping[str, str] | None = None, data: Any = None,
          allow_redirects: bool = True) -> Answer:
    """One exchange: a bodiless GET through the small client (:mod:`sbx.seams.registry_http`)
    when it gives what requests would, else through requests."""
    if method == "GET" and data is None and env is not None and registry_http.usable(env):
        answer = registry_http.get(url, headers, timeout=TIMEOUT_S, env=env, params=params)
        if answer is not None:
            return answer
    import requests

    try:
        response = requests.request(method, url, headers=dict(headers), params=params,
                                    data=data, timeout=TIMEOUT_S,
                                    allow_redirects=allow_redirects)
    except requests.RequestException as exc:
        raise TransportError(type(exc).__name__) from None
    return Answer(response.status_code, {k.lower(): v for k, v in response.headers.items()},
                  response.content)


def _basic(credentials: Credentials) -> str:
    pair = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def _authorization(ref: Reference, challenge: str, credentials: Credentials | None,
                   env: Mapping[str, str] | None = None) -> str | None:
    scheme, params = parse_challenge(challenge)
    if scheme == "basic":
        if credentials is None or credentials.identity_token:
            return None
        return _basic(credentials)
    if scheme != "bearer" or not params.get("realm"):
        return None
    token = fetch_token(ref, params, credentials, env=env)
    return f"Bearer {token}"


def fetch_token(ref: Reference, params: Mapping[str, str], credentials: Credentials | None,
                *, env: Mapping[str, str] | None = None) -> str:
    """A bearer token from the challenge's realm (the only URL credentials go to); https
    unless the realm is on loopback."""
    realm = params["realm"]
    parts = urlsplit(realm)
    if parts.scheme not in ("https", "http") or not parts.hostname or (
            parts.scheme == "http" and not _loopback(parts.hostname)):
        raise SbxError(Reason.REGISTRY_UNREACHABLE,
                       f"registry {ref.host} named a token service that is not https "
                       f"({parts.scheme or 'no scheme'}://{parts.hostname or ''}); refusing "
                       "to send credentials there")
    query = {k: params[k] for k in ("service", "scope") if params.get(k)}
    headers: dict[str, str] = {}
    method = "GET"
    data: dict[str, str] | None = None
    if credentials is not None and credentials.identity_token:
        # The OAuth2 refresh-token grant the docker CLI uses for identity tokens.
        method = "POST"
        data = {"grant_type": "refresh_token", "refresh_token": credentials.identity_token,
                "service": params.get("service", ""), "scope": params.get("scope", ""),
                "client_id": "sbx"}
    elif credentials is not None:
        headers["Authorization"] = _basic(credentials)
    try:
        response = _send(method, realm, env, params=query if data is None else None,
                         data=data, headers=headers, allow_redirects=False)
    except TransportError as exc:
        raise _unreachable(ref, f"token service: {exc.name}") from None
    if response.status_code != 200:
        raise SbxError(Reason.REGISTRY_UNREACHABLE,
                       f"the token service of registry {ref.host} refused "
                       f"{'the credentials' if credentials else 'anonymous access'} "
                       f"(HTTP {response.status_code})",
                       hint="Check `docker login` for that registry, then retry.")
    try:
        answer = json.loads(response.content)
        token = answer.get("token") or answer.get("access_token")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or not token:
        raise SbxError(Reason.REGISTRY_UNREACHABLE,
                       f"the token service of registry {ref.host} answered no token")
    return token


def get_manifest(ref: Reference, target: str | None = None, *,
                 env: Mapping[str, str] | None = None) -> Manifest:
    url = f"{ref.base_url}/manifests/{target or ref.target}"
    response = _request(ref, "GET", url, env, headers={"Accept": ACCEPT})
    if response.status_code == 404:
        raise SbxError(Reason.IMAGE_MISSING,
                       f"{ref.name}:{target or ref.target} is not in the registry",
                       hint="Check the repository and tag (`sbx kit push` publishes a kit).")
    if response.status_code >= 500:
        raise _unreachable(ref, f"HTTP {response.status_code}")
    if response.status_code != 200:
        raise SbxError(Reason.IMAGE_MISSING,
                       f"the registry refused {ref.name}:{target or ref.target} "
                       f"(HTTP {response.status_code})")
    body = response.content[:MAX_MANIFEST_BYTES + 1]
    if len(body) > MAX_MANIFEST_BYTES:
        raise SbxError(Reason.INVALID_KIT, f"the manifest of {ref.name} is too large")
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    media_type = response.header("Content-Type").split(";")[0].strip()
    if not media_type:
        try:
            media_type = str(json.loads(body).get("mediaType", ""))
        except (ValueError, AttributeError):
            media_type = ""
    return Manifest(media_type, body, digest)


def put_manifest(ref: Reference, media_type: str, body: bytes, *,
                 env: Mapping[str, str] | None = None) -> str:
    """PUT a manifest under the reference's tag; return its digest."""
    url = f"{ref.base_url}/manifests/{ref.tag or 'latest'}"
    response = _request(ref, "PUT", url, env, data=body, headers={"Content-Type": media_type})
    if response.status_code >= 500:
        raise _unreachable(ref, f"HTTP {response.status_code}")
    if response.status_code not in (200, 201, 202):
        detail = " ".join(response.text.split())[:300]
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"the registry refused the manifest for {ref.name} "
                       f"(HTTP {response.status_code}): {detail}")
    return "sha256:" + hashlib.sha256(body).hexdigest()


def annotate(ref: Reference, annotations: Mapping[str, str], *,
             env: Mapping[str, str] | None = None) -> str:
    """Re-put the image manifest under ``ref`` with ``annotations`` added; return the new
    digest (the manifest bytes change, so the digest does)."""
    manifest = get_manifest(ref, env=env)
    if manifest.media_type in INDEX_TYPES:
        raise SbxError(Reason.INVALID_ARGUMENT,
                       f"{ref.name}:{ref.target} is an index; sbx kit push annotates single "
                       "image manifests only")
    data = manifest.data
    merged = dict(data.get("annotations") or {})
    merged.update(annotations)
    data["annotations"] = merged
    body = json.dumps(data, indent=3).encode("utf-8")
    return put_manifest(ref, manifest.media_type or str(data.get("mediaType", "")), body,
                        env=env)


def kit_annotations(descriptor: Mapping[str, Any]) -> dict[str, str]:
    """The published-form annotations of a descriptor (KIT-SPEC-V3 §6.1)."""
    out = {
        DESCRIPTOR_ANNOTATION: json.dumps(descriptor, separators=(",", ":"), ensure_ascii=False),
        SCHEMA_VERSION_ANNOTATION: "3",
    }
    types = sorted({str(c.get("type")) for c in _capabilities(descriptor) if c.get("type")})
    if types:
        out[CAPABILITIES_ANNOTATION] = ",".join(types)
    return out


def _capabilities(descriptor: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for entry in descriptor.get("capabilities") or []:
        if not isinstance(entry, Mapping):
            continue
        group = entry.get("group")
        if isinstance(group, Mapping):  # a group's members are what it requests
            members = group.get("capabilities")
            found.extend(m for m in members or [] if isinstance(m, Mapping))
        else:
            found.append(entry)
    return found


def fetch_kit_manifest(ref: Reference, *, os_name: str = "linux", architecture: str = "amd64",
                       env: Mapping[str, str] | None = None) -> KitManifest:
    """One manifest GET; for an index whose own annotations lack the descriptor, fall back to
    the platform manifest's annotations (KIT-SPEC-V3 §6.1)."""
    top = get_manifest(ref, env=env)
    try:
        data = top.data
    except ValueError as exc:
        raise SbxError(Reason.INVALID_KIT, f"the manifest of {ref.name} is not JSON: {exc}",
                       ) from exc
    annotations = _annotations(data)
    if top.media_type in INDEX_TYPES and DESCRIPTOR_ANNOTATION not in annotations:
        chosen = _platform(data, os_name, architecture)
        if chosen is not None:
            platform = get_manifest(ref, chosen, env=env)
            try:
                annotations = _annotations(platform.data)
            except ValueError as exc:
                raise SbxError(Reason.INVALID_KIT,
                               f"the platform manifest of {ref.name} is not JSON") from exc
    return KitManifest(ref, top.digest, top.media_type, annotations)


def _annotations(data: Mapping[str, Any]) -> dict[str, str]:
    raw = data.get("annotations")
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items() if isinstance(v, str)}


def _platform(index: Mapping[str, Any], os_name: str, architecture: str) -> str | None:
    entries = [m for m in index.get("manifests") or [] if isinstance(m, Mapping)]
    for entry in entries:
        platform = entry.get("platform") or {}
        if platform.get("os") == os_name and platform.get("architecture") == architecture:
            return str(entry.get("digest"))
    return str(entries[0].get("digest")) if entries else None


__all__ = ["CAPABILITIES_ANNOTATION", "DESCRIPTOR_ANNOTATION", "DOCKER_HUB", "DOCKER_HUB_API",
           "SCHEMA_VERSION_ANNOTATION", "KitManifest", "Manifest", "Reference", "annotate",
           "canonical_reference", "fetch_kit_manifest", "fetch_token", "get_manifest",
           "kit_annotations", "normalize_reference", "parse_challenge", "parse_reference",
           "put_manifest"]
