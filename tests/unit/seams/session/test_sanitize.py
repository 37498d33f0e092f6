"""The terminal filter: sequences that act outside the screen never reach the terminal, however
the output is cut into reads; everything else passes byte for byte; nothing is held for long."""

from __future__ import annotations

import random

import pytest

from sbx.seams.session.mode import HostStreams
from sbx.seams.session.sanitize import MAX_DROPPED, TerminalFilter, for_terminal, utf8_locale

ST = b"\x1b\\"
B64 = b"cm0gLXJmIH4K"  # "rm -rf ~"

ATTACKS = {
    "clipboard (BEL)": b"\x1b]52;c;" + B64 + b"\x07",
    "clipboard (ST)": b"\x1b]52;c;" + B64 + ST,
    "clipboard query": b"\x1b]52;c;?\x07",
    "title 0": b"\x1b]0;owned\x07",
    "title 1": b"\x1b]1;owned" + ST,
    "title 2": b"\x1b]2;owned\x07",
    "cwd 7": b"\x1b]7;file://host/etc\x07",
    "notify 9": b"\x1b]9;you have mail\x07",
    "notify 777": b"\x1b]777;notify;title;body\x07",
    "notify 99": b"\x1b]99;;hello" + ST,
    "iterm2 file": b"\x1b]1337;File=name=eA==;inline=0:" + B64 + b"\x07",
    "unknown osc": b"\x1b]5113;ac=send\x07",
    "osc without a number": b"\x1b]l title\x07",
    "tmux passthrough": b"\x1bPtmux;\x1b\x1b]52;c;" + B64 + b"\x07" + ST,
    "dcs udk": b"\x1bP0;1|17/" + B64 + ST,
    "dcs query": b"\x1bP$qm" + ST,
    "kitty graphics": b"\x1b_Ga=T,t=f;L2V0Yy9wYXNzd2Q=" + ST,
    "pm": b"\x1b^secret" + ST,
    "sos": b"\x1bXsecret" + ST,
    "window resize": b"\x1b[8;200;200t",
    "window report": b"\x1b[21t",
    "iconify": b"\x1b[2t",
    "printer on": b"\x1b[5i",
    "c1 osc (utf-8)": b"\xc2\x9d52;c;" + B64 + b"\xc2\x9c",
    "c1 osc (stray byte)": b"\x9d0;owned\x07",
    "c1 dcs (stray byte)": b"\x90tmux;x\x9c",
    "c1 csi window": b"\xc2\x9b8;1;1t",
}

# Hyperlinks: the link goes, its text stays.
LINK = b"\x1b]8;;https://evil.example/\x1b\\click here\x1b]8;;\x1b\\"

ORDINARY = (
    b"plain text\r\n"
    b"\x1b[1;31mred bold\x1b[0m \x1b[38;5;208morange\x1b[39m \x1b[48;2;1;2;3mrgb\x1b[m\n"
    b"\x1b[2J\x1b[H\x1b[?1049h\x1b[?25l\x1b[10;20H\x1b[K\x1b[?2004h\x1b[6n\x1b[>c\x1b[?1049l"
    b"\x1b7\x1b8\x1b(B\x1b)0\x1b=\x1b>\x1bM\x1bc\x1b#8\x1b\\"
    b"box \xe2\x95\x9d\xe2\x94\x80\xe2\x95\x90 emoji \xf0\x9f\x98\x80 caf\xc3\xa9 \xc2\xa0nbsp"
    b" cjk \xe6\xbc\xa2\xe5\xad\x97\n"
    b"\x1b]4;1;rgb:ff/00/00\x07\x1b]10;?\x1b\\\x1b]104\x07\x1b]11;#000000\x07"
    b"\x07bell \x08\t\x1b[3g tabs\n"
)


def _filtered(data: bytes, cuts: list[int] | None = None, *, utf8: bool = True) -> bytes:
    flt = TerminalFilter(utf8=utf8)
    out = bytearray()
    previous = 0
    for cut in [*(cuts or []), len(data)]:
        out += flt.feed(data[previous:cut])
        previous = cut
    out += flt.close()
    return bytes(out)


def _every_split(data: bytes) -> list[list[int]]:
    return [[cut] for cut in range(len(data) + 1)]


def test_ordinary_output_passes_byte_for_byte_however_it_is_cut() -> None:
    assert _filtered(ORDINARY) == ORDINARY
    for cuts in _every_split(ORDINARY):
        assert _filtered(ORDINARY, cuts) == ORDINARY, cuts
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(ORDINARY)), rng.randint(1, 30)))
        assert _filtered(ORDINARY, cuts) == ORDINARY
    for size in (1, 2, 3):  # byte by byte, and in pairs
        assert _filtered(ORDINARY, list(range(size, len(ORDINARY), size))) == ORDINARY


@pytest.mark.slow
def test_binary_and_random_text_is_untouched_when_it_holds_no_introducer() -> None:
    rng = random.Random(3)
    alphabet = [bytes([b]) for b in range(0x20, 0x7F)] + ["é ╝ 😀 ─".encode()] * 5
    text = b"".join(rng.choice(alphabet) for _ in range(20000))
    assert _filtered(text, list(range(0, len(text), 777))) == text


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_sequence_that_acts_outside_the_screen_is_dropped(name: str) -> None:
    attack = ATTACKS[name]
    data = b"before " + attack + b" after\n"
    assert _filtered(data) == b"before  after\n"
    for cuts in _every_split(data):  # cut anywhere: still dropped, the rest still there
        assert _filtered(data, cuts) == b"before  after\n", cuts


def test_a_hyperlink_loses_its_target_and_keeps_its_text() -> None:
    assert _filtered(b"see " + LINK + b".") == b"see click here."


def test_a_utf8_character_inside_a_string_is_its_payload_however_it_is_cut() -> None:
    """U+2733 is E2 9C B3: its 0x9C is not an ST. Claude Code titles its window
    "\u2733 Claude Code"; ended early, the rest of the title landed in its input box."""
    title = "\x1b]0;\u2733 Claude Code\x07".encode()
    colour = "\x1b]11;\u2733\x07".encode()  # a screen OSC: passed whole
    for cuts in ([], *([cut] for cut in range(1, len(title)))):
        assert _filtered(title + b"ok", cuts) == b"ok"
    for cut in range(1, len(colour)):
        assert _filtered(colour + b"ok", [cut]) == colour + b"ok"
    # A stray 0x9C (no lead before it) still ends the string, as the module says.
    assert _filtered(b"\x1b]0;a\x9cok") == b"ok"


def test_8bit_locale_filters_raw_c1_controls() -> None:
    assert _filtered(b"a\x9d52;c;" + B64 + b"\x9cb", utf8=False) == b"ab"
    assert _filtered(b"a\x9b8;1;1tb", utf8=False) == b"ab"
    assert _filtered(b"a\x9b31mb", utf8=False) == b"a\x9b31mb"
    # In UTF-8, the same bytes inside characters are text.
    text = "╝ ❝ ✝".encode()
    assert _filtered(text) == text


def test_an_aborted_string_does_not_swallow_what_follows() -> None:
    # ESC starts something new: the title is gone, the colour stays.
    assert _filtered(b"\x1b]0;title\x1b[31mred\x1b[0m") == b"\x1b[31mred\x1b[0m"
    assert _filtered(b"\x1b]0;title\x18visible") == b"\x18visible"
    # A passed colour string aborted by a clipboard write: the clipboard write is dropped.
    out = _filtered(b"\x1b]4;1;red\x1b]52;c;" + B64 + b"\x07x")
    assert b"52" not in out and out.endswith(b"x")


def test_an_unterminated_string_is_bounded_and_output_returns() -> None:
    flt = TerminalFilter()
    out = bytearray(flt.feed(b"\x1b]52;c;"))
    piece = b"A" * 65536
    for _ in range(2 * MAX_DROPPED // len(piece)):
        out += flt.feed(piece)
        assert len(flt._held) < 300 and len(flt._carry) < 8
    out += flt.feed(b" visible")
    assert out.endswith(b" visible")
    assert len(out) <= MAX_DROPPED + len(b" visible") + 16


def test_an_unterminated_sequence_at_the_end_is_not_left_to_the_host() -> None:
    flt = TerminalFilter()
    assert flt.feed(b"ok \x1b]52;c;" + B64) == b"ok "
    assert flt.close() == b""
    flt = TerminalFilter()
    assert flt.feed(b"\x1b[8;1") == b""
    assert flt.close() == b""  # never completed by the host's next output
    flt = TerminalFilter()
    assert flt.feed(b"\x1b]4;1;rgb:00/00/00") == b"\x1b]4;1;rgb:00/00/00"
    assert flt.close() == ST  # a passed colour string is ended


def test_overlong_control_sequences_are_dropped_whole() -> None:
    data = b"\x1b[" + b"1;" * 1000 + b"t" + b"after"
    assert _filtered(data) == b"after"


def test_only_streams_on_a_terminal_are_filtered() -> None:
    seen: list[tuple[str, bytes]] = []

    def sink(stream: str, chunk: bytes | memoryview) -> None:
        seen.append((stream, bytes(chunk)))

    host = HostStreams(stdin_fd=None, stdin_is_terminal=False, stdout_is_terminal=True,
                       stderr_is_terminal=False)
    write, close = for_terminal(sink, host, {}, passthrough=False)
    write("stdout", ATTACKS["title 0"] + b"x")
    write("stderr", ATTACKS["title 0"] + b"y")
    close()
    assert seen == [("stdout", b"x"), ("stderr", ATTACKS["title 0"] + b"y")]
    seen.clear()
    write, close = for_terminal(sink, host, {}, passthrough=True)
    write("stdout", ATTACKS["title 0"])
    assert seen == [("stdout", ATTACKS["title 0"])]


@pytest.mark.slow
@pytest.mark.parametrize(("env", "utf8"), [
    ({}, True), ({"LANG": "C"}, True), ({"LANG": "en_US.UTF-8"}, True),
    ({"LANG": "de_DE.utf8"}, True), ({"LANG": "en_US.ISO-8859-1"}, False),
    ({"LC_ALL": "en_US.ISO-8859-15", "LANG": "en_US.UTF-8"}, False),
    ({"LC_CTYPE": "ja_JP.eucJP"}, False), ({"LC_ALL": "C.UTF-8", "LANG": "x.latin1"}, True),
])
def test_the_locale_decides_how_c1_controls_look(env: dict[str, str], utf8: bool) -> None:
    assert utf8_locale(env) is utf8


@pytest.mark.slow
def test_mixed_output_cut_at_random_is_filtered_the_same_every_time() -> None:
    rng = random.Random(11)
    pieces = ORDINARY.splitlines(keepends=True)
    attacks = [*ATTACKS.values(), LINK]
    for _ in range(300):
        data = b"".join(rng.choice(pieces) if rng.random() < 0.6 else rng.choice(attacks)
                        for _ in range(12))
        whole = _filtered(data)
        cuts = sorted(rng.sample(range(len(data)), min(len(data) - 1, rng.randint(1, 40))))
        assert _filtered(data, cuts) == whole
        for marker in (b"]52;", b"]0;owned", b"tmux;", b"1337;", b"8;200;200t", b"evil"):
            assert marker not in whole


def test_a_control_sequence_with_a_stray_byte_inside_never_completes() -> None:
    for inside in (b"\xc3\xa9", b"\x9d", b"\x1b", b"\x18"):
        out = _filtered(b"\x1b[8;100;100" + inside + b"t")
        assert b"[8;100;100" not in out
    # A control character inside is the terminal's to execute; the sequence stands.
    assert _filtered(b"\x1b[1;\n31m") == b"\x1b[1;\n31m"
    assert _filtered(b"\x1b[8;\n1;1t") == b""


def test_sbx_own_messages_show_control_characters_as_escapes() -> None:
    """A build's or a hook's words in sbx's messages (a failure's log tail, -v, a progress
    line) cannot act on the terminal either."""
    import io

    from sbx.base.errors import SbxError
    from sbx.base.reasons import Reason
    from sbx.base.render import Renderer

    err = io.StringIO()
    renderer = Renderer(io.StringIO(), err, as_json=False, env={"NO_COLOR": "1"})
    renderer.error(SbxError(Reason.BUILD_FAILED, "building k failed: \x1b]52;c;" + B64.decode()
                            + "\x07", details={"log_tail": ["step \x1b]0;owned\x07 done"]}),
                   "run")
    renderer.trace("line \x9d2;x\x9c and\ttab")
    text = err.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\x9d" not in text
    assert "\\x1b]52;c;" in text and "\\x1b]0;owned\\x07" in text and "and\ttab" in text
