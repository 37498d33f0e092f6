"""Output of the kit commands."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Envelope, Renderer, escape
from sbx.domain.kits.surfacetypes import format_widenings

if TYPE_CHECKING:
    from sbx.domain.kits.reference import ShortName
    from sbx.domain.kits.surfacetypes import Widening
    from sbx.domain.sandbox.hostmounts import StoredMount
    from sbx.usecases.kitinit import KitInitResult
    from sbx.usecases.kitpush import PushResult
    from sbx.usecases.kitstore import TagInfo
    from sbx.usecases.kitvalidate import KitValidation
    from sbx.usecases.pull import PullResult


def kit_init(renderer: Renderer, result: KitInitResult) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="kit init", status="ok", exit_code=0,
                               data=result.as_dict()))
        return
    renderer.plain(f"created {result.kind} kit {result.name} in {result.directory}:")
    for path in result.files:
        renderer.plain(f"  {path.name}")
    renderer.plain(f"check it:   sbx kit validate {result.directory}")
    if result.kind == "workload":
        renderer.plain(f"run it:     sbx run {result.directory}   (needs {result.base_image} "
                    "present locally: sbx never pulls implicitly)")
    else:
        renderer.plain(f"compose it: sbx run WORKLOAD --kit {result.directory}")


def kit_validation(renderer: Renderer, result: KitValidation) -> None:
    """``valid`` on stdout, or the diagnostics and an ``invalid_kit`` line on stderr."""
    status = 0 if result.valid else int(Reason.INVALID_KIT.exit_status)
    if renderer.as_json:
        renderer.envelope(Envelope(
            command="kit validate", status="ok" if result.valid else "refused",
            exit_code=status, data=result.as_dict(),
            reason=None if result.valid else Reason.INVALID_KIT.value,
            message=None if result.valid else f"{result.reference} is not a valid kit",
            diagnostics=[dict(e) for e in result.errors]))
        return
    for warning in result.warnings:
        renderer.warn(f"{result.reference}: {warning}")
    if result.valid:
        where = f" ({result.descriptor})" if result.descriptor else ""
        renderer.plain(f"{result.reference}: valid {result.kind} kit{where}")
        return
    count = len(result.errors)
    renderer.error(SbxError(Reason.INVALID_KIT,
                        f"{result.reference} is not a valid kit ({count} problem"
                        f"{'s' if count != 1 else ''})", body=result.body,
                        hint="Fix each field at the path and position shown."), "kit")


def host_mounts(renderer: Renderer, mounts: Sequence[StoredMount], *,
                removed: bool = False) -> None:
    """The kits' host-mount@1 directories (or the ones just removed)."""
    rows = [{"kit": m.kit, "path": m.path, "directory": str(m.directory)} for m in mounts]
    if renderer.as_json:
        renderer.envelope(Envelope(command="kit mounts", status="ok", exit_code=0,
                               data={"action": "rm" if removed else "ls", "mounts": rows}))
        return
    if not rows:
        renderer.note("no host-mount@1 directories")
        return
    if removed:
        for row in rows:
            text = f"removed {row['directory']} ({row['kit']} {row['path']})"
            renderer.line(renderer.out_file, escape(text), text)
        return
    renderer.table(("kit", "path", "directory"),
                   [(escape(r["kit"]), escape(r["path"]), escape(r["directory"])) for r in rows])


def kit_registry(renderer: Renderer, tags: Sequence[TagInfo], *, host: str,
                 removed: bool = False) -> None:
    """The kit registry's tags (or what was just removed)."""
    rows = [{"name": t.name, "tag": t.tag or None, "digest": t.digest, "size": t.size,
             "reference": f"{host}/{t.name}" + (f":{t.tag}" if t.tag else "")} for t in tags]
    if renderer.as_json:
        renderer.envelope(Envelope(command="kit registry", status="ok", exit_code=0,
                                   data={"action": "rm" if removed else "ls", "tags": rows}))
        return
    if removed:
        for row in rows:
            text = f"removed {row['reference']}"
            renderer.line(renderer.out_file, escape(text), text)
        return
    if not rows:
        renderer.note("the kit registry is empty")
        return
    renderer.table(("name", "tag", "digest", "size"),
                   [(escape(str(r["name"])), escape(str(r["tag"])), escape(str(r["digest"])),
                     str(r["size"])) for r in rows])


def short_names(renderer: Renderer, names: Sequence[ShortName]) -> None:
    """The bundled agents' short names and what each resolves to from here."""
    rows = [n.as_dict() for n in names]
    if renderer.as_json:
        renderer.envelope(Envelope(command="kit ls", status="ok", exit_code=0,
                                   data={"kits": rows}))
        return
    renderer.table(("name", "kit", "resolves to"),
                   [(escape(str(r["name"])), escape(str(r["kit"])),
                     escape(str(r["resolves_to"])
                            + (f" ({r['source']}, not the bundled kit)" if r["shadowed"]
                               else ""))) for r in rows])


def kit_pushed(renderer: Renderer, result: PushResult) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="kit push", status="ok", exit_code=0,
                               data=result.as_dict()))
        return
    text = f"pushed {result.reference}: {result.digest}"
    renderer.line(renderer.out_file, escape(text), text)


def pull_result(renderer: Renderer, result: PullResult) -> None:
    if renderer.as_json:
        renderer.envelope(Envelope(command="pull", status="ok", exit_code=0,
                               data=result.as_dict()))
        return
    for item in result.items:
        decision = item.gate.decision.value if item.gate is not None else "image"
        text = f"{item.reference}: {item.kind} {item.digest} ({decision})"
        renderer.line(renderer.out_file, escape(text), text)


def confirm_widenings(renderer: Renderer, reference: str, widenings: Sequence[Widening],
                      first: bool = False, *, local: bool = False) -> bool:
    """Show a kit upgrade's widenings (or, on its first pull, every permission it asks
    for; or a local kit's since its last approved run) on stderr and ask; anything but yes
    declines."""
    what = ("it changed since its last approved run and now asks for more" if local
            else "asks for these permissions" if first
            else "the new version asks for more than you approved")
    text = f"{reference}: {what}:\n{format_widenings(widenings)}"
    renderer.line(renderer.err_file, escape(text), text)
    renderer.err_file.write("Accept these permissions? [y/N] ")
    renderer.err_file.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):
        return False
    return answer.strip().lower() in {"y", "yes"}

def kit_confirmation(renderer: Renderer) -> Callable[[str, Sequence[Widening]], bool] | None:
    """The terminal question a run asks about a local kit's widenings; None without a
    terminal (the run is then refused unless --accept)."""
    if not renderer.interactive():
        return None
    return lambda reference, widenings: confirm_widenings(renderer, reference, widenings,
                                                          local=True)


def named_confirmation(renderer: Renderer) -> Callable[[str, Sequence[Widening]], bool] | None:
    """The question a named sandbox's start asks about kits that now ask for more than it
    runs with (None: no terminal to ask on)."""
    if not renderer.interactive():
        return None

    def ask(what: str, widenings: Sequence[Widening]) -> bool:
        text = f"{what}:\n{format_widenings(widenings)}"
        renderer.line(renderer.err_file, escape(text), text)
        return renderer.confirm("Accept these permissions?")

    return ask


__all__ = ['kit_init', 'kit_validation', 'kit_pushed', 'pull_result', 'confirm_widenings',
           'kit_confirmation', 'named_confirmation']
