"""``credential@1`` ``oauth.credentialFile``: the sentinel credential file in the sandbox.

A credential bound in its OAuth mode (:mod:`sbx.domain.credentials.oauth`) whose kit declares a
``credentialFile``
gets that file, rendered with the sentinels (never a token), at the declared path, 0600 and owned
by the sandbox user: ``~/…`` (or a relative path) in the sandbox's HOME, an absolute path as it
is. HOME is a mount made at every start, so a file there is put in place by the start-up step of
:mod:`sbx.domain.sandbox.mountedfiles`, like any kit file on such a mount.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path

from sbx.domain.credentials.oauth import OAuthConfig, home_relative, render_credential_file
from sbx.domain.credentials.oauthstore import OAuthStore
from sbx.domain.kits.compose import Composition
from sbx.domain.sandbox.lifecycle import KitFile


def credential_files(composition: Composition, modes: Mapping[str, str], state_home: Path,
                     *, home: str, now: float | None = None) -> list[KitFile]:
    """The OAuth credential files (sentinels only), at their paths in the sandbox."""
    store = OAuthStore(state_home)
    files: list[KitFile] = []
    seen: set[str] = set()
    for credential in composition.credentials:
        service = credential.service
        if modes.get(service) != "oauth":
            continue
        declared = OAuthConfig.from_credential(service, credential.config)
        if declared is None or declared.credential_file is None:
            continue
        path = declared.credential_file.path
        if path in seen:
            continue
        seen.add(path)
        relative = home_relative(path)
        if relative is None and not path.startswith("/"):
            relative = path.strip("/")
        target = posixpath.join(home, relative) if relative is not None else path
        where = f"{credential.declared_at or f'capabilities[{credential.index}]'}" \
                ".config.oauth.credentialFile"
        files.append(KitFile(kit=credential.kit, where=where, path=target,
                             content=render_credential_file(declared, store.get(service),
                                                            now=now),
                             mode=0o600))
    return files


__all__ = ["credential_files"]
