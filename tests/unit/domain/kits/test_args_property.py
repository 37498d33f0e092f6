"""Property tests: malformed descriptors never crash sbx, they fail as ``invalid_kit``.

Inputs are random YAML-ish structures (biased towards the descriptor's own vocabulary so they
reach deep into the schema and rules) and random mutations of the valid corpus, both textual
(bytes edited) and structural (subtrees replaced). A mutation may happen to stay valid; what may
never happen is an exception other than :class:`KitError`, a KitError with another reason, or
a diagnostic that names neither a path nor a position.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbx.base.errors import KitError
from sbx.base.reasons import Reason
from sbx.domain.kits.args import expand, validate_effective
from sbx.domain.kits.descriptor import Descriptor, parse_descriptor_text

CORPUS = sorted((Path(__file__).resolve().parents[3] / "data" / "kits" / "valid")
                .glob("*/*.yaml"))
TEXTS = [p.read_text(encoding="utf-8") for p in CORPUS]
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

WORDS = ["schemaVersion", "kind", "capabilities", "type", "config", "optional", "group", "args",
         "provides", "requires", "integrates", "conflicts", "kits", "ref", "digest", "runtime",
         "install", "allow", "deny", "hosts", "methods", "paths", "service", "phase", "apiKey",
         "inject", "domain", "name", "path", "mode", "size", "container", "transport",
         "default", "required", "enum", "pattern", "env", "buildArg", "files", "content",
         "command", "directory", "filename", "sign", "authenticate", "unrestricted", "source"]
TYPES = ["com.docker.sandbox/" + t for t in (
    "network-policy@1", "network-policy@2", "credential@1", "ssh-agent@1", "volume@1",
    "host-mount@1", "port@1", "usb-device@1", "resources@1", "privileged@1", "long-running@1",
    "lifecycle@1", "agent-context@1", "agent-sessions@1", "agent-interactive-sessions@1",
    "agent-skills@1", "agent-skill@1", "git-identity@1", "kit-registry@1", "sbx@1", "acp@1")]
STRINGS = st.one_of(
    st.sampled_from(["3", "workload", "mixin", "set", "runtime", "install", "GET", "ANY", "*",
                     "/data", "example.com", "gh@1.0.0", "gh >= 1", "${{ kit.args.x }}",
                     "${{ kit.env.HOME }}", "${{ kit.args", "", "0755", "8080", "deb/x@1",
                     *TYPES]),
    st.text(max_size=12),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), STRINGS)
KEYS = st.one_of(st.sampled_from(WORDS), st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=5)), max_leaves=30)
DOCUMENTS = st.one_of(
    VALUES,
    st.fixed_dictionaries({"schemaVersion": st.sampled_from(["3", 3, "2"]),
                           "kind": st.sampled_from(["workload", "mixin", "set", "x"])},
                          optional={"capabilities": st.lists(
                              st.fixed_dictionaries({"type": st.sampled_from(TYPES)},
                                                    optional={"config": VALUES,
                                                              "optional": SCALARS}),
                              max_size=4),
                              "args": st.dictionaries(KEYS, VALUES, max_size=3),
                              "provides": VALUES, "requires": VALUES, "kits": VALUES}),
)


def _dump(value: Any) -> str:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    stream = io.StringIO()
    yaml.dump(value, stream)
    return stream.getvalue()


def _check(text: str) -> Descriptor | None:
    try:
        return parse_descriptor_text(text, "fuzz.yaml")
    except KitError as error:
        assert error.reason is Reason.INVALID_KIT
        found = error.details["diagnostics"]
        assert found, "a KitError without diagnostics"
        for diagnostic in found:
            assert diagnostic["path"] or diagnostic["line"] > 0, diagnostic
            assert diagnostic["message"]
        assert error.body
        return None


@pytest.mark.slow
@SETTINGS
@given(DOCUMENTS)
def test_random_structures_fail_cleanly(document: Any) -> None:
    _check(_dump(document))
    _check(json.dumps(document))  # the published form is compact JSON, which is YAML too


@pytest.mark.slow
@SETTINGS
@given(st.sampled_from(TEXTS), st.data())
def test_textual_mutations_of_valid_kits_fail_cleanly(text: str, data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(1, 3))):
        if not text:
            break
        at = data.draw(st.integers(0, len(text) - 1))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "dup-line", "drop-line",
                                          "indent"]))
        lines = text.splitlines(keepends=True)
        row = data.draw(st.integers(0, max(len(lines) - 1, 0)))
        if kind == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 5)):]
        elif kind == "insert":
            text = text[:at] + data.draw(st.sampled_from(
                [":", "-", " ", "\n", "{", "[", "'", '"', "&a", "*a", "!!int", "\t", "#", "\x00",
                 "${{", "ü"])) + text[at:]
        elif kind == "replace":
            text = text[:at] + data.draw(st.text(max_size=6)) + text[at + 1:]
        elif kind == "dup-line" and lines:
            lines.insert(row, lines[row])
            text = "".join(lines)
        elif kind == "drop-line" and lines:
            del lines[row]
            text = "".join(lines)
        elif lines:
            lines[row] = "  " + lines[row]
            text = "".join(lines)
    _check(text)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out.extend(_paths(child, (*prefix, i)))
    return out


@pytest.mark.slow
@SETTINGS
@given(st.sampled_from(CORPUS), st.data())
def test_structural_mutations_of_valid_kits_fail_cleanly(path: Path,
                                                         data: st.DataObject) -> None:
    from ruamel.yaml import YAML

    document = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(_paths(document)[1:] or [()]))
        if not target:
            break
        parent = document
        for part in target[:-1]:
            parent = parent[part]
        action = data.draw(st.sampled_from(["replace", "delete", "add-key", "wrap"]))
        last = target[-1]
        if action == "replace":
            parent[last] = data.draw(VALUES)
        elif action == "delete":
            del parent[last]
        elif action == "add-key" and isinstance(parent[last], dict):
            parent[last][data.draw(KEYS)] = data.draw(VALUES)
        else:
            parent[last] = [parent[last]]
    _check(_dump(document))


@pytest.mark.slow
@SETTINGS
@given(st.sampled_from(CORPUS),
       st.dictionaries(st.sampled_from(["greeting", "version", "port", "mode", "registry",
                                        "directory", "skill", "volume_mode", "mount_path",
                                        "model", "undeclared"]),
                       st.one_of(st.text(max_size=10),
                                 st.sampled_from(["8080", "1.5", "true", "/x", "${{ kit.env.A }}",
                                                  "755", "0755"])), max_size=3),
       st.one_of(st.none(), st.dictionaries(st.sampled_from(["HOME", "KIT_TCK_CANARY",
                                                             "KIT_GROUP_PATH", "DIR"]),
                                            st.text(max_size=8), max_size=4)))
def test_expansion_of_valid_kits_never_crashes(path: Path, supplied: dict[str, str],
                                               env: dict[str, str] | None) -> None:
    text = path.read_text(encoding="utf-8")
    descriptor = parse_descriptor_text(text, str(path))
    try:
        expanded = expand(descriptor, supplied=supplied, env=env, file=str(path), text=text)
        validate_effective(expanded.data, str(path), text=text)
    except KitError as error:
        assert error.reason is Reason.INVALID_KIT
        assert error.details["diagnostics"]
        for diagnostic in error.details["diagnostics"]:
            assert diagnostic["path"] or diagnostic["line"] > 0, diagnostic
