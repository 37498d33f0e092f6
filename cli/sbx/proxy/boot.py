"""``python -m sbx.proxy.boot HOME``: the proxy started in a container on the engine, where it
cannot read the CLI host's state home. Its stdin brings what it would have read there.

The first line is the byte count of a tar that follows at once: the proxy's state (its config
as ``proxy.json``, the CA, anything else the config names under HOME). It is unpacked into
HOME (the container's tmpfs: nothing of it reaches the engine's disk), and the proxy then
starts as :func:`sbx.proxy.process.main` does, with the rest of stdin as its owner pipe."""

from __future__ import annotations

import io
import os
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from sbx.proxy import process
from sbx.proxy.server import write_stderr

MAX_STATE_BYTES: Final = 16 * 1024 * 1024
CONFIG_NAME: Final = "proxy.json"


def read_state(fd: int, home: Path) -> str | None:
    """Unpack the state tar from ``fd`` into ``home``; why not, or None when done."""
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(header) > 20:
            return "stdin ended before the state's length"
        header += byte
    try:
        size = int(header)
    except ValueError:
        return "the state's length is not a number"
    if not 0 < size <= MAX_STATE_BYTES:
        return f"the state's length {size} is out of range"
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(65536, size - len(data)))
        if not chunk:
            return "stdin ended inside the state"
        data += chunk
    os.umask(0o077)  # the data filter gives directories the default mode: this one's private
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as tar:
            tar.extractall(home, filter="data")  # no links out, no devices, no owners
    except (tarfile.TarError, OSError) as error:
        return f"the state does not unpack: {error}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        write_stderr("usage: python -m sbx.proxy.boot HOME (stdin: the state, then the "
                     "owner's pipe)")
        return 2
    home = Path(args[0])
    refused = read_state(sys.stdin.fileno(), home)
    if refused is not None:
        write_stderr(refused)
        return 2
    return process.main([str(home / CONFIG_NAME)])


if __name__ == "__main__":
    sys.exit(main())
