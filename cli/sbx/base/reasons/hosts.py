"""Commands on the host (secret sources, logins) and the engine host (SSH keys, plain TCP,
remote engines)."""

from __future__ import annotations

from typing import Final

from sbx.base.reasons.codes import ExitStatus, Reason, ReasonInfo

_R = Reason
_E = ExitStatus

ENTRIES: Final[dict[Reason, ReasonInfo]] = {
    _R.COMMAND_TIMEOUT: ReasonInfo(
        "Host command timed out",
        "A command sbx runs on the host for you (a secret's `--from-command`, a Docker "
        "credential helper) did not finish within its time. sbx ended it together with "
        "everything it started (its whole session, and what left the session) and used none "
        "of its output.",
        "Run the command named in the message yourself and see why it hangs (a prompt waiting "
        "for input, a network call, a lock), make it finish on its own, or store the value "
        "itself: `printf %s \"$VALUE\" | sbx secret set SERVICE`.",
        _E.REFUSED,
    ),
    _R.LOGIN_FAILED: ReasonInfo(
        "Agent login failed",
        "`sbx secret login claude|codex|gemini` runs the agent's own OAuth login on the host "
        "(a browser code to paste, or Codex's device code) and the provider, or the way to it, "
        "did not complete it: the code was missing, expired or from another login, the token "
        "endpoint refused the grant or could not be reached (through [network] upstream_proxy "
        "when set), or its answer held no access token. Nothing was stored; an earlier login "
        "of the service stays as it was.",
        "Run the login again and paste the code of that attempt. Or log in with the agent "
        "itself on the host and import its file: `sbx secret login claude --from-file "
        "~/.claude/.credentials.json` (codex: ~/.codex/auth.json, gemini: "
        "~/.gemini/oauth_creds.json).",
        _E.FAILED,
    ),
    _R.ENGINE_HOST_KEY: ReasonInfo(
        "Engine host's key not trusted",
        "The engine is reached over ssh, and ssh refused the host's key: it is not in your "
        "known hosts, or it changed since you accepted it. sbx checks host keys as ssh does and "
        "never accepts one itself (it runs ssh without prompts).",
        "Check the key's fingerprint with the host's owner, then accept it once by hand: "
        "`ssh USER@HOST true` (the message names the exact command).",
        _E.REFUSED,
    ),
    _R.ENGINE_PLAIN_TCP: ReasonInfo(
        "Unprotected engine connection",
        "DOCKER_HOST (or the docker context) names an engine on another host over plain tcp, "
        "or over TLS with verification skipped: the calls travel unencrypted or to whoever "
        "answers, and whoever reaches the port owns the engine.",
        "Use TLS with verification (`export DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=DIR`) or "
        "ssh:// (`export DOCKER_HOST=ssh://USER@HOST`); to accept the risk knowingly: "
        "`export SBX_ENGINE_PLAIN_TCP=allow`.",
        _E.REFUSED,
    ),
    _R.ENGINE_UNKNOWN: ReasonInfo(
        "No such engine",
        "`--engine NAME` names an engine that is not in the [engines] table of sbx's config "
        "file, or names one for a sandbox that lives on another engine (a sandbox stays on the "
        "engine it was created on).",
        "Pick a name the message lists (`sbx config` shows the [engines] table), or add it: "
        "`NAME = \"ssh://USER@HOST\"` under [engines] in the config file; for an existing "
        "sandbox leave --engine out.",
        _E.REFUSED,
    ),
    _R.RESIDENT_UNAVAILABLE: ReasonInfo(
        "Resident helper could not start",
        "`sbx resident start` could not start this user's resident helper: its directory "
        "($XDG_RUNTIME_DIR/sbx, or /tmp/sbx-resident-UID without XDG_RUNTIME_DIR) is not a "
        "directory of yours closed to everyone else (mode 0700, not a link), or the helper "
        "exited before it served (its log, resident.log in that directory, says why). sbx "
        "works without the helper: every command runs in its own process as before.",
        "Make the directory yours and private (`chmod 700 DIR`, or remove it and let sbx make "
        "it); if another user made it, point sbx at a directory of yours (`export "
        "XDG_RUNTIME_DIR=DIR`, mode 0700); read resident.log in it, then `sbx resident start` "
        "again; or go on without the helper.",
        _E.REFUSED,
    ),
    _R.RESIDENT_LOST: ReasonInfo(
        "Resident helper lost during a command",
        "The command was handed to this user's resident helper, and the helper and the "
        "command both ended without reporting an exit status (killed, for example by the "
        "out-of-memory killer or `kill -9`). Its sandbox, if it made one, is removed by its "
        "own cleanup or by `sbx gc`.",
        "Run the command again: with no helper listening it runs in its own process; "
        "`sbx resident start` starts a new helper, `SBX_RESIDENT=0` bypasses it.",
        _E.FAILED,
    ),
    _R.ENGINE_NOT_LOCAL: ReasonInfo(
        "Needs an engine on this machine",
        "The engine is on another host (ssh://, or tcp:// to another address), and the run "
        "needs something that only exists where sbx runs: a workspace or --mount bound from "
        "this machine's disk, a sized volume staged here, a published port, or a part of "
        "egress only this machine serves today (a named sandbox's proxy, OAuth credentials, "
        "the SSH agent relay, the kit registry). A one-shot run's egress itself works there: "
        "its proxy runs beside the sandbox. sbx refuses instead of starting it with an empty "
        "workspace or without its egress boundary.",
        "Copy the workspace in instead of binding it (`sbx run WORKLOAD WORKSPACE "
        "--workspace-mode copy`; `sbx cp NAME:PATH DEST` brings results back), run it as a "
        "one-shot run (`sbx run --rm WORKLOAD`) with API-key credentials, or use the local "
        "engine (`unset DOCKER_HOST DOCKER_CONTEXT`).",
        _E.REFUSED,
    ),
    _R.ENGINE_UNSUPPORTED: ReasonInfo(
        "Engine that sbx does not run sandboxes on",
        "The Docker API is answered by an engine other than Docker's (Podman's "
        "`podman system service`). Measured with Debian's Podman 4.3: it refuses the tmpfs "
        "owner options of the sandbox's HOME and /tmp and sets its own rlimits, so sbx cannot "
        "make there the hardened container it checks. sbx refuses instead of running a "
        "different one. Commands that do not start a sandbox (ls, gc, explain, doctor) still "
        "work.",
        "Point sbx at a Docker engine: `export DOCKER_HOST=unix:///var/run/docker.sock` (or "
        "`unset DOCKER_HOST DOCKER_CONTEXT` for the default one).",
        _E.REFUSED,
    ),
    _R.RUNTIME_MISSING: ReasonInfo(
        "Runtime not on the engine",
        "The run asks for an OCI runtime (`--runtime NAME` or `[sandbox] runtime`: gVisor's "
        "runsc, Kata, crun...) that the engine has not registered (`docker info` lists its "
        "Runtimes). sbx refuses before anything is created instead of running the sandbox on "
        "the engine's default runtime (usually runc), which would give it weaker isolation "
        "than asked for without saying so.",
        "Register the runtime with the engine, e.g. add `\"runtimes\": {\"runsc\": "
        "{\"path\": \"/usr/bin/runsc\"}}` to /etc/docker/daemon.json and `sudo systemctl "
        "reload docker` (or start dockerd with `--add-runtime runsc=/usr/bin/runsc`); or "
        "choose one it has: `sbx doctor` lists them.",
        _E.REFUSED,
    ),
}

__all__ = ["ENTRIES"]
