"""sbx@1 on a real engine: the agent is launched under bash (the image's BASH_ENV sourced), as
the image's user, not as PID 1, in the image's WORKDIR, with its arguments unchanged; session
verbs land after the launch; an image without a USER is refused before anything exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sbxproc import run_sbx

from .conftest import make_kit

pytestmark = pytest.mark.docker

PLATFORM = "  - type: com.docker.sandbox/sbx@1\n"
# The agent: what it was given and where it runs; PID 1's name last.
PROBE = ('printf "%s|" "$PLATFORM_MARK" "$(id -un)" "$$" "$(pwd)" "$@"\n'
         'tr "\\0" " " < /proc/1/cmdline\n')
DOCKERFILE = ("FROM sbx-base/agent:1\n"
              "COPY env.sh /etc/sbx-platform-env.sh\n"
              "COPY probe.sh /usr/local/lib/probe.sh\n"
              "ENV BASH_ENV=/etc/sbx-platform-env.sh\n"
              "USER agent\nWORKDIR /home/agent/project\n"
              'ENTRYPOINT ["sh", "/usr/local/lib/probe.sh"]\n')


def _kit(root: Path, name: str, dockerfile: str) -> Path:
    kit = make_kit(root, name, dockerfile, f"capabilities:\n{PLATFORM}")
    (kit / "env.sh").write_text("export PLATFORM_MARK=sourced\n", encoding="utf-8")
    (kit / "probe.sh").write_text(PROBE, encoding="utf-8")
    return kit


def test_the_agent_is_launched_under_bash_as_the_image_user_not_as_pid_1(
        tmp_path: Path, env: dict[str, str]) -> None:
    kit = _kit(tmp_path, "platform", DOCKERFILE)
    done = run_sbx(["run", str(kit), "--", "a b", "$(id)"], env=env, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    mark, user, pid, cwd, first, second, init = done.stdout.decode().split("|")
    assert (mark, user, cwd, first, second) == ("sourced", "agent", "/home/agent/project",
                                                "a b", "$(id)")
    # PID 1 is the sandbox's init, which started the agent through bash
    assert int(pid) != 1 and init.startswith("/sbin/docker-init -- /bin/bash -c "), init


def test_an_image_without_a_user_is_refused_before_anything_exists(
        tmp_path: Path, env: dict[str, str]) -> None:
    kit = _kit(tmp_path, "nouser", DOCKERFILE.replace("USER agent\n", ""))
    done = run_sbx(["run", str(kit), "--json"], env=env, timeout=300)
    assert done.returncode != 0 and b'"platform_unmet"' in done.stdout, done.stdout


def test_an_image_without_bash_is_refused_before_the_sandbox_starts(
        tmp_path: Path, env: dict[str, str]) -> None:
    kit = _kit(tmp_path, "nobash", DOCKERFILE.replace(
        "FROM sbx-base/agent:1\n", "FROM sbx-base/agent:1\nRUN rm /usr/bin/bash\n"))
    done = run_sbx(["run", str(kit), "--json"], env=env, timeout=300)
    assert done.returncode != 0 and b'"platform_unmet"' in done.stdout, done.stdout
    assert b"/bin/bash" in done.stdout and b"127" not in done.stdout
    # the image's answer is remembered: a second run refuses the same way
    again = run_sbx(["run", str(kit), "--json"], env=env, timeout=300)
    assert again.returncode == done.returncode and b'"platform_unmet"' in again.stdout
