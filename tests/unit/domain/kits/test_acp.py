"""Which ACP adapter `--acp` starts: only one serving a composed agent, the workload's own
first; a shell string is the kit's own text for sh -c; malformed configs never start."""

from __future__ import annotations

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.acp import Adapter, adapter_of, choose_adapter
from sbx.domain.kits.versions import normalize_name


def _adapter(agent: str) -> Adapter:
    return Adapter(normalize_name(agent), (f"{agent}-acp",))


def test_a_config_becomes_an_adapter_or_nothing() -> None:
    assert adapter_of({"agent": "claude", "command": ["a", "b"], "env": {"K": "v"},
                       "protocolVersion": 2}) == Adapter("com.docker.kit/claude", ("a", "b"),
                                                         {"K": "v"}, 2)
    assert adapter_of({"agent": "x", "command": "run it"}) == \
        Adapter("com.docker.kit/x", ("sh", "-c", "run it"))
    for bad in ({"agent": "x"}, {"command": ["a"]}, {"agent": "x", "command": []},
                {"agent": "x", "command": [" "]}, {"agent": "x", "command": "  "},
                {"agent": "x", "command": ["a", 1]}, {"agent": "x", "command": ["a"],
                                                      "env": {"K": 1}}):
        assert adapter_of(bad) is None, bad


def test_the_workloads_own_agent_comes_first_then_the_only_one() -> None:
    both = [_adapter("claude"), _adapter("codex")]
    own = choose_adapter(both, ["claude", "codex"], ["codex"], workload="wl")
    only = choose_adapter(both, ["claude", "shell"], ["shell"], workload="wl")
    assert (own.agent, only.agent) == (normalize_name("codex"), normalize_name("claude"))


def test_no_serving_adapter_or_several_strangers_are_refused_with_the_fix() -> None:
    cases = [([], ["claude"], ["claude"]), ([_adapter("codex")], ["claude"], ["claude"]),
             ([_adapter("claude"), _adapter("codex")], ["claude", "codex", "sh"], ["sh"])]
    for adapters, provided, own in cases:
        with pytest.raises(SbxError) as caught:
            choose_adapter(adapters, provided, own, workload="wl")
        assert caught.value.reason is Reason.ACP_UNAVAILABLE
        assert "--acp" in (caught.value.hint or "")
