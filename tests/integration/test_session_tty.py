"""Interactive `sbx run` sessions driven as a person would: the real console script runs in a
tmux pane (a real terminal), the test types keys into it and reads the screen back.

Covers the TTY session (typing, typeahead, `tty`, TERM/COLORTERM/LANG/LC_* passed in, window
size and SIGWINCH, Ctrl-C to the workload, the exit status), the host terminal restored on every
way out (normal, failing workload, timeout, SIGTERM/SIGHUP/SIGQUIT, detach), the detach keys
(default, `--detach-keys`, `[sandbox] detach_keys`), bash's line editor in a Debian image,
`--no-tty` on a terminal (no TTY, cooked stdin), a closed terminal, repeated SIGHUP during the
cleanup, and `-t` with a stdin that is not a terminal (the size comes from stdout).

Every tmux session runs on its own tmux server (``-L``, no user config), so the pane's TERM and
size are the test's own; the server is killed at teardown, and the test waits for every sbx it
started to have exited before the state home is checked for leftovers.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from sbx.seams.driver import SdkEngine
from sbx.seams.engine import OwnedObject

from .conftest import BUSYBOX, owned

pytestmark = pytest.mark.docker

BOOKWORM = "sbx-base/bookworm:1"
VENV_BIN = Path(sys.executable).parent
SBX = shutil.which("sbx", path=str(VENV_BIN)) or shutil.which("sbx") or "sbx"
# Identical kit directories give the same image, so only the first test builds it.
SHELL_KIT = f'FROM {BUSYBOX}\nUSER agent\nWORKDIR /workspace\nCMD ["sh"]\n'
BASH_KIT = f'FROM {BOOKWORM}\nUSER agent\nWORKDIR /workspace\nCMD ["bash"]\n'
ROWS, COLUMNS = 30, 100
# The pane's terminal and locale variables besides TERM (which tmux sets for its panes).
TERMINAL_ENV = {"COLORTERM": "truecolor", "LANG": "C.UTF-8", "LC_PAPER": "C.UTF-8"}
WAIT_S = 30.0  # the bound of every wait (a first run may build the kit image)
POLL_S = 0.1
BUSYBOX_PROMPT = r"^/workspace \$ ?$"

T = TypeVar("T")


def poll(probe: Callable[[], T | None], timeout: float) -> T | None:
    """Call ``probe`` every 0.1 s until it returns something other than None, at most
    ``timeout`` seconds; its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(POLL_S)


def wait_for(probe: Callable[[], T | None], *, timeout: float = WAIT_S,
             what: Callable[[], str] = lambda: "") -> T:
    """:func:`poll`, failing the test when nothing came within ``timeout``."""
    found = poll(probe, timeout)
    if found is None:
        pytest.fail(f"not seen within {timeout:g}s\n{what()}")
    return found


def _process_gone(pid: int) -> bool:
    """True when ``pid`` has exited (a zombie nobody reaps counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait_exited(pid: int) -> None:
    wait_for(lambda: True if _process_gone(pid) else None,
             what=lambda: f"sbx (pid {pid}) did not exit")


@dataclass
class Pane:
    """One tmux session (on its own server) whose single pane runs an interactive bash."""

    server: str
    name: str
    workdir: Path
    started: list[str] = field(default_factory=list)  # tags of the sbx runs started
    socket: Path | None = None  # the server's socket file (tmux leaves it when killed)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.server, *args], capture_output=True,
                              text=True, timeout=10, check=True)
        return done.stdout

    def keys(self, *keys: str) -> None:
        """Key names as tmux spells them: ``C-c``, ``Enter``, ``C-p``."""
        self.tmux("send-keys", "-t", self.name, *keys)

    def type(self, text: str, *, enter: bool = True) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        if enter:
            self.keys("Enter")

    def screen(self, *, joined: bool = False) -> str:
        """The pane's history and screen: one line per row, or (``joined``) with the rows of
        wrapped lines joined."""
        return self.tmux("capture-pane", "-p", *(["-J"] if joined else []), "-S", "-",
                         "-t", self.name)

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen().splitlines()]

    def search(self, pattern: str) -> re.Match[str] | None:
        """``pattern`` (multi-line regex) on the pane's rows, else on its joined lines.

        Rows: output always starts a row, even after a typed line that filled the width (which
        tmux marks as wrapped, so joining would glue the output to it). Joined lines: a long
        message that wrapped is whole again."""
        compiled = re.compile(pattern, re.MULTILINE)
        return compiled.search(self.screen()) or compiled.search(self.screen(joined=True))

    def wait(self, pattern: str, *, timeout: float = WAIT_S) -> re.Match[str]:
        """The first match of ``pattern`` on the pane, polled."""
        return wait_for(lambda: self.search(pattern), timeout=timeout,
                        what=lambda: f"pattern {pattern!r} on the pane:\n{self.screen()}")

    def count(self, line: str) -> int:
        return self.lines().count(line)

    def size(self) -> tuple[int, int]:
        rows, columns = self.tmux("display-message", "-p", "-t", self.name,
                                  "#{pane_height} #{pane_width}").split()
        return int(rows), int(columns)

    def tty(self) -> str:
        return self.tmux("display-message", "-p", "-t", self.name, "#{pane_tty}").strip()

    def ask(self, command: str, pattern: str, *, every: float = 2.0,
            timeout: float = WAIT_S) -> re.Match[str]:
        """Type ``command`` until its output matches ``pattern`` (for values that arrive
        asynchronously, like a window size)."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            self.type(command)
            found = poll(lambda: self.search(pattern), min(every, remaining))
            if found is not None:
                return found
        pytest.fail(f"{command!r} never printed {pattern!r}:\n{self.screen()}")

    # -- sbx in the pane -----------------------------------------------------------------------

    def sbx(self, tag: str, args: str, *, prefix: str = "") -> None:
        """Type the command line that runs ``sbx run ARGS`` with the host terminal's settings
        saved before and after (``TAG.before``/``TAG.after``) and the status shown as
        ``TAG:RC=N``. ``args`` is shell text (kits are under ``kits/``, relative to the pane);
        ``prefix`` goes before the script (e.g. ``NAME=value``)."""
        self.started.append(tag)
        self.type(f"stty -g > {tag}.before; {prefix} ./sbx.sh {tag} {args}; rc=$?; "
                  f"stty -g > {tag}.after; echo {tag}:RC=$rc")

    def close(self) -> None:
        """Close the terminal, as closing a terminal window does: the pane's processes are
        hung up (SIGHUP) and their terminal is gone."""
        subprocess.run(["tmux", "-L", self.server, "kill-server"], check=False, timeout=10,
                       capture_output=True)
        if self.socket is not None:
            self.socket.unlink(missing_ok=True)

    def status(self, tag: str, *, timeout: float = WAIT_S) -> int:
        """sbx's exit status for the run ``tag``, as the pane's shell saw it."""
        return int(self.wait(rf"^{re.escape(tag)}:RC=(\d+)$", timeout=timeout).group(1))

    def pid(self, tag: str) -> int:
        path = self.workdir / f"{tag}.pid"
        text = wait_for(lambda: (path.read_text(encoding="utf-8").strip() or None)
                        if path.exists() else None, what=lambda: f"{path} never written")
        return int(text)

    def settings(self, tag: str) -> tuple[str, str]:
        """The host terminal's `stty -g` before and after the run ``tag``."""
        before, after = ((self.workdir / f"{tag}.{when}").read_text(encoding="utf-8").strip()
                         for when in ("before", "after"))
        return before, after

    def ended(self, tag: str) -> bool:
        """Whether the run ``tag`` has ended (its status line is on the pane)."""
        return self.search(rf"^{re.escape(tag)}:RC=\d+$") is not None

    def host_term(self, tag: str) -> str:
        return (self.workdir / f"{tag}.term").read_text(encoding="utf-8").strip()

    def live_settings(self) -> str:
        """The pane terminal's settings right now, read from outside (as root may)."""
        return subprocess.run(["stty", "-a", "-F", self.tty()], capture_output=True, text=True,
                              timeout=10, check=True).stdout


RUN_SCRIPT = """\
#!/bin/sh
# sbx.sh TAG ARGS...: runs `sbx run ARGS` in this terminal; TAG.pid is sbx's pid (exec keeps
# it) and TAG.term the TERM this terminal had. SBX_CONFIG, when set, names a config file.
tag=$1; shift
printf '%s\\n' "$TERM" > "$tag.term"
echo $$ > "$tag.pid"
[ -n "$SBX_CONFIG" ] || SBX_CONFIG={config}
export SBX_HOME={home} SBX_CONFIG PATH={bin}:$PATH NO_COLOR=1
exec {sbx} run "$@"
"""


@pytest.fixture
def pane(tmp_path: Path, state_home: Path) -> Iterator[Pane]:
    """A fresh tmux server and session (``ROWS``x``COLUMNS``), its pane an interactive bash in
    ``tmp_path`` with ``./sbx.sh`` there. Teardown kills the server, then waits for every sbx
    it started to exit (the pane closing hangs them up, and they clean up on SIGHUP)."""
    if shutil.which("tmux") is None:
        if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
            pytest.fail("tmux is missing")
        pytest.skip("tmux is missing")
    script = tmp_path / "sbx.sh"
    script.write_text(RUN_SCRIPT.format(
        home=shlex.quote(str(state_home)), config=shlex.quote(os.devnull),
        bin=shlex.quote(str(VENV_BIN)), sbx=shlex.quote(SBX)), encoding="utf-8")
    script.chmod(0o755)
    suffix = uuid.uuid4().hex[:12]
    session = Pane(server=f"sbx-test-{suffix}", name=f"s{suffix}", workdir=tmp_path)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TMUX", "SBX_", "LC_"))}
    env.update({"PS1": "$ ", "PATH": f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
                **TERMINAL_ENV})
    subprocess.run(["tmux", "-L", session.server, "-f", "/dev/null", "new-session", "-d",
                    "-s", session.name, "-x", str(COLUMNS), "-y", str(ROWS),
                    "-c", str(tmp_path), "bash", "--norc", "--noprofile"],
                   env=env, check=True, timeout=10, capture_output=True)
    try:
        session.socket = Path(session.tmux("display-message", "-p", "#{socket_path}").strip())
        session.wait(r"^\$ ?$")
        yield session
    finally:
        session.close()
        for tag in session.started:
            path = tmp_path / f"{tag}.pid"
            text = path.read_text(encoding="utf-8").strip() if path.exists() else ""
            if text:
                _wait_exited(int(text))


@pytest.fixture
def shell_kit(kit_factory: Callable[..., Path]) -> Path:
    return kit_factory("shell", SHELL_KIT)


def _nothing_owned(engine: SdkEngine, state_home: Path) -> None:
    assert owned(engine, state_home) == []


def _remove_leftovers(engine: SdkEngine, state_home: Path) -> list[OwnedObject]:
    """What the run left behind; removed now (polled: an aborted removal may still be in
    progress in the engine), so a known bug does not also fail the teardown."""
    left = owned(engine, state_home)

    def removed() -> bool | None:
        remaining = owned(engine, state_home)
        for obj in remaining:
            if obj.kind == "container":
                engine.remove_container(obj.id)
        return True if not remaining else None

    wait_for(removed, what=lambda: f"could not remove {owned(engine, state_home)}")
    return left


# -- the TTY session ---------------------------------------------------------------------------


def test_interactive_shell_reads_typed_commands_in_a_tty(pane: Pane, shell_kit: Path) -> None:
    pane.sbx("a", "kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    pane.type("echo $((6*7))")
    pane.wait(r"^42$")
    pane.type("tty")
    pane.wait(r"^/dev/pts/\d+$")
    pane.type('echo "term=$TERM colorterm=$COLORTERM lang=$LANG paper=$LC_PAPER"')
    term = pane.host_term("a")
    assert term  # tmux gives each pane a TERM
    pane.wait(rf"^term={re.escape(term)} colorterm=truecolor lang=C.UTF-8 paper=C.UTF-8$")
    pane.type("exit")
    assert pane.status("a") == 0


def test_window_size_is_set_at_start_and_follows_resizes(pane: Pane, shell_kit: Path) -> None:
    rows, columns = pane.size()
    assert (rows, columns) == (ROWS, COLUMNS)
    pane.sbx("a", "kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    pane.ask("stty size", rf"^{rows} {columns}$")
    pane.tmux("resize-window", "-t", pane.name, "-x", "120", "-y", "40")
    assert pane.size() == (40, 120)
    pane.ask("stty size", r"^40 120$")
    pane.type("exit")
    assert pane.status("a") == 0


def test_ctrl_c_reaches_the_workload_and_the_exit_status_is_sbx_s(pane: Pane,
                                                                  shell_kit: Path) -> None:
    pane.sbx("a", "kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    pane.type('echo "sle""eping"; sleep 100')
    pane.wait(r"^sleeping$")
    pane.keys("C-c")
    # Answered long before the sleep would have ended: Ctrl-C interrupted it, and only it.
    pane.type('echo "al""ive"')
    pane.wait(r"^alive$")
    assert not pane.ended("a")
    pane.type("exit 7")
    assert pane.status("a") == 7


def test_keys_typed_before_the_sandbox_is_up_reach_it(pane: Pane, shell_kit: Path) -> None:
    pane.sbx("a", "kits/shell")
    pane.type('echo "type""ahead-$((1+1))"')  # at once: sbx is still starting
    pane.wait(r"^typeahead-2$")
    pane.type("exit")
    assert pane.status("a") == 0


def test_tty_without_a_terminal_stdin_still_gets_the_window_size(pane: Pane,
                                                                 shell_kit: Path) -> None:
    # The size arrives just after the start: the workload polls for it (bounded, 3 s).
    pane.sbx("a", "-t kits/shell -- sh -c 'i=0; while [ $i -lt 30 ]; do "
                  's=$(stty size 2>/dev/null); [ -n "$s" ] && [ "$s" != "0 0" ] && break; '
                  "i=$((i+1)); sleep 0.1; done; "
                  "echo \"size=[$s]\"' < /dev/null")
    assert pane.status("a") == 0
    assert pane.search(rf"^size=\[{ROWS} {COLUMNS}\]$") is not None, pane.screen()


# -- the host terminal is restored on every way out ----------------------------------------------


@pytest.mark.parametrize(("args", "expected"), [
    pytest.param("kits/shell -- true", 0, id="success"),
    pytest.param("kits/shell -- sh -c 'exit 5'", 5, id="workload-fails"),
    pytest.param("--timeout 3 kits/shell -- sleep 60", 124, id="timeout"),
])
def test_host_terminal_is_restored_after_the_run(pane: Pane, shell_kit: Path, args: str,
                                                 expected: int, engine: SdkEngine,
                                                 state_home: Path) -> None:
    pane.sbx("a", args)
    assert pane.status("a") == expected
    before, after = pane.settings("a")
    assert before == after
    if expected == 124:
        pane.wait(r"\(timeout\)")
    _nothing_owned(engine, state_home)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT],
                         ids=lambda s: s.name)
def test_signal_ends_the_session_and_restores_the_terminal(pane: Pane, shell_kit: Path,
                                                           sig: signal.Signals,
                                                           engine: SdkEngine,
                                                           state_home: Path) -> None:
    pane.sbx("a", "kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    pid = pane.pid("a")
    assert owned(engine, state_home)  # the sandbox is there while the session runs
    during = pane.live_settings()
    assert "-icanon" in during.split() and "-echo" in during.split()  # raw for the session
    os.kill(pid, sig)
    assert pane.status("a") == 130
    pane.wait(r"\(interrupted\)")
    before, after = pane.settings("a")
    assert before == after
    _nothing_owned(engine, state_home)


def test_closing_the_terminal_exits_130_and_removes_the_sandbox(
        pane: Pane, shell_kit: Path, engine: SdkEngine, state_home: Path) -> None:
    # The wrapping shell ignores SIGHUP so that it outlives the terminal to record the status;
    # sbx installs its own SIGHUP handler, so it is hung up as usual.
    pane.started.append("a")
    pane.type("""sh -c 'trap "" HUP; ./sbx.sh a kits/shell; echo $? > a.rc'""")
    pane.wait(BUSYBOX_PROMPT)
    pid = pane.pid("a")
    assert owned(engine, state_home)
    pane.close()
    _wait_exited(pid)
    rc_file = pane.workdir / "a.rc"
    status = wait_for(lambda: (rc_file.read_text(encoding="utf-8").strip() or None)
                      if rc_file.exists() else None, what=lambda: "a.rc never written")
    left = _remove_leftovers(engine, state_home)
    assert (status, left) == ("130", [])


def test_repeated_sighup_still_removes_the_sandbox(pane: Pane, shell_kit: Path,
                                                   engine: SdkEngine,
                                                   state_home: Path) -> None:
    pane.sbx("a", "kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    pid = pane.pid("a")
    deadline = time.monotonic() + WAIT_S
    while not _process_gone(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGHUP)
        time.sleep(0.002)
    status = pane.status("a")
    left = _remove_leftovers(engine, state_home)
    assert (status, left, "Traceback" in pane.screen()) == (130, [], False)


# -- detach keys ---------------------------------------------------------------------------------


def test_default_detach_keys_end_the_session(pane: Pane, shell_kit: Path, engine: SdkEngine,
                                             state_home: Path) -> None:
    pane.sbx("a", "kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    pane.keys("C-p", "C-q")
    assert pane.status("a") == 130
    pane.wait(r"\(detached\)")
    before, after = pane.settings("a")
    assert before == after
    _nothing_owned(engine, state_home)


def test_custom_detach_keys_end_it_and_the_default_ones_reach_the_workload(
        pane: Pane, shell_kit: Path, engine: SdkEngine, state_home: Path) -> None:
    pane.sbx("a", "--detach-keys ctrl-x,x kits/shell")
    pane.wait(BUSYBOX_PROMPT)
    # The workload reads two raw bytes and prints them: ctrl-p ctrl-q arrive as 0x10 0x11.
    pane.type('stty raw -echo; echo "REA""DY"; dd bs=1 count=2 2>/dev/null | od -An -tx1; '
              "stty sane")
    pane.wait(r"^READY$")
    pane.keys("C-p", "C-q")
    pane.wait(r"^\s*10 11$")
    pane.type('echo "al""ive"')
    pane.wait(r"^alive$")
    assert not pane.ended("a")
    pane.keys("C-x")
    pane.type("x", enter=False)
    assert pane.status("a") == 130
    pane.wait(r"\(detached\)")
    before, after = pane.settings("a")
    assert before == after
    _nothing_owned(engine, state_home)


def test_detach_keys_from_the_config_file(pane: Pane, shell_kit: Path, engine: SdkEngine,
                                         state_home: Path) -> None:
    (pane.workdir / "detach.toml").write_text('[sandbox]\ndetach_keys = "ctrl-x,x"\n',
                                              encoding="utf-8")
    pane.sbx("a", "kits/shell", prefix="SBX_CONFIG=detach.toml")
    pane.wait(BUSYBOX_PROMPT)
    pane.keys("C-x")
    pane.type("x", enter=False)
    assert pane.status("a") == 130
    pane.wait(r"\(ctrl-x,x\).*\(detached\)")
    _nothing_owned(engine, state_home)


# -- bash in a Debian image ----------------------------------------------------------------------


def test_bash_interactive_prompt_line_editing_and_exit_status(
        pane: Pane, kit_factory: Callable[..., Path]) -> None:
    kit_factory("bash", BASH_KIT)
    pane.sbx("a", "kits/bash -- bash -i")
    pane.wait(r":/workspace\$ ?$")
    pane.type("echo $((6*7))")
    pane.wait(r"^42$")
    pane.type('echo "home=$HOME"')
    pane.wait(r"^home=/home/sbx$")
    # readline gets the raw keys: type the end of the line, go to its start (C-a), finish it.
    pane.type('cho "edi""ted"', enter=False)
    pane.keys("C-a")
    pane.type("e")
    pane.wait(r"^edited$")
    pane.type("exit 3")
    assert pane.status("a") == 3
    before, after = pane.settings("a")
    assert before == after


# -- no TTY on a terminal ------------------------------------------------------------------------


def test_no_tty_on_a_terminal_gives_the_workload_no_terminal(pane: Pane,
                                                             shell_kit: Path) -> None:
    pane.sbx("a", """--no-tty kits/shell -- sh -c 'tty; rc=$?; echo "term=[$TERM]"; exit $rc'""")
    assert pane.status("a") == 1
    assert "not a tty" in pane.lines()
    assert "term=[]" in pane.lines()  # terminal variables go only into a TTY session


def test_interactive_no_tty_forwards_typed_lines_in_cooked_mode(pane: Pane,
                                                                shell_kit: Path) -> None:
    pane.sbx("a", "-i --no-tty kits/shell -- cat")
    pane.pid("a")
    line = "typed-into-cat"
    pane.type(line)  # echoed once by the host terminal (cooked), once more by cat
    wait_for(lambda: True if pane.count(line) >= 2 else None,
             what=lambda: f"{line!r} not echoed back by cat:\n{pane.screen()}")
    pane.keys("C-d")  # end of input: cat ends, and so does the run
    assert pane.status("a") == 0
    assert pane.count(line) == 2
    before, after = pane.settings("a")
    assert before == after
