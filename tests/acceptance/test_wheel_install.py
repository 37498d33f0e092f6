"""The built wheel installs as a user installs it, offline: with pipx into a temporary home
(the man page where `man` finds it, the completion scripts under share/, a working `sbx`), and
with pip into a clean venv.

The wheel is built here from this checkout (hatchling, no build isolation, no index) and its
dependencies come from the local wheelhouse that scripts/setup.sh fills
(``.venv/sbx-wheelhouse``, scripts/wheelhouse.py): ``--no-index --find-links``, so nothing
leaves the machine (TESTING.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main

from sbx import __version__
from sbx.app import app

pytestmark = pytest.mark.acceptance

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "cli" / "sbx" / "data"
WHEELHOUSE = REPO / ".venv" / "sbx-wheelhouse"
# Where the wheel puts each file, relative to the installation prefix (pyproject shared-data).
SHARED = {
    "share/man/man1/sbx.1": DATA / "man" / "sbx.1",
    "share/bash-completion/completions/sbx": DATA / "completions" / "sbx.bash",
    "share/zsh/site-functions/_sbx": DATA / "completions" / "_sbx",
    "share/fish/vendor_completions.d/sbx.fish": DATA / "completions" / "sbx.fish",
}
SHELL_FILES = {"bash": "share/bash-completion/completions/sbx",
               "zsh": "share/zsh/site-functions/_sbx",
               "fish": "share/fish/vendor_completions.d/sbx.fish"}


def _missing(message: str) -> None:
    """A missing tool or wheelhouse: an error in CI (SBX_REQUIRE_ENGINE=1), else a skip."""
    if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
        pytest.fail(f"{message}: run scripts/setup.sh")
    pytest.skip(message)


def _offline_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user whose home is ``home``, with pip cut off from every index
    and from the machine's pip configuration (which names mirrors and find-links)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PIP_", "PIPX_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_DATA_HOME=str(home / ".local/share"),
               XDG_STATE_HOME=str(home / ".local/state"), PIP_CONFIG_FILE=os.devnull,
               PIP_NO_INDEX="1", PIP_FIND_LINKS=str(WHEELHOUSE),
               PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1", SBX_HOME=str(home / "sbx"),
               SBX_CONFIG=os.devnull)
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float = 300,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not any(WHEELHOUSE.glob("typer-*.whl")):
        _missing(f"no wheelhouse at {WHEELHOUSE}")
    out = tmp_path_factory.mktemp("dist")
    home = tmp_path_factory.mktemp("build-home")
    done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--wheel-dir", str(out), str(REPO)], _offline_env(home))
    assert done.returncode == 0, done.stdout + done.stderr
    [built] = out.glob("sbx_sandbox-*.whl")
    return built


@pytest.fixture(scope="module")
def pipx_home(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A user's home with sbx installed by pipx from the built wheel, offline."""
    home = tmp_path_factory.mktemp("pipx-user")
    env = _pipx_env(home)
    # The shared pip comes from the interpreter's bundled wheel: no upgrade from an index.
    done = _run([sys.executable, "-m", "pipx", "install", "--pip-args",
                 f"--no-index --find-links {WHEELHOUSE}", str(wheel)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "These manual pages are now available" in done.stdout, done.stdout
    yield home
    _run([sys.executable, "-m", "pipx", "uninstall", "sbx-sandbox"], env)


def _pipx_env(home: Path) -> dict[str, str]:
    return _offline_env(home, PIPX_HOME=str(home / "pipx"), PIPX_BIN_DIR=str(home / "bin"),
                        PIPX_MAN_DIR=str(home / "man"), PIPX_SHARED_LIBS=str(home / "shared"),
                        PIPX_DISABLE_SHARED_LIBS_AUTO_UPGRADE="1",
                        PATH=f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")


def _command_names() -> list[str]:
    """Every command path below `sbx` ("sbx run", "sbx kit init", ...)."""
    names = []

    def walk(command: object, path: str) -> None:
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if getattr(sub, "hidden", False):
                continue
            names.append(f"{path} {name}")
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "sbx")
    return names


def test_the_wheel_carries_the_man_page_and_completions_as_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        data = f"sbx_sandbox-{__version__}.data/data/"
        for installed, source in SHARED.items():
            assert data + installed in names
            assert archive.read(data + installed) == source.read_bytes(), installed
            # ...and the package's own copy, which `sbx completion` prints.
            own = "sbx/" + str(source.relative_to(REPO / "cli" / "sbx"))
            assert archive.read(own) == source.read_bytes(), own
        metadata = archive.read(f"sbx_sandbox-{__version__}.dist-info/METADATA").decode()
    assert "Name: sbx-sandbox" in metadata
    assert "License-Expression: Apache-2.0" in metadata
    assert "Provides-Extra: keyring" in metadata
    assert f"sbx_sandbox-{__version__}.dist-info/licenses/LICENSE" in names


AGENT_KITS = {"claude": "claude-code", "codex": "codex", "gemini": "gemini-cli"}
MIXIN_KITS = {"browser": "browser", "browser-observer": "browser-observer"}


def test_the_wheel_carries_the_agent_kits_but_no_staged_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    source = DATA / "agents"
    assert "sbx/data/agents/README.md" in names
    for kit in AGENT_KITS.values():
        for tracked in (f"{kit}.yaml", f"{kit}.dockerfile", "npm-fetch.sh", "packages.list",
                        "packages.lock", "packages/README.md"):
            assert f"sbx/data/agents/{kit}/{tracked}" in names, (kit, tracked)
    # Tarballs staged by scripts/stage_agents.py stay out (gitignored, hundreds of MB).
    staged = [n for n in names if n.startswith("sbx/data/agents/") and n.endswith(".tgz")]
    assert staged == [], staged
    assert {p.name for p in source.iterdir() if p.is_dir()} == set(AGENT_KITS.values())
    for kit in MIXIN_KITS.values():
        assert f"sbx/data/kits/{kit}/{kit}.yaml" in names, kit
        assert f"sbx/data/kits/{kit}/{kit}.dockerfile" in names, kit


def test_pipx_install_resolves_the_short_names_to_its_own_kits(pipx_home: Path,
                                                               tmp_path: Path) -> None:
    sbx = pipx_home / "bin" / "sbx"
    env = _pipx_env(pipx_home)
    venv = (pipx_home / "pipx" / "venvs" / "sbx-sandbox").resolve()
    listed = subprocess.run([str(sbx), "kit", "ls", "--json"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL, check=False)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["data"]["kits"]
    assert [(r["name"], r["kit"], r["source"]) for r in rows] == [
        (name, kit, "bundled") for name, kit in {**AGENT_KITS, **MIXIN_KITS}.items()]
    for row in rows:
        assert Path(row["resolves_to"]).resolve().is_relative_to(venv), row
    for name in MIXIN_KITS:
        done = subprocess.run([str(sbx), "kit", "validate", "--json", name], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["data"]["kind"] == "mixin"
    for name, kit in AGENT_KITS.items():
        done = subprocess.run([str(sbx), "kit", "validate", "--json", name], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        data = json.loads(done.stdout)["data"]
        assert data["valid"] is True and data["kind"] == "workload"
        assert Path(data["descriptor"]).resolve() == (
            Path(rows[0]["resolves_to"]).parent / kit / f"{kit}.yaml").resolve()
    wrong = subprocess.run([str(sbx), "run", "--json", "claud", "."], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL, check=False)
    assert wrong.returncode == 125, wrong.stdout + wrong.stderr
    refused = json.loads(wrong.stdout)
    assert refused["reason"] == "kit_not_found" and "claude" in refused["hint"]


def test_pipx_install_gives_man_sbx(pipx_home: Path) -> None:
    if shutil.which("man") is None:
        _missing("man (man-db) is not installed")
    man_dir = pipx_home / "man"
    assert (man_dir / "man1" / "sbx.1").read_bytes() == SHARED["share/man/man1/sbx.1"].read_bytes()
    # Piped output without MAN_KEEP_FORMATTING: plain text, no overstrike.
    env = {**_pipx_env(pipx_home), "MANPATH": str(man_dir), "MANPAGER": "cat", "PAGER": "cat",
           "MANWIDTH": "200", "LC_ALL": "C.UTF-8"}
    env.pop("MAN_KEEP_FORMATTING", None)
    where = _run(["man", "-w", "sbx"], env, timeout=60)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).resolve() == (man_dir / "man1" / "sbx.1").resolve()
    page = _run(["man", "sbx"], env, timeout=60)
    assert page.returncode == 0, page.stderr
    lines = {line.strip() for line in page.stdout.splitlines()}
    assert any(line.startswith("SBX(1)") for line in lines), page.stdout[:300]
    commands = _command_names()
    assert {"sbx run", "sbx kit init", "sbx completion", "sbx config show"} <= set(commands)
    missing = [name for name in commands if name not in lines]
    assert not missing, f"man sbx does not document: {missing}"


def test_pipx_install_gives_the_completion_files_and_a_working_sbx(pipx_home: Path) -> None:
    venv = pipx_home / "pipx" / "venvs" / "sbx-sandbox"
    for installed in SHELL_FILES.values():
        assert (venv / installed).read_bytes() == SHARED[installed].read_bytes(), installed
    sbx = pipx_home / "bin" / "sbx"
    assert sbx.exists()
    env = _pipx_env(pipx_home)
    version = _run([str(sbx), "--version"], env, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"sbx {__version__}"
    for shell, installed in SHELL_FILES.items():
        printed = _run([str(sbx), "completion", shell], env, timeout=60)
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == (venv / installed).read_text(encoding="utf-8"), shell


def test_a_clean_venv_installs_the_wheel_offline(wheel: Path, tmp_path: Path) -> None:
    env = _offline_env(tmp_path / "home")
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], env)
    assert made.returncode == 0, made.stderr
    installed = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index",
                      "--find-links", str(WHEELHOUSE), str(wheel)], env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # Only the wheelhouse was used, and it held what the wheel declares: pip would have said
    # "No matching distribution" otherwise.
    helped = _run([str(venv / "bin" / "sbx"), "--help"], env, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "Usage: sbx" in helped.stdout
    for command in ("run", "kit", "secret", "config", "completion"):
        assert command in helped.stdout
    # The optional keyring is not pulled in by a plain install.
    listed = _run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"], env)
    assert "keyring==" not in listed.stdout
    assert (venv / "share" / "man" / "man1" / "sbx.1").is_file()
