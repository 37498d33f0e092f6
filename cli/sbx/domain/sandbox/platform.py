"""sbx@1, the sandbox agent platform: the workload's agent is launched by the host under
``bash`` (so the image's ``BASH_ENV`` is sourced), as the image's own user, never as PID 1
(the sandbox's init is), with the workspace at the image's WORKDIR."""

from __future__ import annotations

import stat
from collections.abc import Sequence
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.kits.types import SBX

BASH: Final = "/bin/bash"
# A non-interactive bash reads $BASH_ENV before running its command, then the agent replaces it.
_EXEC_ARGS: Final = ('exec "$@"', "sbx-agent")


def declares_platform(composition: Any, workload: str) -> bool:
    """Whether the workload (the only kit that may) declares sbx@1."""
    return any(entry.type == SBX and any(o.kit == workload for o in entry.origins)
               for entry in composition.others)


def agent_launch(argv: Sequence[str]) -> tuple[str, ...]:
    """The agent's argv as the platform launches it: through bash, each element unchanged."""
    return (BASH, "-c", *_EXEC_ARGS, *argv)


def check_platform_bash(st_mode: int | None, workload: str) -> None:
    """The platform launches the agent with /bin/bash: an image without it would only fail
    at start, with the shell's own exit 127."""
    if st_mode is not None and (stat.S_ISLNK(st_mode) or (
            stat.S_ISREG(st_mode) and st_mode & 0o111)):
        return  # a link is taken on trust: following it would be a second probe
    found = "has no /bin/bash" if st_mode is None else "has a /bin/bash that is not an " \
        "executable file"
    raise SbxError(Reason.PLATFORM_UNMET,
                   f"{workload} declares {SBX}, whose agent is launched with {BASH}, and its "
                   f"image {found}",
                   hint=f"Install bash in {workload}'s dockerfile (e.g. `RUN apt-get install -y "
                        f"bash`), or drop {SBX} from its descriptor.")


def check_platform_image(image_user: str, workload: str) -> None:
    """The image's side of the contract sbx can see before anything starts: a named user."""
    if not image_user.strip():
        raise SbxError(Reason.PLATFORM_UNMET,
                       f"{workload} declares {SBX}, whose agent runs as the image's own user, "
                       "and its image sets no USER",
                       hint=f"Add `USER agent` (an account of the image's /etc/passwd) to "
                            f"{workload}'s dockerfile, or drop {SBX} from its descriptor.")


__all__ = ["BASH", "agent_launch", "check_platform_bash", "check_platform_image",
           "declares_platform"]
