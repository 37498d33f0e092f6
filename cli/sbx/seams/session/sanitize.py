"""What of a sandbox's output may reach the user's terminal: everything, byte for byte, except
the control sequences that act outside the screen.

Dropped by default (``--terminal-passthrough`` / ``[sandbox] terminal_passthrough`` passes
them): every OSC except those that only set colours (the clipboard 52, the title 0/1/2, the
hyperlink 8, the working directory 7, notifications 9/99/777, iTerm2's 1337 with its file
transfer, and any unknown number), every DCS, APC, PM and SOS string (tmux passthrough
``ESC P tmux;``, DECUDK key programming, kitty graphics, which can read host files, sixel), and
the CSI controls of the window (``t``: move, resize, iconify, report the title) and of the
printer (``i``: media copy). Hyperlinks are dropped too: their text can say one thing and the
link open another on the host; the text itself stays.

Both string terminators (BEL and ``ESC \\``) and the 8-bit C1 forms are recognised: in a UTF-8
locale the C1 controls as UTF-8 encodes them (``C2 9D``) and any stray byte 0x80-0x9F that is
not part of a UTF-8 character; in an explicitly 8-bit locale (ISO-8859-1...) every such byte.
A sequence split across reads is held (never more than a few hundred bytes) until it is
complete; a dropped string that never ends is dropped for at most :data:`MAX_DROPPED` bytes,
after which the output is shown again (the terminal never saw its start, so nothing it sees is
inside a sequence).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sbx.seams.session.mode import HostStreams

MAX_DROPPED: Final = 1024 * 1024  # bytes of one dropped string before output shows again
MAX_CSI: Final = 256  # bytes of one control sequence held to decide it
MAX_OSC_NUMBER: Final = 8  # digits of an OSC number

# OSCs that only set or query colours on the screen: passed.
SCREEN_OSC: Final = frozenset({4, 5, 104, 105, *range(10, 20), *range(110, 120)})
# CSI finals that act outside the screen: the window (t) and the printer (i).
DROPPED_CSI_FINALS: Final = frozenset(b"ti")

_ESC: Final = 0x1B
_BEL: Final = 0x07
_CAN: Final = 0x18
_SUB: Final = 0x1A
# C1 controls (their 7-bit forms are ESC + byte - 0x40).
_C1_STRINGS: Final = {0x90: "dcs", 0x98: "sos", 0x9D: "osc", 0x9E: "pm", 0x9F: "apc"}
_C1_CSI: Final = 0x9B
_C1_ST: Final = 0x9C
_ESC_STRINGS: Final = {ord("P"): "dcs", ord("X"): "sos", ord("]"): "osc", ord("^"): "pm",
                       ord("_"): "apc"}

# Ground state: what needs a look (everything else is passed as it is).
_UTF8_CANDIDATES: Final = re.compile(rb"[\x1b\x80-\xff]")
_BYTE_CANDIDATES: Final = re.compile(rb"[\x1b\x80-\x9f]")
# A run of UTF-8 characters (none of them a C1 control), and a character cut by the read's end.
_UTF8_CHARACTERS: Final = re.compile(
    rb"(?:\xc2[\xa0-\xbf]|[\xc3-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}"
    rb"|[\xf0-\xf4][\x80-\xbf]{3})+")
_UTF8_CUT: Final = re.compile(rb"[\xc2-\xf4][\x80-\xbf]{0,2}\Z")
# What is surely safe, matched at once: text, complete control sequences whose final is not
# dropped, and escapes that start no string (the state machine below takes everything else).
_SAFE_CONTROLS: Final = (
    rb"|\x1b\[[\x20-\x3f]{0,254}[\x40-\x68\x6a-\x73\x75-\x7e]"  # CSI, not t or i
    rb"|\x1b[\x20-\x2f]{0,8}[\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e]")  # not [ ] P X ^ _
_UTF8_SAFE: Final = re.compile(
    rb"(?:[\x00-\x1a\x1c-\x7f]+|\xc2[\xa0-\xbf]|[\xc3-\xdf][\x80-\xbf]"
    rb"|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}" + _SAFE_CONTROLS + rb")+")
_BYTE_SAFE: Final = re.compile(
    rb"(?:[\x00-\x1a\x1c-\x7f\xa0-\xff]+" + _SAFE_CONTROLS + rb")+")
# Inside a string: its payload, up to what may end or abort it. In UTF-8 a whole character is
# payload (the 0x9C inside U+2733, E2 9C B3, is no ST); only a stray byte or C2 80-9F is a C1.
_UTF8_STRING_PAYLOAD: Final = re.compile(
    rb"(?:[\x00-\x06\x08-\x17\x19\x1c-\x7f]+|\xc2[\xa0-\xbf]|[\xc3-\xdf][\x80-\xbf]"
    rb"|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3})*")
_BYTE_STRING_PAYLOAD: Final = re.compile(rb"[^\x07\x18\x1a\x1b\x80-\x9f]*")


def utf8_locale(env: Mapping[str, str]) -> bool:
    """Whether the terminal's locale is UTF-8: unless it explicitly names another charset
    (``LC_ALL``, else ``LC_CTYPE``, else ``LANG``; ``C`` and unset count as UTF-8, as
    today's terminals are)."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = env.get(name)
        if value:
            codeset = value.partition(".")[2].partition("@")[0].lower().replace("-", "")
            return codeset in ("", "utf8")
    return True


class TerminalFilter:
    """One output stream's filter; :meth:`feed` each read, :meth:`close` at the end."""

    def __init__(self, *, utf8: bool = True) -> None:
        self._utf8 = utf8
        self._candidates = _UTF8_CANDIDATES if utf8 else _BYTE_CANDIDATES
        self._safe = _UTF8_SAFE if utf8 else _BYTE_SAFE
        self._payload = _UTF8_STRING_PAYLOAD if utf8 else _BYTE_STRING_PAYLOAD
        self._carry = b""  # the end of the last read, to be read again with the next
        self._held = bytearray()  # a CSI or an OSC's start while it is being decided
        self._intro = 0  # length of the held OSC's introducer
        self._state = "ground"  # ground | csi | osc_number | string
        self._kind = ""  # the string's: osc, dcs, sos, pm, apc
        self._passing = False  # inside a string: whether its bytes are passed
        self._dropped = 0  # bytes of the current dropped string or overlong CSI

    def feed(self, data: bytes | memoryview) -> bytes:
        view = self._carry + bytes(data) if self._carry else bytes(data)
        self._carry = b""
        if self._state == "ground" and view.isascii() and b"\x1b" not in view:
            return view  # nothing but text
        out = bytearray()
        position = 0
        while position < len(view) and not self._carry:
            if self._state == "ground":
                position = self._scan_ground(view, position, out)
            elif self._state == "csi":
                position = self._scan_csi(view, position, out)
            elif self._state == "osc_number":
                position = self._scan_osc_number(view, position, out)
            else:
                position = self._scan_string(view, position, out)
        return bytes(out)

    def close(self) -> bytes:
        """At the end of the output: an incomplete sequence is dropped (it would join the
        host's own next output); a passed string still open is ended, so the terminal is back
        in its ground state."""
        ending = b"\x1b\\" if self._state == "string" and self._passing else b""
        self._carry, self._state, self._passing = b"", "ground", False
        self._held.clear()
        return ending

    # -- ground ----------------------------------------------------------------------------

    def _scan_ground(self, view: bytes, position: int, out: bytearray) -> int:
        plain = position  # where the text not yet copied out begins
        while True:
            safe = self._safe.match(view, position)
            if safe is not None:
                position = safe.end()
                if position == len(view):
                    out += view[plain:]
                    return position
            found = self._candidates.search(view, position)
            if found is None:
                out += view[plain:]
                return len(view)
            start = found.start()
            first = view[start]
            if self._utf8 and first >= 0xA0 and not (
                    first == 0xC2 and start + 1 < len(view) and view[start + 1] <= 0x9F):
                characters = _UTF8_CHARACTERS.match(view, start)
                if characters is not None:
                    position = characters.end()  # characters: passed as they are
                    continue
                if _UTF8_CUT.match(view, start) is not None:
                    out += view[plain:start]  # a character cut by the read's end
                    self._carry = view[start:]
                    return len(view)
                position = start + 1  # not UTF-8: the terminal shows a replacement
                continue
            out += view[plain:start]
            if first == _ESC:
                if start + 1 >= len(view):
                    self._carry = view[start:]  # the next read says what it starts
                    return len(view)
                return self._escape(view, start, out)
            if first == 0xC2:
                if start + 1 >= len(view):
                    self._carry = view[start:]
                    return len(view)
                return self._c1(view[start + 1], view, start, start + 2, out)
            return self._c1(first, view, start, start + 1, out)

    def _escape(self, view: bytes, start: int, out: bytearray) -> int:
        """``view[start]`` is ESC and ``view[start + 1]`` exists."""
        follower = view[start + 1]
        if follower == ord("["):
            return self._begin_csi(view, start, start + 2)
        kind = _ESC_STRINGS.get(follower)
        if kind is not None:
            return self._begin_string(kind, view, start, start + 2)
        out.append(_ESC)  # any other escape: the terminal's own, passed
        return start + 1

    def _c1(self, code: int, view: bytes, start: int, stop: int, out: bytearray) -> int:
        if code == _C1_CSI:
            return self._begin_csi(view, start, stop)
        kind = _C1_STRINGS.get(code)
        if kind is not None:
            return self._begin_string(kind, view, start, stop)
        out += view[start:stop]  # other C1 controls act on the screen (or nothing)
        return stop

    # -- control sequences -------------------------------------------------------------------

    def _begin_csi(self, view: bytes, start: int, body: int) -> int:
        self._state, self._dropped = "csi", 0
        self._held[:] = view[start:body]
        return body

    def _scan_csi(self, view: bytes, position: int, out: bytearray) -> int:
        while position < len(view):
            byte = view[position]
            if 0x40 <= byte <= 0x7E:  # the final byte
                if not self._dropped and byte not in DROPPED_CSI_FINALS:
                    out += self._held
                    out.append(byte)
                self._held.clear()
                self._state = "ground"
                return position + 1
            if byte in (_ESC, _CAN, _SUB) or byte >= 0x80:
                # Aborted: dropped (a terminal ignores an aborted sequence, and one that would
                # read on past such a byte never saw its start), the byte read again.
                self._held.clear()
                self._state = "ground"
                return position
            if self._dropped:
                self._dropped += 1
            else:
                self._held.append(byte)
                if len(self._held) > MAX_CSI:  # no control is this long: dropped whole
                    self._held.clear()
                    self._dropped = 1
            position += 1
        return position

    # -- strings: OSC, DCS, SOS, PM, APC -------------------------------------------------------

    def _begin_string(self, kind: str, view: bytes, start: int, body: int) -> int:
        self._dropped, self._kind = 0, kind
        if kind == "osc":  # its number decides
            self._state, self._intro = "osc_number", body - start
            self._held[:] = view[start:body]
        else:
            self._state, self._passing = "string", False
        return body

    def _scan_osc_number(self, view: bytes, position: int, out: bytearray) -> int:
        while position < len(view):
            byte = view[position]
            digits = len(self._held) - self._intro
            if 0x30 <= byte <= 0x39 and digits < MAX_OSC_NUMBER:
                self._held.append(byte)
                position += 1
                continue
            ends = byte in (ord(";"), _BEL, _ESC, _CAN, _SUB) or (
                byte == 0xC2 if self._utf8 else byte == _C1_ST)
            number = int(self._held[self._intro:]) if digits and ends else -1
            self._passing = number in SCREEN_OSC
            if self._passing:
                out += self._held
            self._held.clear()
            self._state = "string"
            return position  # the byte is the string's (or its end)
        return position

    def _scan_string(self, view: bytes, position: int, out: bytearray) -> int:
        start = position
        while position < len(view):
            match = self._payload.match(view, position)
            stop = len(view) if match is None else match.end()
            if not self._passing:
                self._dropped += stop - position
                if self._dropped > MAX_DROPPED:  # never ended: shown again from here
                    self._state = "ground"
                    return max(position, stop - (self._dropped - MAX_DROPPED))
            position = stop
            if position >= len(view):
                break
            byte = view[position]
            if byte == _ESC:
                self._pass(view, start, position, out)
                if position + 1 >= len(view):
                    self._carry = view[position:]  # ST or an abort: the next read says
                    return len(view)
                follower = view[position + 1]
                if follower == _ESC and not self._passing and self._kind != "osc":
                    position += 2  # ESC ESC in a dropped DCS: tmux's escaped ESC
                    continue
                self._state = "ground"
                if follower == ord("\\"):  # ESC \: the string's end
                    self._pass(view, position, position + 2, out)
                    return position + 2
                return position  # aborted: ESC and what follows, read again
            if byte == _BEL and self._kind == "osc":
                self._pass(view, start, position + 1, out)
                self._state = "ground"
                return position + 1
            if byte in (_CAN, _SUB):
                self._pass(view, start, position, out)
                self._state = "ground"
                return position  # executed from the ground state
            if self._utf8 and byte > 0xC2 and _UTF8_CUT.match(view, position):
                self._pass(view, start, position, out)
                self._carry = view[position:]  # a character cut by the read's end
                return len(view)
            c1 = self._c1_at(view, position)
            if c1 is not None:
                self._pass(view, start, position, out)
                if c1 == -1:
                    self._carry = view[position:]
                    return len(view)
                self._state = "ground"
                if c1 > 0:  # ST
                    self._pass(view, position, position + c1, out)
                    return position + c1
                return position  # another control starts: aborted, read again
            position += 1  # payload
        self._pass(view, start, position, out)
        return position

    def _c1_at(self, view: bytes, position: int) -> int | None:
        """At ``position`` inside a string: the length of a C1 ST, 0 for a C1 control that
        starts a new sequence (an abort), -1 for a UTF-8 lead cut by the read's end, None
        for payload."""
        byte = view[position]
        code = byte
        if self._utf8 and byte == 0xC2:
            if position + 1 >= len(view):
                return -1
            code = view[position + 1]
            if code == _C1_ST:
                return 2
        if code == _C1_ST:
            return 1
        if code == _C1_CSI or code in _C1_STRINGS:
            return 0
        return None

    def _pass(self, view: bytes, start: int, stop: int, out: bytearray) -> None:
        if self._passing:
            out += view[start:stop]


def _complete(token: bytes) -> bool:
    lead = token[0]
    need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return len(token) >= need


def filtered(sink: Callable[[str, bytes | memoryview], None], streams: set[str], *,
             utf8: bool) -> tuple[Callable[[str, bytes | memoryview], None],
                                  Callable[[], None]]:
    """``sink`` with the streams named in ``streams`` (those that reach a terminal) filtered;
    and the function that ends them (call it once the output is over)."""
    filters = {name: TerminalFilter(utf8=utf8) for name in streams}

    def write(stream: str, chunk: bytes | memoryview) -> None:
        chosen = filters.get(stream)
        if chosen is None:
            sink(stream, chunk)
            return
        data = chosen.feed(chunk)
        if data:
            sink(stream, data)

    def close() -> None:
        for name, chosen in filters.items():
            ending = chosen.close()
            if ending:
                sink(name, ending)

    return write, close


def for_terminal(sink: Callable[[str, bytes | memoryview], None], host: HostStreams,
                 env: Mapping[str, str], *, passthrough: bool,
                 ) -> tuple[Callable[[str, bytes | memoryview], None], Callable[[], None]]:
    """``sink`` filtered on the streams that reach a terminal (sbx's stdout, its stderr),
    unless ``passthrough``; piped output stays byte for byte. Returns the sink and the
    function that ends the filtering (an open passed string is closed)."""
    streams = set() if passthrough else {
        name for name, terminal in (("stdout", host.stdout_is_terminal),
                                    ("stderr", host.stderr_is_terminal)) if terminal}
    if not streams:
        return sink, lambda: None
    return filtered(sink, streams, utf8=utf8_locale(env))


__all__ = ["DROPPED_CSI_FINALS", "MAX_CSI", "MAX_DROPPED", "SCREEN_OSC", "TerminalFilter",
           "filtered", "for_terminal", "utf8_locale"]
