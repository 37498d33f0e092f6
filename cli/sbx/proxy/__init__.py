"""The egress proxy program: owner pipe, policy at the boundary, relay.

The egress proxy: the only way out of a sandbox with a network policy (SPEC §8).

Run as its own process (``python -m sbx.proxy CONFIG_PATH RUN_ID``), it prints one
line, ``SBX-PROXY-READY <port>`` (:data:`sbx.seams.host.handshake.PROXY`), once it listens,
writes to stderr only on errors, switches from the install phase to the runtime phase on
SIGUSR1 (never back; ``phase_file`` then says ``runtime``), re-reads the secret store on SIGHUP
and exits on SIGTERM.

Its stdin is its **owner's pipe**: the first line is the run's client token (empty for none),
followed, after a ``|``, by the secrets ``sbx`` resolved itself (keyring, host variable, host
command: :func:`sbx.domain.credentials.secrets.encode_provided`) when there are any, and the write
end stays with
the ``sbx`` process that started it. When that process ends — even
by SIGKILL, when no cleanup code runs — the kernel closes the pipe, the proxy reads EOF and
exits, so a one-shot run's proxy never outlives its owner (a pipe, not ``PR_SET_PDEATHSIG``,
which fires on the death of the parent *thread* and is lost across a re-parenting).

Who may use it (:mod:`sbx.domain.egress.proxyauth`): with a token, every CONNECT and plain request
must
carry ``Proxy-Authorization`` with the run's credentials (else 407); with ``peer_network``,
clients must come from inside the run's network and not from its gateway (else 403). A proxy
listening on anything but loopback refuses to start without both.

What it does with each client connection:

- ``CONNECT host:port``: :func:`sbx.domain.egress.policy.classify` says *denied* (403 and close),
  *unbounded* (a byte tunnel, no interception — unless a credential is injected for that host,
  then it is intercepted so the secret can be set; the client's first bytes are held until
  judged: a TLS ClientHello must name the CONNECT host or no host, and must not hide it with
  Encrypted Client Hello, else the tunnel ends with a TLS alert; the server's bytes flow at once
  so server-first protocols work) or *bounded* (TLS is terminated with the state
  home CA's leaf for the CONNECT host; the client's SNI must name that host and every request's
  ``Host`` must too; each HTTP/1.1 request is judged by :func:`~sbx.domain.egress.policy.decide` on
  its
  method and normalised path and forwarded — with the normalised path — only when allowed).
- Absolute-form plain HTTP requests (``GET http://host/path``) are judged per request the same way.
- Destinations: names are resolved here and every address checked: loopback, link-local (cloud
  metadata), private, shared, multicast, reserved and unspecified addresses are refused unless an
  allow rule names that address literally; the proxy connects to the exact address it checked,
  so a second DNS answer cannot rebind it. With ``upstream_proxy`` every outbound connection goes
  through the corporate proxy (``CONNECT`` for TLS, absolute-form for HTTP) and names are left to
  it, but internal address literals, ``localhost`` names, single-label names and special-use
  suffixes (``.internal``, ``.local``...) are still refused here
  (:func:`sbx.domain.egress.hosts.internal_name`) unless a rule names that exact host. Cloud
  metadata
  names (``metadata.google.internal``, ``instance-data``...) are refused that way with or without
  an upstream, before any resolution.
- Credentials (``credential@1``): on requests to an inject domain in the current phase the
  configured header is *replaced* with ``format % secret`` (or basic auth); any header carrying a
  sentinel is dropped everywhere, so a sentinel never leaves; the secret (and its percent- and
  JSON-escaped forms) is masked out of the response an inject domain sends back, across chunk
  boundaries: headers and bodies — the proxy asks for ``Accept-Encoding: identity`` and drops
  ``Range``/``If-Range`` there (a range could cut the secret in pieces no mask recognises),
  decodes gzip/deflate bodies itself (:mod:`sbx.domain.egress.encoding`) and refuses any other
  encoding
  (502 ``response_unmaskable``); a credential whose secret is not stored refuses its requests
  (502 ``credential_unbound``) instead of silently sending the sentinel. Injection is refused
  over plain HTTP.
- OAuth credentials (:mod:`sbx.domain.egress.oauth_intercept` decides, the I/O is here): the token
  endpoint is answered with sentinels while the real refresh token goes upstream and the new
  real tokens go to the host store (under its lock); on resource hosts the access sentinel
  becomes the real access token, and any other credential there is refused (403
  ``credential_not_issued``); the real tokens are masked out of those hosts' answers and
  redacted from stderr.
- Refusals are HTTP 403 with ``X-Sbx-Reason: egress_denied``, ``X-Sbx-Rule`` and a text body that
  names host, method, path, the deciding rule (kit, capability index, phase) and the exact
  ``sbx explain … METHOD URL`` command; each is audited as ``egress_denied``. Any internal error
  answers 502 (or closes the connection) — never a bypass.

Engine choice. ``mitmproxy`` was evaluated first and rejected: its releases since 11.1 require
Python ≥ 3.12, and the last one for 3.11 (11.0.2, 2024) pins ``cryptography<44.1`` (sbx needs a
current one), ``h11<=0.14`` (before the 0.16 fix for the chunked-encoding request-smuggling flaw,
CVE-2025-43859) and ``ruamel.yaml<=0.18.6``, and pulls in 24 dependencies (Flask, tornado, urwid,
ldap3, aioquic, a Rust extension; 132 MB installed) for an interactive tool whose addon API we
would bend into a policy engine. Start-up was fine (~0.45 s). What we need is narrow — an HTTP/1.1
forward proxy with CONNECT, per-request decisions, header rewriting and TLS termination — so it
is written here on asyncio, ``h11`` (a small, pure-Python, well-kept HTTP/1.1 state machine that
does the parsing and framing, the part that is easy to get dangerously wrong) and the standard
library's ``ssl`` (through ``MemoryBIO`` so the proxy controls handshakes, SNI and timeouts).
HTTP/2 and WebSockets to intercepted hosts are not offered (ALPN advertises only http/1.1 and
``Upgrade`` is stripped); tunnelled hosts carry any protocol.

The parts, each a module named for what it owns:

- :mod:`~sbx.proxy.server`: :class:`EgressProxy` — listening, the phase, shutdown;
- :mod:`~sbx.proxy.connection`: one client connection — admission, CONNECT or plain;
- :mod:`~sbx.proxy.relay`: raw tunnels — the first-bytes judgement, then the relay
  (asyncio protocols; a ``splice(2)`` relay, measured and left off by default);
- :mod:`~sbx.proxy.intercept`: TLS termination of intercepted tunnels;
- :mod:`~sbx.proxy.exchange`: one HTTP request — policy, Host checks, forwarding;
- :mod:`~sbx.proxy.credentials`: injection, sentinels, the OAuth header swap, masking;
- :mod:`~sbx.proxy.tokens`: the OAuth token endpoint answered with sentinels;
- :mod:`~sbx.proxy.dialing`: address checks, resolving, upstream chaining, pooling;
- :mod:`~sbx.proxy.refusals`: refusals, their answers and audit records (codes from
  :mod:`sbx.base.reasons`);
- :mod:`~sbx.proxy.streams`, :mod:`~sbx.proxy.messages`: TCP/TLS
streams and
  HTTP/1.1 helpers;
- :mod:`~sbx.proxy.process`: the process — owner pipe, secrets, signals, ``main``.
"""


from __future__ import annotations

from sbx.proxy.credentials import Masker, escaped_forms, injected_value, redact
from sbx.proxy.dialing import blocked_address, origin_context
from sbx.proxy.messages import parse_authority
from sbx.proxy.process import (
    load_secrets,
    main,
    read_owner_line,
    startable,
)
from sbx.proxy.refusals import (
    EgressRefusal,
    client_refusal,
    explain_line,
    refusal_body,
    refusal_for,
    refusal_response,
)
from sbx.proxy.server import EgressProxy
from sbx.proxy.streams import TlsStream

__all__ = [
    "EgressProxy",
    "EgressRefusal",
    "Masker",
    "TlsStream",
    "blocked_address",
    "client_refusal",
    "escaped_forms",
    "explain_line",
    "injected_value",
    "load_secrets",
    "main",
    "origin_context",
    "parse_authority",
    "read_owner_line",
    "redact",
    "refusal_body",
    "refusal_for",
    "refusal_response",
    "startable",
]
