"""Failures once a run is under way (build, hooks, create, start, proxy, cleanup) and of the
state home."""

from __future__ import annotations

from typing import Final

from sbx.base.reasons.codes import ExitStatus, Reason, ReasonInfo

_R = Reason
_E = ExitStatus

ENTRIES: Final[dict[Reason, ReasonInfo]] = {
    _R.BUILD_FAILED: ReasonInfo(
        "Kit image build failed",
        "The engine could not build the kit's dockerfile.",
        "Read the last lines of the build output shown with the error (the `log_tail` field "
        "under --json); fix the dockerfile, or make its base image present locally "
        "(`docker pull IMAGE` or `docker load`).",
        _E.FAILED,
    ),
    _R.HOOK_FAILED: ReasonInfo(
        "Kit lifecycle hook failed",
        "An install or startup hook of a kit exited non-zero. The message names the kit and "
        "the hook's position in its lifecycle@1 capability.",
        "Read the hook's output above the error and fix the kit's command (or its inputs, "
        "such as --arg values).",
        _E.FAILED,
    ),
    _R.CREATE_FAILED: ReasonInfo(
        "Engine refused to create the container",
        "The engine rejected the sandbox container's configuration.",
        "Read the engine's message; `sbx doctor` checks the engine's support for the "
        "hardening options.",
        _E.FAILED,
    ),
    _R.START_FAILED: ReasonInfo(
        "Engine could not start the container",
        "The container was created but the engine failed to start it (e.g. the entrypoint "
        "does not exist in the image).",
        "Check the image's ENTRYPOINT/CMD or the command given after `--`.",
        _E.FAILED,
    ),
    _R.PROXY_FAILED: ReasonInfo(
        "Egress proxy failed",
        "The egress proxy for the sandbox could not start or died; the sandbox does not start "
        "(or loses egress) without it.",
        "Run `sbx doctor` to check that the proxy can bind; see the audit log for details.",
        _E.FAILED,
    ),
    _R.TIMEOUT: ReasonInfo(
        "Run timed out",
        "The workload ran longer than its time limit and was killed.",
        "Raise `--timeout SECONDS` or `[sandbox] timeout_ms` in the config file.",
        _E.TIMEOUT,
    ),
    _R.EGRESS_DENIED: ReasonInfo(
        "Egress denied at the boundary",
        "A request from the sandbox matched no allow rule, or matched a deny rule, of the "
        "kits' network policy.",
        "Run the `sbx explain` command printed in the 403 body to see the deciding rule and "
        "the smallest change that would allow it.",
        _E.DENIED,
    ),
    _R.CLEANUP_FAILED: ReasonInfo(
        "Cleanup failed",
        "sbx could not remove something it created (a container, network, volume or run "
        "directory).",
        "Run `sbx gc` (it removes what crashed or failed runs left behind, by label only).",
        _E.FAILED,
    ),
    _R.INVALID_ARGUMENT: ReasonInfo(
        "Invalid argument",
        "A command-line value is malformed or names something that does not exist.",
        "Correct the value named in the message; `sbx COMMAND --help` lists the forms.",
        _E.USAGE,
    ),
    _R.INTERRUPTED: ReasonInfo(
        "Interrupted",
        "sbx received Ctrl-C or SIGTERM; everything the run had created was removed.",
        "Run again; `sbx gc` removes anything a hard kill left behind.",
        _E.INTERRUPTED,
    ),
    _R.INTERNAL_ERROR: ReasonInfo(
        "Unexpected error in sbx",
        "sbx hit a bug. A report with versions and the traceback was written to a file.",
        "Attach the report file named in the message to a bug report; rerun with "
        "`--traceback` to see the traceback on screen.",
        _E.INTERNAL,
    ),
    _R.SECRET_STORE_UNSAFE: ReasonInfo(
        "Secret store unsafe",
        "A file or directory of sbx's secret store is a symlink, not a regular file, owned by "
        "another user, readable or writable by other users, or cannot be written, so sbx will "
        "not read a value from it or store one in it.",
        "Follow the fix printed with the message: remove the named path or `chmod 600` it, and "
        "rotate the secret if someone else could have read it.",
        _E.REFUSED,
    ),
    _R.REGISTRY_UNREACHABLE: ReasonInfo(
        "Registry unreachable",
        "sbx could not reach the registry named in the reference (nothing listens there, the "
        "connection broke, or it answered with a server error), so nothing was pulled or "
        "pushed and the lock was not changed.",
        "Check the reference's host and port and that the registry is running, then retry.",
        _E.REFUSED,
    ),
    _R.WORKSPACE_UNWRITABLE: ReasonInfo(
        "Workspace not writable by the sandbox user",
        "The workspace is mounted read-write, but the user the sandbox would run as cannot "
        "create files in it (it belongs to root, or --user names someone else). sbx refuses "
        "instead of giving the agent a workspace that is read-only in practice.",
        "Run on a directory you own (the sandbox then runs as its owner), pass --access ro, "
        "drop or change --user, or for a root-owned workspace set `[sandbox] root_workspace "
        '= "sandbox-user"` in the config file.',
        _E.REFUSED,
    ),
    _R.DETACHED: ReasonInfo(
        "Session ended from the host",
        "The detach keys (default ctrl-p,ctrl-q; `--detach-keys` or `[sandbox] detach_keys`) "
        "were typed in a TTY session. A one-shot sandbox cannot outlive its session, so the "
        "workload was stopped and everything the run created was removed.",
        "Nothing to fix; to type the keys themselves in the sandbox, choose other detach keys.",
        _E.INTERRUPTED,
    ),
    _R.STOPPED_IDLE: ReasonInfo(
        "Stopped for being idle",
        "The named sandbox's idle stop (`[sandbox] idle_stop` or `--idle-stop`) was set and "
        "for that long it had no client (no `sbx run`/`attach`/`exec` session), sent no "
        "request through its egress proxy and used almost no CPU, so its keeper stopped it "
        "as `sbx stop` does. Its files, HOME and volumes are kept.",
        "Start it again: `sbx start NAME` (or `sbx run --name NAME WORKLOAD`); to keep it "
        "running, raise or unset `[sandbox] idle_stop` (`--idle-stop` at creation).",
        _E.INTERRUPTED,
    ),
    _R.ENGINE_LOST: ReasonInfo(
        "Lost the engine during a run",
        "The connection to the Docker engine broke after sbx had created the sandbox (the "
        "engine stopped, restarted or its socket went away). The workload's outcome is "
        "unknown; what sbx could not remove is named in the message.",
        "Start the engine again (`docker version` must answer), then run `sbx gc` to remove "
        "what the run left behind.",
        _E.FAILED,
    ),
    _R.OUTPUT_CLOSED: ReasonInfo(
        "Output closed by its reader",
        "Whoever read sbx's output went away (e.g. `sbx run ... | head -1`). sbx stopped the "
        "workload quietly, removed everything the run created, and exits 141 as a shell "
        "pipeline does for SIGPIPE.",
        "Nothing to fix; keep the reader open until the run ends if the rest of the output "
        "matters.",
        _E.OUTPUT_CLOSED,
    ),
    _R.STATE_UNWRITABLE: ReasonInfo(
        "State home not writable",
        "sbx could not write to its state home (SBX_HOME, else $XDG_STATE_HOME/sbx: the audit "
        "log, run records, caches, the kit lock): the disk or quota is full, the filesystem is "
        "read-only, this user may not write there, or the state home is not a directory. "
        "sbx refuses rather than run a sandbox it could not record (gc finds what runs leave "
        "by those records).",
        "Follow the fix printed with the message: free space, fix the directory's owner and "
        "mode, or point SBX_HOME at a writable directory (it is created if missing).",
        _E.REFUSED,
    ),
    _R.STATE_CORRUPT: ReasonInfo(
        "State file damaged",
        "A file in sbx's state home (the kit lock, a pulled kit's stored descriptor) is not "
        "what sbx wrote: not UTF-8, not JSON, the wrong shape, or nested too deeply. sbx does "
        "not guess past it or replace it silently: a kit lock read as empty would forget the "
        "permissions you approved.",
        "Move the named file aside (keep it to inspect), then `sbx pull` the kits again; "
        "`sbx gc` keeps working and never deletes on doubt.",
        _E.REFUSED,
    ),
    _R.STATE_UNSAFE: ReasonInfo(
        "State not sbx's own",
        "A directory or file sbx would trust in its state home (a cached plan or verdict, a "
        "record, the kit lock, a lock, the audit log) could have been written or swapped by "
        "someone else: the home or a directory on the way to it is owned by another user or "
        "writable by its group or others, or the file is a symlink, not a regular file, "
        "another user's, hard-linked or writable by others. sbx does not read it, not even as "
        "a cache miss.",
        "Follow the fix printed with the message: `chmod go-w PATH` on a directory you own, "
        "remove a file that is not yours, or point SBX_HOME at a directory you own.",
        _E.REFUSED,
    ),
}

__all__ = ["ENTRIES"]
