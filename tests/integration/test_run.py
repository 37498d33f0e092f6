"""`sbx run` against a real engine: status, output, workspace access, mounts, cleanup paths."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.seams.driver import SdkEngine
from sbx.seams.transports import open_engine
from sbx.usecases.context import AppContext
from sbx.usecases.run.entry import run
from sbx.usecases.run.request import RunRequest

from .conftest import BUSYBOX, owned, user_owned

pytestmark = pytest.mark.docker


@pytest.fixture
def env(state_home: Path, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def test_workload_exit_status_and_streams_pass_through(busybox_kit: Path, sbx_cli: Any,
                                                       env: dict[str, str]) -> None:
    result = sbx_cli(["run", str(busybox_kit), "--", "sh", "-c",
                      "echo to-out; echo to-err >&2; exit 7"], env=env)
    assert result.exit_code == 7
    assert "to-out" in result.stdout and "to-out" not in result.stderr
    assert "to-err" in result.stderr and "to-err" not in result.stdout


def test_image_cmd_runs_without_args_and_build_is_cached(kit_factory: Callable[..., Path],
                                                         sbx_cli: Any, env: dict[str, str],
                                                         ) -> None:
    # A unique label makes the content (and so the cache key) new to this engine.
    kit = kit_factory("cmdkit", f'FROM {BUSYBOX}\nLABEL test.nonce="{uuid.uuid4().hex}"\n'
                      'USER agent\nCMD ["echo", "from-cmd"]\n')
    first = sbx_cli(["run", "--json", str(kit)], env=env).envelope()
    second = sbx_cli(["run", "--json", str(kit)], env=env).envelope()
    assert first["data"]["stdout"] == "from-cmd\n"
    assert first["data"]["image_built"] is True
    assert second["data"]["image_built"] is False
    assert first["data"]["image"] == second["data"]["image"]
    # A change to anything in the kit directory rebuilds.
    (kit / "extra.txt").write_text("changed", encoding="utf-8")
    third = sbx_cli(["run", "--json", str(kit)], env=env).envelope()
    assert third["data"]["image_built"] is True
    assert third["data"]["image"] != first["data"]["image"]


def test_json_envelope_records_skipped_optional_capability(kit_factory: Callable[..., Path],
                                                           sbx_cli: Any,
                                                           env: dict[str, str]) -> None:
    kit = kit_factory("optkit", f"FROM {BUSYBOX}\nUSER agent\n", """
        capabilities:
          - type: com.example/not-a-real-thing@1
            optional: true
        """)
    envelope = sbx_cli(["run", "--json", str(kit), "--", "true"], env=env).envelope()
    assert envelope["status"] == "ok" and envelope["exit_code"] == 0
    skipped = envelope["data"]["selection"]["skipped"]
    assert [s["type"] for s in skipped] == ["com.example/not-a-real-thing@1"]
    audit = (Path(env["SBX_HOME"]) / "audit.jsonl").read_text(encoding="utf-8")
    assert "capability_skipped" in audit and "not-a-real-thing" in audit


def test_required_unknown_capability_is_refused_by_type_name(kit_factory: Callable[..., Path],
                                                             sbx_cli: Any,
                                                             env: dict[str, str]) -> None:
    kit = kit_factory("reqkit", f"FROM {BUSYBOX}\nUSER agent\n", """
        capabilities:
          - type: com.example/needs-this@3
        """)
    result = sbx_cli(["run", str(kit), "--", "true"], env=env)
    assert result.exit_code == 125
    assert "com.example/needs-this@3" in result.stderr
    assert "(unsupported_capability)" in result.stderr


def test_timeout_kills_exits_124_and_removes_the_container(busybox_kit: Path, sbx_cli: Any,
                                                           env: dict[str, str],
                                                           engine: SdkEngine,
                                                           state_home: Path) -> None:
    result = sbx_cli(["run", str(busybox_kit), "--timeout", "1", "--", "sleep", "30"], env=env)
    assert result.exit_code == 124
    assert "(timeout)" in result.stderr
    assert owned(engine, state_home) == []
    assert not any((state_home / "runs").iterdir())


def test_workspace_rw_read_only_and_none(tmp_path: Path, busybox_kit: Path, sbx_cli: Any,
                                         env: dict[str, str]) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "seed.txt").write_text("seed", encoding="utf-8")
    unwritable = sbx_cli(["run", str(busybox_kit), str(workspace), "--", "true"], env=env)
    if os.geteuid() == 0:  # root-owned: never a silently read-only workspace
        assert unwritable.exit_code == 125
        assert "cannot write" in unwritable.stderr
        assert "(workspace_unwritable)" in unwritable.stderr
    user_owned(workspace)
    write = 'cat seed.txt; echo; echo written > "$SBX_WORKSPACE/out.txt"; echo rc=$?'

    rw = sbx_cli(["run", str(busybox_kit), str(workspace), "--", "sh", "-c", write], env=env)
    assert rw.exit_code == 0 and "seed" in rw.stdout and "rc=0" in rw.stdout
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "written\n"
    (workspace / "out.txt").unlink()

    ro = sbx_cli(["run", str(busybox_kit), str(workspace), "--access", "ro", "--", "sh", "-c",
                  write], env=env)
    assert ro.exit_code == 0 and "seed" in ro.stdout and "rc=0" not in ro.stdout
    assert not (workspace / "out.txt").exists()

    none = sbx_cli(["run", str(busybox_kit), str(workspace), "--access", "none", "--", "sh",
                    "-c", write], env=env)
    assert none.exit_code == 0 and "rc=0" in none.stdout and "seed" not in none.stdout
    assert not (workspace / "out.txt").exists()


def test_extra_mount_read_only_and_blocked_mount(tmp_path: Path, busybox_kit: Path,
                                                 sbx_cli: Any, env: dict[str, str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "d.txt").write_text("data-file", encoding="utf-8")
    ok = sbx_cli(["run", str(busybox_kit), "--mount", f"{data}:/data:ro", "--", "sh", "-c",
                  "cat /data/d.txt; touch /data/x 2>/dev/null || echo denied"], env=env)
    assert ok.exit_code == 0 and "data-file" in ok.stdout and "denied" in ok.stdout
    blocked = sbx_cli(["run", str(busybox_kit), "--mount", "/etc:/hostetc:ro", "--", "true"],
                      env=env)
    assert blocked.exit_code == 125 and "(mount_blocked)" in blocked.stderr
    assert "system_path" in blocked.stderr


def test_symlink_escape_from_workspace_is_blocked(tmp_path: Path, busybox_kit: Path,
                                                  sbx_cli: Any, env: dict[str, str]) -> None:
    link = tmp_path / "innocent"
    link.symlink_to("/etc")
    result = sbx_cli(["run", str(busybox_kit), str(link), "--", "true"], env=env)
    assert result.exit_code == 125
    assert "(mount_blocked)" in result.stderr and "resolves to" in result.stderr


def test_image_user_root_falls_back_to_configured_user(kit_factory: Callable[..., Path],
                                                       sbx_cli: Any, env: dict[str, str],
                                                       tmp_path: Path) -> None:
    kit = kit_factory("rootkit", f"FROM {BUSYBOX}\nUSER root\n")
    config = tmp_path / "user.toml"
    config.write_text("[sandbox]\nuser = 4242\n", encoding="utf-8")
    result = sbx_cli(["run", str(kit), "--", "sh", "-c", "echo $(id -u):$(id -g)"],
                     env={**env, "SBX_CONFIG": str(config)})
    assert result.exit_code == 0 and "4242:4242" in result.stdout


def test_image_user_with_root_group_is_refused(kit_factory: Callable[..., Path], sbx_cli: Any,
                                               env: dict[str, str]) -> None:
    kit = kit_factory("gidkit", f"FROM {BUSYBOX}\nUSER 1000:0\n")
    result = sbx_cli(["run", str(kit), "--", "true"], env=env)
    assert result.exit_code == 125 and "(root_user)" in result.stderr


def test_named_user_resolving_to_uid_0_is_not_trusted(kit_factory: Callable[..., Path],
                                                      sbx_cli: Any, env: dict[str, str]) -> None:
    # "toor" is uid 0 under another name: the image's /etc/passwd is what counts.
    kit = kit_factory("toorkit", f"FROM {BUSYBOX}\nUSER root\n"
                      "RUN echo 'toor:x:0:0::/root:/bin/sh' >> /etc/passwd\nUSER toor\n")
    result = sbx_cli(["run", str(kit), "--", "id", "-u"], env=env)
    assert result.exit_code == 0 and result.stdout.strip() == "1000"


def test_missing_base_image_is_refused_without_pulling(kit_factory: Callable[..., Path],
                                                       sbx_cli: Any, env: dict[str, str],
                                                       engine: SdkEngine) -> None:
    kit = kit_factory("missing", "FROM sbx-test/does-not-exist:42\nCMD [\"true\"]\n")
    result = sbx_cli(["run", str(kit)], env=env)
    assert result.exit_code == 125 and "(image_missing)" in result.stderr
    assert "docker pull sbx-test/does-not-exist:42" in result.stderr
    assert "docker load" in result.stderr and "sbx pull" not in result.stderr
    assert engine.image("sbx-test/does-not-exist:42") is None


def test_failing_build_is_reported(kit_factory: Callable[..., Path], sbx_cli: Any,
                                   env: dict[str, str]) -> None:
    kit = kit_factory("broken", f"FROM {BUSYBOX}\nRUN echo step-output-marker && exit 3\n")
    result = sbx_cli(["run", str(kit)], env=env)
    assert result.exit_code == 126 and "(build_failed)" in result.stderr
    # The build's own output is shown with the error (bounded), not left to "read above".
    assert "lines of the build output:" in result.stderr
    assert "  | step-output-marker" in result.stderr
    envelope = sbx_cli(["run", "--json", str(kit)], env=env).envelope()
    assert "step-output-marker" in envelope["data"]["log_tail"]
    assert len(envelope["data"]["log_tail"]) <= 20


def test_missing_command_exits_127_like_a_shell(busybox_kit: Path, sbx_cli: Any,
                                               env: dict[str, str]) -> None:
    # The sandbox runs an init (tini) as PID 1, which reports a missing command the way a
    # shell does (127) instead of an engine start failure.
    result = sbx_cli(["run", str(busybox_kit), "--", "/no/such/binary"], env=env)
    assert result.exit_code == 127 and "/no/such/binary" in result.stderr


class _FailingWait:
    """The real driver, except that waiting fails as if the engine vanished mid-run."""

    def __init__(self, inner: SdkEngine) -> None:
        self.inner = inner
        self.created: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, spec: Any) -> str:
        cid = self.inner.create(spec)
        self.created.append(cid)
        return cid

    def wait(self, container_id: str, timeout_s: float) -> int | None:
        raise SbxError(Reason.DOCKER_UNREACHABLE, "lost the Docker engine (injected)")


def test_engine_error_mid_run_still_removes_the_container(
        busybox_kit: Path, env: dict[str, str], engine: SdkEngine, state_home: Path,
        tmp_path: Path) -> None:
    from sbx.base.render import Renderer

    failing = _FailingWait(open_engine(env))
    console = io.StringIO()
    renderer = Renderer(console, console, as_json=True, env=env)
    ctx = AppContext(env=env, cwd=tmp_path, renderer=renderer,
                     driver_factory=lambda _env: failing)
    with pytest.raises(SbxError) as raised:
        run(ctx, RunRequest(workload=str(busybox_kit), command=("sleep", "30")),
            on_output=lambda _s, _c: None, progress=_no_progress)
    # Lost after the container was created: a failure after the start (126), not a refusal.
    assert raised.value.reason is Reason.ENGINE_LOST
    assert raised.value.exit_status == 126
    assert failing.created, "the container was never created; the test proves nothing"
    assert owned(engine, state_home) == []


class _NoProgress:
    def __enter__(self) -> Callable[[str], None]:
        return lambda _line: None

    def __exit__(self, *_exc: object) -> None:
        return None


def _no_progress(_title: str) -> _NoProgress:
    return _NoProgress()


@pytest.fixture(autouse=True)
def _no_stray_helpers(engine: SdkEngine, state_home: Path) -> Iterator[None]:
    yield
    # Helper containers (reading /etc/passwd out of an image) are removed right after use.
    assert [o for o in owned(engine, state_home) if o.kind == "container"] == []
