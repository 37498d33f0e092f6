"""What an owner may say to its proxy after the owner pipe's first line: one line per
message, ``<TAG> <base64>``. Today that is the user policy's new text (``sbx policy``
changed it on the owner's host), for a proxy in a container that cannot see that file.
Both sides use these functions; anything else on the pipe is ignored."""

from __future__ import annotations

import base64
import binascii
from typing import Final

POLICY: Final = "SBX-POLICY"
MAX_LINE_BYTES: Final = 12 * 1024 * 1024  # an 8 MiB policy file, in base64


def encode_policy(text: bytes) -> bytes:
    return f"{POLICY} ".encode("ascii") + base64.b64encode(text) + b"\n"


def decode_policy(line: bytes) -> bytes | None:
    """The policy text a line carries; None for any other line."""
    tag, _, payload = line.rstrip(b"\n").partition(b" ")
    if tag != POLICY.encode("ascii"):
        return None
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None


__all__ = ["MAX_LINE_BYTES", "POLICY", "decode_policy", "encode_policy"]
