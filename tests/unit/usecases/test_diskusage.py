"""`sbx df`'s accounting on the fake engine: only this home's objects, and as reclaimable
exactly what gc's own dry run would remove, priced from the engine's numbers."""

from __future__ import annotations

from pathlib import Path

from sbx.base import labels as label_keys
from sbx.usecases.diskusage import disk_usage
from tests.unit.usecases.test_gc import Harness, container, hex64


def test_a_home_that_never_ran_reclaims_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    usage = disk_usage(h.ctx())
    assert usage.reclaimable == [] and usage.note is not None and "never ran" in usage.note


def test_what_gc_would_remove_is_priced_and_other_homes_are_ignored(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    (h.tmp / "state" / "runs").mkdir(parents=True, exist_ok=True)
    exited = container("exited", home=h.home, run=hex64(), deadline="1")
    running = container("running", home=h.home, run=hex64(), deadline="9999999999")
    theirs = container("exited", home="f" * 64, run=hex64(), deadline="1")
    h.engine.containers = [exited, running]
    h.engine.usage = {
        "Containers": [{**exited, "SizeRw": 5000}, {**running, "SizeRw": 7},
                       {**theirs, "SizeRw": 10**9}],
        "Volumes": [{"Name": "v1", "Labels": label_keys.home_selector(h.home),
                     "UsageData": {"Size": 42}},
                    {"Name": "v2", "Labels": {}, "UsageData": {"Size": 10**9}}],
        "Images": [{"Id": "sha256:" + "1" * 64, "Labels": label_keys.home_selector(h.home),
                    "RepoTags": ["sbx-run/x:1"], "Size": 300, "SharedSize": 100,
                    "Containers": 0}],
    }
    usage = disk_usage(h.ctx())
    assert [(u.id, u.bytes, u.kind) for u in usage.reclaimable] == \
        [(exited["Id"], 5000, "container")]
    assert {u.id for u in usage.sandboxes} == {exited["Id"], running["Id"]}
    assert [(u.name, u.bytes) for u in usage.volumes] == [("v1", 42)]
    assert [(u.name, u.bytes) for u in usage.images] == [("sbx-run/x:1", 200)]
    totals = usage.totals()
    assert totals["reclaimable"] == 5000 and totals["sandboxes"] == 5007
    assert h.engine.containers == [exited, running]  # a dry run: nothing removed
