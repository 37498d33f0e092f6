"""The agent kits (examples/agents: Claude Code, Codex, Gemini CLI) with their real clients.

Each kit is built once per session from the npm packages scripts/stage_agents.py staged
(``--arg source=staged``) and run for real in a sandbox: the official release at its pinned
version, its TUI in a tmux pane (a real terminal), its one-shot mode, and the published kit
pushed to a local registry, pulled back and run (where the release comes from the registry path:
the kit's install hook fetches it through sbx's proxy).

The "internet" is local (TESTING.md): the agents' APIs are stand-ins on the test origin
(tests/support/agent_api.py), reached through sbx's `[network] upstream_proxy`. They record what
crossed the boundary: the real key (from `sbx secret set`) must arrive in the header the API
expects and the sandbox's sentinel must not arrive anywhere. A tool call the stand-in asks for
runs ``curl`` on a host outside the kit's policy: sbx answers it with a 403 that `sbx explain
--last` lists, and the origin never sees that host.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from sbx.domain.credentials.secrets import SecretStore
from sbx.seams.driver import SdkEngine
from sbx.seams.registry import DESCRIPTOR_ANNOTATION, get_manifest, parse_reference
from tests.support.agent_api import AnthropicAPI, GeminiAPI, NpmRegistry, OpenAIAPI, Script, StandIn
from tests.support.origin import Internet, Seen
from tests.support.sbxproc import run_sbx

from .conftest import owned
from .registry import Registry, start_registry
from .test_captype_ssh_agent import host_agent
from .test_session_tty import Pane, poll, wait_for

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
AGENTS = REPO / "examples" / "agents"
VENV_BIN = Path(sys.executable).parent
SBX = str(VENV_BIN / "sbx")
__all__ = ["host_agent"]  # the fixture, re-exported for pytest

SCRIPT = Script()
RUN_TIMEOUT_S = 300.0  # one sbx run of an agent, install hook and all
SCREEN_S = 90.0  # the bound of every wait for the agent's screen
ROWS, COLUMNS = 40, 120


@dataclass(frozen=True)
class Agent:
    kit: str  # directory under examples/agents
    binary: str
    service: str  # credential@1 service = the `sbx secret set` name
    key_env: str  # the variable that holds the sentinel in the sandbox
    api: type[StandIn]
    key_header: str  # where the API expects the key
    key_format: str
    one_shot: tuple[str, ...]  # argv before the prompt
    allow_tools: tuple[str, ...]  # the agent's own flags that let a one-shot run the tool
    approval: str | None  # what the TUI asks before running a shell command (None: no prompt)
    banner: str  # the first screen's title; {version} is the pinned version
    ready: str  # the empty input box (Claude Code's prompt mark is U+276F): the TUI takes keys

    @property
    def directory(self) -> Path:
        return AGENTS / self.kit

    @property
    def secret(self) -> str:
        return f"real-{self.service}-key-must-stay-on-the-host"

    @property
    def sentinel(self) -> str:
        return f"sbx-proxy-managed-{self.service}"

    @property
    def args(self) -> dict[str, str]:
        data = YAML(typ="safe").load(
            (self.directory / f"{self.kit}.yaml").read_text(encoding="utf-8"))
        return {str(k): str(v["default"]) for k, v in data["args"].items()}

    @property
    def version(self) -> str:
        return self.args["version"]

    def context_line(self) -> str:
        """The first line of the kit's agent-context notes after their title."""
        text = (self.directory / f"{self.kit}-context.md").read_text(encoding="utf-8")
        return next(line for line in text.splitlines()[1:] if line.strip())


CLAUDE = Agent("claude-code", "claude", "anthropic", "ANTHROPIC_API_KEY", AnthropicAPI,
               "x-api-key", "{}", ("claude", "-p"), ("--allowedTools", "Bash(curl:*)"),
               r"Do you want to proceed\?", r"Claude Code v{version}", "^\u276f\\s*$")
CODEX = Agent("codex", "codex", "openai", "OPENAI_API_KEY", OpenAIAPI, "authorization",
              "Bearer {}", ("codex", "exec", "--skip-git-repo-check"), (), None,
              r"OpenAI Codex \(v{version}\)", r"\? for shortcuts")
GEMINI = Agent("gemini-cli", "gemini", "gemini", "GEMINI_API_KEY", GeminiAPI, "x-goog-api-key",
               "{}", ("gemini", "-p"), ("--approval-mode", "yolo"), r"Allow execution of",
               r"Gemini CLI v{version}", r"Type your message")
ALL = [pytest.param(a, id=a.kit) for a in (CLAUDE, CODEX, GEMINI)]


def _require(message: str) -> None:
    if os.environ.get("SBX_REQUIRE_ENGINE") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _env(home: Path, config: Path | str) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(home), "SBX_CONFIG": str(config), "NO_COLOR": "1"}


def _bind(home: Path, agent: Agent) -> None:
    SecretStore(home).set(agent.service, agent.secret)


@pytest.fixture(scope="session")
def agent_versions(engine: SdkEngine,
                   tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each kit's image, built once per session from the staged packages (later runs find it
    by its content hash), and what ``<agent> --version`` printed in a sandbox."""
    staged = subprocess.run([sys.executable, str(REPO / "scripts" / "stage_agents.py"),
                             "--check"], capture_output=True, text=True, timeout=600,
                            check=False)
    if staged.returncode != 0:
        _require(f"the agents' npm packages are not staged (scripts/stage_agents.py): "
                 f"{staged.stderr.strip()}")
    home = tmp_path_factory.mktemp("agent-builds") / "state"
    versions: dict[str, str] = {}
    try:
        for agent in (CLAUDE, CODEX, GEMINI):
            _bind(home, agent)
            done = run_sbx(["run", str(agent.directory), "--arg", "source=staged",
                            "--timeout", "600", "--", agent.binary, "--version"],
                           env=_env(home, os.devnull), timeout=1800)
            assert done.returncode == 0, done.stderr.decode(errors="replace")
            versions[agent.kit] = done.stdout.decode(errors="replace")
    finally:
        assert owned(engine, home) == []
    return versions


@pytest.fixture
def api(internet: Internet, request: pytest.FixtureRequest) -> Iterator[StandIn]:
    agent: Agent = request.node.callspec.params["agent"]
    stand_in = agent.api(SCRIPT)
    stand_in.install(internet.origin)
    internet.origin.clear()
    try:
        yield stand_in
    finally:
        stand_in.uninstall(internet.origin)


def _crossed(agent: Agent, api: StandIn, internet: Internet, *outputs: str) -> None:
    """What the stand-in API saw: every request carried the real key where the API expects it;
    nothing the origin saw, and nothing the user saw, carries the sentinel or the secret."""
    seen = api.recorded()
    assert seen, "the agent never reached its API"
    expected = agent.key_format.format(agent.secret)
    assert {s.header(agent.key_header) for s in seen} == {expected}, \
        [(s.method, s.path, s.header(agent.key_header)) for s in seen]
    for request in internet.origin.requests():
        text = json.dumps(request.headers) + request.body.decode("utf-8", "replace")
        assert agent.sentinel not in text, (request.method, request.path)
    for output in outputs:
        assert agent.secret not in output


def _hosts(requests: list[Seen]) -> set[str]:
    return {(r.header("host") or "").rsplit(":", 1)[0] for r in requests}


# -- the user's git identity and SSH agent -----------------------------------------------------

# The user's name on commits, and a git signature from the host's key; a file-namespace
# signature is outside the kits' grant.
GIT_AND_SIGN = """\
echo "name=$(git config user.name)"; echo "email=$(git config user.email)"
echo "sock=${SSH_AUTH_SOCK:-none}"
ssh-add -L > /tmp/key.pub 2>/dev/null || true
for ns in git file; do
  printf 'payload' > /tmp/msg-$ns
  ssh-keygen -Y sign -q -f /tmp/key.pub -n $ns /tmp/msg-$ns >/dev/null 2>&1 \
    && echo "sign_$ns=signed" || echo "sign_$ns=refused"
done
"""


def _said(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.mark.parametrize("agent", ALL)
def test_commits_carry_the_users_identity_and_sign_with_the_host_key(
        agent: Agent, agent_versions: dict[str, str], host_agent: tuple[Path, str],
        state_home: Path, tmp_path: Path) -> None:
    sock, _fingerprint = host_agent
    gitconfig = tmp_path / "host-gitconfig"
    gitconfig.write_text("[user]\n\tname = Host Person\n\temail = host@example.test\n")
    _bind(state_home, agent)
    env = {**_env(state_home, os.devnull), "SSH_AUTH_SOCK": str(sock),
           "GIT_CONFIG_GLOBAL": str(gitconfig)}
    argv = ["run", str(agent.directory), "--arg", "source=staged", "--", "sh", "-c",
            GIT_AND_SIGN]
    done = run_sbx(argv, env=env, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    seen = _said(done.stdout.decode())
    assert (seen["name"], seen["email"]) == ("Host Person", "host@example.test")
    assert seen["sign_git"] == "signed" and seen["sign_file"] == "refused", seen
    # Neither is required: with no agent and no identity the kit still runs, without both.
    gitconfig.write_text("")
    bare = {k: v for k, v in env.items() if k != "SSH_AUTH_SOCK"}
    done = run_sbx(argv, env=bare, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    seen = _said(done.stdout.decode())
    assert (seen["name"], seen["email"], seen["sock"]) == ("", "", "none"), seen


# -- the release and the one-shot mode ---------------------------------------------------------


@pytest.mark.parametrize("agent", ALL)
def test_kit_installs_the_pinned_official_release(agent: Agent,
                                                  agent_versions: dict[str, str]) -> None:
    printed = agent_versions[agent.kit]
    assert re.search(rf"(^|\s){re.escape(agent.version)}(\s|$)", printed), printed


@pytest.mark.parametrize("agent", ALL)
def test_one_shot_prints_the_canned_completion(agent: Agent, agent_versions: dict[str, str],
                                               api: StandIn, internet: Internet,
                                               state_home: Path, tmp_path: Path) -> None:
    _bind(state_home, agent)
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))
    done = run_sbx(["run", str(agent.directory), "--arg", "source=staged", "--timeout", "240",
                    "--", *agent.one_shot, "Say hello."], env=env, timeout=RUN_TIMEOUT_S)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, err
    assert SCRIPT.reply in out
    [asked] = api.model_requests()[:1]
    assert b"Say hello." in asked.body
    # The kit's agent-context notes reached the model with the prompt.
    assert agent.context_line().encode() in asked.body
    _crossed(agent, api, internet, out, err)


@pytest.mark.parametrize("agent", ALL)
def test_one_shot_tool_call_outside_the_policy_gets_403(
        agent: Agent, agent_versions: dict[str, str], api: StandIn, internet: Internet,
        state_home: Path, tmp_path: Path) -> None:
    _bind(state_home, agent)
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))
    done = run_sbx(["run", str(agent.directory), "--arg", "source=staged", "--timeout", "240",
                    "--", *agent.one_shot, f"Please run {SCRIPT.probe_word}.",
                    *agent.allow_tools], env=env, timeout=RUN_TIMEOUT_S)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, err
    assert SCRIPT.done in out
    results = api.tool_results()
    assert results and all("403" in r for r in results), results
    assert "example.org" not in _hosts(internet.origin.requests())
    _explained(env, agent)
    _crossed(agent, api, internet, out, err)


def _explained(env: dict[str, str], agent: Agent) -> None:
    """`sbx explain --last` lists the probe's refusal, with the command that explains it."""
    done = subprocess.run([SBX, "explain", "--last"], env=env, capture_output=True, text=True,
                          timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "egress_denied: CONNECT example.org:443 (runtime phase)" in done.stdout, done.stdout
    # The command reproduces the run: the kit's absolute path and the args it ran with.
    assert f"sbx explain {agent.directory} --arg source=staged example.org:443" in done.stdout


# -- the TUI in a real terminal ----------------------------------------------------------------

RUN_SCRIPT = """\
#!/bin/sh
# sbx.sh TAG ARGS...: `sbx run ARGS` in this terminal, TAG.pid its pid.
tag=$1; shift
echo $$ > "$tag.pid"
export SBX_HOME={home} SBX_CONFIG={config} PATH={bin}:$PATH NO_COLOR=1
exec {sbx} run "$@"
"""


@pytest.fixture
def agent_pane(tmp_path: Path, state_home: Path, internet: Internet) -> Iterator[Pane]:
    """A tmux pane (own server, ROWS x COLUMNS) with an interactive bash and ./sbx.sh."""
    if shutil.which("tmux") is None:
        _require("tmux is missing")
    config = internet.sbx_config(tmp_path / "config.toml")
    script = tmp_path / "sbx.sh"
    script.write_text(RUN_SCRIPT.format(
        home=shlex.quote(str(state_home)), config=shlex.quote(str(config)),
        bin=shlex.quote(str(VENV_BIN)), sbx=shlex.quote(SBX)), encoding="utf-8")
    script.chmod(0o755)
    suffix = uuid.uuid4().hex[:12]
    pane = Pane(server=f"sbx-agent-{suffix}", name=f"a{suffix}", workdir=tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "SBX_", "LC_"))}
    env.update({"PS1": "$ ", "LANG": "C.UTF-8", "COLORTERM": "truecolor"})
    subprocess.run(["tmux", "-L", pane.server, "-f", "/dev/null", "new-session", "-d",
                    "-s", pane.name, "-x", str(COLUMNS), "-y", str(ROWS), "-c", str(tmp_path),
                    "bash", "--norc", "--noprofile"],
                   env=env, check=True, timeout=10, capture_output=True)
    try:
        pane.socket = Path(pane.tmux("display-message", "-p", "#{socket_path}").strip())
        pane.wait(r"^\$ ?$")
        yield pane
    finally:
        pane.close()
        pid_file = tmp_path / "run.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text(encoding="utf-8").strip())
            wait_for(lambda: True if not Path(f"/proc/{pid}").exists()
                     or Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
                     .rsplit(")", 1)[1].split()[0] in ("Z", "X") else None,
                     timeout=60, what=lambda: f"sbx (pid {pid}) did not exit")


def _say(pane: Pane, agent: Agent, api: StandIn, text: str) -> None:
    """Type ``text`` into the agent's empty input box and submit it. Enter is pressed once the
    text shows, and again (at most 5 times, 10 s apart) until the stand-in got the turn: an
    Enter that arrives while the TUI is still busy with the last turn can be dropped."""
    wait_for(lambda: re.search(agent.ready, _visible(pane), re.MULTILINE),
             timeout=SCREEN_S, what=lambda: f"the input box never came back:\n{_visible(pane)}")
    before = len(api.model_requests())
    pane.tmux("send-keys", "-t", pane.name, "-l", text)
    pane.wait(re.escape(text), timeout=SCREEN_S)
    for _ in range(5):
        pane.keys("Enter")
        if poll(lambda: True if len(api.model_requests()) > before else None, 10.0):
            return
    pytest.fail(f"{text!r} never reached the model:\n{_visible(pane)}")


def _approve(pane: Pane, question: str) -> None:
    """Answer the agent's "run this command?" with its first choice (allow once). A key pressed
    while the dialog is still being drawn can be lost, so Enter is pressed again (at most 10
    times, 3 s apart) until the question has left the screen."""
    pane.wait(question, timeout=SCREEN_S)
    for _ in range(10):
        pane.keys("Enter")
        if poll(lambda: None if re.search(question, _visible(pane)) else True, 3.0):
            return
    pytest.fail(f"the agent kept asking {question!r}:\n{_visible(pane)}")


def _visible(pane: Pane) -> str:
    """The pane's screen as it is now (no history)."""
    return pane.tmux("capture-pane", "-p", "-t", pane.name)


@pytest.mark.parametrize("agent", ALL)
def test_tui_starts_answers_with_the_real_key_and_a_refused_tool_call_is_explained(
        agent: Agent, agent_versions: dict[str, str], api: StandIn, internet: Internet,
        agent_pane: Pane, state_home: Path, tmp_path: Path) -> None:
    _bind(state_home, agent)
    pane = agent_pane
    pane.started.append("run")
    # The status goes on a cleared row: a TUI ended from the host leaves its screen behind.
    pane.type(f"./sbx.sh run {shlex.quote(str(agent.directory))} --arg source=staged "
              "--timeout 600; rc=$?; printf '\\n\\033[2Krun:RC=%s\\n' \"$rc\"")
    # The agent's own first screen, then its input box.
    pane.wait(agent.banner.format(version=re.escape(agent.version)), timeout=SCREEN_S)
    assert "could not be parsed" not in pane.screen()  # the stand-in answered as the API does
    _say(pane, agent, api, "Say hello.")
    pane.wait(re.escape(SCRIPT.reply), timeout=SCREEN_S)
    first = api.recorded()[0]
    assert first.header(agent.key_header) == agent.key_format.format(agent.secret)
    assert api.model_requests(), "no model turn reached the stand-in"

    _say(pane, agent, api, f"Please run {SCRIPT.probe_word}.")
    if agent.approval is not None:
        _approve(pane, agent.approval)
    pane.wait(re.escape(SCRIPT.done), timeout=SCREEN_S)
    results = api.tool_results()
    assert results and all("403" in r for r in results), results

    pane.keys("C-p", "C-q")  # sbx's detach keys end a one-shot session from the host
    assert pane.status("run", timeout=SCREEN_S) == 130
    screen = pane.screen()
    assert agent.secret not in screen
    assert "example.org" not in _hosts(internet.origin.requests())
    assert "example.org" not in internet.origin.server_names()
    _explained(_env(state_home, tmp_path / "config.toml"), agent)
    _crossed(agent, api, internet, screen)


# -- published, pushed, pulled back, run -------------------------------------------------------


@pytest.fixture(scope="module")
def kit_registry(engine: SdkEngine,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """One local registry for the module: the kits share their base image's layers."""
    started = start_registry(tmp_path_factory.mktemp("kit-registry"))
    try:
        yield started
    finally:
        started.stop()
        _untag(started)


def _untag(registry: Registry) -> None:
    """Remove every local name of an image from ``registry`` (a shared base image stays)."""
    import docker

    client = docker.from_env()
    try:
        for image in client.images.list():
            for name in [*(image.attrs.get("RepoTags") or []),
                         *(image.attrs.get("RepoDigests") or [])]:
                if str(name).startswith(registry.host + "/"):
                    with contextlib.suppress(docker.errors.NotFound):
                        client.images.remove(str(name))
    finally:
        client.close()


@pytest.mark.parametrize("agent", ALL)
def test_published_kit_is_pushed_pulled_and_installs_from_the_registry(
        agent: Agent, agent_versions: dict[str, str], api: StandIn, internet: Internet,
        kit_registry: Registry, state_home: Path, tmp_path: Path) -> None:
    env = _env(state_home, internet.sbx_config(tmp_path / "config.toml"))

    def sbx(*args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SBX, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)

    checked = sbx("kit", "validate", "--json", str(agent.directory))
    assert checked.returncode == 0, checked.stderr
    verdict = json.loads(checked.stdout)["data"]
    assert (verdict["valid"], verdict["warnings"]) == (True, [])

    ref = kit_registry.ref(f"kits/{agent.kit}", agent.version)
    pushed = sbx("kit", "push", "--json", str(agent.directory), ref, timeout=900)
    assert pushed.returncode == 0, pushed.stderr
    digest = json.loads(pushed.stdout)["data"]["digest"]
    published = json.loads(get_manifest(parse_reference(ref)).data["annotations"]
                           [DESCRIPTOR_ANNOTATION])
    # The published form: build-phase args resolved (the default: source=registry), the
    # context notes in the image's kit-sources layer, so a consumer needs nothing but the image.
    assert "${{" not in json.dumps(published)
    assert published["provides"] == [f"{agent.kit}@{agent.version}"]
    [context] = [c["config"] for c in published["capabilities"]
                 if c["type"] == "com.docker.sandbox/agent-context@1"]
    assert context["contentFile"].startswith(f"/usr/share/sandbox/kit/{agent.kit}/")
    remote = sbx("kit", "validate", "--json", ref)
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout)["data"]["valid"] is True

    _untag(kit_registry)
    pulled = sbx("pull", "--json", "--accept", ref)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["data"]["pulled"][0]["digest"] == digest

    # The pulled kit holds only the installer: its install hook fetches the release from the
    # npm registry (the stand-in serves the staged tarballs) through sbx's proxy.
    packages = _staged_packages(agent)
    npm = NpmRegistry(packages)
    npm.install(internet.origin)
    try:
        _bind(state_home, agent)
        done = sbx("run", ref, "--timeout", "600", "--", *agent.one_shot, "Say hello.",
                   timeout=900)
    finally:
        npm.uninstall(internet.origin)
    assert done.returncode == 0, done.stderr
    assert SCRIPT.reply in done.stdout
    fetched = {r.path for r in npm.recorded() if r.method == "GET"}
    for (_name, _version), tarball in packages.items():
        assert any(path.endswith("/-/" + tarball.name) for path in fetched), fetched
    assert all(r.header("x-api-key") is None and r.header("authorization") is None
               for r in npm.recorded()), "a credential went to the npm registry"
    _crossed(agent, api, internet, done.stdout, done.stderr)


def _staged_packages(agent: Agent) -> dict[tuple[str, str], Path]:
    """(name, version) -> the staged tarball, for every package in the kit's packages.list."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import stage_agents
    finally:
        sys.path.remove(str(REPO / "scripts"))
    values = {**agent.args, "arch": stage_agents.npm_arch()}
    out: dict[tuple[str, str], Path] = {}
    for spec in stage_agents.package_specs(agent.directory, values):
        name, _, version = spec.rpartition("@")
        out[(name, version)] = agent.directory / "packages" / stage_agents.pack_name(spec)
    return out
