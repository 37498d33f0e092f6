"""`sbx mcp serve`: sbx's sandboxes as MCP tools for an orchestrating agent, over stdio
(the tools: sbx.usecases.mcptools; the wire: sbx.seams.mcpwire)."""

from __future__ import annotations

import sys

import typer

from sbx.usecases import mcptools


def serve(ctx: typer.Context) -> int:
    """Serve MCP on stdin/stdout (JSON-RPC, one message a line) until stdin ends.

    Tools: run (a one-shot command, its exit code and bounded output), create, exec, stop, rm,
    ls, cp. A refusal is a tool error carrying its reason code and fix hint. stdout carries
    only the protocol; sbx's own words go into each tool's result.
    """
    app = ctx.obj
    mcptools.serve(app, sys.stdin.buffer, app.renderer.protocol)
    return 0


__all__ = ["serve"]
