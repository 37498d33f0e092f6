"""Secrets from where they live: the OS keyring, a host variable, a host command.

Dynamic sources store only their reference; values are resolved in the sbx process at run
start and reach the egress proxy over its owner pipe, never a file, output, audit or --json.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import sbx.proxy as proxy_module
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.domain.credentials.secrets import (
    SecretStore,
    decode_provided,
    encode_provided,
    resolve_for_run,
)
from sbx.domain.credentials.secretsources import run_command
from sbx.domain.credentials.secretvalues import COMMAND, ENV, SecretSource
from sbx.proxy import process as process_module
from sbx.seams import audit, keyrings
from sbx.usecases import secretops

TOKEN = "ghp_DYNAMICvalue0123456789abcdefXYZ"  # noqa: S105 -- a made-up test value


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def store(home: Path) -> SecretStore:
    return SecretStore(home, keyring=None)


def _nowhere_on_disk(home: Path, value: str = TOKEN) -> None:
    """The value is in no file under the state home (secrets, audit log, caches)."""
    for path in home.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path


# --- references -------------------------------------------------------------------------------


def test_from_env_stores_the_name_and_resolves_at_run_start(store: SecretStore,
                                                             home: Path) -> None:
    info = store.set_reference("github", SecretSource(ENV, "GH_TOKEN"))
    assert (info.source, info.reference, info.masked, info.length) == ("env", "GH_TOKEN",
                                                                       None, None)
    assert store.has("github") and store.get("github") is None  # nothing stored
    assert store.resolve("github", {"GH_TOKEN": TOKEN + "\n"}) == TOKEN
    with pytest.raises(SbxError) as caught:
        store.resolve("github", {})
    assert caught.value.reason is Reason.CREDENTIAL_UNBOUND
    assert "$GH_TOKEN is not set" in caught.value.message
    assert not (home / "secrets" / "github").exists()
    assert json.loads((home / "secrets" / "github.ref").read_text()) == {
        "source": "env", "reference": "GH_TOKEN"}
    _nowhere_on_disk(home)


def test_from_command_runs_on_the_host_with_sbx_environment(store: SecretStore,
                                                             home: Path) -> None:
    store.set_reference("github", SecretSource(COMMAND, 'printf "%s\\n" "$SOURCE"'))
    assert store.resolve("github", {"SOURCE": TOKEN, "PATH": os.environ["PATH"]}) == TOKEN
    [info] = store.services()
    assert (info.service, info.source, info.reference) == (
        "github", "command", 'printf "%s\\n" "$SOURCE"')
    _nowhere_on_disk(home)


@pytest.mark.slow
@pytest.mark.parametrize(("command", "fragment"), [
    ('echo "leaked-$VALUE"; echo "leaked-$VALUE" >&2; exit 3', "failed (exit 3)"),
    ("true", "printed no usable value"),
    ("printf 'a\\001b'", "printed no usable value"),
    ("head -c 70000 /dev/zero | tr '\\0' a", "more than 65536 bytes"),
    ("/nonexistent/helper", "failed (exit 127)"),
])
def test_command_failures_name_the_command_never_the_output(command: str,
                                                             fragment: str) -> None:
    with pytest.raises(SbxError) as caught:
        run_command("github", command, {"PATH": os.environ["PATH"], "VALUE": TOKEN})
    error = caught.value
    assert error.reason is Reason.CREDENTIAL_UNBOUND and fragment in error.message
    assert TOKEN not in f"{error.message} {error.hint} {error.details}"


@pytest.mark.slow
def test_a_command_that_hangs_is_killed_at_its_deadline(tmp_path: Path) -> None:
    marker = tmp_path / "child-alive"
    with pytest.raises(SbxError, match="did not finish within 1s"):
        run_command("github", f"sleep 30 & echo $! > {marker}; wait",
                    {"PATH": os.environ["PATH"]}, timeout=1)
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):  # the whole process group went
        for _ in range(50):
            os.kill(pid, 0)
            import time

            time.sleep(0.05)


@pytest.mark.slow
def test_set_value_replaces_a_reference_and_back(store: SecretStore, home: Path) -> None:
    store.set_reference("github", SecretSource(ENV, "GH_TOKEN"))
    store.set("github", TOKEN)
    assert store.source("github") == SecretSource("file")
    assert not (home / "secrets" / "github.ref").exists()
    store.set_reference("github", SecretSource(COMMAND, "gh auth token"))
    assert not (home / "secrets" / "github").exists()
    assert store.remove("github") and not store.has("github")
    events = [(e["event_type"], e["details"]) for e in audit.read_events(home)]
    assert [d.get("source") for kind, d in events if kind == audit.SECRET_SET] == [
        "env", "file", "command"]
    assert TOKEN not in audit.audit_path(home).read_text()


@pytest.mark.parametrize(("source", "fragment"), [
    (SecretSource(ENV, "GH-TOKEN"), "not an environment variable name"),
    (SecretSource(ENV, "$GH_TOKEN"), "not an environment variable name"),
    (SecretSource(COMMAND, "gh auth\ntoken"), "one non-empty line"),
    (SecretSource(COMMAND, "   "), "one non-empty line"),
])
def test_bad_references_are_refused(store: SecretStore, source: SecretSource,
                                    fragment: str) -> None:
    with pytest.raises(SbxError, match=fragment) as caught:
        store.set_reference("github", source)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
    assert not store.has("github")


def test_a_tampered_record_is_refused(store: SecretStore, home: Path) -> None:
    store.set_reference("github", SecretSource(ENV, "GH_TOKEN"))
    (home / "secrets" / "github.ref").write_text('{"source": "shell", "reference": "x"}')
    with pytest.raises(SbxError) as caught:
        store.resolve("github", {})
    assert caught.value.reason is Reason.SECRET_STORE_UNSAFE


def test_set_reference_verifies_by_default(store: SecretStore) -> None:
    with pytest.raises(SbxError) as caught:
        secretops.set_reference(store, "github", {}, from_env="GH_TOKEN", from_command=None,
                                verify=True)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
    assert "nothing was stored" in caught.value.message and not store.has("github")
    info = secretops.set_reference(store, "github", {}, from_env="GH_TOKEN",
                                   from_command=None, verify=False)
    assert info.source == "env"
    with pytest.raises(SbxError, match="one of --from-env"):
        secretops.set_reference(store, "github", {}, from_env="A", from_command="b",
                                verify=False)


# --- a run's secrets --------------------------------------------------------------------------


def _credential(service: str, optional: bool = False) -> Any:
    return SimpleNamespace(service=service, optional=optional)


@pytest.mark.slow
def test_resolve_for_run_leaves_files_to_the_proxy(store: SecretStore) -> None:
    store.set("files", "stored-value")
    store.set_reference("envy", SecretSource(ENV, "ENVY"))
    store.set_reference("cmd", SecretSource(COMMAND, "echo from-command"))
    secrets = resolve_for_run(store, [_credential("files"), _credential("envy"),
                                      _credential("cmd"), _credential("none", True)],
                              {"ENVY": TOKEN, "PATH": os.environ["PATH"]})
    assert secrets.available == {"files": True, "envy": True, "cmd": True, "none": False}
    assert secrets.provided == {"envy": TOKEN, "cmd": "from-command"}
    assert TOKEN not in repr(secrets)


@pytest.mark.slow
def test_resolve_for_run_refuses_a_required_source_that_yields_nothing(
        store: SecretStore) -> None:
    store.set_reference("envy", SecretSource(ENV, "ENVY"))
    with pytest.raises(SbxError) as caught:
        resolve_for_run(store, [_credential("envy")], {})
    assert caught.value.reason is Reason.CREDENTIAL_UNBOUND
    assert "$ENVY" in caught.value.message
    skipped = resolve_for_run(store, [_credential("envy", optional=True)], {})
    assert skipped.available == {"envy": False} and "envy" in skipped.problems


@pytest.mark.slow
def test_provided_secrets_round_trip_on_one_ascii_word() -> None:
    values = {"github": TOKEN, "other": "with space and ünïcode"}
    encoded = encode_provided(values)
    assert encoded.isascii() and " " not in encoded and "\n" not in encoded
    assert "|" not in encoded
    assert decode_provided(encoded) == values
    for bad in ("not base64!", encode_provided({})[:-2] + "xx", "W10="):  # W10= is "[]"
        with pytest.raises(ValueError):
            decode_provided(bad)


@pytest.mark.slow
def test_the_proxy_takes_provided_secrets_from_its_owner_pipe(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sbx.domain.egress.proxyconfig import ProxyConfig

    config = SimpleNamespace(credentials=[SimpleNamespace(service="github", domains=("d",)),
                                          SimpleNamespace(service="files", domains=("d",)),
                                          SimpleNamespace(service="oauth-only", domains=())],
                             state_home=tmp_path / "state")
    SecretStore(config.state_home, keyring=None).set("files", "from-the-file-store")
    notes: list[str] = []
    loaded = proxy_module.load_secrets(config, notes.append,  # type: ignore[arg-type]
                                       provided={"github": TOKEN})
    assert loaded == {"github": TOKEN, "files": "from-the-file-store"} and notes == []

    from sbx.domain.kits.compose import Network, NetworkPhase

    network = Network(1, NetworkPhase(), NetworkPhase(), False, ())
    loaded_config = ProxyConfig(run_id="run-1", state_home=tmp_path / "state",
                                audit_log=tmp_path / "audit.jsonl", network=network,
                                listen_host="172.18.0.1", peer_network="172.18.0.0/16")
    read, write = os.pipe()
    try:
        token = "a" * 64
        os.write(write, f"{token}|{encode_provided({'github': TOKEN})}\n".encode())
        owned = process_module._owner_token(loaded_config, read)
        assert owned == (token, {"github": TOKEN})
        os.write(write, f"{token}|garbage!\n".encode())
        assert process_module._owner_token(loaded_config, read) == 2
    finally:
        os.close(read)
        os.close(write)
    err = capsys.readouterr().err
    assert "malformed secrets" in err and TOKEN not in err


# --- the OS keyring ---------------------------------------------------------------------------


class MemoryKeyring:
    """A keyring backend object as keyring plug-ins are (duck-typed for the unit tests)."""

    priority = 5
    name = "memory keyring"

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        from keyring.errors import PasswordDeleteError

        if self.entries.pop((service, username), None) is None:
            raise PasswordDeleteError(username)


@pytest.fixture
def memory(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryKeyring]:
    backend = MemoryKeyring()
    ring = keyrings.Keyring(backend, keyrings.SERVICE_PREFIX + "test")
    monkeypatch.setattr(keyrings, "detect", lambda _home: ring)
    yield backend


@pytest.mark.slow
def test_set_uses_the_os_keyring_when_there_is_one(home: Path, memory: MemoryKeyring) -> None:
    store = SecretStore(home)
    info = store.set("github", TOKEN)
    assert (info.source, info.masked) == ("keyring", "ghp_****")
    assert info.reference is not None and info.reference.endswith("MemoryKeyring")
    assert memory.entries == {("sbx:test", "github"): TOKEN}
    assert not (home / "secrets" / "github").exists()
    _nowhere_on_disk(home)
    assert store.get("github") == TOKEN
    secrets = resolve_for_run(store, [_credential("github")], {})
    assert secrets.provided == {"github": TOKEN}  # the proxy cannot reach a keyring itself
    assert store.remove("github") and memory.entries == {}


@pytest.mark.slow
def test_a_keyring_that_went_away_is_a_clear_refusal(home: Path, memory: MemoryKeyring,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    SecretStore(home).set("github", TOKEN)
    monkeypatch.setattr(keyrings, "detect", lambda _home: None)
    with pytest.raises(SbxError) as caught:
        SecretStore(home).resolve("github", {})
    assert caught.value.reason is Reason.CREDENTIAL_UNBOUND
    assert "not available now" in caught.value.message


def test_keyring_errors_never_carry_the_value(home: Path) -> None:
    class Broken(MemoryKeyring):
        def set_password(self, service: str, username: str, password: str) -> None:
            raise RuntimeError(f"cannot store {password}")

    store = SecretStore(home, keyring=keyrings.Keyring(Broken(), "sbx:x"))
    with pytest.raises(SbxError) as caught:
        store.set("github", TOKEN)
    assert caught.value.reason is Reason.SECRET_STORE_UNSAFE
    assert "RuntimeError" in caught.value.message and TOKEN not in str(caught.value)


@pytest.mark.slow
def test_detect_takes_only_os_keyrings(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring
    from keyring.backends import chainer, fail, null

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    keyring.core.init_backend()
    assert keyrings.detect(home) is None  # no keyring on this machine: the file store
    for weak in (fail.Keyring(), null.Keyring()):
        monkeypatch.setattr(keyring, "get_keyring", lambda w=weak: w)
        assert keyrings.detect(home) is None
    fake = MemoryKeyring()
    monkeypatch.setattr(keyring, "get_keyring", lambda: fake)
    found = keyrings.detect(home)
    assert found is not None and found.backend is fake
    from sbx.base.paths import home_hash

    assert found.namespace == f"sbx:{home_hash(home)}"  # one entry set per state home

    chain = chainer.ChainerBackend()
    monkeypatch.setattr(chainer.ChainerBackend, "backends", (fail.Keyring(), fake))
    monkeypatch.setattr(keyring, "get_keyring", lambda: chain)
    chained = keyrings.detect(home)
    assert chained is not None and chained.backend is fake


def test_without_the_keyring_package_the_file_store_is_used(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "keyring", None)  # import keyring → ImportError
    assert keyrings.detect(home) is None
    assert SecretStore(home).set("github", TOKEN).source == "file"


# --- import -----------------------------------------------------------------------------------


ENV_WITH_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-" + "a" * 30, "GH_TOKEN": TOKEN,
                 "GITHUB_TOKEN": "ghp_other", "OPENAI_API_KEY": "", "HOME": "/h"}


def test_import_candidates_are_known_variables_once_per_service(store: SecretStore) -> None:
    found = secretops.find_candidates(ENV_WITH_KEYS, store)
    assert [(c.variable, c.service, c.length) for c in found] == [
        ("ANTHROPIC_API_KEY", "anthropic", 37), ("GH_TOKEN", "github", len(TOKEN))]
    assert TOKEN not in repr(found)
    with pytest.raises(SbxError, match="knows no environment variable for nope"):
        secretops.find_candidates(ENV_WITH_KEYS, store, ["nope"])


def test_import_needs_a_terminal_or_yes(store: SecretStore) -> None:
    with pytest.raises(SbxError) as caught:
        secretops.import_secrets(store, ENV_WITH_KEYS, services=(), yes=False, dry_run=False,
                                 confirm=None)
    assert caught.value.reason is Reason.INVALID_ARGUMENT
    assert "--yes" in (caught.value.hint or "") and "$GH_TOKEN as github" in caught.value.message
    assert TOKEN not in str(caught.value)
    assert store.services() == []
    dry = secretops.import_secrets(store, ENV_WITH_KEYS, services=(), yes=False, dry_run=True,
                                   confirm=None)
    assert len(dry.candidates) == 2 and dry.imported == () and store.services() == []


@pytest.mark.slow
def test_import_asks_for_each_and_skips_existing(store: SecretStore, home: Path) -> None:
    store.set("anthropic", "already-there")
    asked: list[str] = []

    def answer(candidate: secretops.ImportCandidate) -> bool:
        asked.append(candidate.variable)
        return True

    result = secretops.import_secrets(store, ENV_WITH_KEYS, services=(), yes=False,
                                      dry_run=False, confirm=answer)
    assert asked == ["GH_TOKEN"]
    assert [i.service for i in result.imported] == ["github"]
    assert [(c.service, why.split(" ")[0]) for c, why in result.skipped] == [
        ("anthropic", "anthropic")]
    assert store.get("github") == TOKEN and store.get("anthropic") == "already-there"
    assert TOKEN not in json.dumps(result.as_dict())
    declined = secretops.import_secrets(SecretStore(home / "other", keyring=None),
                                        ENV_WITH_KEYS, services=["github"], yes=False,
                                        dry_run=False, confirm=lambda _c: False)
    assert [why for _, why in declined.skipped] == ["declined"] and not declined.imported
