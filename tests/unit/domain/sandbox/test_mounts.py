"""Unit tests for the mount policy (SPEC §6), against real files and symlinks under tmp_path.

Fake homes and a fake state home live under tmp_path, so nothing depends on the real home's
contents; the system rules use the real /etc, /proc, /sys and /dev.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbx.base.errors import ConfigError, MountBlocked, SbxError
from sbx.base.reasons import ExitStatus, Reason
from sbx.domain.sandbox import mountrules
from sbx.domain.sandbox.mountpolicy import MountPolicy
from sbx.domain.sandbox.mountrules import RESERVED_TARGETS, RULES
from sbx.domain.sandbox.mounts import (
    CheckedMount,
    MountRequest,
    check_mount,
    check_source,
    check_target,
    parse_mount_flag,
)


@dataclass(frozen=True)
class Host:
    """A fake host laid out under tmp_path."""

    root: Path
    home: Path
    state: Path
    project: Path
    outside: Path
    extra: Path
    policy: MountPolicy


def _make_host(root: Path) -> Host:
    root = root.resolve()
    home = root / "home" / "u"
    for name in (".ssh", ".aws", ".config"):  # the other credential dirs deliberately absent
        (home / name).mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("secret")
    state = root / "state" / "sbx"
    (state / "secrets").mkdir(parents=True)
    project = root / "work" / "proj"
    (project / "src").mkdir(parents=True)
    (project / "README").write_text("hi")
    outside = root / "elsewhere"
    outside.mkdir()
    extra = root / "data"
    extra.mkdir()
    policy = MountPolicy(homes=(home,), state_home=state, extra_blocked=(extra,))
    return Host(root, home, state, project, outside, extra, policy)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return _make_host(tmp_path)


@pytest.fixture(scope="module")
def shared_host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    # Module-scoped so hypothesis can reuse it across examples.
    return _make_host(tmp_path_factory.mktemp("shared"))


def refused(policy: MountPolicy, source: str | Path) -> MountBlocked:
    with pytest.raises(MountBlocked) as info:
        check_source(policy, str(source))
    return info.value


def refused_target(target: str, reserved: tuple[str, ...] = ()) -> MountBlocked:
    with pytest.raises(MountBlocked) as info:
        check_target(target, reserved_targets=reserved)
    return info.value


# --- parse_mount_flag -----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("/a:/b", MountRequest("/a", "/b", read_only=False)),
    ("/a:/b:rw", MountRequest("/a", "/b", read_only=False)),
    ("/a:/b:ro", MountRequest("/a", "/b", read_only=True)),
    ("rel/dir:/data", MountRequest("rel/dir", "/data", read_only=False)),
    ("./x:data:ro", MountRequest("./x", "data", read_only=True)),  # target judged later
])
def test_parse_mount_flag_forms(text: str, expected: MountRequest) -> None:
    assert parse_mount_flag(text) == expected


@pytest.mark.parametrize("text", [
    "", "/a", "/a:", ":/b", "/a:/b:", "/a:/b:RO", "/a:/b:readonly", "/a:/b:ro:x", "::",
    "C:\\x:/d",
])
def test_parse_mount_flag_rejects_bad_forms(text: str) -> None:
    with pytest.raises(SbxError) as info:
        parse_mount_flag(text)
    assert info.value.reason is Reason.INVALID_ARGUMENT
    assert info.value.exit_status is ExitStatus.USAGE
    assert repr(text) in info.value.message
    assert info.value.hint


# --- the error shape ------------------------------------------------------------------------------

def test_refusal_carries_reason_rule_path_and_hint(host: Host) -> None:
    error = refused(host.policy, host.home / ".ssh")
    assert error.reason is Reason.MOUNT_BLOCKED
    assert error.exit_status is ExitStatus.REFUSED
    assert error.rule == "credential_dir"
    assert error.details == {"rule": "credential_dir", "path": str(host.home / ".ssh")}
    assert error.message == (
        f"mount source {host.home}/.ssh is blocked: credential directory ~/.ssh of home "
        f"{host.home} (rule credential_dir)"
    )
    assert error.hint
    assert str(error).endswith("(mount_blocked)")


def test_every_rule_has_a_hint_and_unique_name() -> None:
    assert len(set(RULES)) == len(RULES)
    assert set(mountrules.HINTS) == set(RULES)


# --- allowed sources ------------------------------------------------------------------------------

def test_project_dir_is_allowed_and_canonical(host: Host) -> None:
    assert check_source(host.policy, str(host.project)) == host.project


@pytest.mark.parametrize("suffix", ["", "/", "//", "/.", "/src/..", "/src", "/README"])
def test_project_spellings_are_allowed(host: Host, suffix: str) -> None:
    result = check_source(host.policy, f"{host.project}{suffix}")
    assert result == Path(os.path.normpath(f"{host.project}{suffix}"))
    assert result.is_absolute()


def test_relative_source_is_made_absolute(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(host.project / "src")
    assert check_source(host.policy, ".") == host.project / "src"
    assert check_source(host.policy, "..") == host.project


def test_symlink_to_allowed_dir_returns_its_target(host: Host) -> None:
    (host.outside / "link").symlink_to(host.project / "src")
    assert check_source(host.policy, str(host.outside / "link")) == host.project / "src"


@pytest.mark.parametrize("name", [".sshkeys", ".ssh-old", ".configure", ".aws2", "ssh", ".npm2",
                                  ".kubeconfig", ".gitconfig.d"])
def test_comparison_is_component_wise_in_homes(host: Host, name: str) -> None:
    (host.home / name).mkdir()
    assert check_source(host.policy, str(host.home / name)) == host.home / name


def test_comparison_is_component_wise_for_state_and_extras(host: Host) -> None:
    for sibling in (host.state.parent / "sbx2", host.root / "database", host.root / "data.bak"):
        sibling.mkdir()
        assert check_source(host.policy, str(sibling)) == sibling


@pytest.mark.parametrize("path", ["/etcetera", "/procfs", "/system", "/devices", "/bootstrap"])
def test_system_lookalikes_are_not_system_paths(host: Host, path: str) -> None:
    # They do not exist on this host, so the first rule that applies is the last one checked.
    assert refused(host.policy, path).rule == "source_missing"


# --- blocked sources ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in mountrules.CREDENTIAL_NAMES if n != ".docker"])
@pytest.mark.parametrize("below", ["", "/", "/deeper/file"])
def test_credential_dirs_blocked_whether_or_not_they_exist(host: Host, name: str,
                                                           below: str) -> None:
    error = refused(host.policy, f"{host.home}/{name}{below}")
    assert error.rule == "credential_dir"
    assert f"~/{name}" in error.message
    assert "(rule credential_dir)" in error.message


@pytest.mark.parametrize("below", ["", "/config.json", "/run/docker.sock"])
def test_home_docker_dir_is_the_docker_socket_rule(host: Host, below: str) -> None:
    error = refused(host.policy, f"{host.home}/.docker{below}")
    assert error.rule == "docker_socket"


@pytest.mark.parametrize("path", [
    "/var/run/docker.sock", "/run/docker.sock", "/var/run/docker", "/run/docker/plugins",
    "/run/containerd", "/var/run/containerd/containerd.sock", "/var/lib/docker",
    "/var/lib/docker/volumes", "/var/lib/containerd", "/run/user/1000/docker.sock",
    "/var/run/user/1000/docker.sock", "/run/podman/podman.sock",
])
def test_docker_socket_family_blocked(host: Host, path: str) -> None:
    error = refused(host.policy, path)
    assert error.rule == "docker_socket"
    assert error.path == path


def test_any_file_named_docker_sock_is_blocked(host: Host) -> None:
    (host.project / "docker.sock").write_text("")
    assert refused(host.policy, host.project / "docker.sock").rule == "docker_socket"


@pytest.mark.parametrize(("path", "rule"), [
    ("/", "system_path"),
    ("//", "system_path"),
    ("/etc", "system_path"),
    ("/etc/", "system_path"),
    ("/etc/passwd", "system_path"),
    ("//etc//passwd", "system_path"),
    ("/usr/../etc/shadow", "system_path"),
    ("/proc", "system_path"),
    ("/proc/self/root", "system_path"),
    ("/sys", "system_path"),
    ("/sys/kernel", "system_path"),
    ("/dev", "system_path"),
    ("/dev/null", "system_path"),
    ("/boot", "system_path"),
    ("/var", "parent_of_blocked"),
    ("/var/lib", "parent_of_blocked"),
    ("/run", "parent_of_blocked"),
    ("/var/run", "parent_of_blocked"),
    ("/run/user", "parent_of_blocked"),
    ("/run/user/1000", "parent_of_blocked"),
])
def test_system_paths_and_their_parents(host: Host, path: str, rule: str) -> None:
    assert refused(host.policy, path).rule == rule


def test_root_is_a_system_path_even_via_dotdot(host: Host) -> None:
    error = refused(host.policy, "/" + "../" * 5)
    assert error.rule == "system_path"
    assert "root directory" in error.message


@pytest.mark.parametrize("below", ["", "/", "/secrets", "/secrets/key", "/not/yet/there"])
def test_state_home_and_everything_inside_blocked(host: Host, below: str) -> None:
    assert refused(host.policy, f"{host.state}{below}").rule == "sbx_state"


@pytest.mark.parametrize("below", ["", "/x", "/x/y"])
def test_configured_extra_blocked(host: Host, below: str) -> None:
    error = refused(host.policy, f"{host.extra}{below}")
    assert error.rule == "configured_block"
    assert "config file" in error.message


@pytest.mark.parametrize("which", ["home", "home_parent", "state_parent", "tmp_root"])
def test_parents_of_blocked_paths(host: Host, which: str) -> None:
    path = {
        "home": host.home,
        "home_parent": host.home.parent,
        "state_parent": host.state.parent,
        "tmp_root": host.root,
    }[which]
    error = refused(host.policy, path)
    assert error.rule == "parent_of_blocked"
    assert "it contains" in error.message
    assert error.hint is not None
    assert "narrower" in error.hint


def test_parent_of_missing_blocked_path_is_still_blocked(tmp_path: Path) -> None:
    # The home has no credential dirs at all: the would-be ~/.ssh still makes it a parent.
    home = tmp_path / "bare"
    home.mkdir()
    policy = MountPolicy(homes=(home,), state_home=tmp_path / "nostate" / "sbx")
    assert refused(policy, home).rule == "parent_of_blocked"
    assert refused(policy, tmp_path / "nostate").rule == "parent_of_blocked"


def test_parent_of_extra_blocked(host: Host) -> None:
    inner = host.project / "keys"
    inner.mkdir()
    policy = MountPolicy(homes=(host.home,), state_home=host.state, extra_blocked=(inner,))
    error = refused(policy, host.project)
    assert error.rule == "parent_of_blocked"
    assert str(inner) in error.message


# --- symlinks -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "rule"), [
    ("home/.ssh", "credential_dir"),
    ("home/.ssh/id_ed25519", "credential_dir"),
    ("home/.gnupg", "credential_dir"),  # dangling: the dir does not exist
    ("home/.ssh/new_key", "credential_dir"),  # dangling into a blocked dir
    ("home", "parent_of_blocked"),
    ("state", "sbx_state"),
    ("state_parent", "parent_of_blocked"),
    ("extra", "configured_block"),
    ("/etc", "system_path"),
    ("/proc/self", "system_path"),
    ("/", "system_path"),
    ("/var/lib", "parent_of_blocked"),
])
def test_symlink_escape_is_caught_after_resolution(host: Host, target: str, rule: str) -> None:
    real = {
        "home": host.home, "state": host.state, "state_parent": host.state.parent,
        "extra": host.extra,
    }
    head, _, rest = target.partition("/")
    destination = Path(target) if target.startswith("/") else real[head] / rest
    link = host.project / "link"
    link.symlink_to(destination)
    error = refused(host.policy, link)
    assert error.rule == rule
    assert error.path == str(link)
    assert f"mount source {link} resolves to " in error.message


def test_symlinked_parent_with_missing_tail_is_judged_by_its_target(host: Host) -> None:
    (host.project / "h").symlink_to(host.home)
    error = refused(host.policy, host.project / "h" / ".cargo" / "credentials")
    assert error.rule == "credential_dir"
    assert f"resolves to {host.home}/.cargo/credentials" in error.message


def test_symlink_chain_is_followed(host: Host) -> None:
    (host.outside / "b").symlink_to(host.home / ".aws")
    (host.project / "a").symlink_to(host.outside / "b")
    assert refused(host.policy, host.project / "a").rule == "credential_dir"


def test_symlink_loop_is_refused_as_missing(host: Host) -> None:
    loop = host.project / "loop"
    loop.symlink_to(loop)
    assert refused(host.policy, loop).rule == "source_missing"


def test_home_alias_protects_both_names(tmp_path: Path) -> None:
    real_home = tmp_path / "real" / "u"
    (real_home / ".ssh").mkdir(parents=True)
    alias = tmp_path / "alias"
    alias.symlink_to(real_home)
    policy = MountPolicy(homes=(alias,), state_home=tmp_path / "state")
    assert refused(policy, alias / ".ssh").rule == "credential_dir"
    error = refused(policy, real_home / ".ssh")
    assert error.rule == "credential_dir"
    assert "real path" in error.message
    assert refused(policy, real_home).rule == "parent_of_blocked"
    assert refused(policy, tmp_path / "real").rule == "parent_of_blocked"


def test_symlinked_credential_dir_protects_its_target(host: Host) -> None:
    dotfiles = host.root / "dotfiles"
    (dotfiles / "npm").mkdir(parents=True)
    (host.home / ".npm").symlink_to(dotfiles / "npm")
    assert refused(host.policy, dotfiles / "npm").rule == "credential_dir"
    assert refused(host.policy, dotfiles / "npm" / "cache").rule == "credential_dir"
    assert refused(host.policy, dotfiles).rule == "parent_of_blocked"


def test_lexical_check_refuses_blocked_name_even_if_it_points_somewhere_safe(host: Host) -> None:
    # ~/.npm -> a project dir: the name is still a credential root, so it is refused.
    (host.home / ".npm").symlink_to(host.project)
    assert refused(host.policy, host.home / ".npm").rule == "credential_dir"


# --- allowed roots --------------------------------------------------------------------------------

def _rooted(host: Host, *roots: Path) -> MountPolicy:
    return MountPolicy(homes=host.policy.homes, state_home=host.state,
                       extra_blocked=host.policy.extra_blocked, allowed_roots=roots)


def test_allowed_roots_inside_and_root_itself(host: Host) -> None:
    policy = _rooted(host, host.project.parent)
    assert check_source(policy, str(host.project)) == host.project
    assert check_source(policy, str(host.project.parent)) == host.project.parent


def test_outside_allowed_roots_refused(host: Host) -> None:
    error = refused(_rooted(host, host.project), host.outside)
    assert error.rule == "outside_allowed_roots"
    assert str(host.project) in error.message


def test_allowed_root_prefix_is_component_wise(host: Host) -> None:
    sibling = host.project.parent / "proj2"
    sibling.mkdir()
    assert refused(_rooted(host, host.project), sibling).rule == "outside_allowed_roots"


def test_symlink_out_of_allowed_root_refused(host: Host) -> None:
    (host.project / "out").symlink_to(host.outside)
    error = refused(_rooted(host, host.project), host.project / "out")
    assert error.rule == "outside_allowed_roots"
    assert "resolves to" in error.message


def test_symlink_into_allowed_root_allowed(host: Host) -> None:
    (host.outside / "in").symlink_to(host.project / "src")
    policy = _rooted(host, host.project)
    assert check_source(policy, str(host.outside / "in")) == host.project / "src"


def test_allowed_root_given_through_a_symlink(host: Host) -> None:
    alias = host.outside / "projects"
    alias.symlink_to(host.project.parent)
    policy = _rooted(host, alias)
    assert check_source(policy, str(host.project)) == host.project
    assert check_source(policy, str(alias / "proj")) == host.project


def test_allowed_roots_never_override_blocked_paths(host: Host) -> None:
    policy = _rooted(host, host.root)
    assert refused(policy, host.home / ".ssh").rule == "credential_dir"
    assert refused(policy, host.state).rule == "sbx_state"


# --- unsafe characters and missing sources --------------------------------------------------------

@pytest.mark.parametrize("char", [",", "\n", "\r", "\0"])
def test_unsafe_characters_in_source(host: Host, char: str) -> None:
    name = f"a{char}b"
    if char != "\0":  # NUL cannot be in a real file name; the others can
        (host.project / name).mkdir()
    error = refused(host.policy, f"{host.project}/{name}")
    assert error.rule == "unsafe_characters"
    assert "\n" not in error.message  # the path is quoted with repr


@pytest.mark.parametrize("char", [",", "\n", "\r", "\0"])
def test_unsafe_characters_in_target(char: str) -> None:
    assert refused_target(f"/data{char}x").rule == "unsafe_characters"


def test_missing_source_refused(host: Host) -> None:
    error = refused(host.policy, host.project / "nope")
    assert error.rule == "source_missing"
    assert "does not exist" in error.message


def test_empty_source_refused_not_cwd(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(host.project)
    assert refused(host.policy, "").rule == "source_missing"


# --- targets --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "expected"), [
    ("/data", "/data"),
    ("/data/", "/data"),
    ("//data//x/", "/data/x"),
    ("/data/./x", "/data/x"),
    ("/etc/app", "/etc/app"),
    ("/usr/local/src", "/usr/local/src"),
    ("/tmp/cache", "/tmp/cache"),
    ("/workspaces", "/workspaces"),
    ("/mnt/ro", "/mnt/ro"),
])
def test_targets_allowed_and_normalised(target: str, expected: str) -> None:
    assert check_target(target, reserved_targets=("/workspace",)) == expected


@pytest.mark.parametrize(("target", "rule"), [
    ("data", "relative_target"),
    ("", "relative_target"),
    ("./data", "relative_target"),
    ("~/data", "relative_target"),
    ("/data/../x", "relative_target"),
    ("/..", "relative_target"),
    ("/", "reserved_target"),
    ("//", "reserved_target"),
    ("/etc", "reserved_target"),
    ("/etc/", "reserved_target"),
    ("/usr", "reserved_target"),
    ("/bin", "reserved_target"),
    ("/lib64", "reserved_target"),
    ("/tmp", "reserved_target"),
    ("/run", "reserved_target"),
    ("/var/run", "reserved_target"),
    ("/sbx", "reserved_target"),
    ("/sbx/ca.pem", "reserved_target"),
    ("/proc", "reserved_target"),
    ("/proc/sys", "reserved_target"),
    ("/sys/fs/cgroup", "reserved_target"),
    ("/dev/shm", "reserved_target"),
    ("/workspace", "reserved_target"),
    ("/workspace/", "reserved_target"),
    ("/workspace/sub", "reserved_target"),
])
def test_targets_refused(target: str, rule: str) -> None:
    error = refused_target(target, ("/workspace/",))
    assert error.rule == rule
    assert f"(rule {rule})" in error.message


def test_reserved_targets_constant_holds_the_documented_paths() -> None:
    assert {"/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/tmp", "/sbx",
            "/var/run", "/run"} <= RESERVED_TARGETS
    assert all(t.startswith("/") for t in RESERVED_TARGETS)


# --- check_mount ----------------------------------------------------------------------------------

def test_check_mount_returns_checked_mount(host: Host) -> None:
    request = parse_mount_flag(f"{host.project}/src/:/data/:ro")
    assert check_mount(host.policy, request) == CheckedMount(
        source=host.project / "src", target="/data", read_only=True)


def test_check_mount_checks_target_and_reserved(host: Host) -> None:
    request = MountRequest(str(host.project), "/workspace", read_only=False)
    with pytest.raises(MountBlocked) as info:
        check_mount(host.policy, request, reserved_targets=("/workspace",))
    assert info.value.rule == "reserved_target"


def test_check_mount_checks_source(host: Host) -> None:
    request = MountRequest(str(host.home), "/data", read_only=True)
    with pytest.raises(MountBlocked) as info:
        check_mount(host.policy, request)
    assert info.value.rule == "parent_of_blocked"


# --- for_host -------------------------------------------------------------------------------------

def test_for_host_homes_from_env_and_password_database(tmp_path: Path) -> None:
    policy = MountPolicy.for_host({"HOME": str(tmp_path / "me")}, state_home=tmp_path / "st")
    assert policy.homes[0] == tmp_path / "me"
    assert Path("/") not in policy.homes
    assert len(set(policy.homes)) == len(policy.homes)
    expected = {Path(os.path.normpath(e.pw_dir)) for e in pwd.getpwall()
                if os.path.isabs(e.pw_dir) and os.path.normpath(e.pw_dir) not in ("/", "//")}
    assert expected <= set(policy.homes)
    assert policy.state_home == tmp_path / "st"


@pytest.mark.parametrize("home", ["", "relative/home", "/"])
def test_for_host_skips_unusable_home(tmp_path: Path, home: str) -> None:
    policy = MountPolicy.for_host({"HOME": home}, state_home=tmp_path / "st")
    assert Path(home) not in policy.homes
    assert Path("/") not in policy.homes


def test_for_host_protects_env_home(tmp_path: Path) -> None:
    home = tmp_path / "me"
    (home / ".ssh").mkdir(parents=True)
    policy = MountPolicy.for_host({"HOME": str(home)}, state_home=tmp_path / "st")
    assert refused(policy, home / ".ssh").rule == "credential_dir"
    assert refused(policy, tmp_path / "st" / "x").rule == "sbx_state"


def test_for_host_expands_extras_and_roots_with_env_home(tmp_path: Path) -> None:
    home = tmp_path / "me"
    (home / "projects" / "app").mkdir(parents=True)
    (home / "vault").mkdir()
    policy = MountPolicy.for_host(
        {"HOME": str(home)}, state_home=tmp_path / "st",
        extra_blocked=["~/vault", str(tmp_path / "other/")], allowed_roots=["~/projects"],
    )
    assert policy.extra_blocked == (home / "vault", tmp_path / "other")
    assert policy.allowed_roots == (home / "projects",)
    assert refused(policy, home / "vault").rule == "configured_block"
    assert check_source(policy, str(home / "projects" / "app")) == home / "projects" / "app"


@pytest.mark.parametrize("field", ["extra_blocked", "allowed_roots"])
def test_for_host_rejects_relative_config_paths(tmp_path: Path, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        MountPolicy.for_host({"HOME": str(tmp_path)}, state_home=tmp_path / "st",
                             **{field: ["relative/path"]})
    assert info.value.reason is Reason.INVALID_CONFIG
    assert "relative/path" in info.value.message


@pytest.mark.slow
def test_for_host_blocks_engine_paths_from_env(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "other").mkdir()
    sock_dir = tmp_path / "sockdir"
    sock_dir.mkdir()
    config = tmp_path / "dockercfg"
    config.mkdir()
    env = {"HOME": str(tmp_path / "me"), "XDG_RUNTIME_DIR": str(runtime),
           "DOCKER_HOST": f"unix://{sock_dir}/engine.sock", "DOCKER_CONFIG": str(config)}
    policy = MountPolicy.for_host(env, state_home=tmp_path / "st")
    assert refused(policy, runtime / "docker.sock").rule == "docker_socket"
    assert refused(policy, runtime).rule == "parent_of_blocked"
    assert check_source(policy, str(runtime / "other")) == runtime / "other"
    assert refused(policy, sock_dir / "engine.sock").rule == "docker_socket"
    assert refused(policy, sock_dir).rule == "parent_of_blocked"
    assert refused(policy, config / "config.json").rule == "docker_socket"


def test_for_host_ignores_non_unix_docker_host(tmp_path: Path) -> None:
    policy = MountPolicy.for_host({"DOCKER_HOST": "tcp://10.0.0.1:2376"},
                                  state_home=tmp_path / "st")
    assert policy.docker_paths == ()


# --- properties -----------------------------------------------------------------------------------

_SEGMENT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="/\0,\n\r"),
    min_size=1, max_size=12,
).filter(lambda s: s not in (".", ".."))

_BLOCKED_DIRS = st.sampled_from([
    "home/.ssh", "home/.aws", "home/.config", "home/.gnupg", "home/.netrc", "home/.npm",
    "home/.cargo", "home/.docker", "state", "extra", "/etc", "/proc", "/sys", "/dev", "/boot",
    "/var/lib/docker", "/run/containerd",
])


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(blocked=_BLOCKED_DIRS, tail=st.lists(_SEGMENT, max_size=5))
def test_property_anything_under_a_blocked_dir_is_refused(
    shared_host: Host, blocked: str, tail: list[str],
) -> None:
    bases = {"home": shared_host.home, "state": shared_host.state, "extra": shared_host.extra}
    head, _, rest = blocked.partition("/")
    base = Path(blocked) if blocked.startswith("/") else bases[head] / rest
    path = os.path.join(base, *tail)
    with pytest.raises(MountBlocked) as info:
        check_source(shared_host.policy, path)
    assert info.value.rule in {"docker_socket", "system_path", "sbx_state", "credential_dir",
                               "configured_block"}


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(segments=st.lists(st.sampled_from(["a", "b", ".", "", "etc", "x y"]), max_size=6),
       trailing=st.booleans())
def test_property_checked_targets_are_normal_and_absolute(segments: list[str],
                                                          trailing: bool) -> None:
    target = "/" + "/".join(segments) + ("/" if trailing else "")
    try:
        normal = check_target(target)
    except MountBlocked as error:
        assert error.rule == "reserved_target"
        return
    assert normal.startswith("/")
    assert not normal.startswith("//")
    assert os.path.normpath(normal) == normal
    assert ".." not in normal.split("/")
    assert check_target(normal) == normal


def test_for_host_expands_tilde_user(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.getuid())
    policy = MountPolicy.for_host({}, state_home=tmp_path / "st",
                                  extra_blocked=[f"~{me.pw_name}/vault", "~"])
    assert policy.extra_blocked == (Path(me.pw_dir) / "vault", Path(me.pw_dir))


def test_for_host_unknown_tilde_user_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        MountPolicy.for_host({}, state_home=tmp_path / "st",
                             extra_blocked=["~no-such-user-sbx-test/x"])
