"""Which requests the kit registry answers, and the namespace it keeps to."""

from __future__ import annotations

import json

import pytest

from sbx.domain.egress.kitregistry import (
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryError,
    Route,
    manifest_references,
    route,
)

D = "sha256:" + "a" * 64
E = "sha256:" + "b" * 64


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/v2/", Route("ping")),
    ("HEAD", "/v2", Route("ping")),
    ("GET", "/v2/_catalog", Route("catalog")),
    ("GET", "/v2/kits/a/tags/list", Route("tags", "kits/a")),
    ("PUT", "/v2/kits/a/b/manifests/v1.0", Route("manifest", "kits/a/b", "v1.0")),
    ("GET", f"/v2/kits/a/manifests/{D}", Route("manifest", "kits/a", D)),
    ("HEAD", f"/v2/kits/a/blobs/{D}", Route("blob", "kits/a", D)),
    ("POST", "/v2/kits/a/blobs/uploads/", Route("upload_start", "kits/a")),
    ("PATCH", "/v2/kits/a/blobs/uploads/" + "0" * 32, Route("upload", "kits/a", "0" * 32)),
    # a repository may be named like the API's own words
    ("GET", "/v2/kits/manifests/manifests/latest", Route("manifest", "kits/manifests", "latest")),
])
def test_the_routes_it_answers(method: str, path: str, expected: Route) -> None:
    assert route(method, path) == expected


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/v2/library/alpine/manifests/latest", 403, "DENIED"),
    ("POST", "/v2/kitsx/blobs/uploads/", 403, "DENIED"),
    ("GET", "/v2/kits/tags/list", 403, "DENIED"),  # `kits` itself is not under kits/
    ("GET", "/v2/kits/../x/tags/list", 400, "NAME_INVALID"),
    ("GET", "/v2/kits/a%2Fb/tags/list", 400, "NAME_INVALID"),
    ("GET", "/v2/kits/_a/tags/list", 400, "NAME_INVALID"),
    ("GET", "/v2/kits/A/tags/list", 400, "NAME_INVALID"),
    ("GET", "/v2/kits/a/blobs/sha512:" + "a" * 128, 400, "DIGEST_INVALID"),
    ("GET", "/v2/kits/a/manifests/.hidden", 400, "MANIFEST_INVALID"),
    ("GET", "/v2/kits/a/blobs/uploads/../../x", 404, "NOT_FOUND"),
    ("GET", "/v2/kits/a/blobs/uploads/nothex", 404, "BLOB_UPLOAD_UNKNOWN"),
    ("DELETE", f"/v2/kits/a/manifests/{D}", 405, "UNSUPPORTED"),
    ("GET", "/v1/_ping", 404, "NOT_FOUND"),
])
def test_what_it_refuses(method: str, path: str, status: int, code: str) -> None:
    with pytest.raises(RegistryError) as caught:
        route(method, path)
    assert (caught.value.status, caught.value.code) == (status, code)
    assert json.loads(caught.value.body())["errors"][0]["code"] == code


def test_a_manifest_names_its_config_and_layers_an_index_its_children() -> None:
    image = json.dumps({"mediaType": OCI_MANIFEST, "config": {"digest": D},
                        "layers": [{"digest": E}]}).encode()
    assert manifest_references(OCI_MANIFEST, image) == ([D, E], [])
    index = json.dumps({"manifests": [{"digest": D}]}).encode()
    assert manifest_references(OCI_INDEX, index) == ([], [D])


@pytest.mark.parametrize(("media_type", "body"), [
    ("text/plain", b"{}"),
    (OCI_MANIFEST, b"not json"),
    (OCI_MANIFEST, b"[]"),
    (OCI_MANIFEST, json.dumps({"config": {"digest": "md5:x"}, "layers": []}).encode()),
    (OCI_MANIFEST, json.dumps({"config": {"digest": D}}).encode()),
    (OCI_MANIFEST, json.dumps({"mediaType": OCI_INDEX, "manifests": []}).encode()),
])
def test_a_manifest_it_will_not_store(media_type: str, body: bytes) -> None:
    with pytest.raises(RegistryError) as caught:
        manifest_references(media_type, body)
    assert caught.value.status == 400
