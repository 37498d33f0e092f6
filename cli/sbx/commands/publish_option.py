"""`-p/--publish`: the published ports of every command that creates a sandbox (Docker's form;
parsed by sbx.domain.sandbox.publish, forwarded like a kit's port@1)."""

from __future__ import annotations

from typing import Annotated

import typer

from sbx.domain.sandbox.publish import parse_publishes

PublishOption = Annotated[list[str] | None, typer.Option(
    "--publish", "-p", metavar="[HOST_IP:][HOST_PORT:]PORT[/tcp]",
    help="Publish a container port on this machine's loopback (repeatable): 8080 (a free "
         "host port), 9000:8080, 127.0.0.1::8080. Only loopback and tcp; `sbx ports NAME` "
         "lists them.")]


def publish_words(values: list[str] | None) -> tuple[str, ...]:
    """The -p values as given, checked now so bad input is refused before anything runs."""
    words = tuple(values or ())
    parse_publishes(words)
    return words


__all__ = ["PublishOption", "publish_words"]
