"""The session verbs in a real terminal (a tmux pane): --continue takes the interactive tail
(agent-interactive-sessions@1) with a terminal attached, --prompt stays headless (no terminal)
even there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import BUSYBOX, make_kit
from .test_session_tty import Pane
from .test_session_tty import pane as pane  # noqa: PLC0414 -- the tmux pane fixture, shared

pytestmark = pytest.mark.docker

AGENT = """[ $# -eq 0 ] && exec sleep 3600
if [ -t 1 ]; then t=yes; else t=no; fi
printf 'ARGS=%s TTY=%s\\n' "$*" "$t"
exit 4
"""
HEADLESS = {"prompt": ["-p", "{{.Prompt}}"], "continue": ["--continue"]}
INTERACTIVE = {"prompt": ["--", "{{.Prompt}}"], "continue": ["--tui-continue"]}


def _kit(root: Path) -> Path:
    kit = make_kit(root, "agent", f"FROM {BUSYBOX}\nCOPY fakeagent /usr/local/lib/fakeagent\n"
                   "USER agent\nWORKDIR /workspace\n"
                   "CMD [\"sh\", \"/usr/local/lib/fakeagent\"]\n",
                   "capabilities:\n"
                   f"  - type: com.docker.sandbox/agent-sessions@1\n"
                   f"    config: {json.dumps(HEADLESS)}\n"
                   f"  - type: com.docker.sandbox/agent-interactive-sessions@1\n"
                   f"    config: {json.dumps(INTERACTIVE)}\n")
    (kit / "fakeagent").write_text(AGENT, encoding="utf-8")
    return kit


def test_continue_is_interactive_in_a_terminal_and_prompt_headless(pane: Pane) -> None:
    _kit(pane.workdir / "kits")
    pane.sbx("cont", "kits/agent --continue")
    assert pane.status("cont") == 4, pane.screen()
    assert pane.search(r"^ARGS=--tui-continue TTY=yes\s*$") is not None, pane.screen()
    pane.sbx("prompt", "kits/agent --prompt 'two words'")
    assert pane.status("prompt") == 4, pane.screen()
    assert pane.search(r"^ARGS=-p two words TTY=no\s*$") is not None, pane.screen()
