"""agent-sessions@1 on a real engine, with a fake agent that writes its argv (NUL-separated)
to stdout, exits 3, and keeps one session file per prompt in HOME: `sbx run --prompt` (one
argv element whatever the prompt holds, bytes as written, the exit status passed through),
`--resume`, `--continue`, `sbx sessions NAME [--json]` in a named sandbox, and the refusals
(no capability, a mixin's declaration, a missing verb, a session id that is no id)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kits import write_kit
from tests.support.sbxproc import Finished, run_sbx

from .conftest import BUSYBOX, make_kit

pytestmark = pytest.mark.docker

SESSIONS = "com.docker.sandbox/agent-sessions@1"
AGENT = r"""# argv on stdout (NUL-separated), a session per prompt; launched alone it waits
[ $# -eq 0 ] && exec sleep 3600
mkdir -p "$HOME/sessions"
if [ "$1" = "-p" ]; then
  n=$(ls "$HOME/sessions" | wc -l)
  touch "$HOME/sessions/s$((n + 1))"
fi
printf '%s\0' "$@"
exit 3
"""
# Sessions newest first, then what a hostile agent might print: a terminal title sequence and
# an "id" that an agent would read as an option. Neither may come back as a session.
LIST = ("ls \"$HOME/sessions\" | sort -r; printf '\\033]0;evil\\007\\n-rf\\n'")
DOCKERFILE = (f"FROM {BUSYBOX}\nCOPY fakeagent /usr/local/lib/fakeagent\nUSER agent\n"
              "WORKDIR /workspace\nCMD [\"sh\", \"/usr/local/lib/fakeagent\"]\n")
HOSTILE = "a; touch /tmp/pwned $(id) `id` \"q\" 'x' | cat > /etc/x & \n line2 {{.SessionID}} *"


def _kit(root: Path, name: str, config: dict[str, Any] | None, extra: str = "") -> Path:
    capability = (f"  - type: {SESSIONS}\n    config: {json.dumps(config)}\n"
                  if config is not None else "")
    descriptor = f"capabilities:\n{capability}{extra}" if capability or extra else ""
    kit = make_kit(root, name, DOCKERFILE, descriptor)
    (kit / "fakeagent").write_text(AGENT, encoding="utf-8")
    return kit


FULL = {"prompt": ["-p", "{{.Prompt}}"], "resume": ["--resume={{.SessionID}}"],
        "continue": ["--continue"], "list": ["sh", "-c", LIST]}


@pytest.fixture(scope="module")
def kits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kits")
    mixin = write_kit(root, "sessionsmixin", f"""
        capabilities:
          - type: {SESSIONS}
            config: {{"prompt": ["-p", "{{{{.Prompt}}}}"]}}
        """, kind="mixin")
    return {"full": _kit(root, "agentfull", FULL),
            "none": _kit(root, "agentnone", None),
            "prompt_only": _kit(root, "agentprompt", {"prompt": ["-p", "{{.Prompt}}"]}),
            "mixin": mixin}


@pytest.fixture
def named(env: dict[str, str]) -> Iterator[str]:
    name = f"sess-{uuid.uuid4().hex[:10]}"
    yield name
    run_sbx(["rm", "-f", name], env=env, timeout=120)


def sbx(env: dict[str, str], *args: str) -> Finished:
    return run_sbx(list(args), env=env, timeout=300)


def argv_of(done: Finished) -> list[str]:
    assert done.stdout.endswith(b"\0"), (done.stdout, done.stderr)
    return done.stdout[:-1].decode().split("\0")


def test_a_prompt_with_shell_metacharacters_is_one_argv_element_and_the_status_passes(
        kits: dict[str, Path], env: dict[str, str]) -> None:
    done = sbx(env, "run", str(kits["full"]), "--prompt", HOSTILE)
    assert done.returncode == 3, done.stderr.decode()
    assert argv_of(done) == ["-p", HOSTILE]
    assert done.stdout == b"-p\0" + HOSTILE.encode() + b"\0"  # byte for byte, no terminal
    again = sbx(env, "run", str(kits["full"]), "--prompt", HOSTILE)  # from the plan cache
    assert (again.returncode, again.stdout) == (3, done.stdout), again.stderr.decode()


def test_continue_and_resume_put_their_tails_after_the_launch_argv(
        kits: dict[str, Path], env: dict[str, str]) -> None:
    assert argv_of(sbx(env, "run", str(kits["full"]), "--continue")) == ["--continue"]
    assert argv_of(sbx(env, "run", str(kits["full"]), "--resume", "s1")) == ["--resume=s1"]


def test_a_session_id_an_agent_would_read_as_an_option_is_refused(
        kits: dict[str, Path], env: dict[str, str]) -> None:
    for bad in ("-rf", "a b", "x\ny"):
        done = sbx(env, "run", str(kits["full"]), "--resume", bad)
        assert done.returncode == 125, done.stderr.decode()
        assert b"(session_id_invalid)" in done.stderr and done.stdout == b""


def test_refusals_name_their_reason_and_a_fix(kits: dict[str, Path],
                                                  env: dict[str, str]) -> None:
    none = sbx(env, "run", str(kits["none"]), "--prompt", "hi")
    assert none.returncode == 125 and b"(sessions_unsupported)" in none.stderr
    assert b"-- CMD" in none.stderr and none.stdout == b""
    # a mixin's declaration has no agent to drive: the workload's governs
    mixed = sbx(env, "run", str(kits["none"]), "--kit", str(kits["mixin"]), "--prompt", "hi")
    assert mixed.returncode == 125 and b"(sessions_unsupported)" in mixed.stderr, mixed.stderr
    missing = sbx(env, "run", str(kits["prompt_only"]), "--continue")
    assert missing.returncode == 125 and b"(session_verb_missing)" in missing.stderr
    assert b"it declares: prompt" in missing.stderr
    both = sbx(env, "run", str(kits["full"]), "--prompt", "x", "--continue")
    assert both.returncode == 2 and b"(invalid_argument)" in both.stderr
    explained = sbx(env, "explain", "sessions_unsupported")
    assert explained.returncode == 0 and b"agent-sessions@1" in explained.stdout


def test_a_named_sandbox_runs_verbs_as_its_processes_and_lists_its_sessions(
        kits: dict[str, Path], env: dict[str, str], named: str) -> None:
    first = sbx(env, "run", "--name", named, str(kits["full"]), "--prompt", HOSTILE)
    assert first.returncode == 3, first.stderr.decode()
    assert argv_of(first) == ["-p", HOSTILE]
    second = sbx(env, "run", "--name", named, "--prompt", "again")
    assert argv_of(second) == ["-p", "again"]
    listed = sbx(env, "sessions", named, "--json")
    assert listed.returncode == 0, listed.stderr.decode()
    data = json.loads(listed.stdout.decode().strip().splitlines()[-1])["data"]
    assert data["sessions"] == ["s2", "s1"]  # the hostile lines are no ids
    human = sbx(env, "sessions", named)
    assert human.stdout.decode().split() == ["s2", "s1"] and b"\033" not in human.stdout
    resumed = sbx(env, "run", "--name", named, "--resume", data["sessions"][-1])
    assert argv_of(resumed) == ["--resume=s1"]
    # stopped: the verb starts it again, HOME (the sessions) kept
    assert sbx(env, "stop", named).returncode == 0
    again = sbx(env, "sessions", named, "--json")
    assert json.loads(again.stdout.decode().strip().splitlines()[-1])["data"]["sessions"] \
        == ["s2", "s1"], again.stderr.decode()
