"""The detail codes of the egress boundary under their reasons: the policy's own decisions and
the proxy's (``sbx explain CODE``)."""

from __future__ import annotations

from typing import Final

from sbx.base.reasons.codes import DetailInfo, EgressCode, Reason

_R = Reason
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
    EgressCode.KIT_REGISTRY_NOT_GRANTED: _D(
        "The kit registry is not granted to this sandbox",
        "kit-registry.sbx.internal is sbx's kit registry, answered by the proxy itself; only a "
        "sandbox whose kits declare com.docker.sandbox/kit-registry@1 (and whose grant was "
        "approved at the pull gate) is routed to it. A network rule allowing the name does "
        "not open it.",
        "Declare `- type: com.docker.sandbox/kit-registry@1` in the kit's capabilities "
        "(`sbx kit validate KIT` checks it), then run the sandbox again; a named sandbox is "
        "created again to take it (`sbx rm -f NAME`, then `sbx create`).", _DENIED),
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


__all__ = ["DETAILS"]
