"""The engine driver's name for :mod:`sbx.seams.host.processes`, where its credential helpers
run (the one choke point for ``subprocess``); new code imports that module."""

from __future__ import annotations

from sbx.seams.host.processes import CommandTimeout, run

__all__ = ["CommandTimeout", "run"]
