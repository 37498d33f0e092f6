"""The distribution role through the docker SDK: push and pull, with the user's registry
credentials."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.engine import (
    ImageInfo,
    registry_chunk,
    split_tag,
)
from sbx.seams.enginebounds import (
    json_lines,
    stream,
)

if TYPE_CHECKING:


    pass

from sbx.seams.driver.images import SdkImages


class SdkDistribution(SdkImages):
    """Distribution (:class:`sbx.seams.engine.Distribution`); a pull answers with the pulled
    image, hence built on the images role."""

    def push_image(self, ref: str, on_line: Callable[[str], None]) -> None:
        """Push a local tag to its registry; the stream's errors become reason-coded errors."""
        repository, tag = split_tag(ref)
        auth = self._auth_config(ref)
        with self._engine_errors(f"pushing {ref}", Reason.REGISTRY_UNREACHABLE,
                                 stream(self._env)), \
                closing(self._api.push(repository, tag=tag, stream=True, decode=False,
                                       auth_config=auth)) as pieces:
            for chunk in json_lines(pieces):
                if isinstance(chunk, dict):
                    registry_chunk(f"pushing {ref}", chunk, on_line)

    def _auth_config(self, ref: str) -> dict[str, str] | None:
        """The user's Docker credentials for ``ref``'s registry host, as the SDK's
        ``auth_config``; None for anonymous access."""
        first = ref.split("/", 1)[0]
        explicit = "/" in ref and ("." in first or ":" in first or first == "localhost")
        found = self._credentials(first if explicit else "docker.io")
        return None if found is None else dict(found)

    def pull_image(self, ref: str, on_line: Callable[[str], None]) -> ImageInfo:
        """Pull ``ref`` (best ``repo@sha256:...``) with progress lines; return the image."""
        auth = self._auth_config(ref)
        with self._engine_errors(f"pulling {ref}", Reason.REGISTRY_UNREACHABLE,
                                 stream(self._env)), \
                closing(self._api.pull(ref, stream=True, decode=False,
                                       auth_config=auth)) as pieces:
            for chunk in json_lines(pieces):
                if isinstance(chunk, dict):
                    registry_chunk(f"pulling {ref}", chunk, on_line)
        image = self.image(ref)
        if image is None:
            raise SbxError(Reason.IMAGE_MISSING, f"pulling {ref} left no image")
        return image


__all__ = ["SdkDistribution"]
