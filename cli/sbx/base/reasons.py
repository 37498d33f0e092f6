"""The one registry of reason codes and exit statuses.

Every refusal or failure sbx reports carries a :class:`Reason`. Its title, cause, fix and exit
status live here and nowhere else: errors, ``sbx explain REASON``, the man page and the tests all
read this table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


@enum.unique
class ExitStatus(enum.IntEnum):
    """sbx's own exit statuses (SPEC §3).

    A workload's own exit status is passed through unchanged; these values are the ones sbx
    itself chooses. They follow ``docker run`` where it has a convention (125 = refused before
    anything started, 126 = failed after the engine was asked to run something) so scripts that
    already know Docker read them the same way. The ``--json`` envelope's ``status`` field
    disambiguates when a workload happens to exit with one of these numbers itself.
    """

    OK = 0
    DENIED = 1  # `sbx explain` of a request that the policy denies; doctor found a failure
    USAGE = 2  # bad flags or arguments (click's convention)
    INTERNAL = 70  # an unexpected crash inside sbx (EX_SOFTWARE); a report file was written
    TIMEOUT = 124  # the run exceeded its time limit (like coreutils `timeout`)
    REFUSED = 125  # refused before anything started: config, kit, mount, engine, image...
    FAILED = 126  # the engine or sbx failed after sbx asked it to build, create or start
    INTERRUPTED = 130  # Ctrl-C / SIGTERM / SIGHUP / SIGQUIT, or a TTY session detached;
    # everything the run created was removed
    OUTPUT_CLOSED = 141  # the reader of sbx's output went away (128 + SIGPIPE, like a shell)


@dataclass(frozen=True)
class ReasonInfo:
    title: str
    cause: str
    fix: str
    exit_status: ExitStatus


class Reason(enum.StrEnum):
    """Reason codes. Never rename a member's value: scripts depend on them (SPEC §3)."""

    DOCKER_UNREACHABLE = "docker_unreachable"
    IMAGE_MISSING = "image_missing"
    RESOURCE_LIMITS_UNENFORCED = "resource_limits_unenforced"
    ROOT_USER = "root_user"
    UNSUPPORTED_PLATFORM = "unsupported_platform"
    INVALID_CONFIG = "invalid_config"
    INVALID_KIT = "invalid_kit"
    KIT_INCOHERENT = "kit_incoherent"
    UNSUPPORTED_CAPABILITY = "unsupported_capability"
    CREDENTIAL_UNBOUND = "credential_unbound"
    MOUNT_BLOCKED = "mount_blocked"
    PERMISSION_WIDENED = "permission_widened"
    PERMISSION_UNAPPROVED = "permission_unapproved"
    CONSENT_REQUIRED = "consent_required"
    GIT_IDENTITY_MISSING = "git_identity_missing"
    SSH_AGENT_MISSING = "ssh_agent_missing"
    SSH_AGENT_UNBOUNDABLE = "ssh_agent_unboundable"
    LONG_RUNNING_UNNAMED = "long_running_unnamed"
    HOST_SERVICES_EXPOSED = "host_services_exposed"
    BUILD_FAILED = "build_failed"
    HOOK_FAILED = "hook_failed"
    CREATE_FAILED = "create_failed"
    START_FAILED = "start_failed"
    PROXY_FAILED = "proxy_failed"
    TIMEOUT = "timeout"
    EGRESS_DENIED = "egress_denied"
    CLEANUP_FAILED = "cleanup_failed"
    INVALID_ARGUMENT = "invalid_argument"
    INTERRUPTED = "interrupted"
    INTERNAL_ERROR = "internal_error"
    SECRET_STORE_UNSAFE = "secret_store_unsafe"  # noqa: S105 -- a reason code, not a password
    REGISTRY_UNREACHABLE = "registry_unreachable"
    WORKSPACE_UNWRITABLE = "workspace_unwritable"
    DETACHED = "detached"
    OUTPUT_CLOSED = "output_closed"
    STATE_UNWRITABLE = "state_unwritable"
    STATE_CORRUPT = "state_corrupt"
    ENGINE_LOST = "engine_lost"
    PROXY_CLIENT_REFUSED = "proxy_client_refused"
    RESPONSE_UNMASKABLE = "response_unmaskable"
    CREDENTIAL_NOT_ISSUED = "credential_not_issued"
    TOKEN_ANSWER_UNREWRITABLE = "token_answer_unrewritable"  # noqa: S105 - a code
    TOKEN_ENDPOINT_AMBIGUOUS = "token_endpoint_ambiguous"  # noqa: S105 - a code
    STATE_UNSAFE = "state_unsafe"
    COMMAND_TIMEOUT = "command_timeout"
    LOGIN_FAILED = "login_failed"
    ENGINE_HOST_KEY = "engine_host_key"
    ENGINE_PLAIN_TCP = "engine_plain_tcp"
    ENGINE_NOT_LOCAL = "engine_not_local"

    @property
    def info(self) -> ReasonInfo:
        return REGISTRY[self]

    @property
    def exit_status(self) -> ExitStatus:
        return REGISTRY[self].exit_status


@enum.unique
class EgressCode(enum.StrEnum):
    """The egress proxy's own detail codes: the ``code`` of a refusal's audit record, its
    ``X-Sbx-Rule`` (with ``-`` for ``_``) and its body, under one of the :class:`Reason` codes
    in ``X-Sbx-Reason`` (``egress_denied``, ``proxy_failed``...). The policy's own codes come
    from ``sbx.domain.egress.policy.Decision.code``. Never rename a value: audit readers match
    them."""

    # refused by the proxy (under egress_denied)
    DESTINATION_BLOCKED = "destination_blocked"
    SNI_MISMATCH = "sni_mismatch"
    SNI_HIDDEN = "sni_hidden"
    BAD_CLIENT_HELLO = "bad_client_hello"
    HOST_MISMATCH = "host_mismatch"
    NOT_TLS = "not_tls"
    NOT_HTTP = "not_http"
    CREDENTIAL_NEEDS_TLS = "credential_needs_tls"
    METHOD_OVERRIDE = "method_override"
    # a credential sbx did not issue (under credential_not_issued)
    FOREIGN_CREDENTIAL = "foreign_credential"
    # an answer the proxy cannot mask (under response_unmaskable)
    ENCODED_RESPONSE = "encoded_response"
    # clients that are not the run's sandbox (under proxy_client_refused)
    PROXY_AUTH_MISSING = "proxy_auth_missing"
    PROXY_AUTH_INVALID = "proxy_auth_invalid"
    PEER_NOT_SANDBOX = "peer_not_sandbox"
    # not carried (under proxy_failed)
    BAD_REQUEST = "bad_request"
    NOT_A_PROXY_REQUEST = "not_a_proxy_request"
    TARGET_TOO_LONG = "target_too_long"
    HEAD_TOO_LARGE = "head_too_large"
    AMBIGUOUS_FRAMING = "ambiguous_framing"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    CERTIFICATE_FAILED = "certificate_failed"
    DNS_FAILED = "dns_failed"
    CONNECT_FAILED = "connect_failed"
    ORIGIN_UNTRUSTED = "origin_untrusted"
    ORIGIN_TLS_FAILED = "origin_tls_failed"
    UPSTREAM_FAILED = "upstream_failed"
    UPSTREAM_PROXY_UNREACHABLE = "upstream_proxy_unreachable"
    UPSTREAM_PROXY_FAILED = "upstream_proxy_failed"
    UPSTREAM_PROXY_REFUSED = "upstream_proxy_refused"
    TOKEN_REQUEST_UNREADABLE = "token_request_unreadable"  # noqa: S105 - a code, not a secret
    TOKEN_REQUEST_TOO_LARGE = "token_request_too_large"  # noqa: S105 - a code, not a secret
    TOKEN_STORE_FAILED = "token_store_failed"  # noqa: S105 - a code, not a secret
    TOKEN_STORE_LOCKED = "token_store_locked"  # noqa: S105 - a code, not a secret
    # an OAuth token answer sbx cannot rewrite (under token_answer_unrewritable)
    UNREWRITABLE_TOKEN_ANSWER = "unrewritable_token_answer"  # noqa: S105 - a code
    # a token-host path sbx cannot normalise (under token_endpoint_ambiguous)
    AMBIGUOUS_TOKEN_PATH = "ambiguous_token_path"  # noqa: S105 - a code


_R = Reason
_E = ExitStatus

REGISTRY: Final[dict[Reason, ReasonInfo]] = {
    _R.DOCKER_UNREACHABLE: ReasonInfo(
        "Docker engine unreachable",
        "sbx could not talk to a Docker engine: it is not running, its socket is missing, "
        "this user may not open the socket, or DOCKER_HOST points somewhere else.",
        "Start the engine (`dockerd`, or `systemctl start docker`), check `docker version`, "
        "and make sure this user may use the socket (the `docker` group) or unset DOCKER_HOST.",
        _E.REFUSED,
    ),
    _R.IMAGE_MISSING: ReasonInfo(
        "Image not present locally",
        "The image a kit needs is not in the local image store. sbx never pulls at run time, "
        "so a missing image stops the run before anything starts.",
        "Fetch it explicitly with `sbx pull REF` (or build it), then run again.",
        _E.REFUSED,
    ),
    _R.RESOURCE_LIMITS_UNENFORCED: ReasonInfo(
        "Resource limits not enforced",
        "The engine accepted memory/pids/cpu limits but does not apply them, typically a "
        "rootless engine without cgroup delegation.",
        "Use a rootful engine, or enable cgroup v2 delegation for the rootless one; "
        "`sbx doctor` names each limit that is not applied.",
        _E.REFUSED,
    ),
    _R.ROOT_USER: ReasonInfo(
        "Sandbox user would be root",
        "The sandbox would run as uid 0 or gid 0 (the image's USER is root and the configured "
        "fallback user is root, or the image's user resolves to uid/gid 0).",
        "Give the image a non-root USER with a non-root group, or set `[sandbox] user` to a "
        "non-zero uid (used as uid and gid) in the config file.",
        _E.REFUSED,
    ),
    _R.UNSUPPORTED_PLATFORM: ReasonInfo(
        "Unsupported platform",
        "sbx runs only on unix hosts.",
        "Run sbx on Linux (or another unix) with a Docker engine.",
        _E.REFUSED,
    ),
    _R.INVALID_CONFIG: ReasonInfo(
        "Invalid configuration",
        "A config section has an unknown key or an out-of-range value. An invalid section is "
        "never replaced by defaults: the sandbox is unavailable until it is fixed.",
        "Fix the key named in the message (file:line), or remove it to use the default; "
        "`sbx explain WORKLOAD` shows where every value came from.",
        _E.REFUSED,
    ),
    _R.INVALID_KIT: ReasonInfo(
        "Invalid kit descriptor",
        "A kit descriptor failed strict validation (unknown field, wrong type, bad value).",
        "Fix the field at the dotted path and file:line:col given in the message.",
        _E.REFUSED,
    ),
    _R.KIT_INCOHERENT: ReasonInfo(
        "Kit set does not resolve",
        "The kits given together do not form one coherent composition (not exactly one "
        "workload, an unmet requirement, a conflict, two owners of one name...).",
        "Add or drop kits as each listed problem says.",
        _E.REFUSED,
    ),
    _R.UNSUPPORTED_CAPABILITY: ReasonInfo(
        "Required capability not supported",
        "A kit requires a capability type that this sbx does not implement. Optional ones are "
        "skipped and recorded; required ones refuse the run (fail closed).",
        "Mark the capability `optional: true` in the kit if it can do without, or use a "
        "version of sbx that implements the type.",
        _E.REFUSED,
    ),
    _R.CREDENTIAL_UNBOUND: ReasonInfo(
        "Required credential not bound",
        "A kit requires a credential for a service that has no secret in sbx's store (for "
        "an OAuth credential: no tokens stored on the host), or the egress proxy was asked "
        "to use a credential whose secret or tokens are gone (502).",
        "Store it with `printf %s \"$TOKEN\" | sbx secret set SERVICE`, or for an OAuth "
        "credential log in with `sbx secret login SERVICE`.",
        _E.REFUSED,
    ),
    _R.MOUNT_BLOCKED: ReasonInfo(
        "Mount blocked by the mount policy",
        "A workspace or --mount source is a system path, a credential directory, a Docker "
        "socket, a parent of one of those, outside the allowed roots, or otherwise unsafe; or "
        "it would let the sandbox rewrite a kit the run uses (rule kit_writable: the mount is "
        "the kit's directory or inside it, or the kit is named through a link inside it).",
        "Mount a narrower directory that holds only what the workload needs; the message "
        "names the rule that blocked it.",
        _E.REFUSED,
    ),
    _R.PERMISSION_WIDENED: ReasonInfo(
        "Kit asks for more than was approved",
        "A kit asks for more than what was approved for it, and the widening was not "
        "approved: a new version of a pulled kit (`sbx pull`), or a local kit directory that "
        "changed since its last approved run in this state home (`sbx run`) — a new host, a "
        "removed deny rule, a credential, or a credential sent to another host "
        "(credentials.destinations). A kit inside a sandbox's writable workspace may have "
        "been rewritten by that sandbox.",
        "Review the listed widenings (did you make them?), then run the command again on a "
        "terminal and confirm, or add `--accept` (the refusal prints the command).",
        _E.REFUSED,
    ),
    _R.PERMISSION_UNAPPROVED: ReasonInfo(
        "Kit permissions not approved",
        "The first pull of a kit shows every permission it asks for (hosts it may reach, "
        "credentials, ports, storage, privileged...) and needs approval, which was not given: "
        "no terminal to confirm on, the question was declined, and no --accept.",
        "Review the listed permissions, then pull again on a terminal and confirm, or pass "
        "`--accept`.",
        _E.REFUSED,
    ),
    _R.CONSENT_REQUIRED: ReasonInfo(
        "Explicit consent required",
        "A kit asks for something that removes sandbox protections (privileged@1), which sbx "
        "grants only when the user consents on the command line for that run.",
        "Pass --allow-privileged if you accept running the sandbox privileged, or drop the "
        "kit that asks for it.",
        _E.REFUSED,
    ),
    _R.GIT_IDENTITY_MISSING: ReasonInfo(
        "No git identity to give the sandbox",
        "A kit requires git-identity@1 (the user's git user.name and user.email inside the "
        "sandbox), and the host's global git config names no usable pair. sbx never takes "
        "it from a repository's config.",
        "Set a global identity: git config --global user.name 'Your Name' && "
        "git config --global user.email you@example.com (or mark the capability optional).",
        _E.REFUSED,
    ),
    _R.SSH_AGENT_MISSING: ReasonInfo(
        "No SSH agent to relay into the sandbox",
        "A kit requires ssh-agent@1 (signatures from the user's SSH agent, relayed so the keys "
        "stay on the host), and SSH_AUTH_SOCK names no agent socket sbx can reach.",
        "Start an agent and add a key: eval \"$(ssh-agent -s)\" && ssh-add (or mark the "
        "capability optional).",
        _E.REFUSED,
    ),
    _R.SSH_AGENT_UNBOUNDABLE: ReasonInfo(
        "An ssh-agent@1 bound sbx cannot enforce",
        "A kit bounds ssh-agent@1 to login destinations (authenticate), which needs a verified "
        "session binding to tell which server a signature is for; sbx relays SSHSIG signing "
        "bounded by namespace (sign) and unrestricted agents only, and never relays a bound it "
        "cannot check.",
        "Ask the kit's author for a sign-only bound, or for unrestricted: true if you accept "
        "any signature from the agent (or mark the capability optional).",
        _E.REFUSED,
    ),
    _R.LONG_RUNNING_UNNAMED: ReasonInfo(
        "A long-running workload in a one-shot run",
        "The workload requires long-running@1 (it keeps running apart from any session), and a "
        "one-shot sbx run ends its sandbox with its session.",
        "Run it as a named sandbox: sbx run --name NAME WORKLOAD (detach with ctrl-p ctrl-q, "
        "stop it with sbx stop NAME).",
        _E.REFUSED,
    ),
    _R.HOST_SERVICES_EXPOSED: ReasonInfo(
        "Host services reachable from sandbox networks",
        "A sandbox with a network (egress policy or published ports) can reach the host at its "
        "network's gateway, and with it every host service listening on all interfaces. sbx "
        "closes that with two firewall rules per run, which needs root and iptables.",
        "Run sbx as root (with iptables), or bind the named services to 127.0.0.1.",
        _E.DENIED,
    ),
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
    _R.PROXY_CLIENT_REFUSED: ReasonInfo(
        "Egress proxy client refused",
        "Something other than the sandbox tried to use a run's egress proxy: the request had "
        "no Proxy-Authorization with the run's proxy credentials (407), or it came from an "
        "address outside the run's network (403). Only the sandbox may use its proxy, so "
        "nobody else gets its credentials injected; the attempt was audited.",
        "Inside the sandbox, use the proxy URL of HTTP_PROXY/HTTPS_PROXY as given: it carries "
        "the run's credentials (curl, Python requests/urllib and Node send them). Nothing "
        "outside the sandbox may use it.",
        _E.DENIED,
    ),
    _R.RESPONSE_UNMASKABLE: ReasonInfo(
        "Response could not be checked for the secret",
        "The origin of a domain where sbx injects a credential answered with a content "
        "encoding sbx cannot decode (br, zstd, compress...) or a malformed one, so the proxy "
        "could not mask the secret out of the body and refused to pass it on (502). sbx asks "
        "such origins for identity bodies (Accept-Encoding: identity) and decodes gzip and "
        "deflate itself.",
        "Nothing to change in the sandbox; if the origin keeps sending such bodies despite "
        "Accept-Encoding: identity, report it to the kit's author.",
        _E.FAILED,
    ),
    _R.CREDENTIAL_NOT_ISSUED: ReasonInfo(
        "Credential not issued by sbx",
        "A request from the sandbox to a host that takes an OAuth credential sbx manages (a "
        "kit's oauth resourceHosts, apiKey inject domains or token endpoint) carried a token "
        "that is not the sentinel sbx put in the sandbox: a bearer token or API key of its "
        "own, or a refresh token sbx did not issue. sbx never forwards a credential it does "
        "not know to those hosts, so the request was refused (403) and audited.",
        "Let the agent use the credential file or variable sbx put in the sandbox (it holds "
        "the sentinel, swapped for the real token at the boundary). To use another account, "
        "log in on the host: `sbx secret login SERVICE` (see `sbx secret login --help`).",
        _E.DENIED,
    ),
    _R.TOKEN_ANSWER_UNREWRITABLE: ReasonInfo(
        "OAuth token answer could not be rewritten",
        "The OAuth token endpoint of a credential sbx manages answered with something sbx "
        "cannot rewrite with certainty: a body that is neither JSON nor a form (HTML, text, a "
        "bare value), a JSON object or form naming a field twice, or a redirect whose URL "
        "carries a token. Such an answer may hold real tokens, so the proxy refused it (502) "
        "instead of forwarding it; the sandbox only ever gets sentinels. If it answered a "
        "refresh of your login, the provider may have spent the stored refresh token.",
        "Nothing to change in the sandbox: retry the request. If the provider keeps answering "
        "this way, log in again on the host (`sbx secret login SERVICE`) and report the "
        "provider's answer format to the kit's author.",
        _E.FAILED,
    ),
    _R.TOKEN_ENDPOINT_AMBIGUOUS: ReasonInfo(
        "Request to an OAuth token host with an unreadable path",
        "A request to the host of an OAuth token endpoint sbx manages had a path sbx cannot "
        "normalise (an encoded `/` or `\\`, an encoded control character such as %00, a "
        "malformed escape, a `..` above the root). The origin might read it as the token "
        "endpoint, whose answers sbx must rewrite, so it was refused (403) and audited.",
        "Send the request with a plain path (no encoded `/`, no %00). Token requests go to the "
        "kit's oauth.tokenEndpoint as written.",
        _E.DENIED,
    ),
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
    _R.ENGINE_NOT_LOCAL: ReasonInfo(
        "Needs an engine on this machine",
        "The engine is on another host (ssh://, or tcp:// to another address), and the run "
        "needs something that only exists where sbx runs: a workspace or --mount bound from "
        "this machine's disk, a sized volume staged here, or a network whose egress proxy and "
        "firewall sbx puts on this machine's bridge. sbx refuses instead of starting it with an "
        "empty workspace or without its egress boundary.",
        "Run without a workspace and offline (`sbx run WORKLOAD -- CMD` with a kit that needs "
        "no network), or use the local engine (`unset DOCKER_HOST DOCKER_CONTEXT`). Copying a "
        "workspace to a remote engine (`--workspace-mode copy`) is not built yet.",
        _E.REFUSED,
    ),
}



@dataclass(frozen=True)
class DetailInfo:
    """A detail code of the egress boundary: what a 403/407/502 body, the audit log, the
    request log and ``sbx explain --last`` say under their :class:`Reason` (``reason``)."""

    title: str
    cause: str
    fix: str
    reason: Reason


_D = DetailInfo
_DENIED = _R.EGRESS_DENIED
_FAILED = _R.PROXY_FAILED

# Every detail code: the policy's own decisions (sbx.domain.egress.policy.CODES, a test holds
# them equal) and the proxy's (EgressCode). `sbx explain CODE` prints from here.
DETAILS: Final[dict[str, DetailInfo]] = {
    "default_deny": _D(
        "No rule allows it (deny by default)",
        "No allow rule of the kits or of your user policy covers the host (and port) in this "
        "phase. Everything not allowed is refused.",
        "Paste the `sbx policy allow ...` command printed with the refusal (it allows that "
        "host, method and path prefix only), or add the host to a kit's network-policy "
        "(the refusal names the file and the lines).", _DENIED),
    "deny_rule": _D(
        "A deny rule refuses it",
        "A deny rule of a kit or of your user policy covers the request. Deny wins over every "
        "allow, so no allow rule can open it.",
        "Remove the deny: `sbx policy rm ID` for your own rule, or edit the kit named in the "
        "refusal (or do not compose it).", _DENIED),
    "method_not_allowed": _D(
        "The method is not allowed for this host",
        "The host is allowed only for some HTTP methods (a bounded network-policy@2 rule), "
        "and this request's method is not among them.",
        "Paste the `sbx policy allow HOST PATH --method M` command printed with the refusal, "
        "or add the method to the kit's rule named there.", _DENIED),
    "path_not_allowed": _D(
        "The path is not allowed for this host",
        "The host is allowed only for some paths (a bounded network-policy@2 rule), and this "
        "request's path matches none of them.",
        "Paste the `sbx policy allow HOST PATH --method M` command printed with the refusal, "
        "or add the path to the kit's rule named there.", _DENIED),
    "needs_inspection": _D(
        "The host is checked per request, and this was not an inspectable request",
        "The host is bounded by methods or paths (or a bounded deny covers it), so sbx must "
        "see each HTTP request; a raw tunnel or non-HTTP traffic cannot be checked and is "
        "refused (fail closed).",
        "Send HTTP(S) through the proxy (HTTPS_PROXY), or allow the host outright (no "
        "methods, no paths) if a tunnel is intended.", _DENIED),
    "invalid_target": _D(
        "The request target cannot be judged safely",
        "The path holds an encoded `/` or `\\`, a `..` above the root, a control character or "
        "a malformed escape, and a rule bounded by paths covers the host: origins read such "
        "paths differently, so it is refused.",
        "Send the request with a plain path.", _DENIED),
    EgressCode.DESTINATION_BLOCKED: _D(
        "The destination is an internal address",
        "The name resolved to (or is) a loopback, link-local (cloud metadata), private, "
        "multicast or otherwise non-public address, or is an internal-only name; the proxy "
        "does not connect there unless a rule names that exact address or host. One internal "
        "answer taints the name (DNS rebinding).",
        "If it is intended, allow the literal address: `sbx policy allow ADDRESS:PORT` (the "
        "refusal prints it; cloud metadata is never suggested). `sbx explain` checks names "
        "found in /etc/hosts, or any name with --resolve.", _DENIED),
    EgressCode.SNI_MISMATCH: _D(
        "The TLS server name is not the CONNECT host",
        "The ClientHello named another host than the CONNECT asked for: the policy judged "
        "the CONNECT host, so the tunnel was ended with a TLS alert.",
        "Open the tunnel to the host the TLS handshake names.", _DENIED),
    EgressCode.SNI_HIDDEN: _D(
        "The TLS server name is hidden (Encrypted Client Hello)",
        "Encrypted Client Hello hides which host the tunnel is for, so sbx cannot check it "
        "is the CONNECT host.",
        "Disable Encrypted Client Hello for egress through sbx.", _DENIED),
    EgressCode.BAD_CLIENT_HELLO: _D(
        "The TLS handshake cannot be read",
        "What was sent into the tunnel looks like TLS but its ClientHello cannot be parsed, "
        "so its server name cannot be checked (fail closed).",
        "Use a standard TLS client.", _DENIED),
    EgressCode.HOST_MISMATCH: _D(
        "The Host header does not name the connection's host",
        "A request inside a tunnel (or a plain request) named another host in its Host header "
        "or target than the one the connection was opened and judged for.",
        "Send each request to the host its connection was opened for.", _DENIED),
    EgressCode.NOT_TLS: _D(
        "Not TLS, to a host checked per HTTPS request",
        "The host is bounded by methods or paths, so sbx terminates TLS to see each request; "
        "the bytes sent into the tunnel were not TLS.",
        "Send HTTPS requests through the proxy.", _DENIED),
    EgressCode.NOT_HTTP: _D(
        "Not HTTP/1.1, inside TLS to a host checked per request",
        "After TLS, what was sent was not an HTTP/1.1 request, so it cannot be checked "
        "(HTTP/2 and other protocols are not offered to intercepted hosts).",
        "Use HTTP/1.1 (ALPN offers only http/1.1).", _DENIED),
    EgressCode.CREDENTIAL_NEEDS_TLS: _D(
        "A credential is sent only over HTTPS",
        "A credential is injected for this host, and sbx never sends a secret over plain "
        "HTTP.",
        "Use https:// for that host.", _DENIED),
    EgressCode.METHOD_OVERRIDE: _D(
        "A method override asks for a refused method",
        "An X-HTTP-Method-Override (or similar) header asks the origin to treat the request "
        "as a method the policy refuses.",
        "Send the request with the method itself, if the policy allows it.", _DENIED),
    EgressCode.FOREIGN_CREDENTIAL: _D(
        "A credential sbx did not issue",
        "A request to a host of an OAuth credential sbx manages carried a token that is not "
        "the sentinel sbx put in the sandbox.",
        "Use the credential file or variable sbx put in the sandbox; log in on the host with "
        "`sbx secret login SERVICE` for another account.", _R.CREDENTIAL_NOT_ISSUED),
    EgressCode.ENCODED_RESPONSE: _D(
        "An answer sbx cannot mask",
        "The origin of a credential's domain answered with a content encoding sbx cannot "
        "decode, so the secret could not be masked out of it.",
        "Report it to the kit's author; sbx asks such origins for identity bodies.",
        _R.RESPONSE_UNMASKABLE),
    EgressCode.PROXY_AUTH_MISSING: _D(
        "No proxy credentials (407)",
        "The request to the sandbox's egress proxy carried no Proxy-Authorization with the "
        "run's proxy token: a tool inside the sandbox that does not use HTTP_PROXY/"
        "HTTPS_PROXY as given, or something else trying the proxy.",
        "Use the proxy URL of HTTP_PROXY/HTTPS_PROXY as given inside the sandbox (it carries "
        "the token).", _R.PROXY_CLIENT_REFUSED),
    EgressCode.PROXY_AUTH_INVALID: _D(
        "Wrong proxy credentials (407)",
        "The Proxy-Authorization did not hold this run's proxy token.",
        "Use the proxy URL of HTTP_PROXY/HTTPS_PROXY as given inside the sandbox.",
        _R.PROXY_CLIENT_REFUSED),
    EgressCode.PEER_NOT_SANDBOX: _D(
        "The client is not the sandbox",
        "A connection to the egress proxy came from outside the run's network (the host, "
        "another container): only the sandbox may use its proxy.",
        "Nothing outside the sandbox may use it.", _R.PROXY_CLIENT_REFUSED),
    EgressCode.BAD_REQUEST: _D(
        "Not a valid HTTP/1.1 request",
        "The proxy could not parse the request (or its CONNECT target).",
        "Send well-formed HTTP/1.1 through the proxy.", _FAILED),
    EgressCode.NOT_A_PROXY_REQUEST: _D(
        "Not a proxy request",
        "A plain request to the proxy must be absolute-form (`GET http://host/path`); HTTPS "
        "goes through CONNECT.",
        "Use the proxy as HTTP_PROXY/HTTPS_PROXY, not as an origin.", _FAILED),
    EgressCode.TARGET_TOO_LONG: _D(
        "Request target too long (414)",
        "The request's URL is longer than the proxy's bound.",
        "Send a shorter URL.", _FAILED),
    EgressCode.HEAD_TOO_LARGE: _D(
        "Request head too large (431)",
        "More header fields or bytes of request head than the proxy's bound.",
        "Send fewer or smaller headers.", _FAILED),
    EgressCode.AMBIGUOUS_FRAMING: _D(
        "Ambiguous request framing",
        "The request had both Transfer-Encoding and Content-Length, which is how requests "
        "are smuggled (RFC 9112 §6.3).",
        "Send one framing.", _FAILED),
    EgressCode.TOO_MANY_CONNECTIONS: _D(
        "Too many connections (503)",
        "The sandbox has more connections open through its proxy than its bound.",
        "Close idle connections, or open fewer at once.", _FAILED),
    EgressCode.CERTIFICATE_FAILED: _D(
        "No certificate for the intercepted host",
        "The proxy could not issue its CA's certificate for the host it intercepts.",
        "Check the state home's CA (`sbx doctor`).", _FAILED),
    EgressCode.DNS_FAILED: _D(
        "The name does not resolve (502)",
        "The proxy could not resolve the host (no such name, no answer in time, or no "
        "address). The policy allowed the request: this is not a refusal.",
        "Check the host name and the host's resolver (`getent hosts NAME` on the host), or "
        "reach it through `[network] upstream_proxy`.", _FAILED),
    EgressCode.CONNECT_FAILED: _D(
        "The origin does not accept connections (502)",
        "The proxy could not connect to any address of the host (refused, unreachable, or "
        "timed out). The policy allowed the request.",
        "Check that the origin is up and reachable from the host.", _FAILED),
    EgressCode.ORIGIN_UNTRUSTED: _D(
        "The origin's certificate is not trusted (502)",
        "The origin's TLS certificate does not verify against the host's trust store plus "
        "`[network] upstream_ca_file`.",
        "Add the origin's CA to `[network] upstream_ca_file` if it is a private CA you "
        "trust.", _FAILED),
    EgressCode.ORIGIN_TLS_FAILED: _D(
        "TLS to the origin failed (502)",
        "The TLS handshake with the origin failed (protocol, cipher, or the connection "
        "broke).",
        "Check the origin's TLS (TLS 1.2 or newer, HTTP/1.1).", _FAILED),
    EgressCode.UPSTREAM_FAILED: _D(
        "The origin failed mid-answer (502)",
        "The origin (or the path to it) broke the connection or sent something that is not "
        "HTTP/1.1 before its answer began.",
        "Retry; check the origin.", _FAILED),
    EgressCode.UPSTREAM_PROXY_UNREACHABLE: _D(
        "The upstream proxy is unreachable (502)",
        "`[network] upstream_proxy` names a proxy the egress proxy cannot connect to.",
        "Check `[network] upstream_proxy` (sbx config show) and that the proxy is up.",
        _FAILED),
    EgressCode.UPSTREAM_PROXY_FAILED: _D(
        "The upstream proxy failed (502)",
        "The upstream proxy did not answer the CONNECT, or sent bytes before the tunnel was "
        "used.",
        "Check the upstream proxy.", _FAILED),
    EgressCode.UPSTREAM_PROXY_REFUSED: _D(
        "The upstream proxy refused (502)",
        "The upstream proxy answered the CONNECT with an error status (its own policy, "
        "authentication).",
        "Check the upstream proxy's rules and the credentials in `[network] "
        "upstream_proxy`.", _FAILED),
    EgressCode.TOKEN_REQUEST_UNREADABLE: _D(
        "An OAuth token request that cannot be read",
        "A request to an OAuth token endpoint sbx answers was not a form or JSON it can read.",
        "Use the agent's own client for its login.", _FAILED),
    EgressCode.TOKEN_REQUEST_TOO_LARGE: _D(
        "An OAuth token request too large (413)",
        "A request to an OAuth token endpoint was larger than a token request is.",
        "Use the agent's own client for its login.", _FAILED),
    EgressCode.TOKEN_STORE_FAILED: _D(
        "The new OAuth tokens could not be stored (502)",
        "The token endpoint answered, but the host's token store could not be written; the "
        "sandbox got nothing, so the tokens it holds stay valid.",
        "Check the state home (`sbx doctor`), then retry.", _FAILED),
    EgressCode.TOKEN_STORE_LOCKED: _D(
        "The OAuth token store is busy (502)",
        "Another sandbox held the token store's lock for too long.",
        "Retry.", _FAILED),
    EgressCode.UNREWRITABLE_TOKEN_ANSWER: _D(
        "An OAuth token answer sbx cannot rewrite (502)",
        "The token endpoint answered with something sbx cannot rewrite with certainty (not "
        "JSON, not a form, or a token where it cannot put the sentinel), so it was not passed "
        "on: the sandbox never sees a real token.",
        "See `sbx explain token_answer_unrewritable`; log in on the host with `sbx secret "
        "login SERVICE`.", _R.TOKEN_ANSWER_UNREWRITABLE),
    EgressCode.AMBIGUOUS_TOKEN_PATH: _D(
        "A path on an OAuth token host sbx cannot normalise",
        "The request went to the host of an OAuth token endpoint sbx manages with a path it "
        "cannot normalise, so it cannot tell whether the origin reads it as the token "
        "endpoint (fail closed).",
        "Send the request with a plain path (no encoded `/`, no %00).",
        _R.TOKEN_ENDPOINT_AMBIGUOUS),
}


__all__ = ["DETAILS", "REGISTRY", "DetailInfo", "EgressCode", "ExitStatus", "Reason",
           "ReasonInfo"]
