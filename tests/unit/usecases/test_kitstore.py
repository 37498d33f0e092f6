"""The kit store: what a repository sees, and what removing a tag takes with it."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from sbx.domain.egress.kitregistry import OCI_MANIFEST
from sbx.usecases.kitstore import PUSH_GRACE_S, STALE_UPLOAD_S, KitStore


def _blob(store: KitStore, name: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    staged = store.upload_dir("run") / "staged"
    staged.write_bytes(data)
    store.commit_blob(name, staged, digest)
    return digest


def _image(store: KitStore, name: str, tag: str, layer: bytes) -> str:
    config = _blob(store, name, b"{}")
    digest = _blob(store, name, layer)
    manifest = json.dumps({"mediaType": OCI_MANIFEST, "config": {"digest": config},
                           "layers": [{"digest": digest}]}).encode()
    return store.put_manifest(name, tag, OCI_MANIFEST, manifest)


def _age(store: KitStore) -> None:
    old = time.time() - PUSH_GRACE_S - 10
    for path in (store.root / "blobs" / "sha256").iterdir():
        os.utime(path, (old, old))


def test_a_repository_sees_only_what_was_pushed_to_it(tmp_path: Path) -> None:
    store = KitStore(tmp_path / "reg")
    store.ensure()
    layer = _image(store, "kits/a", "v1", b"layer")
    assert store.manifest("kits/a", "v1") is not None
    assert store.manifest("kits/b", "v1") is None
    digest = "sha256:" + hashlib.sha256(b"layer").hexdigest()
    assert store.blob_path("kits/a", digest) is not None
    assert store.blob_path("kits/b", digest) is None
    assert store.repositories() == ["kits/a"] and store.tags("kits/a") == ["v1"]
    info = store.tag_info("kits/a", "v1")
    assert info is not None and info.digest == layer and info.size > len(b"layer")


def test_a_manifest_changed_on_disk_is_not_served(tmp_path: Path) -> None:
    store = KitStore(tmp_path / "reg")
    store.ensure()
    digest = _image(store, "kits/a", "v1", b"layer")
    (store.root / "blobs" / "sha256" / digest.split(":")[1]).write_bytes(b"{}")
    assert store.manifest("kits/a", "v1") is None


def test_removing_a_tag_keeps_what_another_tag_uses(tmp_path: Path) -> None:
    store = KitStore(tmp_path / "reg")
    store.ensure()
    _image(store, "kits/a", "v1", b"shared")
    _image(store, "kits/b", "v1", b"shared")
    _image(store, "kits/a", "v2", b"only a")
    _age(store)
    assert store.remove("kits/a", "v2") == ["kits/a:v2"]
    blobs = {p.name for p in (store.root / "blobs" / "sha256").iterdir()}
    assert hashlib.sha256(b"only a").hexdigest() not in blobs
    assert hashlib.sha256(b"shared").hexdigest() in blobs
    assert store.remove("kits/a", None) == ["kits/a"]
    assert store.repositories() == ["kits/b"] and store.manifest("kits/b", "v1") is not None
    assert store.remove("kits/a", "v1") == [] and store.remove("kits/nope", None) == []


def test_a_young_unreferenced_blob_survives_a_removal(tmp_path: Path) -> None:
    # a push in progress: its blobs are up, its manifest is not yet
    store = KitStore(tmp_path / "reg")
    store.ensure()
    _image(store, "kits/a", "v1", b"old")
    _age(store)
    pending = _blob(store, "kits/b", b"pending layer")
    store.remove("kits/a", None)
    assert store.blob_path("kits/b", pending) is not None
    assert not any((store.root / "blobs" / "sha256").glob(hashlib.sha256(b"old").hexdigest()))


def test_an_upload_idle_for_a_day_goes_and_a_live_one_stays(tmp_path: Path) -> None:
    store = KitStore(tmp_path / "kit-registry")
    dead = store.upload_dir("killed-run")
    (dead / "part").write_bytes(b"x" * 10)
    live = store.upload_dir("live-run")
    (live / "part").write_bytes(b"y")
    old = time.time() - STALE_UPLOAD_S - 60
    for path in (dead / "part", dead, live):
        os.utime(path, (old, old))  # live's file was written just now
    store.upload_dir("next-run")
    assert not dead.exists()
    assert (live / "part").read_bytes() == b"y"
