"""A sandbox writes to the user's terminal only what acts on the screen: run in a tmux pane, a
sandbox that writes the clipboard (OSC 52), the title (OSC 0/2), a hyperlink (OSC 8), a
notification and a tmux passthrough leaves tmux's paste buffers, the pane's title and the bytes
the pane received free of them, while its text and colours arrive; with
``--terminal-passthrough`` (or ``[sandbox] terminal_passthrough``) they pass, and output that
goes to a file instead of the terminal is byte for byte what the sandbox wrote.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from .test_session_tty import BUSYBOX_PROMPT, Pane, wait_for
from .test_session_tty import pane as pane  # noqa: PLC0414 -- the tmux pane fixture, shared
from .test_session_tty import shell_kit as shell_kit  # noqa: PLC0414 -- its kit fixture

pytestmark = pytest.mark.docker

CLIPBOARD = "rm -rf ~ # from the sandbox"
PAYLOAD = base64.b64encode(CLIPBOARD.encode()).decode()
# What the sandbox prints, with busybox's printf.
EMIT = (
    "printf '\\033]52;c;%s\\007' " + PAYLOAD + "\n"
    "printf '\\033]0;owned-title\\007'\n"
    "printf '\\033]2;owned-title-2\\033\\\\'\n"
    "printf '\\033]8;;https://evil.example/\\033\\\\click-me\\033]8;;\\033\\\\\\n'\n"
    "printf '\\033]9;notify-me\\007'\n"
    "printf '\\033Ptmux;\\033\\033]52;c;%s\\007\\033\\\\' " + PAYLOAD + "\n"
    "printf '\\033[31mred-text\\033[0m\\n'\n"
    "echo emitted-all\n"
)
ATTACK_BYTES = (b"]52;", b"]0;owned", b"]2;owned", b"]8;;https://evil", b"]9;notify",
                b"Ptmux;")


def _start(pane: Pane) -> Path:
    """The workspace with the emitting script; tmux keeps OSC 52 writes as paste buffers, and
    every byte the pane receives is logged."""
    workspace = pane.workdir / "ws"
    workspace.mkdir()
    (workspace / "emit.sh").write_text(EMIT, encoding="utf-8")
    pane.tmux("set-option", "-s", "set-clipboard", "on")
    raw = pane.workdir / "raw.log"
    pane.tmux("pipe-pane", "-o", "-t", pane.name, f"cat >> {raw}")
    return raw


def _buffers(pane: Pane) -> str:
    done = subprocess.run(["tmux", "-L", pane.server, "list-buffers", "-F",
                           "#{buffer_sample}"], capture_output=True, text=True, timeout=10,
                          check=False)
    return done.stdout


def _title(pane: Pane) -> str:
    return pane.tmux("display-message", "-p", "-t", pane.name, "#{pane_title}").strip()


def _received(raw: Path) -> bytes:
    return raw.read_bytes() if raw.exists() else b""


def test_sequences_acting_outside_the_screen_do_not_reach_the_terminal(
        pane: Pane, shell_kit: Path) -> None:
    raw = _start(pane)
    title_before = _title(pane)
    pane.sbx("f", "kits/shell ws --access ro -- sh emit.sh")
    assert pane.status("f") == 0
    pane.wait(r"^click-me$")
    pane.wait(r"^red-text$")
    pane.wait(r"^emitted-all$")
    wait_for(lambda: True if b"emitted-all" in _received(raw) else None,
             what=lambda: "the pane's log never got the output")
    received = _received(raw)
    for attack in ATTACK_BYTES:
        assert attack not in received, attack
    assert b"\x1b[31mred-text\x1b[0m" in received  # colours pass byte for byte
    assert CLIPBOARD not in _buffers(pane) and PAYLOAD not in _buffers(pane)
    assert "owned" not in _title(pane) and _title(pane) == title_before


@pytest.mark.parametrize("how", ["flag", "config"])
def test_the_option_passes_them(pane: Pane, shell_kit: Path, tmp_path: Path, how: str) -> None:
    raw = _start(pane)
    config = tmp_path / "passthrough.toml"
    config.write_text("[sandbox]\nterminal_passthrough = true\n", encoding="utf-8")
    if how == "flag":
        pane.sbx("p", "--terminal-passthrough kits/shell ws --access ro -- sh emit.sh")
    else:
        pane.sbx("p", "kits/shell ws --access ro -- sh emit.sh",
                 prefix=f"SBX_CONFIG={config}")
    assert pane.status("p") == 0
    pane.wait(r"^emitted-all$")
    wait_for(lambda: True if CLIPBOARD in _buffers(pane) else None,
             what=lambda: f"no clipboard buffer: {_buffers(pane)!r}")
    wait_for(lambda: True if _title(pane).startswith("owned-title") else None,
             what=lambda: f"the title is {_title(pane)!r}")
    assert b"]8;;https://evil.example/" in _received(raw)


def test_output_to_a_file_stays_byte_for_byte(pane: Pane, shell_kit: Path) -> None:
    _start(pane)
    pane.sbx("o", "kits/shell ws --access ro -- sh emit.sh > out.bin")
    assert pane.status("o") == 0
    out = (pane.workdir / "out.bin").read_bytes()
    assert out.startswith(b"\x1b]52;c;" + PAYLOAD.encode() + b"\x07\x1b]0;owned-title\x07")
    for attack in ATTACK_BYTES:
        assert attack in out


def test_an_interactive_shell_in_the_sandbox_cannot_set_the_title(
        pane: Pane, shell_kit: Path) -> None:
    """The same in a TTY session typed into, where the sequence is printed by a shell."""
    _start(pane)
    pane.sbx("t", "kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    pane.type("printf '\\033]2;typed-title\\007'; echo typed-done")
    pane.wait(r"^typed-done$")
    assert "typed-title" not in _title(pane)
    pane.type("exit")
    assert pane.status("t") == 0
