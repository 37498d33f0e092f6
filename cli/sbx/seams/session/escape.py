"""Detach keys: the sequence typed on the host that ends a TTY session from the host side.

The format is Docker's (``--detach-keys``): comma-separated keys, each a single printable
character or ``ctrl-X`` with X one of ``a``-``z``, ``@``, ``[``, ``\\``, ``]``, ``^``, ``_``.
The default is Docker's own, ``ctrl-p,ctrl-q``.
"""

from __future__ import annotations

from typing import Final

DEFAULT_DETACH_KEYS: Final = "ctrl-p,ctrl-q"
_CTRL_SPECIAL: Final = {"@": 0, "[": 27, "\\": 28, "]": 29, "^": 30, "_": 31}


def parse_detach_keys(text: str) -> bytes:
    """``"ctrl-p,ctrl-q"`` → ``b"\\x10\\x11"``; ValueError naming the bad key otherwise."""
    keys = bytearray()
    for part in text.split(","):
        key = part.strip()
        lowered = key.lower()
        if lowered.startswith("ctrl-") and len(key) == 6:
            letter = lowered[5]
            if "a" <= letter <= "z":
                keys.append(ord(letter) - ord("a") + 1)
                continue
            if letter in _CTRL_SPECIAL:
                keys.append(_CTRL_SPECIAL[letter])
                continue
        elif len(key) == 1 and 32 < ord(key) < 127:
            keys.append(ord(key))
            continue
        raise ValueError(f"invalid detach key {key!r}: use a character or ctrl-<a-z,@,[,\\,],^,_>"
                         " (e.g. ctrl-p,ctrl-q)")
    return bytes(keys)


class EscapeDetector:
    """Finds the detach sequence in typed input, across reads.

    Bytes that may start the sequence are held back until the next byte decides: the rest of
    the sequence ends the session (and is never forwarded); anything else releases what was
    held, in order, so no keystroke is lost or reordered.
    """

    def __init__(self, sequence: bytes) -> None:
        if not sequence:
            raise ValueError("the detach sequence must not be empty")
        self._sequence = sequence
        self._pending = bytearray()  # a held-back prefix of the sequence

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """(bytes to forward now, whether the sequence was completed)."""
        out = bytearray()
        for byte in data:
            self._pending.append(byte)
            # Release from the front until what is held is a prefix of the sequence again
            # (the sequence may overlap itself, e.g. "aab" typed as "aaab").
            while self._pending and not self._sequence.startswith(self._pending):
                out.append(self._pending.pop(0))
            if len(self._pending) == len(self._sequence):
                self._pending.clear()
                return bytes(out), True
        return bytes(out), False


__all__ = ["DEFAULT_DETACH_KEYS", "EscapeDetector", "parse_detach_keys"]
