"""``credential@1`` ``oauth.credentialFile``: the sentinel credential file in the sandbox.

A credential bound in its OAuth mode (:mod:`sbx.oauth`) whose kit declares a ``credentialFile``
gets that file, rendered with the sentinels (never a token), at the declared path:

- ``~/…`` (or a relative path): in the sandbox's HOME, which is a fresh tmpfs at every start,
  so the rendered file is baked into the per-run image under ``/.sbx/credentials/`` (root-owned,
  0644: it holds sentinels only) and copied into HOME by a startup step sbx adds before the
  kits' own startup hooks (0600, directories 0700);
- an absolute path: written into the per-run image by the create step, owned by the sandbox
  user, 0600.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from sbx.core.capabilities import CapabilityPlan
from sbx.core.lifecycle import SBX_DIR, KitFile
from sbx.kits.compose import Composition, Hook

STAGED_DIR: Final = f"{SBX_DIR}/credentials"


def credential_file_plan(composition: Composition, modes: Mapping[str, str],
                         state_home: Path, *, now: float | None = None,
                         ) -> tuple[list[KitFile], Hook | None]:
    """The files and the startup step that put each OAuth credential file in place."""
    from sbx.oauth import OAuthConfig, OAuthStore, home_relative, render_credential_file

    store = OAuthStore(state_home)
    files: list[KitFile] = []
    lines: list[str] = []
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
        content = render_credential_file(declared, store.get(service), now=now)
        where = f"{credential.declared_at or f'capabilities[{credential.index}]'}" \
                ".config.oauth.credentialFile"
        relative = home_relative(path)
        if relative is None and not path.startswith("/"):
            relative = path.strip("/")
        if relative is None:
            files.append(KitFile(kit=credential.kit, where=where, path=path, content=content,
                                 mode=0o600))
            continue
        suffix = ".toml" if declared.credential_file.format == "toml" else ".json"
        staged = f"{STAGED_DIR}/{service}-{len(files)}{suffix}"
        files.append(KitFile(kit=credential.kit, where=where, path=staged, content=content,
                             mode=0o644, owner_is_sandbox_user=False))
        target = '"$HOME"/' + shlex.quote(relative)
        directory = posixpath.dirname(relative)
        if directory:
            lines.append('mkdir -p "$HOME"/' + shlex.quote(directory))
        lines.append(f"cat {shlex.quote(staged)} > {target}")
    if not lines:
        return files, None
    script = "set -eu\numask 077\n" + "\n".join(lines) + "\n"
    hook = Hook(stage="startup", command=script, user=None, env=(), background=False,
                description="sbx: put the OAuth credential files (sentinels only) in HOME",
                config={}, kit="sbx", index=-1, position=0,
                declared_at="credential@1 oauth.credentialFile")
    return files, hook


def with_credential_files(capabilities: CapabilityPlan, files: list[KitFile],
                          hook: Hook | None) -> CapabilityPlan:
    """The capability plan with the credential files and their startup step (first, so the
    kits' own startup hooks can read the files)."""
    if not files and hook is None:
        return capabilities
    lifecycle = capabilities.lifecycle
    return dataclasses.replace(capabilities, lifecycle=dataclasses.replace(
        lifecycle, files=(*lifecycle.files, *files),
        startup=((hook,) if hook is not None else ()) + tuple(lifecycle.startup)))


__all__ = ["STAGED_DIR", "credential_file_plan", "with_credential_files"]
