"""What `sbx` costs on top of the engine: `sbx run` vs `docker run`, and CLI cold start.

Usage::

    .venv/bin/python bench/run_overhead.py [--runs N] [--startup-runs M] [--json] [--keep-image]

Part 1 runs one trivial workload (``true`` in a busybox image) four ways, interleaved N times:

    sbx_run       ``sbx run <kit> -- true`` as a subprocess, its plan cached by the warm-up
                  (what a user pays from the second run on)
    sbx_run_full  the same with ``SBX_PLAN_CACHE=0``: the full plan every time (what the first
                  run of a new kit set pays once its image is built)
    sbx_first     the first run in a fresh state home (its image built beforehand): the full
                  plan, and the image probe (its accounts and mount points) its cache lacks
    sbx_warm      the cached run inside this (warm) process: no interpreter start, no imports
    sbx_resident  ``sbx run <kit> -- true`` served by the resident helper (``sbx resident
                  start``, in the benchmark's own runtime directory); its CPU adds the fork's
                  own (the helper's ``child_cpu_s`` per command) to the client process's
    docker_cli    ``docker run --rm`` of the same image tag with the same hardening flags
    docker_sdk    the same container through the docker SDK, in this process, on a warm client

The docker flags are derived from the ContainerSpec that sbx's own ``build_spec`` produces under
the same (temporary, default) config, so both sides run the identical container shape.

Each subprocess variant also reports the user + system CPU of its process and all it waited
for (``RUSAGE_CHILDREN`` deltas; for docker run that is the CLI, not the engine's work).

Part 2 times process start: ``python -c pass`` vs ``sbx --help`` (same venv interpreter), with
``import sbx.app`` and the ``sbx run`` import path as a breakdown, and ``sbx --help`` served by
the resident helper.

Everything sbx writes goes to a temporary SBX_HOME (and SBX_CONFIG points at an empty file,
/dev/null, so the user's config cannot change the limits); nothing touches the user's state.
No network traffic leaves the machine: every container runs with ``--network none``, nothing
is pulled.

Exit status: 0 whenever results were printed (targets are reported, not asserted); 1 when the
benchmark could not be set up or a workload failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

BASE_IMAGE: Final = "sbx-test/busybox:1"
KIT_STEM: Final = "bench-kit"
KIT_DESCRIPTOR: Final = '# syntax=docker/sandbox-kit:3\nschemaVersion: "3"\nkind: workload\n'
KIT_RECIPE: Final = f'FROM {BASE_IMAGE}\nUSER agent\nCMD ["true"]\n'
WORKLOAD: Final = ("true",)
# Everything `sbx run` imports beyond `sbx --help`: rich (renderer), the run core (config with
# jsonschema, kits with ruamel.yaml), the docker SDK, and typer's pydantic-based value adapters
# (loaded while parsing a command's parameters; guarded because the module is typer-internal).
RUN_IMPORTS: Final = (
    "import sbx.app, sbx.base.render, sbx.usecases.run.entry, sbx.usecases.run.fromkits\n"
    "import sbx.usecases.pipeline, sbx.base.config\n"
    "import docker\n"
    "try:\n    import typer._adapters\nexcept ImportError:\n    pass\n"
)
# What a run from the plan cache imports (sbx.usecases.plancache): no typer, config, kits or SDK.
CACHED_RUN_IMPORTS: Final = (
    "import sbx.__main__, sbx.commands.run_cached, sbx.usecases.plancache, sbx.usecases.run.start, "
    "sbx.base.render, sbx.seams.driver, sbx.domain.sandbox.requirements"
)

RATIO_TARGET: Final = 1.3  # sbx run (cached plan) median <= 1.3x docker run median
FULL_RATIO_TARGET: Final = 2.0  # a first run (full plan, image built) <= 2x docker run
FIRST_RATIO_TARGET: Final = 1.5  # a first run in a fresh state home <= 1.5x docker run
CACHED_CPU_TARGET_S: Final = 0.08  # client CPU of one cached `sbx run`
HELP_TARGET_MS: Final = 80.0  # sbx --help median (its page is printed without typer)
MAX_RUNS: Final = 100  # hard bound on iterations, whatever the flags say
CALL_TIMEOUT_S: Final = 120  # any single subprocess or engine call
BENCH_LABEL: Final = "dev.sbx.bench"  # on the containers this script creates itself
MANAGED_LABEL: Final = "dev.sbx.managed"
HOME_LABEL: Final = "dev.sbx.home"


class BenchError(Exception):
    """The benchmark cannot run (missing engine/image, a workload that does not exit 0)."""


# -- statistics ----------------------------------------------------------------------------


@dataclass
class Series:
    name: str
    label: str
    samples_s: list[float]
    cpu_s: list[float] = field(default_factory=list)  # subprocess variants only

    def ms(self) -> list[float]:
        return [s * 1000 for s in self.samples_s]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.ms())

    @property
    def p90_ms(self) -> float:
        values = sorted(self.ms())
        if len(values) < 2:
            return values[0]
        return statistics.quantiles(values, n=10, method="inclusive")[8]

    @property
    def min_ms(self) -> float:
        return min(self.ms())

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "n": len(self.samples_s),
            "median_ms": round(self.median_ms, 2),
            "p90_ms": round(self.p90_ms, 2),
            "min_ms": round(self.min_ms, 2),
            "samples_ms": [round(v, 2) for v in self.ms()],
            **({"cpu_median_ms": round(statistics.median(self.cpu_s) * 1000, 2)}
               if self.cpu_s else {}),
        }


def interleave(variants: Sequence[tuple[Series, Callable[[], None]]], rounds: int,
               what: str) -> None:
    """Run every variant once per round, rotating the order so none always goes first."""
    for index in range(rounds):
        shift = index % len(variants)
        for series, action in [*variants[shift:], *variants[:shift]]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            action()
            series.samples_s.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if cpu > 0:  # in-process variants wait for no child
                series.cpu_s.append(cpu)
        progress(f"{what}: round {index + 1}/{rounds}")


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


# -- subprocesses --------------------------------------------------------------------------


def call(argv: Sequence[str], env: Mapping[str, str],
         what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), env=dict(env), capture_output=True, text=True,
                              timeout=CALL_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise BenchError(f"{what}: {argv[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{what}: no answer within {CALL_TIMEOUT_S}s") from exc


def must_succeed(argv: Sequence[str], env: Mapping[str, str], what: str) -> str:
    done = call(argv, env, what)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise BenchError(f"{what} exited {done.returncode}: {' '.join(argv)}\n  "
                         + "\n  ".join(tail))
    return done.stdout


def timed_ok(argv: Sequence[str], env: Mapping[str, str], what: str) -> Callable[[], None]:
    """An action running ``argv`` that aborts the benchmark unless it exits 0."""
    def action() -> None:
        must_succeed(argv, env, what)

    return action


# -- setup ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    python: str
    sbx: str
    docker: str
    env: dict[str, str]
    home: Path
    kit: Path
    token: str


def find_tools() -> tuple[str, str, str]:
    # sys.executable is not resolved: the venv's python is a symlink and resolving it would
    # leave the venv (and lose the installed sbx).
    python = sys.executable
    sbx = Path(python).parent / "sbx"
    sbx_path = str(sbx) if sbx.exists() else shutil.which("sbx")
    if sbx_path is None:
        raise BenchError(f"no `sbx` console script beside {python} or on PATH; run this with "
                         "the venv's python (`.venv/bin/python bench/run_overhead.py`)")
    docker = shutil.which("docker")
    if docker is None:
        raise BenchError("no `docker` CLI on PATH")
    return python, sbx_path, docker


def make_setup(root: Path) -> Setup:
    python, sbx, docker = find_tools()
    home = root / "sbx-home"
    home.mkdir(mode=0o700)
    kit = root / KIT_STEM
    kit.mkdir()
    (kit / f"{KIT_STEM}.yaml").write_text(KIT_DESCRIPTOR, encoding="utf-8")
    (kit / f"{KIT_STEM}.dockerfile").write_text(KIT_RECIPE, encoding="utf-8")
    env = dict(os.environ)
    env["SBX_HOME"] = str(home)
    env["SBX_CONFIG"] = os.devnull  # an empty config file: all defaults
    env.pop("SBX_TRACEBACK", None)
    # As installed, sbx's modules are byte-compiled: a shell that forbids writing bytecode
    # would make every timed process compile its sources again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    runtime = root / "runtime"  # the resident helper's, this benchmark's own
    runtime.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    env["SBX_RESIDENT"] = "0"  # every variant but the resident one runs in its own process
    return Setup(python=python, sbx=sbx, docker=docker, env=env, home=home, kit=kit,
                 token=uuid.uuid4().hex)


def check_engine(setup: Setup) -> str:
    version = must_succeed([setup.docker, "version", "--format", "{{.Server.Version}}"],
                           setup.env, "reaching the Docker engine").strip()
    done = call([setup.docker, "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE],
                setup.env, "inspecting the base image")
    if done.returncode != 0:
        raise BenchError(f"base image {BASE_IMAGE} is missing; build it with "
                         "scripts/build-images.sh")
    return version


def warm_up_sbx(setup: Setup) -> dict[str, Any]:
    """First `sbx run --json`: builds (or reuses) the kit image; returns the envelope's data."""
    out = must_succeed([setup.sbx, "run", "--json", str(setup.kit), "--", *WORKLOAD],
                       setup.env, "warm-up `sbx run --json`")
    try:
        envelope = json.loads(out.strip().splitlines()[-1])
        data: dict[str, Any] = envelope["data"]
        _ = data["image"], data["user"], data["workspace"]["target"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"cannot read the image tag from `sbx run --json`: {out[:300]!r}") \
            from exc
    if envelope.get("exit_code") != 0:
        raise BenchError(f"warm-up `sbx run` reported exit_code {envelope.get('exit_code')}")
    return data


def sandbox_spec(setup: Setup, image: str, user: str, workspace: str) -> Any:
    """The ContainerSpec sbx builds for this run, from sbx's own config and build_spec."""
    from sbx.base.config import load_config
    from sbx.domain.sandbox.hardening import Limits, build_spec
    from sbx.domain.sandbox.identity import FALLBACK_HOME

    sandbox = load_config(setup.env).sandbox
    limits = Limits.from_sandbox(sandbox)
    uid, _, gid = user.partition(":")
    return build_spec(image=image, uid=int(uid), gid=int(gid), limits=limits,
                      workspace_target=workspace, workspace_bind=None, extra_binds=(),
                      command=WORKLOAD, entrypoint=None, env={}, home=FALLBACK_HOME,
                      labels={BENCH_LABEL: setup.token}, image_labels={})


def docker_run_argv(docker: str, spec: Any) -> list[str]:
    """`docker run` flags for a ContainerSpec (the CLI spelling of sbx's create_kwargs)."""
    argv = [docker, "run", "--rm"]
    if spec.read_only:
        argv.append("--read-only")
    argv += ["--user", spec.user]
    for cap in spec.cap_drop:
        argv += ["--cap-drop", cap]
    for opt in spec.security_opt:
        argv += ["--security-opt", opt]
    argv += ["--memory", str(spec.memory_bytes), "--memory-swap", str(spec.memory_swap_bytes),
             "--pids-limit", str(spec.pids_limit), "--cpus", f"{spec.nano_cpus / 1e9:g}"]
    for target, options in spec.tmpfs.items():
        argv += ["--tmpfs", f"{target}:{options}"]
    argv += ["--network", spec.network_mode, "--log-driver", spec.log_driver]
    argv += [arg for key, value in spec.log_options for arg in ("--log-opt", f"{key}={value}")]
    if spec.init:
        argv.append("--init")
    argv += ["--workdir", spec.working_dir, "--pull", "never"]
    for key, value in spec.env.items():
        argv += ["--env", f"{key}={value}"]
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    return [*argv, spec.image, *(spec.command or ())]


class SdkRunner:
    """create + attach + start + read to EOF + wait + remove on one warm SDK client (no
    process start)."""

    def __init__(self, env: Mapping[str, str], spec: Any) -> None:
        import docker

        from sbx.seams.engine import create_kwargs

        self.client = docker.DockerClient.from_env(environment=dict(env),
                                                   timeout=CALL_TIMEOUT_S)
        self.api = self.client.api
        self.kwargs = create_kwargs(spec)
        # sbx's driver consumes these itself (name, StdinOnce, the client's proxies); the
        # SDK's create_container does not take them.
        for key in ("name", "stdin_once", "use_config_proxy"):
            self.kwargs.pop(key, None)
        self.host_config = self.api.create_host_config(**self.kwargs.pop("host_config"))

    def __call__(self) -> None:
        created = self.api.create_container(host_config=self.host_config, **self.kwargs)
        container_id = created["Id"]
        try:
            # Attached before the start and read to its end, as sbx and `docker run` do (the
            # sandbox's log driver is "none": there is no engine log to read afterwards).
            stream = self.api.attach_socket(container_id, params={
                "stdout": 1, "stderr": 1, "stream": 1, "logs": 0})
            self.api.start(container_id)
            sock = getattr(stream, "_sock", stream)
            while sock.recv(65536):
                pass
            stream.close()
            status = self.api.wait(container_id, timeout=CALL_TIMEOUT_S)["StatusCode"]
        finally:
            self.api.remove_container(container_id, force=True, v=True)
        if status != 0:
            raise BenchError(f"docker SDK run exited {status}")

    def close(self) -> None:
        self.client.close()


class WarmRunner:
    """``sbx run`` through :func:`sbx.__main__.cli` in this process, already imported: the
    ceiling of what a resident helper (a daemon that runs requests for a thin client) buys."""

    def __init__(self, setup: Setup) -> None:
        import io

        from sbx.__main__ import cli

        self.cli = cli
        self.setup = setup
        self.io = io

    def __call__(self) -> None:
        out = self.io.TextIOWrapper(self.io.BytesIO(), encoding="utf-8")
        with open(os.devnull, encoding="utf-8") as stdin:
            status = self.cli(["run", str(self.setup.kit), "--", *WORKLOAD], env=self.setup.env,
                              cwd=self.setup.home, stdout=out, stderr=out, stdin=stdin)
        if status != 0:
            raise BenchError(f"in-process `sbx run` exited {status}")


class FirstRunner:
    """``sbx run`` in a state home of its own each time (mode 0700, as sbx makes one): nothing
    cached but the kit image, which the warm-up built. The homes are kept for the cleanup."""

    def __init__(self, setup: Setup, argv: Sequence[str]) -> None:
        self.setup, self.argv = setup, list(argv)
        self.root = setup.home.parent / "first-homes"
        self.root.mkdir(mode=0o700)
        self.homes: list[Path] = []

    def __call__(self) -> None:
        home = self.root / str(len(self.homes))
        home.mkdir(mode=0o700)
        self.homes.append(home)
        must_succeed(self.argv, {**self.setup.env, "SBX_HOME": str(home)},
                     "`sbx run` in a fresh state home")


# -- leftovers -----------------------------------------------------------------------------


def leftovers(setup: Setup, homes: Sequence[Path] = ()) -> list[str]:
    """Containers still present that this benchmark (or sbx under its temp homes) created."""
    from sbx.base.paths import home_hash

    found: list[str] = []
    for label in (*(f"{HOME_LABEL}={home_hash(h)}" for h in (setup.home, *homes)),
                  f"{BENCH_LABEL}={setup.token}"):
        extra = ["--filter", f"label={MANAGED_LABEL}=true"] if label.startswith(HOME_LABEL) \
            else []
        done = call([setup.docker, "ps", "-a", *extra, "--filter", f"label={label}",
                     "--format", "{{.ID}} {{.Names}} {{.Status}}"],
                    setup.env, "listing leftover containers")
        if done.returncode != 0:
            found.append(f"(could not list containers labelled {label}: "
                         f"{done.stderr.strip()[:200]})")
            continue
        found += [line for line in done.stdout.splitlines() if line.strip()]
    return found


def remove_leftovers(setup: Setup, found: Sequence[str]) -> None:
    ids = [line.split()[0] for line in found if not line.startswith("(")]
    if ids:
        call([setup.docker, "rm", "-f", *ids], setup.env, "removing leftover containers")


def use_tags(setup: Setup, homes: Sequence[Path]) -> list[str]:
    """The image use tags (``sbx-use/<home hash>:…``, sbx's image cache) of these homes."""
    from sbx.base.paths import home_hash
    from sbx.domain.sandbox.imagecache import HOME_DIGITS, USE_REPOSITORY

    tags: list[str] = []
    for home in homes:
        repository = f"{USE_REPOSITORY}{home_hash(home)[:HOME_DIGITS]}"
        done = call([setup.docker, "image", "ls", repository, "--format",
                     "{{.Repository}}:{{.Tag}}"], setup.env, "listing use tags")
        tags += [line for line in done.stdout.split() if line.startswith(repository + ":")]
    return tags


def clean_up(setup: Setup | None, run: Mapping[str, Any], *, keep_image: bool,
             homes: Sequence[Path] = ()) -> list[str]:
    """Check for (and remove) leftover containers; untag what the homes' runs tagged; drop
    the kit image if the warm-up built it."""
    if setup is None:
        return []
    try:
        found = leftovers(setup, homes)
        remove_leftovers(setup, found)
        for tag in use_tags(setup, [setup.home, *homes]):
            call([setup.docker, "image", "rm", tag], setup.env, "untagging an image")
        if run.get("image_built_by_warmup") and not keep_image:
            call([setup.docker, "image", "rm", str(run["image"])], setup.env,
                 "removing the kit image")
    except BenchError as error:
        return [f"(cleanup failed: {error})"]
    return found


# -- the two parts -------------------------------------------------------------------------


def resident_env(setup: Setup) -> dict[str, str]:
    return {**setup.env, "SBX_RESIDENT": "1"}


def resident_status(setup: Setup) -> dict[str, Any]:
    out = must_succeed([setup.sbx, "resident", "status", "--json"], resident_env(setup),
                       "`sbx resident status`")
    data: dict[str, Any] = json.loads(out)["data"]
    return data


def bench_run(setup: Setup, runs: int, homes: list[Path]) -> dict[str, Any]:
    data = warm_up_sbx(setup)
    image = str(data["image"])
    spec = sandbox_spec(setup, image, str(data["user"]), str(data["workspace"]["target"]))
    docker_argv = docker_run_argv(setup.docker, spec)
    # Both must work before anything is timed; these also warm the engine's caches.
    must_succeed([setup.sbx, "run", str(setup.kit), "--", *WORKLOAD], setup.env,
                 "check `sbx run`")
    must_succeed(docker_argv, setup.env, "check `docker run`")
    sbx_argv = [setup.sbx, "run", str(setup.kit), "--", *WORKLOAD]
    full_env = {**setup.env, "SBX_PLAN_CACHE": "0"}
    must_succeed(sbx_argv, full_env, "check `sbx run` without the plan cache")
    cached = plan_cache_entries(setup)
    if not cached:
        raise BenchError("the warm-up left no plan cache entry: `sbx run` would not be timed "
                         "on its cached path")
    sdk = SdkRunner(setup.env, spec)
    warm = WarmRunner(setup)
    first = FirstRunner(setup, sbx_argv)
    served = resident_env(setup)
    try:
        sdk()
        warm()  # imports everything once and writes the in-process request's own plan
        first()
        must_succeed(sbx_argv, served, "check `sbx run` through the resident helper")
        before = resident_status(setup)
        series = [
            Series("sbx_run", "sbx run <kit> -- true (cached)", []),
            Series("sbx_run_full", "sbx run, SBX_PLAN_CACHE=0 (full)", []),
            Series("sbx_first", "sbx run, fresh state home (first)", []),
            Series("sbx_warm", "sbx run, warm process", []),
            Series("sbx_resident", "sbx run, resident helper (cached)", []),
            Series("docker_cli", "docker run --rm (CLI)", []),
            Series("docker_sdk", "docker SDK in-process", []),
        ]
        interleave([
            (series[0], timed_ok(sbx_argv, setup.env, "`sbx run`")),
            (series[1], timed_ok(sbx_argv, full_env, "`sbx run` (full plan)")),
            (series[2], first),
            (series[3], warm),
            (series[4], timed_ok(sbx_argv, served, "`sbx run` (resident helper)")),
            (series[5], timed_ok(docker_argv, setup.env, "`docker run`")),
            (series[6], sdk),
        ], runs, "sbx run vs docker run")
        after = resident_status(setup)
    finally:
        sdk.close()
        homes.extend(first.homes)
    sbx_s, full_s, first_s, warm_s, resident_s, cli_s, sdk_s = series
    forks = after["served"] - before["served"]
    if forks != runs:
        raise BenchError(f"the resident helper served {forks} of {runs} runs "
                         f"(last declined: {after.get('last_declined')!r})")
    fork_cpu_s = (after["child_cpu_s"] - before["child_cpu_s"]) / forks
    resident_cpu_s = statistics.median(resident_s.cpu_s) + fork_cpu_s
    ratio = sbx_s.median_ms / cli_s.median_ms
    full_ratio = full_s.median_ms / cli_s.median_ms
    first_ratio = first_s.median_ms / cli_s.median_ms
    cached_cpu_s = statistics.median(sbx_s.cpu_s)
    return {
        "image": image,
        "image_built_by_warmup": bool(data.get("image_built")),
        "docker_argv": docker_argv,
        "plan_cache_entries": cached,
        "variants": {s.name: s.as_dict() for s in series},
        "ratio_sbx_to_docker_cli": round(ratio, 3),
        "ratio_full_to_docker_cli": round(full_ratio, 3),
        "ratio_sbx_to_docker_sdk": round(sbx_s.median_ms / sdk_s.median_ms, 3),
        "sbx_minus_docker_cli_ms": round(sbx_s.median_ms - cli_s.median_ms, 2),
        "full_minus_cached_ms": round(full_s.median_ms - sbx_s.median_ms, 2),
        "cached_minus_warm_ms": round(sbx_s.median_ms - warm_s.median_ms, 2),
        "ratio_warm_to_docker_cli": round(warm_s.median_ms / cli_s.median_ms, 3),
        "docker_cli_minus_sdk_ms": round(cli_s.median_ms - sdk_s.median_ms, 2),
        "target_ratio": RATIO_TARGET,
        "meets_target": ratio <= RATIO_TARGET,
        "full_target_ratio": FULL_RATIO_TARGET,
        "full_meets_target": full_ratio <= FULL_RATIO_TARGET,
        "ratio_first_to_docker_cli": round(first_ratio, 3),
        "first_target_ratio": FIRST_RATIO_TARGET,
        "first_meets_target": first_ratio <= FIRST_RATIO_TARGET,
        "cached_cpu_s": round(cached_cpu_s, 3),
        "cached_cpu_target_s": CACHED_CPU_TARGET_S,
        "cached_cpu_meets_target": cached_cpu_s <= CACHED_CPU_TARGET_S,
        "ratio_resident_to_docker_cli": round(resident_s.median_ms / cli_s.median_ms, 3),
        "resident_fork_cpu_s": round(fork_cpu_s, 4),
        "resident_cpu_s": round(resident_cpu_s, 4),
        "resident_cpu_meets_target": resident_cpu_s <= CACHED_CPU_TARGET_S,
        "resident_rss_kib": after.get("rss_kib"),
    }


def plan_cache_entries(setup: Setup) -> int:
    directory = setup.home / "cache" / "plans"
    return len(list(directory.glob("*.json"))) if directory.is_dir() else 0


def bench_startup(setup: Setup, runs: int) -> dict[str, Any]:
    commands = {
        "python_pass": ("python -c pass", [setup.python, "-c", "pass"]),
        "sbx_help": ("sbx --help", [setup.sbx, "--help"]),
        "sbx_help_resident": ("sbx --help (resident helper)", [setup.sbx, "--help"]),
        "import_sbx_app": ("python -c 'import sbx.app'", [setup.python, "-c", "import sbx.app"]),
        "import_run_path": ("python -c 'import <run path>'", [setup.python, "-c", RUN_IMPORTS]),
        "import_cached_run_path": ("python -c 'import <cached path>'",
                                   [setup.python, "-c", CACHED_RUN_IMPORTS]),
    }
    for label, argv in commands.values():
        must_succeed(argv, setup.env, f"`{label.strip()}`")  # warm the page cache
    series = {name: Series(name, label, []) for name, (label, _) in commands.items()}
    interleave([(series[name], timed_ok(
        argv, resident_env(setup) if name.endswith("_resident") else setup.env,
        f"`{label.strip()}`")) for name, (label, argv) in commands.items()], runs, "cold start")
    help_ms = series["sbx_help"].median_ms
    return {
        "variants": {name: s.as_dict() for name, s in series.items()},
        "sbx_help_minus_python_ms": round(help_ms - series["python_pass"].median_ms, 2),
        "import_sbx_app_minus_python_ms": round(
            series["import_sbx_app"].median_ms - series["python_pass"].median_ms, 2),
        "target_ms": HELP_TARGET_MS,
        "meets_target": help_ms < HELP_TARGET_MS,
        "resident_meets_target": series["sbx_help_resident"].median_ms < HELP_TARGET_MS,
    }


# -- report --------------------------------------------------------------------------------


def _row(variant: Mapping[str, Any]) -> str:
    cpu = variant.get("cpu_median_ms")
    return (f"  {variant['label']:<34} {variant['median_ms']:>9.1f} {variant['p90_ms']:>9.1f} "
            f"{variant['min_ms']:>9.1f} {'' if cpu is None else f'{cpu:>9.1f}'}").rstrip()


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def render_table(result: Mapping[str, Any]) -> str:
    run, start, checks = result["run"], result["startup"], result["checks"]
    header = f"  {'variant':<34} {'median':>9} {'p90':>9} {'min':>9} {'cpu':>9}   (ms)"
    lines = [
        f"sbx {result['sbx_version']}, python {result['python_version']}, "
        f"engine {result['engine_version']}, image {run['image']}",
        "",
        f"1. sbx run vs docker run (N={result['runs']}, interleaved)",
        header,
        *(_row(v) for v in run["variants"].values()),
        f"  sbx (cached plan) / docker run median: {run['ratio_sbx_to_docker_cli']:.2f}x "
        f"(target <= {run['target_ratio']}x: {_verdict(run['meets_target'])}); "
        f"sbx adds {run['sbx_minus_docker_cli_ms']:+.1f} ms",
        f"  sbx (full plan) / docker run median: {run['ratio_full_to_docker_cli']:.2f}x "
        f"(target <= {run['full_target_ratio']}x: {_verdict(run['full_meets_target'])}); "
        f"the plan cache saves {run['full_minus_cached_ms']:+.1f} ms",
        f"  sbx (fresh state home) / docker run median: {run['ratio_first_to_docker_cli']:.2f}x "
        f"(target <= {run['first_target_ratio']}x: {_verdict(run['first_meets_target'])})",
        f"  client CPU of a cached sbx run (median): {run['cached_cpu_s'] * 1000:.0f} ms "
        f"(target <= {run['cached_cpu_target_s'] * 1000:.0f} ms: "
        f"{_verdict(run['cached_cpu_meets_target'])})",
        f"  a warm process saves {run['cached_minus_warm_ms']:+.1f} ms "
        f"(warm process / docker run: {run['ratio_warm_to_docker_cli']:.2f}x)",
        f"  resident helper / docker run median: {run['ratio_resident_to_docker_cli']:.2f}x; "
        f"CPU per run {run['resident_cpu_s'] * 1000:.0f} ms (the fork's "
        f"{run['resident_fork_cpu_s'] * 1000:.0f} ms; target <= "
        f"{run['cached_cpu_target_s'] * 1000:.0f} ms: "
        f"{_verdict(run['resident_cpu_meets_target'])}); helper RSS "
        f"{(run['resident_rss_kib'] or 0) // 1024} MiB",
        f"  docker CLI process vs in-process SDK: {run['docker_cli_minus_sdk_ms']:+.1f} ms; "
        f"sbx / SDK median: {run['ratio_sbx_to_docker_sdk']:.2f}x",
        "",
        f"2. cold start (N={result['startup_runs']}, interleaved)",
        header,
        *(_row(v) for v in start["variants"].values()),
        f"  sbx --help median: {start['variants']['sbx_help']['median_ms']:.1f} ms "
        f"(target < {start['target_ms']:g} ms: {_verdict(start['meets_target'])}); "
        f"{start['sbx_help_minus_python_ms']:+.1f} ms over python -c pass",
        "",
        "3. checks: sbx run exit 0: ok; docker run exit 0: ok; leftover containers: "
        + (f"{len(checks['leftover_containers'])} (removed): "
           + "; ".join(checks["leftover_containers"])
           if checks["leftover_containers"] else "none"),
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    def bounded(text: str) -> int:
        value = int(text)
        if not 1 <= value <= MAX_RUNS:
            raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_RUNS}")
        return value

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=bounded, default=15,
                        help="iterations of each run variant (default 15)")
    parser.add_argument("--startup-runs", type=bounded, default=20,
                        help="iterations of each cold-start variant (default 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep-image", action="store_true",
                        help="keep the kit image even when this run built it")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from sbx import __version__

    with tempfile.TemporaryDirectory(prefix="sbx-bench-") as tmp:
        setup: Setup | None = None
        run: dict[str, Any] = {}
        homes: list[Path] = []
        try:
            setup = make_setup(Path(tmp))
            engine = check_engine(setup)
            must_succeed([setup.sbx, "resident", "start", "--idle", "900"], resident_env(setup),
                         "`sbx resident start`")
            run = bench_run(setup, args.runs, homes)
            startup = bench_startup(setup, args.startup_runs)
        except BenchError as error:
            print(f"bench: setup failed: {error}", file=sys.stderr)
            return 1
        finally:
            if setup is not None:
                call([setup.sbx, "resident", "stop"], resident_env(setup), "stopping the helper")
            found = clean_up(setup, run, keep_image=args.keep_image, homes=homes)
    result = {
        "sbx_version": __version__,
        "python_version": platform.python_version(),
        "engine_version": engine,
        "runs": args.runs,
        "startup_runs": args.startup_runs,
        "run": run,
        "startup": startup,
        "checks": {"sbx_run_exit_0": True, "docker_run_exit_0": True,
                   "leftover_containers": found},
    }
    print(json.dumps(result, indent=2) if args.json else render_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
