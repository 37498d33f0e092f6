"""The descriptor corpus: every valid kit parses; every invalid one fails where its header says.

Valid kits live in ``tests/data/kits/valid/<name>/<name>.yaml`` (written from the spec's examples
and the runtime conformance fixtures). Each invalid kit in ``tests/data/kits/invalid/`` starts
with one or more ``# expect: <dotted.path> <message substring>`` lines (``(root)`` for the
document itself); the test checks the path exactly, the message by substring, and that the
reported line is the line of that element (or of its nearest existing ancestor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from sbx.base.errors import KitError
from sbx.base.reasons import Reason
from sbx.domain.kits.descriptor import parse_descriptor_file, parse_descriptor_text

DATA = Path(__file__).resolve().parents[3] / "data" / "kits"
VALID = sorted(DATA.glob("valid/*/*.yaml"))
INVALID = sorted(DATA.glob("invalid/*.yaml"))
_EXPECT = re.compile(r"^# expect: (\S+)(?: (.*))?$")


@dataclass(frozen=True)
class Expectation:
    path: str
    message: str


def expectations(text: str) -> list[Expectation]:
    out = []
    for line in text.splitlines():
        match = _EXPECT.match(line)
        if match:
            path = "" if match.group(1) == "(root)" else match.group(1)
            out.append(Expectation(path, (match.group(2) or "").strip()))
    return out


def _parts(path: str) -> list[str | int]:
    return [int(i) if i else k
            for k, i in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path)]


def _lines_of(document: Any, parts: list[str | int]) -> set[int]:
    """1-based lines where the element at ``parts`` (or its deepest existing ancestor) sits.

    Written independently of sbx's own locator: it walks ruamel's ``lc`` data directly and
    accepts the key's line as well as the value's.
    """
    node, lines = document, {1}
    for part in parts:
        try:
            if isinstance(node, CommentedMap) and part in node:
                key_line, _ = node.lc.key(part)
                value_line, _ = node.lc.value(part)
                lines = {key_line + 1, value_line + 1}
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
                item_line, _ = node.lc.item(part)
                lines = {item_line + 1}
                node = node[part]
            else:
                break
        except (AttributeError, KeyError, TypeError):
            break
    return lines


def _load(text: str) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="rt").load(text)
    except YAMLError:  # the syntax-error fixtures have no tree to locate against
        return None


def test_corpus_is_large_enough() -> None:
    assert len(VALID) >= 40
    assert len(INVALID) >= 45


@pytest.mark.slow
@pytest.mark.parametrize("path", VALID, ids=[p.parent.name for p in VALID])
def test_valid_descriptor_parses(path: Path) -> None:
    assert path.stem == path.parent.name
    descriptor = parse_descriptor_file(path)
    assert descriptor.kind in ("workload", "mixin", "set")


@pytest.mark.slow
@pytest.mark.parametrize("path", VALID, ids=[p.parent.name for p in VALID])
def test_valid_descriptor_is_cached_identically(path: Path, tmp_path: Path) -> None:
    first = parse_descriptor_file(path, cache_dir=tmp_path)
    again = parse_descriptor_file(path, cache_dir=tmp_path)
    assert first.data == again.data


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_descriptor_fails_where_expected(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    wanted = expectations(text)
    assert wanted, f"{path.name} has no '# expect:' header"
    with pytest.raises(KitError) as caught:
        parse_descriptor_text(text, str(path))
    error = caught.value
    assert error.reason is Reason.INVALID_KIT
    found = error.details["diagnostics"]
    shown = "\n".join(f"{d['path']}: {d['message']}" for d in found)
    document = _load(text)
    for expected in wanted:
        matches = [d for d in found if d["path"] == expected.path
                   and expected.message in d["message"]]
        assert matches, f"no diagnostic {expected.path!r} ~ {expected.message!r} in:\n{shown}"
        for diagnostic in matches:
            assert diagnostic["line"] > 0 and diagnostic["col"] > 0, diagnostic
            if document is not None:
                lines = _lines_of(document, _parts(expected.path))
                assert diagnostic["line"] in lines, (diagnostic, lines)
    # Every diagnostic is positioned, the order is deterministic, and the body renders each.
    assert all(d["line"] > 0 for d in found), shown
    assert found == sorted(found, key=lambda d: (d["line"], d["col"], d["path"], d["message"]))
    assert error.body is not None and error.body.count(str(path)) == len(found)


def test_each_valid_kit_has_exactly_one_source_row() -> None:
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", (DATA / "SOURCES.md").read_text(),
                      flags=re.MULTILINE)
    named = [name for name, _source in rows]
    assert sorted(named) == sorted(p.name for p in (DATA / "valid").iterdir() if p.is_dir())
    assert len(named) == len(set(named))
    assert all(source.strip() for _name, source in rows)
