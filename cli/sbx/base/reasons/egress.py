"""The egress boundary's own reasons: clients it refuses, answers it cannot mask or rewrite,
credentials it did not issue."""

from __future__ import annotations

from typing import Final

from sbx.base.reasons.codes import ExitStatus, Reason, ReasonInfo

_R = Reason
_E = ExitStatus

ENTRIES: Final[dict[Reason, ReasonInfo]] = {
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
}

__all__ = ["ENTRIES"]
