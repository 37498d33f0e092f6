"""The kit stage on the corpus: a republished descriptor whose groups carry lifecycle@1 from
two source kits is accepted and composed (singletons are per declaration block, and each group
is one), both groups' hooks and files kept; top-level entries are one block per source kit."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx.base.errors import KitError
from sbx.domain.kits.descriptor import parse_descriptor_text
from sbx.domain.kits.kitset import effective_composition, load_kit_set
from sbx.domain.sandbox.capabilities import SUPPORTED

VALID = Path(__file__).parents[3] / "data" / "kits" / "valid"


def test_groups_republished_from_two_source_kits_compose(tmp_path: Path) -> None:
    kit_set = load_kit_set(str(VALID / "hello"), [str(VALID / "groups-republished")], [],
                           cwd=tmp_path, cache_dir=tmp_path / "cache", supported=SUPPORTED)
    composition, _ = effective_composition(kit_set, {}, SUPPORTED, cache_dir=tmp_path / "c")
    lifecycle = composition.lifecycle
    assert lifecycle is not None
    assert [h.command for h in lifecycle.startup] == ["true"]
    assert [f.path for f in lifecycle.files] == ["/var/tmp/republished-feature"]
    assert [v.path for v in composition.volumes] == ["/var/tmp/republished-volume"]


REPUBLISHED = """\
# syntax=docker/sandbox-kit:3
schemaVersion: "3"
kind: mixin
capabilities:
  - type: com.docker.sandbox/lifecycle@1
    config: {startup: [{command: "true"}]}
    source: {kit: "registry.example/base:1.0.0", path: "capabilities[0]"}
  - type: com.docker.sandbox/lifecycle@1
    config: {startup: [{command: "false"}]}
    source: {kit: "registry.example/%s:1.0.0", path: "capabilities[0]"}
"""


def test_top_level_singletons_are_per_source_kit() -> None:
    parse_descriptor_text(REPUBLISHED % "feature", "republished.yaml", authored=False)
    with pytest.raises(KitError) as caught:
        parse_descriptor_text(REPUBLISHED % "base", "republished.yaml", authored=False)
    assert "is a singleton" in (caught.value.body or caught.value.message)

