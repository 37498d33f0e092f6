"""One context object per invocation, built by the CLI callback and passed explicitly.

The engine driver is created lazily, on first use, so commands that do not need the engine
(``--help``, ``explain REASON``, config checks) never import the docker SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from sbx.base import paths
from sbx.seams import owned
from sbx.seams.session.mode import HostStreams
from sbx.seams.state import check_home
from sbx.seams.tracing import TracingDriver

if TYPE_CHECKING:
    from sbx.base.config import Config
    from sbx.base.render import Renderer
    from sbx.seams.engine import Driver

NO_STREAMS = HostStreams(stdin_fd=None, stdin_is_terminal=False, stdout_is_terminal=False)


def _docker_driver(env: Mapping[str, str]) -> Driver:
    # The engine transport (socket or SDK): opened only once a command talks to the engine.
    from sbx.seams.transports import open_engine

    return open_engine(env)


@dataclass(frozen=True)
class AppContext:
    env: Mapping[str, str]
    cwd: Path
    renderer: Renderer
    as_json: bool = False
    verbose: int = 0
    traceback: bool = False
    driver_factory: Callable[[Mapping[str, str]], Driver] = field(default=_docker_driver)
    passthrough: tuple[str, ...] | None = None  # the ARGS after `--`
    streams: HostStreams = NO_STREAMS  # sbx's own stdin/stdout, for interactive runs
    argv: tuple[str, ...] | None = None  # the words before `--`: the plan cache's key

    @cached_property
    def driver(self) -> Driver:
        driver = self.driver_factory(self.env)
        if self.verbose >= 2:  # -vv: every engine call (-v alone is sbx's own detail)
            traced: Driver = TracingDriver(driver, self.renderer.trace)
            return traced
        return driver

    @cached_property
    def state_home(self) -> Path:
        """The state home, refused when it exists but is not a directory
        (``state_unwritable``) or is not this user's alone (``state_unsafe``); a missing one
        is created by the first write."""
        home = paths.state_home(self.env)
        source = paths.state_home_source(self.env)
        check_home(home, source)
        owned.check_home(home, source)
        return home

    @cached_property
    def home_hash(self) -> str:
        return paths.home_hash(self.state_home)

    def load_config(self) -> Config:
        # Read afresh by every command (no daemon), so an edit applies to the next run.
        # deferred: the config loader (jsonschema) and its verdicts; `sbx --help` and a cached
        # run load none
        from sbx.usecases.configverdicts import load_config

        return load_config(self.env)


__all__ = ["NO_STREAMS", "AppContext"]
