"""The ``sbx`` command: handed to this user's resident helper when one runs for this
installation and may serve it (sbx.resident, started by ``sbx resident start``), else run here.
Without a helper this costs one failed connect; ``SBX_RESIDENT=0`` skips even that."""

from __future__ import annotations

import os
import sys

from sbx.seams import resident


def main() -> None:
    served = None
    if os.environ.get("SBX_RESIDENT", "") != "0":
        # sys.path[0] is this console script's directory; the helper runs without it (-P).
        served = resident.hand_over(sys.argv[1:], os.environ, sys.path[1:])
    status = served.wait() if served is not None else None
    if status == resident.DECLINED:
        served = None  # given back before any of it ran: run it here
    elif served is not None and status is not None:
        sys.exit(status)
    # deferred: a command the helper serves never loads the CLI in this process
    from sbx import __main__ as entry

    if served is not None:  # the helper and the command both ended without a status
        sys.exit(entry.lost_helper(sys.argv[1:]))
    entry.main()


if __name__ == "__main__":
    main()
