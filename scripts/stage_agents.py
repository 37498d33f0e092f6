"""Stage the agent kits' npm packages on the host: ``npm pack`` into a cache, then into each kit.

Containers on the test machines reach no registry, and kit builds run without a network at all,
so the agent kits under ``examples/agents`` can take their packages from files instead: each
kit's ``packages.list`` names them (``NAME@VERSION`` with ``{arg}`` placeholders for the kit's
args and ``{arch}`` for the npm cpu name), the versions are the defaults of the kit's args, and
this script puts exactly those tarballs into the kit's ``packages/`` directory, for ``--arg
source=staged`` builds (``npm-fetch.sh --from``). Each must match the sha512 the kit pins for it
in ``packages.lock`` (npm-fetch.sh checks that pin again in the image); a mismatch stages
nothing.

Downloads go through the ordinary ``npm`` client (``npm pack``, which checks each tarball against
the registry's integrity) into a cache outside the repository (``$SBX_AGENT_CACHE``, else
``$XDG_CACHE_HOME/sbx/agents``, else ``~/.cache/sbx/agents``) and are never committed
(``.gitignore``). Idempotent: a package already cached is not fetched again, and a kit whose
``packages/`` already holds the right files is not touched (its build cache key stays put).

    python scripts/stage_agents.py [--kit NAME]... [--check]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ROOT / "cli" / "sbx" / "data" / "agents"
PACK_TIMEOUT_S = 900  # one large package over a slow link; npm itself retries
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_VALUE = re.compile(r"^[A-Za-z0-9._-]+$")


class StageError(Exception):
    pass


def cache_dir() -> Path:
    explicit = os.environ.get("SBX_AGENT_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sbx" / "agents"


def npm_arch() -> str:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x64"
    if machine in ("aarch64", "arm64"):
        return "arm64"
    raise StageError(f"no agent packages for this machine ({machine})")


def kit_args(kit: Path) -> dict[str, str]:
    """The defaults of a kit's args: the versions it pins."""
    from ruamel.yaml import YAML

    descriptor = kit / f"{kit.name}.yaml"
    data = YAML(typ="safe").load(descriptor.read_text(encoding="utf-8"))
    args = data.get("args") or {}
    return {str(name): str(decl["default"]) for name, decl in args.items()
            if isinstance(decl, dict) and "default" in decl}


def package_specs(kit: Path, values: dict[str, str]) -> list[str]:
    """``packages.list`` with its placeholders filled, as npm-fetch.sh fills them."""
    specs: list[str] = []
    for raw in (kit / "packages.list").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values or not _VALUE.fullmatch(values[name]):
                raise StageError(f"{kit.name}/packages.list: no usable value for {{{name}}}")
            return values[name]

        specs.append(_PLACEHOLDER.sub(fill, line))
    return specs


def pack_name(spec: str) -> str:
    """npm pack's file name for NAME@VERSION (scope's ``@`` dropped, its ``/`` made ``-``)."""
    name, _, version = spec.rpartition("@")
    return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def pins(kit: Path) -> dict[str, str]:
    """``packages.lock``: NAME@VERSION -> the pinned sha512, as hex digits."""
    import base64

    found: dict[str, str] = {}
    for raw in (kit / "packages.lock").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        spec, _, integrity = line.partition(" ")
        if not integrity.startswith("sha512-") or spec in found:
            raise StageError(f"{kit.name}/packages.lock: {line!r} is not one NAME@VERSION "
                             "sha512-... pin")
        found[spec] = base64.b64decode(integrity.removeprefix("sha512-")).hex()
    return found


def sha512(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(spec: str, cache: Path) -> Path:
    """The cached tarball of ``spec``, fetched with ``npm pack`` when missing."""
    target = cache / pack_name(spec)
    recorded = target.with_name(target.name + ".sha512")
    if target.is_file() and recorded.is_file() \
            and recorded.read_text(encoding="ascii").strip() == sha512(target):
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise StageError("npm is not installed (apt-get install npm)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".pack-") as tmp:
        print(f"stage-agents: npm pack {spec}", file=sys.stderr)
        done = subprocess.run([npm, "pack", spec, "--json", "--pack-destination", tmp],
                              capture_output=True, text=True, timeout=PACK_TIMEOUT_S,
                              check=False, cwd=tmp)
        if done.returncode != 0:
            raise StageError(f"npm pack {spec} failed: {done.stderr.strip()[-2000:]}")
        report = json.loads(done.stdout)
        produced = Path(tmp) / report[0]["filename"]
        if produced.name != target.name:
            raise StageError(f"npm pack {spec} wrote {produced.name}, not {target.name}")
        hexsum = sha512(produced)
        integrity = str(report[0].get("integrity", ""))
        if integrity.startswith("sha512-"):
            import base64

            expected = base64.b64decode(integrity[len("sha512-"):]).hex()
            if expected != hexsum:
                raise StageError(f"{spec}: the tarball does not match npm's integrity")
        os.replace(produced, target)
        recorded.write_text(hexsum + "\n", encoding="ascii")
    return target


def stage_kit(kit: Path, cache: Path, *, check: bool) -> bool:
    """Put exactly the kit's pinned tarballs into ``kit/packages``; True when it changed."""
    values = {**kit_args(kit), "arch": npm_arch()}
    specs = package_specs(kit, values)
    pinned = pins(kit)
    packages = kit / "packages"
    wanted = {pack_name(spec): spec for spec in specs}
    changed = False
    for name, spec in sorted(wanted.items()):
        if spec not in pinned:
            raise StageError(f"{kit.name}: {spec} is not pinned in packages.lock")
        staged = packages / name
        if check:
            if not staged.is_file():
                raise StageError(f"{kit.name}: {name} is not staged")
            if sha512(staged) != pinned[spec]:
                raise StageError(f"{kit.name}: {name} does not match its pin in packages.lock")
            continue
        source = fetch(spec, cache)
        hexsum = (cache / (name + ".sha512")).read_text(encoding="ascii").strip()
        if hexsum != pinned[spec]:
            raise StageError(f"{kit.name}: {spec} from npm does not match the sha512 the kit "
                             f"pins in packages.lock; nothing was staged")
        if not staged.is_file() or staged.stat().st_size != source.stat().st_size \
                or sha512(staged) != hexsum:
            packages.mkdir(exist_ok=True)
            tmp = packages / f".{name}.tmp"
            tmp.unlink(missing_ok=True)
            try:
                os.link(source, tmp)  # same file system: no copy of hundreds of MB
            except OSError:
                shutil.copyfile(source, tmp)
            os.replace(tmp, staged)
            changed = True
    if check:
        return False
    for stale in (*packages.glob("*.tgz"), packages / "SHA512SUMS"):
        if stale.exists() and stale.name not in wanted:
            stale.unlink()
            changed = True
    return changed


def agent_kits(names: list[str]) -> list[Path]:
    kits = sorted(p.parent for p in AGENTS.glob("*/packages.list"))
    if names:
        unknown = set(names) - {k.name for k in kits}
        if unknown:
            raise StageError(f"no agent kit named {', '.join(sorted(unknown))}")
        kits = [k for k in kits if k.name in names]
    return kits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", action="append", default=[], help="only this kit (repeatable)")
    parser.add_argument("--check", action="store_true",
                        help="only verify what is staged; fetch nothing")
    options = parser.parse_args(argv)
    cache = cache_dir()
    try:
        for kit in agent_kits(options.kit):
            changed = stage_kit(kit, cache, check=options.check)
            state = "checked" if options.check else ("staged" if changed else "up to date")
            print(f"stage-agents: {kit.name}: {state}", file=sys.stderr)
    except (StageError, OSError, subprocess.TimeoutExpired, ValueError, KeyError) as error:
        print(f"stage-agents: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
