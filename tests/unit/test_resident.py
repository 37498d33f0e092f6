"""The resident helper program (sbx.resident): what it records while importing sbx, which
command lines it declines, and (in a child interpreter, as the helper does) that importing all
of sbx reads no file but code, starts no process, connects nowhere and starts no thread."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from sbx import resident
from sbx.seams import resident as wire
from sbx.usecases import codeprint


def helper(**changes: Any) -> resident.Helper:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.close()
    fields: dict[str, Any] = {
        "listener": listener, "path": Path("/nonexistent/resident.sock"), "idle_s": 60.0,
        "env": {"HOME": "/root", "SBX_HOME": "/a"}, "read": frozenset({"HOME"}),
        "facts": wire.process_facts(), "code": codeprint.code_fingerprint(),
        "search_path": sys.path[1:]}
    fields.update(changes)
    return resident.Helper(**fields)


def request(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"op": "run", "argv": ["ls"], "env": {"HOME": "/root", "SBX_HOME": "/b"},
                            "facts": wire.process_facts(), "path": list(sys.path),
                            "executable": wire.interpreter(), "std": [0, 1, 2]}
    body.update(changes)
    return body


def test_the_recording_environment_notes_reads_and_listings() -> None:
    recording = resident.RecordingEnviron({"A": "1", "B": "2"})
    assert recording["A"] == "1" and recording.get("C") is None and "B" in recording
    assert recording.read == {"A", "B", "C"} and not recording.listed
    assert sorted(recording) == ["A", "B"]
    assert recording.listed


def test_a_caller_like_the_helper_is_served() -> None:
    assert helper().decline_reason(request()) is None


def test_managing_the_helper_and_long_lived_servers_are_not_served() -> None:
    assert helper().decline_reason(request(argv=["resident", "stop"])) == "command resident"
    assert helper().decline_reason(request(argv=["-v", "mcp", "serve"])) == "command mcp"


def test_another_value_of_a_variable_read_at_import_declines() -> None:
    reason = helper().decline_reason(request(env={"HOME": "/home/other", "SBX_HOME": "/a"}))
    assert reason == "another HOME"


def test_another_interpreter_or_module_path_declines() -> None:
    assert helper().decline_reason(request(executable="/usr/bin/python3.99")) \
        == "another interpreter or module path"
    assert helper().decline_reason(request(path=[*sys.path, "/elsewhere"])) \
        == "another interpreter or module path"


def test_a_caller_with_other_limits_or_groups_declines() -> None:
    facts = wire.process_facts()
    reason = helper().decline_reason(request(facts={**facts, "groups": [99999]}))
    assert reason == "runs with another groups"


def test_hostile_bodies_decline_without_an_exception() -> None:
    for body in (request(argv="ls"), request(argv=[1]), request(env=["x"]),
                 request(env={"A": 1}), request(facts="x"), request(path="x")):
        assert helper().decline_reason(body) is not None


def test_changed_code_declines_and_stops_the_helper() -> None:
    stale = helper(code="0" * 64)
    assert stale.decline_reason(request()) == "sbx's code changed"
    assert stale.stopping


AUDIT = r"""
import json, sys, threading
events = []
def hook(event, args):
    if event == "open":
        events.append(["open", str(args[0])])
    elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
                   "socket.connect", "socket.sendto", "socket.sendmsg"):
        events.append([event, repr(args[0])])
sys.addaudithook(hook)
from sbx import resident
read = resident.preload()
print(json.dumps({"events": events, "threads": threading.active_count(),
                  "read": None if read is None else sorted(read)}))
"""


def test_importing_all_of_sbx_touches_nothing_but_code() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-P", "-c", AUDIT], capture_output=True, text=True,
                          timeout=120, check=True, env=env)
    result = json.loads(done.stdout.splitlines()[-1])
    code_like = (".py", ".pyc", ".so", ".pth", ".typed")
    others = [event for event in result["events"]
              if event[0] != "open" or not (event[1].endswith(code_like)
                                            or "__pycache__" in event[1]
                                            or ".dist-info" in event[1]
                                            or event[1].isdigit()  # an fd opened by path
                                            or event[1].endswith(os.sep + "__init__.py"))]
    # an installed library may read its own data at import (jsonschema's metaschemas) and bind
    # a socket to see whether IPv6 exists (urllib3), sending nothing; sbx's own state, config
    # and the user's home are never read
    assert not [e for e in others if e[0] != "open"], others
    read_files = [e[1] for e in others]
    assert not [f for f in read_files if not f.startswith(sys.prefix) and
                not f.startswith(sys.base_prefix)], read_files
    assert result["threads"] == 1
    # no import lists the whole environment, so a variable nobody read at import (SBX_HOME,
    # DOCKER_HOST, ...) never keeps the helper from serving
    assert result["read"] is not None
    assert not [name for name in result["read"] if name.startswith(("SBX_", "DOCKER_"))]


EXIT_HANDLERS = r"""
import atexit, sys
from pathlib import Path
from sbx import resident
marks = Path(sys.argv[1])
atexit.register(lambda: (marks / "helper").write_text("ran"))
def command():
    atexit.register(lambda: (marks / "command").write_text("ran"))
    sys.exit(3)
resident.entry.main = command
code = resident._run_main()
(marks / "code").write_text(str(code))
import os
os._exit(0)
"""


def test_a_fork_runs_its_command_s_exit_handlers_not_the_helper_s(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", EXIT_HANDLERS, str(tmp_path)], timeout=60,
                   check=True)
    assert (tmp_path / "code").read_text() == "3"
    assert (tmp_path / "command").read_text() == "ran"
    assert not (tmp_path / "helper").exists()
