"""A gc pass over the engine's objects (containers, networks, volumes, images, cached images)
in batches, each confirmed gone by one listing; the host's part is :class:`Sweep`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sbx.base import labels as label_keys
from sbx.base.errors import SbxError
from sbx.base.reasons import Reason

if TYPE_CHECKING:
    from sbx.seams.engine import Containers, Images, Inventory, Networks

    class GcEngine(Inventory, Containers, Networks, Images, Protocol):
        """The roles gc uses: listings, and removal of every kind of object."""
from sbx.domain.sandbox.imagecache import (
    CACHE_REPOSITORIES,
    USE_REPOSITORY,
    judge_cached,
    marked_by,
    removal_order,
)
from sbx.usecases.gc.judging import (
    judge_container,
    judge_image,
    judge_shared,
    known_runs,
    recorded_names,
    trust_names,
)
from sbx.usecases.gc.listing import (
    ContainerEntry,
    ImageEntry,
    Listing,
    ListingInvalid,
    RunDir,
    SharedEntry,
    parse_images,
    parse_listing,
    read_run_dirs,
)
from sbx.usecases.gc.result import (
    DOCKER_UNREACHABLE,
    LIST_FAILED,
    LIST_INVALID,
    GcItem,
    GcResult,
    short_id,
)
from sbx.usecases.gc.sweep import Sweep, note_run


@dataclass
class EngineFound:
    """What one engine's pass leaves for the host's part: the run directories it read, the
    runs the engine holds objects of, and the runs whose objects stay."""

    runs: list[RunDir]
    known: dict[str, int | None]
    remaining: set[str]

    def merge(self, other: EngineFound) -> EngineFound:
        known = {**other.known, **self.known}
        return EngineFound(self.runs, known, self.remaining | other.remaining)


class Collector(Sweep):
    @property
    def driver(self) -> GcEngine:
        return self.ctx.driver

    def run(self) -> GcResult:
        found = self.engine_pass()
        if found is not None and self.host_pass(found):
            self.cached_images()
        return self.result

    def engine_pass(self) -> EngineFound | None:
        """This engine's containers, networks, volumes and images; what the host's part
        needs to know of it (None: the listing failed, every run directory is kept)."""
        runs_list = read_run_dirs(self.ctx.state_home, self.clock.now)
        selector = label_keys.home_selector(self.ctx.home_hash)
        try:
            raw = self.driver.list_labelled(selector)
            listing = parse_listing(raw, self.ctx.home_hash)
            images = parse_images(self.driver.list_labelled_images(selector), self.ctx.home_hash)
        except SbxError as error:
            kind = DOCKER_UNREACHABLE if error.reason is Reason.DOCKER_UNREACHABLE \
                else LIST_FAILED
            self._fail(kind, error.reason, f"listing this home's objects failed, nothing was "
                       f"removed: {error.message}")
            self._keep_all_run_dirs(runs_list, "listing_failed")
            return None
        except ListingInvalid as problem:
            self._fail(LIST_INVALID, Reason.CLEANUP_FAILED,
                       f"the engine's listing has an entry sbx cannot parse ({problem}); "
                       "nothing was removed")
            self._keep_all_run_dirs(runs_list, "listing_invalid")
            return None
        runs = {run.name: run for run in runs_list if run.real_dir}
        names = recorded_names(self.ctx.state_home, runs)
        listing = Listing(tuple(trust_names(c, names) for c in listing.containers),
                          tuple(trust_names(e, names) for e in listing.shared))
        images = tuple(trust_names(i, names) for i in images)
        remaining: set[str] = set()  # run ids of objects that stay
        containers = self._plan_containers(listing.containers, runs, remaining)
        shared = self._plan_shared(listing.shared, runs, remaining, {c.id for c in containers})
        self._remove("container", containers, remaining)
        self._remove_shared(shared, remaining)
        # Images only once their containers are gone: whoever still uses one keeps it.
        gone = {item.id for item in self.result.removed if item.kind == "container"}
        self._remove("image", self._plan_images(images, runs, remaining, gone), remaining)
        return EngineFound(runs_list, dict(known_runs(listing, images)), remaining)

    def host_pass(self, found: EngineFound) -> bool:
        """This machine's part (firewall rules, run directories, staging points), judged by
        what every engine keeps (``found``: their union); False when the rules could not be
        listed (then no run directory is removed)."""
        runs = {run.name: run for run in found.runs if run.real_dir}
        if not self._firewall_rules(runs, found.known, found.remaining):
            self._keep_all_run_dirs(found.runs, "firewall_listing_failed",
                                    "nothing shows which firewall rules are this home's")
            return False
        self._run_dirs(found.runs, found.remaining)
        self._orphan_staging({run.name for run in found.runs}, found.remaining)
        return True

    def cached_images(self) -> None:
        self._image_cache(self.image_idle_s)

    def _image_cache(self, idle_s: int) -> None:
        """Cached images (kit builds, assemblies, prepared images) nobody used within the
        grace: this home's use marks go, and an image no home marks goes with its cache tags
        (sbx.domain.sandbox.imagecache)."""
        home = self.ctx.home_hash
        try:  # only this home's images are inspected: the cost follows this home, not all
            images = self.driver.cached_images(
                [USE_REPOSITORY, *CACHE_REPOSITORIES],
                inspect=lambda ident, tags: marked_by(home, ident, tags))
        except SbxError as error:
            self._fail("cached_image_list_failed", error.reason,
                       f"listing the cached images failed, none was removed: {error.message}")
            return
        decisions = []
        for image in images:
            users = (self._users("image", image.id, None, set(), set())
                     if marked_by(home, image.id, image.tags) else 0)
            if users is None:
                continue
            decision = judge_cached(image, home_hash=home, now=self.clock.now,
                                    grace_s=idle_s, users=users)
            if decision.untag:
                decisions.append(decision)
            else:
                self.result.kept.append(GcItem("cached_image", image.id, None, decision.why,
                                               decision.detail))
        limit = self.limit()
        for index, decision in enumerate(removal_order(decisions)):
            item = GcItem("cached_image", decision.image_id, None, decision.why,
                          f"{decision.detail}; removes {', '.join(decision.untag)}")
            if index >= limit:
                self.result.deferred += 1
                self.result.kept.append(GcItem("cached_image", decision.image_id, None,
                                               "deferred", f"over this pass's limit of {limit}"))
                continue
            if self.dry_run:
                self.result.removed.append(item)
                continue
            self._untag(item, decision.untag)

    def _untag(self, item: GcItem, tags: Sequence[str]) -> None:
        for tag in tags:
            try:
                done = self.driver.untag_image(tag)
            except SbxError as error:
                self._fail("cached_image_remove_failed", Reason.CLEANUP_FAILED,
                           f"could not remove the tag {tag}: {error.message}", item.id)
                return
            if not done:  # a container or a child image took it meanwhile: kept
                self.result.kept.append(GcItem("cached_image", item.id, None, "in_use",
                                               f"the engine keeps {tag}: still in use"))
                return
        self.result.removed.append(item)

    # -- planning ------------------------------------------------------------------------

    def _admit(self, item: GcItem, removable: bool, planned: list[GcItem], limit: int,
               remaining: set[str]) -> None:
        """Plan a removable item while the pass has room; otherwise keep it (deferred when it
        was removable), and keep its run in ``remaining`` so its run directory stays too."""
        if removable and len(planned) < limit:
            planned.append(item)
            return
        if removable:
            item = GcItem(item.kind, item.id, item.run_id, "deferred",
                          f"over this pass's limit of {limit}; next gc ({item.detail})")
            self.result.deferred += 1
        self.result.kept.append(item)
        note_run(remaining, item.run_id)

    def _users(self, kind: str, ident: str, run_id: str | None, leaving: set[str],
               remaining: set[str]) -> int | None:
        """How many containers (other than those this pass removes) use the object; None when
        that cannot be checked (recorded as a failure; the object and its run are kept)."""
        try:
            return len(set(self.driver.object_users(kind, ident)) - leaving)
        except SbxError as error:
            self._fail(f"{kind}_remove_failed", error.reason,
                       f"could not check who uses {kind} {short_id(ident)}: {error.message}",
                       ident)
            note_run(remaining, run_id)
            return None

    def _plan_containers(self, entries: Sequence[ContainerEntry], runs: Mapping[str, RunDir],
                         remaining: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.limit()
        for entry in entries:
            remove, why, detail = judge_container(entry, runs, self.clock)
            item = GcItem("container", entry.id, entry.run_id, why, detail)
            self._admit(item, remove, planned, limit, remaining)
        return planned

    def _plan_shared(self, entries: Sequence[SharedEntry], runs: Mapping[str, RunDir],
                     remaining: set[str], leaving: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.limit()
        for entry in entries:
            candidate, why, detail = judge_shared(entry, runs, self.clock)
            if candidate:
                users = self._users(entry.kind, entry.id, entry.run_id, leaving, remaining)
                if users is None:
                    continue
                if users:
                    candidate, why = False, "in_use"
                    detail = f"used by {users} container(s)"
            item = GcItem(entry.kind, entry.id, entry.run_id, why, detail)
            self._admit(item, candidate, planned, limit, remaining)
        return planned

    def _plan_images(self, entries: Sequence[ImageEntry], runs: Mapping[str, RunDir],
                     remaining: set[str], gone: set[str]) -> list[GcItem]:
        planned: list[GcItem] = []
        limit = self.limit()
        for entry in entries:
            candidate, why, detail = judge_image(entry, runs, self.clock)
            if candidate:
                users = self._users("image", entry.id, entry.run_id, gone, remaining)
                if users is None:
                    continue
                if users:
                    candidate, why = False, "in_use"
                    detail = f"used by {users} container(s)"
            item = GcItem("image", entry.id, entry.run_id, why, detail)
            self._admit(item, candidate, planned, limit, remaining)
        return planned

    # -- removal -------------------------------------------------------------------------

    def _remove_shared(self, planned: list[GcItem], remaining: set[str]) -> None:
        # Networks before volumes, so a volume is never left for a network's sake; each kind
        # is confirmed by its own listing.
        self._remove("network", [i for i in planned if i.kind == "network"], remaining)
        self._remove("volume", [i for i in planned if i.kind == "volume"], remaining)

    def _remove(self, kind: str, planned: list[GcItem], remaining: set[str]) -> None:
        if self.dry_run:
            self.result.removed.extend(planned)
            return
        remover = {"container": self.driver.remove_container,
                   "network": self.driver.remove_network,
                   "volume": self.driver.remove_volume,
                   "image": self.driver.remove_image}[kind]
        for start in range(0, len(planned), self.batch):
            attempted: list[GcItem] = []
            for item in planned[start:start + self.batch]:
                if self._owner_now(item, remaining):
                    continue
                try:
                    remover(item.id)
                except SbxError as error:
                    self._fail(f"{kind}_remove_failed", Reason.CLEANUP_FAILED,
                               f"could not remove {kind} {item.short}: {error.message}", item.id)
                    note_run(remaining, item.run_id)
                    continue
                attempted.append(item)
            self._confirm(kind, attempted, remaining)

    def _confirm(self, kind: str, attempted: list[GcItem], remaining: set[str]) -> None:
        if not attempted:
            return
        try:
            still = self._present(kind, [item.id for item in attempted])
        except SbxError as error:
            for item in attempted:
                self._fail(f"{kind}_remove_failed", Reason.CLEANUP_FAILED,
                           f"could not confirm that {kind} {item.short} is gone: "
                           f"{error.message}", item.id)
                note_run(remaining, item.run_id)
            return
        for item in attempted:
            if item.id in still:
                self._fail(f"{kind}_remove_failed", Reason.CLEANUP_FAILED,
                           f"{kind} {item.short} is still present after its removal", item.id)
                note_run(remaining, item.run_id)
            else:
                self.result.removed.append(item)

    def _present(self, kind: str, idents: list[str]) -> set[str]:
        if kind != "image":
            return self.driver.present(kind, idents)
        # Images are confirmed with one listing of this home's images.
        listed = self.driver.list_labelled_images(label_keys.home_selector(self.ctx.home_hash))
        return {str(entry.get("Id")) for entry in listed if isinstance(entry, dict)} & set(idents)

