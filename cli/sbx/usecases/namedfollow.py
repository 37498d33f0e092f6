"""A named sandbox's start follows its kits (sbx.usecases.namedkits) unless nothing they are
read from changed since a start found them as the sandbox runs with.

Reading the kits again means decoding the config and every descriptor and composing them; for
unchanged inputs that always finds the same: nothing to apply, ask or warn about. So when a
follow-up found nothing, the digest of everything it read is kept in the run directory, and
the next start that computes the same digest has nothing to follow. The digest covers sbx's
own code, the environment, the working directory, the sandbox's record (its kits' recorded
state and creation options), the config file's bytes, the proxy's running config and every
file of every kit directory (sbx.usecases.plancache's content digests). Kits that are not all
directories named by absolute paths (a registry reference, a short name) are followed every
time. Any change, or a follow-up that found something, is a miss: the full comparison runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sbx import __version__
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox import runrecord
from sbx.domain.sandbox.records import SandboxRecord, kit_words
from sbx.seams import owned
from sbx.usecases import plancache
from sbx.usecases.codeprint import code_fingerprint
from sbx.usecases.context import AppContext

if TYPE_CHECKING:
    from sbx.usecases.namedkits import Confirm

FOLLOWED: Final = "kits.followed"  # in the run directory: the digest of the last empty follow
FORMAT: Final = 1


def follow(ctx: AppContext, record: SandboxRecord, *, accept: bool, confirm: Confirm | None,
           on_notice: Callable[[str], None], on_warning: Callable[[str], None]) -> None:
    """What sbx.usecases.namedkits.follow does, skipped when its inputs are those of a
    follow-up that found nothing."""
    path = runrecord.run_dir(ctx.state_home, record.run_id) / FOLLOWED
    digest = inputs_digest(ctx, record)
    if digest is not None and _recorded(path) == digest:
        return
    # The kits' decoding and composition: only when something they are read from changed.
    from sbx.usecases import namedkits

    unchanged = namedkits.follow(ctx, record, accept=accept, confirm=confirm,
                                 on_notice=on_notice, on_warning=on_warning)
    if unchanged and digest is not None:
        # the record as follow() may have saved it: its digest is the one to compare later
        saved = inputs_digest(ctx, record)
        if saved == digest:
            _remember(path, digest)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def inputs_digest(ctx: AppContext, record: SandboxRecord) -> str | None:
    """The digest of what a follow-up of ``record`` reads; None when it cannot be had (then
    it is never skipped)."""
    workload, mixins = kit_words(record)
    kits = []
    for word in (workload, *mixins):
        if not os.path.isabs(word) or not os.path.isdir(word):
            return None
        tree = plancache.tree_digest(Path(word))
        if tree is None:
            return None
        kits.append([word, tree])
    run_dir = runrecord.run_dir(ctx.state_home, record.run_id)
    material = {
        "format": FORMAT, "sbx": __version__, "code": code_fingerprint(),
        "euid": os.geteuid(), "cwd": str(ctx.cwd),
        "env": sorted((k, v) for k, v in ctx.env.items() if k not in plancache.VOLATILE_ENV),
        "record": [record.name, record.run_id, record.workload, list(record.kits),
                   record.request],
        "config": plancache.config_dependency(ctx.env),
        "proxy": plancache.file_digest(run_dir / "proxy.json"),
        "kits": kits,
    }
    try:
        text = json.dumps(material, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _recorded(path: Path) -> str | None:
    try:
        raw = owned.read_bytes(path, max_bytes=256)
    except SbxError as error:
        if error.reason is Reason.STATE_UNSAFE:
            raise  # not this user's own file: refused, never a quiet miss
        return None
    except OSError:
        return None
    return raw.decode("ascii", "replace").strip() if raw else None


def _remember(path: Path, digest: str) -> None:
    with contextlib.suppress(OSError, SbxError):  # best effort: a miss only costs time
        owned.write_file(path, digest.encode("ascii"), durable=False)


__all__ = ["FOLLOWED", "follow", "inputs_digest"]
