"""What a sandbox gets back from an OAuth token endpoint (sbx.domain.egress.oauth_answers):
every answer rewritten with sentinels or refused, whatever its status, body format or
headers. No I/O."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

import pytest

from sbx.domain.credentials.oauth import WITHHELD_ID_TOKEN, Tokens
from sbx.domain.egress import oauth_answers as oa
from sbx.domain.egress.proxycreds import OAuthSpec

ACCESS = "sk-ant-oat01-proxy-managed"
REFRESH = "sk-ant-ort01-proxy-managed"
SPEC = OAuthSpec("console.anthropic.com", "/v1/oauth/token", ("api.anthropic.com",), ACCESS,
                 REFRESH)
JSON_TYPE = [(b"content-type", b"application/json")]
FORM_TYPE = [(b"content-type", b"application/x-www-form-urlencoded; charset=utf-8")]


def rewrite(body: bytes, *, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None,
            **kwargs: object) -> oa.RewrittenAnswer:
    return oa.rewrite_token_answer(status, JSON_TYPE if headers is None else headers, body,
                                   SPEC, **kwargs)  # type: ignore[arg-type]


def test_a_json_answer_gets_sentinels_and_keeps_every_other_field() -> None:
    previous = Tokens("old-access", "old-refresh", scopes=("user:inference",))
    body = json.dumps({"token_type": "Bearer", "access_token": "real-a-1",
                       "refresh_token": "real-r-1", "expires_in": 28800,
                       "scope": "user:inference user:profile",
                       "account": {"uuid": "u"}}).encode()
    out = rewrite(body, previous=previous, now=1000.0)
    assert json.loads(out.body) == {"token_type": "Bearer", "access_token": ACCESS,
                                    "refresh_token": REFRESH, "expires_in": 28800,
                                    "scope": "user:inference user:profile",
                                    "account": {"uuid": "u"}}
    tokens = out.tokens
    assert (tokens.access_token, tokens.refresh_token, tokens.expires_at) == (
        "real-a-1", "real-r-1", 29800.0)
    assert tokens.scopes == ("user:inference", "user:profile")
    assert sorted(out.withheld) == ["real-a-1", "real-r-1"]


def test_a_form_answer_as_github_sends_it_is_rewritten_as_a_form() -> None:
    body = b"access_token=gho_realtoken123&scope=repo%2Cgist&token_type=bearer"
    out = rewrite(body, headers=FORM_TYPE)
    assert parse_qsl(out.body.decode()) == [("access_token", ACCESS), ("scope", "repo,gist"),
                                            ("token_type", "bearer")]
    assert out.tokens.access_token == "gho_realtoken123"  # noqa: S105 - a test value
    assert b"gho_realtoken123" not in out.body


@pytest.mark.parametrize("kind", [b"text/plain", b"application/json", b"text/html", None])
def test_the_body_is_read_by_what_it_is_not_by_its_content_type(kind: bytes | None) -> None:
    headers = [] if kind is None else [(b"content-type", kind)]
    as_form = rewrite(b"access_token=real-a&refresh_token=real-r", headers=headers)
    as_json = rewrite(b'{"access_token": "real-a", "refresh_token": "real-r"}',
                      headers=headers)
    for out in (as_form, as_json):
        assert b"real-" not in out.body and out.tokens.refresh_token == "real-r"  # noqa: S105


def test_nested_and_other_token_fields_are_withheld_at_any_depth() -> None:
    body = json.dumps({"data": {"access_token": "real-a", "id_token": "eyJ.real.jwt"},
                       "tokens": [{"refreshToken": "real-r", "sessionToken": "real-s"}],
                       "client_secret": "real-c", "token_type": "Bearer",
                       "expires_in": 5}).encode()
    out = rewrite(body)
    data = json.loads(out.body)
    assert data == {"data": {"access_token": ACCESS, "id_token": WITHHELD_ID_TOKEN},
                    "tokens": [{"refreshToken": REFRESH, "sessionToken": oa.WITHHELD}],
                    "client_secret": oa.WITHHELD, "token_type": "Bearer", "expires_in": 5}
    assert out.tokens is None  # no top-level access token: nothing to store
    assert sorted(out.withheld) == sorted(["real-a", "eyJ.real.jwt", "real-r", "real-s",
                                           "real-c"])


def test_everything_under_a_token_named_key_is_withheld_however_deep() -> None:
    body = json.dumps({"token": {"value": "real-v", "meta": {"kind": "real-k"}},
                       "tokens": ["real-1", {"x": "real-2"}], "credentials": {"a": "real-3"},
                       "raw_key": "sk-ant-api03-real", "note": "plain"}).encode()
    out = rewrite(body)
    assert json.loads(out.body) == {
        "token": {"value": oa.WITHHELD, "meta": {"kind": oa.WITHHELD}},
        "tokens": [oa.WITHHELD, {"x": oa.WITHHELD}], "credentials": {"a": oa.WITHHELD},
        "raw_key": oa.WITHHELD, "note": "plain"}
    assert sorted(out.withheld) == sorted(["real-v", "real-k", "real-1", "real-2", "real-3",
                                           "sk-ant-api03-real"])


def test_escaped_keys_and_values_are_read_as_json_reads_them() -> None:
    out = rewrite(b'{"access_\\u0074oken": "real\\u002da"}')
    assert json.loads(out.body) == {"access_token": ACCESS}
    assert out.tokens.access_token == "real-a"  # noqa: S105 - a test value


@pytest.mark.parametrize("status", [400, 401, 302, 500])
def test_error_answers_carrying_tokens_are_rewritten_and_never_stored(status: int) -> None:
    out = rewrite(b'{"error": "invalid_grant", "access_token": "real-a"}', status=status)
    assert json.loads(out.body) == {"error": "invalid_grant", "access_token": ACCESS}
    assert out.tokens is None and out.withheld == ["real-a"]


@pytest.mark.parametrize("body", [b'{"error": "invalid_grant"}', b"[1]",
                                  b"error=authorization_pending&interval=5",
                                  b'{"access_token": 5}', b"", b"  \r\n"])
def test_answers_without_tokens_pass(body: bytes) -> None:
    out = rewrite(body)
    assert out.tokens is None and out.withheld == []
    if body.strip():
        assert out.body.replace(b" ", b"") == body.replace(b" ", b"") or \
            parse_qsl(out.body.decode()) == parse_qsl(body.decode())


@pytest.mark.parametrize(("body", "why"), [
    (b"<html><body>access_token: gho_x</body></html>", "neither JSON nor a form"),
    (b"gho_realtoken123", "neither JSON nor a form"),
    (b'"gho_realtoken123"', "bare JSON value"),
    (b"123", "bare JSON value"),
    (b'{"access_token": "a", "access_token": "b"}', "twice"),
    (b'{"x": {"refresh_token": "a", "refresh_token": "b"}}', "twice"),
    (b"access_token=a&access_token=b", "twice"),
    (b"\xff\xfeaccess_token", "not UTF-8"),
])
def test_answers_sbx_cannot_rewrite_are_refused(body: bytes, why: str) -> None:
    with pytest.raises(oa.UnrewritableAnswer) as raised:
        rewrite(body)
    assert why in str(raised.value)
    assert "gho_" not in str(raised.value)


def test_cookies_and_token_headers_are_dropped_and_the_rest_kept() -> None:
    headers = [(b"content-type", b"application/json"), (b"set-cookie", b"user_session=s3cr3t"),
               (b"Set-Cookie2", b"x=y"), (b"x-access-token", b"real-a"),
               (b"x-refresh-token", b"real-r"), (b"x-oauth-scopes", b"repo"),
               (b"x-session-id", b"s"), (b"authorization", b"Bearer real"),
               (b"x-request-id", b"r-1"), (b"cache-control", b"no-store")]
    out = rewrite(b'{"access_token": "real-a"}', headers=headers)
    assert out.headers == [(b"content-type", b"application/json"), (b"x-oauth-scopes", b"repo"),
                           (b"x-request-id", b"r-1"), (b"cache-control", b"no-store")]


@pytest.mark.parametrize("header", [
    (b"location", b"https://app.example/cb#access_token=real-a&token_type=bearer"),
    (b"Location", b"https://app.example/cb?refresh_token=real-r"),
    (b"content-location", b"/done?id_token=eyJ"),
    (b"refresh", b"0; url=https://app.example/cb#access_token=real-a"),
    (b"link", b"<https://app.example/?access_token=real-a>; rel=next"),
])
def test_a_redirect_carrying_a_token_is_refused(header: tuple[bytes, bytes]) -> None:
    with pytest.raises(oa.UnrewritableAnswer) as raised:
        rewrite(b"", status=302, headers=[header])
    assert "real-" not in str(raised.value) and "eyJ" not in str(raised.value)


def test_a_plain_redirect_passes() -> None:
    out = rewrite(b"", status=302, headers=[(b"location", b"https://app.example/cb?state=s")])
    assert out.headers == [(b"location", b"https://app.example/cb?state=s")]


def test_custom_response_fields_and_an_unstorable_token() -> None:
    spec = OAuthSpec("h", None, (), "as", "rs", access_field="accessToken",
                     refresh_field="refreshToken", expires_field="expiresIn")
    out = oa.rewrite_token_answer(200, [], b'{"accessToken": "real-a", "refreshToken": '
                                  b'"real-r", "expiresIn": 60}', spec, now=0.0)
    assert json.loads(out.body) == {"accessToken": "as", "refreshToken": "rs", "expiresIn": 60}
    assert out.tokens.expires_at == 60.0
    with pytest.raises(oa.UnrewritableAnswer):  # the sandbox must not think it logged in
        rewrite(b'{"access_token": "has space"}')
    assert rewrite(b'{"access_token": "has space"}', status=400).tokens is None


def test_a_refresh_answer_without_a_refresh_token_keeps_the_previous_one() -> None:
    out = rewrite(b'{"access_token": "real-a-2"}', previous=Tokens("a", "kept-refresh"))
    assert json.loads(out.body) == {"access_token": ACCESS}
    assert out.tokens.refresh_token == "kept-refresh"  # noqa: S105 - a test value


@pytest.mark.parametrize(("key", "hit"), [
    ("access_token", True), ("accessToken", True), ("ID-Token", True), ("token", True),
    ("oauth_token", True), ("client_secret", True), ("password", True), ("api_key", True),
    ("tokens", True), ("client_credentials", True), ("session", True), ("raw_key", True),
    ("token_type", False), ("expires_in", False), ("refresh_token_expires_in", False),
    ("scope", False), ("error", False), ("account", False), ("", False)])
def test_token_keys(key: str, hit: bool) -> None:
    assert oa.token_key(key) is hit
