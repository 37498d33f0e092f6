"""The codes themselves: exit statuses, reason and egress detail codes, and the shape of an
entry (:class:`ReasonInfo`, :class:`DetailInfo`). Their texts live in the entry modules."""

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
    KIT_NOT_FOUND = "kit_not_found"
    KIT_INCOHERENT = "kit_incoherent"
    KIT_SET_DIGEST = "kit_set_digest"
    UNSUPPORTED_CAPABILITY = "unsupported_capability"
    PUBLISH_REFUSED = "publish_refused"
    PORT_TAKEN = "port_taken"
    CREDENTIAL_UNBOUND = "credential_unbound"
    MOUNT_BLOCKED = "mount_blocked"
    PERMISSION_WIDENED = "permission_widened"
    PERMISSION_UNAPPROVED = "permission_unapproved"
    CONSENT_REQUIRED = "consent_required"
    GIT_IDENTITY_MISSING = "git_identity_missing"
    SSH_AGENT_MISSING = "ssh_agent_missing"
    LONG_RUNNING_UNNAMED = "long_running_unnamed"
    SKILL_NO_DESTINATION = "skill_no_destination"
    SKILL_NAME_INVALID = "skill_name_invalid"
    SKILL_EXISTS = "skill_exists"
    SKILL_NOT_FOUND = "skill_not_found"
    SKILL_SOURCE_INVALID = "skill_source_invalid"
    SKILL_SOURCE_UNSAFE = "skill_source_unsafe"
    SKILL_TOO_LARGE = "skill_too_large"
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
    STOPPED_IDLE = "stopped_idle"
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
    ENGINE_UNSUPPORTED = "engine_unsupported"
    ENGINE_UNKNOWN = "engine_unknown"
    RESIDENT_UNAVAILABLE = "resident_unavailable"
    RESIDENT_LOST = "resident_lost"
    LIMIT_OVER_BOUND = "limit_over_bound"
    COPY_REFUSED = "copy_refused"
    RUNTIME_MISSING = "runtime_missing"
    SESSIONS_UNSUPPORTED = "sessions_unsupported"
    SESSION_VERB_MISSING = "session_verb_missing"
    SESSION_ID_INVALID = "session_id_invalid"
    ACP_UNAVAILABLE = "acp_unavailable"
    PLATFORM_UNMET = "platform_unmet"
    WORKSPACE_COPY_REFUSED = "workspace_copy_refused"
    NOT_A_REPOSITORY = "not_a_repository"
    HEAD_UNBORN = "head_unborn"
    NOT_A_CLONE = "not_a_clone"
    BRANCH_DIVERGED = "branch_diverged"
    GIT_MISSING = "git_missing"
    NOT_A_TEMPLATE = "not_a_template"
    TEMPLATE_MISMATCH = "template_mismatch"
    TEMPLATE_LEAK = "template_leak"

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
    KIT_REGISTRY_NOT_GRANTED = "kit_registry_not_granted"
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


# The one table, filled by the package (sbx.base.reasons) from its per-area entry modules, which
# import this module's enums: any import of this module runs the package, and so fills it, first.
REGISTRY: Final[dict[Reason, ReasonInfo]] = {}


@dataclass(frozen=True)
class DetailInfo:
    """A detail code of the egress boundary: what a 403/407/502 body, the audit log, the
    request log and ``sbx explain --last`` say under their :class:`Reason` (``reason``)."""

    title: str
    cause: str
    fix: str
    reason: Reason



__all__ = ["REGISTRY", "DetailInfo", "EgressCode", "ExitStatus", "Reason", "ReasonInfo"]
