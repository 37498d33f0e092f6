"""kit-registry@1 at the proxy: the registry is the proxy's own answer to its announced name,
over the state home's kit store, scoped to ``kits/``; without the grant the name is refused at
the boundary and nothing is dialled (the upstream proxy, the test internet's only way out, sees
no request for it). No Docker: the proxy as ``sbx run`` starts it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx.domain.egress.kitregistry import HOST, OCI_MANIFEST
from sbx.domain.egress.proxyconfig import ProxyConfig, ProxyLimits
from sbx.domain.kits.compose import Network, NetworkPhase, Rule
from sbx.usecases.kitstore import KitStore
from tests.support.origin import Internet, ProxyProcess, Response

BASE = f"http://{HOST}"


def everything() -> Network:
    allow = (Rule("*", (), (), "allow", "./open", 0, "runtime"),)
    return Network(2, NetworkPhase((), ()), NetworkPhase(allow, ()), False, ())


def start(directory: Path, *, granted: bool, internet: Internet | None = None,
          limits: ProxyLimits | None = None) -> ProxyProcess:
    home = directory / "state"
    config = ProxyConfig(
        run_id=f"run-{directory.name}", state_home=home, audit_log=home / "audit.jsonl",
        network=everything(), upstream_proxy=internet.upstream.url if internet else None,
        upstream_ca_file=internet.pki.ca_file if internet else None,
        request_log=directory / "requests.jsonl", limits=limits or ProxyLimits(),
        kit_registry=home / "kit-registry" if granted else None)
    return ProxyProcess(config, directory / "proxy.json")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    proxy = start(tmp_path_factory.mktemp("kitreg"), granted=True)
    yield proxy
    proxy.stop()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def push_blob_in_chunks(proxy: ProxyProcess, name: str, data: bytes) -> Response:
    client = proxy.client()
    started = client.http("POST", f"{BASE}/v2/{name}/blobs/uploads/")
    assert started.status == 202, started.text
    location = started.header("Location")
    assert location is not None and location.startswith(f"/v2/{name}/blobs/uploads/")
    half = len(data) // 2
    patched = client.http("PATCH", BASE + location, body=data[:half],
                          headers=[("Content-Type", "application/octet-stream")])
    assert patched.status == 202 and patched.header("Range") == f"0-{half - 1}"
    return client.http("PUT", f"{BASE}{location}?digest={digest_of(data)}", body=data[half:])


def push_image(proxy: ProxyProcess, name: str, tag: str, layer: bytes) -> tuple[str, bytes]:
    client = proxy.client()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]}}).encode()
    done = client.http("POST", f"{BASE}/v2/{name}/blobs/uploads/?digest={digest_of(config)}",
                       body=config)
    assert done.status == 201, done.text
    assert push_blob_in_chunks(proxy, name, layer).status == 201
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest_of(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": digest_of(layer), "size": len(layer)}]}).encode()
    put = client.http("PUT", f"{BASE}/v2/{name}/manifests/{tag}", body=manifest,
                      headers=[("Content-Type", OCI_MANIFEST)])
    assert put.status == 201, put.text
    assert put.header("Docker-Content-Digest") == digest_of(manifest)
    return digest_of(manifest), manifest


def test_a_pushed_kit_image_reads_back_byte_for_byte(registry: ProxyProcess) -> None:
    layer = bytes(range(256)) * 4096  # 1 MiB, every byte value
    digest, manifest = push_image(registry, "kits/builder/hello", "1.0", layer)
    client = registry.client()
    by_tag = client.http("GET", f"{BASE}/v2/kits/builder/hello/manifests/1.0")
    assert by_tag.status == 200 and by_tag.body == manifest
    assert by_tag.header("Content-Type") == OCI_MANIFEST
    assert by_tag.header("Docker-Content-Digest") == digest
    blob = client.http("GET", f"{BASE}/v2/kits/builder/hello/blobs/{digest_of(layer)}")
    assert blob.status == 200 and blob.body == layer
    tags = client.http("GET", f"{BASE}/v2/kits/builder/hello/tags/list").json()
    assert tags == {"name": "kits/builder/hello", "tags": ["1.0"]}
    assert "kits/builder/hello" in client.http("GET", f"{BASE}/v2/_catalog").json()[
        "repositories"]
    # the store the CLI reads holds it too, and nothing is left of the uploads
    store = KitStore(Path(registry.config.kit_registry))
    info = store.tag_info("kits/builder/hello", "1.0")
    assert info is not None and info.digest == digest and info.size > len(layer)
    assert not any((store.root / "uploads").rglob("*")) or all(
        p.is_dir() for p in (store.root / "uploads").rglob("*"))
    # the request log has each answer, marked as the registry's
    records = [json.loads(line) for line in
               Path(registry.config.request_log).read_text().splitlines()]
    mine = [r for r in records if r.get("host") == HOST]
    assert mine and all(r["code"] == "kit_registry" for r in mine)


def test_https_through_the_proxy_reaches_the_same_registry(registry: ProxyProcess) -> None:
    [ping, catalog] = registry.client().https(HOST, [("GET", "/v2/"), ("GET", "/v2/_catalog")])
    assert ping.status == 200 and ping.header("Docker-Distribution-API-Version") == "registry/2.0"
    assert catalog.status == 200 and isinstance(catalog.json()["repositories"], list)


def test_only_kit_content_is_served_or_written(registry: ProxyProcess) -> None:
    client = registry.client()
    for method, path in (("GET", "/v2/library/alpine/manifests/latest"),
                         ("POST", "/v2/library/alpine/blobs/uploads/"),
                         ("GET", "/v2/secret/blobs/sha256:" + "0" * 64)):
        answer = client.http(method, BASE + path)
        assert answer.status == 403, (method, path, answer.text)
        assert answer.json()["errors"][0]["code"] == "DENIED"
    layer = b"another kit's layer"
    push_image(registry, "kits/one", "v1", layer)
    # a repository sees only its own blobs, even in the kits/ namespace
    other = client.http("GET", f"{BASE}/v2/kits/two/blobs/{digest_of(layer)}")
    assert other.status == 404 and other.json()["errors"][0]["code"] == "BLOB_UNKNOWN"
    for bad in ("/v2/kits/../etc/manifests/x", "/v2/kits/a%2F..%2Fb/tags/list",
                "/v2/kits/UPPER/tags/list", "/v2/kits/x/manifests/..", "/v3/"):
        answer = client.http("GET", BASE + bad)
        assert answer.status in (400, 404), (bad, answer.status)


def test_a_wrong_digest_or_a_dangling_manifest_is_refused(registry: ProxyProcess) -> None:
    client = registry.client()
    wrong = client.http("POST", f"{BASE}/v2/kits/x/blobs/uploads/?digest={digest_of(b'y')}",
                        body=b"not y")
    assert wrong.status == 400 and wrong.json()["errors"][0]["code"] == "DIGEST_INVALID"
    store = KitStore(Path(registry.config.kit_registry))
    assert not (store.root / "blobs" / "sha256" / digest_of(b"not y").split(":")[1]).exists()
    dangling = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"digest": digest_of(b"never pushed"), "size": 1},
                           "layers": []}).encode()
    put = client.http("PUT", f"{BASE}/v2/kits/x/manifests/v1", body=dangling,
                      headers=[("Content-Type", OCI_MANIFEST)])
    assert put.status == 400 and put.json()["errors"][0]["code"] == "MANIFEST_BLOB_UNKNOWN"
    assert client.http("GET", f"{BASE}/v2/kits/x/manifests/v1").status == 404


def test_a_full_store_refuses_the_push_and_keeps_nothing(tmp_path: Path) -> None:
    proxy = start(tmp_path, granted=True, limits=ProxyLimits(kit_registry_bytes=64 * 1024))
    try:
        client = proxy.client()
        started = client.http("POST", f"{BASE}/v2/kits/big/blobs/uploads/")
        assert started.status == 202
        location = started.header("Location")
        assert location is not None
        full = client.http("PATCH", BASE + location, body=b"x" * (256 * 1024))
        assert full.status == 507 and "full" in full.json()["errors"][0]["message"]
        store = Path(proxy.config.kit_registry)
        assert not any(p.is_file() for p in (store / "uploads").rglob("*"))
        assert not any((store / "blobs" / "sha256").iterdir())
        # the upload is gone, and the registry still answers
        assert client.http("GET", BASE + location).status == 404
        assert client.http("GET", f"{BASE}/v2/").status == 200
    finally:
        assert proxy.stop() == 0


def test_without_the_grant_the_name_is_refused_at_the_boundary(tmp_path: Path,
                                                               internet: Internet) -> None:
    proxy = start(tmp_path, granted=False, internet=internet)
    try:
        plain = proxy.client().http("GET", f"{BASE}/v2/")
        [tunnel] = proxy.client().https(HOST, [("GET", "/v2/")])
        for answer in (plain, tunnel):
            assert answer.status == 403, answer.text
            assert answer.header("X-Sbx-Reason") == "egress_denied"
            assert answer.header("X-Sbx-Rule") == "kit-registry-not-granted"
            assert "kit-registry@1" in answer.text
    finally:
        proxy.stop()
    # refused by the proxy, not by a registry: nothing went out for the name
    assert not any(HOST in target for target in internet.upstream.targets())
    assert not (tmp_path / "state" / "kit-registry").exists()
