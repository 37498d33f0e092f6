"""The host's POSTs of an agent login (:mod:`sbx.domain.credentials.agentlogins`), over
requests: through ``[network] upstream_proxy`` when one is set (the way sandboxes leave a
corporate network), trusting its ``upstream_ca_file`` beside requests' own CA bundle."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

TIMEOUT_S: Final = 30.0
MAX_ANSWER_BYTES: Final = 1024 * 1024


@dataclass(frozen=True)
class Answer:
    status: int
    data: Any  # the parsed JSON body, None when it is not JSON


@contextlib.contextmanager
def _bundle(ca_file: Path | None) -> Iterator[str | bool]:
    """requests' ``verify``: its own bundle, plus the upstream proxy's CA when there is one."""
    if ca_file is None:
        yield True
        return
    import certifi

    try:
        extra = ca_file.read_bytes()
    except OSError as error:
        raise SbxError(Reason.INVALID_CONFIG, f"cannot read [network] upstream_ca_file "
                       f"{ca_file}: {error.strerror}") from None
    fd, name = tempfile.mkstemp(prefix="sbx-login-ca-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(Path(certifi.where()).read_bytes() + b"\n" + extra)
        yield name
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def post(url: str, content_type: str, body: bytes, *, upstream_proxy: str | None,
         ca_file: Path | None, timeout: float = TIMEOUT_S) -> Answer:
    """One POST; ``login_failed`` naming the host when it cannot be made (never the body)."""
    import requests

    host = url.split("/", 3)[2] if "://" in url else url
    proxies = {"https": upstream_proxy, "http": upstream_proxy} if upstream_proxy else None
    try:
        with _bundle(ca_file) as verify, requests.Session() as session:
            session.trust_env = False  # sbx's config decides the route, not HTTPS_PROXY
            response = session.post(url, data=body, timeout=timeout, proxies=proxies,
                                    verify=verify, allow_redirects=False, stream=True,
                                    headers={"Content-Type": content_type,
                                             "Accept": "application/json"})
            raw = response.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True)
            status = response.status_code
    except requests.RequestException as error:
        raise SbxError(Reason.LOGIN_FAILED, f"cannot reach {host}: {type(error).__name__}",
                       hint="Check the network (and [network] upstream_proxy when sbx must "
                            "go through a proxy), then log in again.",
                       details={"host": host}) from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise SbxError(Reason.LOGIN_FAILED, f"{host} answered more than {MAX_ANSWER_BYTES} "
                       "bytes", details={"host": host})
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        data = None
    return Answer(status, data)


__all__ = ["MAX_ANSWER_BYTES", "TIMEOUT_S", "Answer", "post"]
