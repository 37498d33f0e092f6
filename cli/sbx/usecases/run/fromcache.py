"""The planner's inputs from a recipe the plan cache kept (sbx.usecases.plancache).

Made again, each run, by the same planner as a full plan (sbx.usecases.run.plan): the host
platform; the engine's requirements (it may have been switched, e.g. to a rootless one); the
kits' recorded approvals against what the recipe's kits ask for; the image, by id, still present
(and marked for gc); the workspace and every ``--mount`` through the mount policy, opened and
scanned for sockets, with the git pins of a writable workspace; the workspace's owner (the user
was chosen with it: a change means a full plan); ``-e``/``--env-file`` and the terminal
variables; the session mode; the run's id, labels and deadline; the spec and its hardening
check. Not made again, because the key covers every input they read: the config's decoding and
validation, the kits' decoding, validation, resolution and composition, the capability plan,
the image build, the user from the image.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sbx.domain.kits.surfacetypes import Surface
from sbx.domain.sandbox.admission import Admission, HostPath
from sbx.domain.sandbox.identity import WorkspaceOwner
from sbx.domain.sandbox.imagecache import record_use, use_tag
from sbx.domain.sandbox.images import SandboxUser
from sbx.domain.sandbox.kitpins import KitFiles
from sbx.domain.sandbox.requirements import check_engine, check_host
from sbx.domain.sandbox.runtimes import check_runtime
from sbx.seams.engine import ImageInfo
from sbx.usecases.context import AppContext
from sbx.usecases.run.plan import Decided, RunPlan, owner_key, plan
from sbx.usecases.run.recipe import Recipe
from sbx.usecases.run.request import RunRequest


def prepare_cached(ctx: AppContext, request: RunRequest, run_id: str,
                   recipe: Recipe) -> RunPlan | None:
    """The plan of a cached recipe, with every check that depends on this moment made again;
    None when the full plan must be made instead."""
    check_host(os.name)
    if not recipe_approved(ctx.state_home, recipe):
        return None  # the full plan runs the kits' permission gate (it asks or refuses)
    return plan(ctx, request, run_id, FromCache(recipe))


class FromCache:
    """The planner's inputs (sbx.usecases.run.plan.PlanInputs) from a cached recipe. It holds
    no credential (plancache.cacheable), so no sentinel variables, and no privilege."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self._images: list[ImageInfo] = []

    @property
    def blocked(self) -> Sequence[str]:
        return self.recipe.blocked

    @property
    def allowed_roots(self) -> Sequence[str]:
        return self.recipe.allowed_roots

    @property
    def timeout_s(self) -> float:
        return self.recipe.timeout_s

    @property
    def kits(self) -> Sequence[str]:
        return self.recipe.facts.kits

    def engine(self, ctx: AppContext, run_id: str, labels: Mapping[str, str]) -> bool:
        """The engine's requirements, and every image of the recipe still there by its id."""
        driver = ctx.driver
        info = driver.info()
        check_engine(info)
        check_runtime(info, self.recipe.runtime_choice)  # the engine may have lost it since
        images = []
        for image_id in dict.fromkeys(self.recipe.images_used):
            found = driver.image(image_id)
            if found is None or found.id != image_id:
                return False  # gone (gc, docker rmi): the full plan builds it again
            images.append(found)
        record_use(driver, ctx.home_hash,
                   [i for i in images if use_tag(ctx.home_hash, i.id) not in i.tags])
        self._images = images
        return True

    @property
    def workspace_target(self) -> str:
        return self.recipe.workspace_target

    @property
    def credential_names(self) -> frozenset[str]:
        return frozenset()

    @property
    def kit_files(self) -> Sequence[KitFiles]:
        return tuple(KitFiles.from_json(kit) for kit in self.recipe.kit_files)

    def kit_mounts(self, ctx: AppContext, taken: Sequence[str]
                   ) -> tuple[Sequence[HostPath], set[str]]:
        return (), set()  # a plan with host directories is never cached

    def user(self, owner: WorkspaceOwner | None,
             ) -> tuple[SandboxUser, tuple[str, ...]] | None:
        recipe = self.recipe
        if owner_key(owner) != recipe.owner:
            return None  # the user was chosen with another owner or mode: plan it again
        return SandboxUser(recipe.uid, recipe.gid, recipe.user_source), recipe.user_warnings

    def decide(self, ctx: AppContext, request: RunRequest, run_id: str, admission: Admission,
               labels: Mapping[str, str]) -> Decided:
        """The recipe as it is, with the labels the engine has for its image now."""
        image_id = self.recipe.image.id
        return Decided(self.recipe, next((i.labels for i in self._images if i.id == image_id),
                                         {}))


def recipe_approved(state_home: Path, recipe: Recipe) -> bool:
    """Whether the kits' recorded approvals still cover what a cached plan's kits ask for
    (they may have changed since the plan was cached: a narrowing is recorded, and going back
    to the cached kit is then a widening that must be asked for)."""
    if not any(kit.get("permissions") for kit in recipe.kit_surfaces):
        return True  # they ask for nothing (an empty surface has no fields)
    # deferred: the approvals store and the surfaces' comparison, for kits that ask for some
    from sbx.domain.kits.approvals import covered

    return covered(state_home, [(str(kit["path"]), str(kit["descriptor"]),
                                 Surface.from_json(kit["permissions"]))
                                for kit in recipe.kit_surfaces])


__all__ = ["FromCache", "prepare_cached", "recipe_approved"]
