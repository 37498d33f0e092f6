"""--clone sandboxes: their own git checkout of the workspace's repository, on branch
``sbx/NAME`` from the host's HEAD, brought in as a bundle through the engine's archive
endpoint (no host mount, so a remote engine works the same); `sbx diff` and `sbx fetch`.

The host runs git only on what it made or verified: its own repository to bundle HEAD, and
a bundle file from the sandbox, checked to hold one ref, fetched with hooks off and the work
tree untouched.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.sandbox.clonegit import branch_of, bundle_commit, start_commit
from sbx.domain.sandbox.copyin import archive_of
from sbx.domain.sandbox.records import SandboxRecord
from sbx.seams.host.git import CommandTimeout, host_git
from sbx.seams.host.processes import Finished
from sbx.usecases import fleet
from sbx.usecases.context import AppContext
from sbx.usecases.named.clonehelper import git_container
from sbx.usecases.named.listing import load_named
from sbx.usecases.sandboxstore import SandboxStore

GIT_TIMEOUT_S = 120
MAX_BUNDLE_BYTES = 4 << 30
MAX_OUTPUT_BYTES = 64 << 20
# Host git on a bundle from the sandbox: no hook, no fsmonitor, whatever the host's config.
SAFE_GIT = ("git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def host_repository(ctx: AppContext, workspace: str) -> tuple[str, str]:
    """(top level, start commit) of the workspace's repository, or refused."""
    path = workspace if os.path.isabs(workspace) else os.path.join(ctx.cwd, workspace)
    top = _host_git(["git", "-C", path, "rev-parse", "--show-toplevel"])
    if top.returncode != 0:
        if b"dubious ownership" in top.stderr:  # git's safe.directory: another user's repo
            raise SbxError(Reason.NOT_A_REPOSITORY,
                           f"git refuses the repository at {workspace}: another user owns it",
                           hint="Run sbx as the repository's owner (git reads an owner's "
                                "config only for that owner), or run without --clone.")
        raise SbxError(Reason.NOT_A_REPOSITORY, f"{workspace} is not in a git repository",
                       hint=f"git -C {workspace} init  (or run without --clone)")
    root = top.stdout.decode().strip()
    head = _host_git(["git", "-C", root, "rev-parse", "--verify", "-q", "HEAD^{commit}"])
    return root, start_commit(workspace, head.returncode, head.stdout.decode())


def seed(ctx: AppContext, name: str, root: str, base: str) -> None:
    """Clone the host repository's HEAD into the new sandbox's workspace on ``sbx/NAME``."""
    store = SandboxStore(ctx.state_home)
    record = store.load(name)
    if record is None:
        raise SbxError(Reason.STATE_CORRUPT, f"{name} has no record after its creation")
    _require_git(ctx, record, str(record.container_id))
    home, target = _home(record), str(record.request.get("workspace_target") or "/workspace")
    with tempfile.TemporaryDirectory(prefix="sbx-clone-") as tmp:
        bundle = Path(tmp) / "seed.bundle"
        made = _host_git(["git", "-C", root, "bundle", "create", "-q", str(bundle), "HEAD"])
        if made.returncode != 0:
            raise SbxError(Reason.START_FAILED, f"git bundle of {root} failed: "
                           f"{made.stderr.decode(errors='replace').strip()}")
        uid, _, gid = str(record.request.get("user") or "0:0").partition(":")
        archive, _count = archive_of(bundle, ".sbx-seed.bundle", uid=int(uid or 0),
                                     gid=int(gid or 0), max_bytes=MAX_BUNDLE_BYTES)
        with archive:
            ctx.driver.archive_write(str(record.container_id), home, archive)
    inside = f"{home}/.sbx-seed.bundle"
    branch = branch_of(name)
    script = ('set -e; git clone -q --no-checkout "$1" "$2/.sbx-clone"; '
              'mv "$2/.sbx-clone/.git" "$2/.git"; rmdir "$2/.sbx-clone"; cd "$2"; '
              'git checkout -q -b "$3" "$4"; git remote remove origin; rm -f "$1"')
    code, _out, err = _in_sandbox(ctx, record, str(record.container_id),
                                  ["sh", "-c", script, "sh", inside, target, branch, base])
    if code != 0:
        raise SbxError(Reason.START_FAILED, f"cloning into {name} failed: {err.strip()}",
                       hint=f"sbx rm -f {name}, then create it again")
    record.request["clone"] = {"repository": root, "base": base, "branch": branch,
                               "path": target}
    store.save(record)


def diff(ctx: AppContext, name: str) -> bytes:
    """The sandbox's changes, committed and not (untracked files too), against its base; a
    stopped one's through a helper (sbx.usecases.named.clonehelper)."""
    ctx = fleet.for_sandbox(ctx, name)  # on the engine it lives on
    record, clone = _clone_of(ctx, name)
    # A throwaway index and object store (on /tmp, the clone's objects read through them):
    # untracked files show, the sandbox's own index is untouched and a read-only clone works.
    script = ('set -e; cd "$1"; t="$(mktemp -d)"; trap \'rm -rf "$t"\' EXIT; '
              'mkdir "$t/objects"; ! [ -f .git/index ] || cp .git/index "$t/index"; '
              'export GIT_INDEX_FILE="$t/index" GIT_OBJECT_DIRECTORY="$t/objects" '
              'GIT_ALTERNATE_OBJECT_DIRECTORIES="$PWD/.git/objects"; '
              'git add -A -N .; git diff --no-ext-diff "$2"')
    with git_container(ctx, record) as container:
        _require_git(ctx, record, container)
        code, out, err = _in_sandbox(ctx, record, container, [
            "sh", "-c", script, "sh", clone["path"], clone["base"]])
    if code != 0:
        raise SbxError(Reason.START_FAILED, f"git diff in {name} failed: {err.strip()}")
    return out


def fetch(ctx: AppContext, name: str, *, force: bool = False) -> dict[str, Any]:
    """The sandbox's ``sbx/NAME`` as the host repository's branch of that name."""
    ctx = fleet.for_sandbox(ctx, name)  # on the engine it lives on
    record, clone = _clone_of(ctx, name)
    branch, root = clone["branch"], clone["repository"]
    with tempfile.TemporaryDirectory(prefix="sbx-fetch-") as tmp:
        bundle = str(Path(tmp) / "fetch.bundle")
        # The bundle comes out on git's stdout, into a file of the host's, bounded.
        with git_container(ctx, record) as container, open(bundle, "wb") as sink:
            _require_git(ctx, record, container)
            code, _out, err = _in_sandbox(ctx, record, container, [
                "sh", "-c", 'cd "$1" && git bundle create -q - "refs/heads/$2"', "sh",
                clone["path"], branch], sink=sink)
        if code != 0:
            raise SbxError(Reason.START_FAILED, f"git bundle in {name} failed: {err.strip()}",
                           hint=f"sbx exec {name} -- git -C {clone['path']} log -1 {branch}")
        verified = _host_git([*SAFE_GIT, "-C", root, "bundle", "verify", "-q", bundle])
        if verified.returncode != 0:
            raise SbxError(Reason.COPY_REFUSED, f"the bundle from {name} does not verify "
                           f"against {root} (rule bundle_verify): "
                           f"{verified.stderr.decode(errors='replace').strip()}",
                           details={"rule": "bundle_verify"})
        heads = _host_git([*SAFE_GIT, "bundle", "list-heads", bundle])
        commit = bundle_commit(name, heads.stdout.decode(errors="replace"))
        ref = f"refs/heads/{branch}"
        existing = _host_git([*SAFE_GIT, "-C", root, "rev-parse", "--verify", "-q", ref])
        fetched = _host_git([*SAFE_GIT, "-C", root, "fetch", "-q", "--no-tags",
                             "--no-write-fetch-head", "--no-recurse-submodules", bundle,
                             f"{ref}:refs/sbx-fetch/{name}"])
        if fetched.returncode != 0:
            raise SbxError(Reason.COPY_REFUSED, f"git fetch from {name}'s bundle failed: "
                           f"{fetched.stderr.decode(errors='replace').strip()}")
        try:
            if existing.returncode == 0 and not force:
                old = existing.stdout.decode().strip()
                ancestor = _host_git([*SAFE_GIT, "-C", root, "merge-base", "--is-ancestor",
                                      old, commit])
                if ancestor.returncode != 0:
                    raise SbxError(Reason.BRANCH_DIVERGED, f"{root} has a branch {branch} "
                                   f"that {name}'s commits do not fast-forward",
                                   hint=f"git -C {root} branch -m {branch} {branch}-old  "
                                        f"(or sbx fetch --force {name})")
            _host_git([*SAFE_GIT, "-C", root, "update-ref", ref, commit])
        finally:
            _host_git([*SAFE_GIT, "-C", root, "update-ref", "-d", f"refs/sbx-fetch/{name}"])
    return {"sandbox": name, "repository": root, "branch": branch, "commit": commit,
            "base": clone["base"]}


def _clone_of(ctx: AppContext, name: str) -> tuple[SandboxRecord, dict[str, str]]:
    record = load_named(ctx, name, command="this command")
    clone = record.request.get("clone")
    if not isinstance(clone, dict):
        raise SbxError(Reason.NOT_A_CLONE, f"{record.name} was not created with --clone",
                       hint=f"sbx create --clone --name {record.name}-clone KIT REPO")
    return record, {k: str(v) for k, v in clone.items()}


def _require_git(ctx: AppContext, record: SandboxRecord, container: str) -> None:
    code, _out, _err = _in_sandbox(ctx, record, container, ["sh", "-c", "command -v git"])
    if code != 0:
        raise SbxError(Reason.GIT_MISSING, f"{record.name}'s image has no git",
                       hint=f"sbx rm -f {record.name}; use a kit whose image installs git")


def _home(record: SandboxRecord) -> str:
    if not record.home_volume or not record.home_volume.startswith("/"):
        raise SbxError(Reason.STATE_CORRUPT, f"{record.name} has no HOME volume to copy "
                       "through")
    return record.home_volume


def _in_sandbox(ctx: AppContext, record: SandboxRecord, container: str,
                argv: Sequence[str], *, sink: IO[bytes] | None = None) -> tuple[int, bytes, str]:
    """Run in ``container`` as the sandbox's workload user; output bounded (stdout into
    ``sink`` when given, up to a bundle's bound)."""
    user = str(record.request.get("user") or "")
    chunks, status = ctx.driver.exec_stream(container, argv, user=user, workdir=None)
    out, err = bytearray(), bytearray()
    written = 0
    for stream, data in chunks:
        if stream != "stderr" and sink is not None:
            written += len(data)
            if written > MAX_BUNDLE_BYTES:
                raise SbxError(Reason.COPY_REFUSED, f"the bundle from {record.name} is over "
                               f"{MAX_BUNDLE_BYTES} bytes")
            sink.write(data)
            continue
        kept = err if stream == "stderr" else out
        if len(kept) + len(data) > MAX_OUTPUT_BYTES:
            raise SbxError(Reason.COPY_REFUSED, f"git in {record.name} wrote more than "
                           f"{MAX_OUTPUT_BYTES} bytes")
        kept += data
    return status(), bytes(out), err.decode(errors="replace")


def _host_git(argv: Sequence[str]) -> Finished:
    try:
        return host_git(argv, timeout=GIT_TIMEOUT_S)
    except OSError as exc:
        raise SbxError(Reason.INVALID_ARGUMENT, "git is not installed on this host",
                       hint="Install git (e.g. apt-get install git)") from exc
    except CommandTimeout as exc:
        raise SbxError(Reason.COMMAND_TIMEOUT, f"{' '.join(argv[:4])} took over "
                       f"{GIT_TIMEOUT_S}s") from exc


__all__ = ["diff", "fetch", "host_repository", "seed"]
