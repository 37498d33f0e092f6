"""The image cache: kit builds, assemblies, prepared and installed images, and who last used
them.

These images are named by their content (``sbx-kit/…``, ``sbx-assembled/…``, ``sbx-prep/…``,
``sbx-installed/…``: sbx.domain.sandbox.installcache)
and shared by every state home on an engine, so no label can say who needs one. A home marks
every cached image it creates, and every one a run of it uses, with a tag of its own,
``sbx-use/<home hash>:<image id>``; tagging also sets the engine's ``LastTagTime``, which is
thereby the image's last use by anyone. ``sbx gc`` of a home touches only images that home
marks (it created them or used them; the pure decisions below):

1. drops its home's mark from an image no container uses and nobody used within the grace
   (an untag, never a deletion), when another home still marks it;
2. removes the cache tags, then its mark, of an image that only its home marks, that carries
   nothing but cache tags (a tag a user added keeps it), that no container uses and that
   nobody tagged within the grace. The engine deletes the image with its last tag, and refuses
   while a container or a child image still uses it: the mark then stays, and a later gc
   tries again.

An image no home marks (built before homes marked their builds, or whose homes dropped their
marks at the same moment) is never removed by gc: ``docker rmi`` it. A run of another home
that starts using an image between gc's listing and its removal keeps the image (its own
mark stays) and at worst loses the cache tag: its next run rebuilds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sbx.seams.engine import CachedImage, ImageInfo, Images

USE_REPOSITORY: Final = "sbx-use/"
CACHE_REPOSITORIES: Final = ("sbx-kit/", "sbx-assembled/", "sbx-prep/", "sbx-installed/")
RUN_REPOSITORY: Final = "sbx-run/"  # a run's own image (sbx.usecases.gc.listing)
HOME_DIGITS: Final = 16
ID_DIGITS: Final = 24


def use_tag(home_hash: str, image_id: str) -> str:
    """This home's use tag of an image."""
    digits = image_id.removeprefix("sha256:")[:ID_DIGITS]
    return f"{USE_REPOSITORY}{home_hash[:HOME_DIGITS]}:{digits}"


def marked_by(home_hash: str, image_id: str, tags: Iterable[str]) -> bool:
    """The image carries this home's use tag: only then is it this home's to judge."""
    return use_tag(home_hash, image_id) in tags


def is_cached(tags: Iterable[str]) -> bool:
    """The image carries a cache tag (it is one of sbx's cached images)."""
    return any(tag.startswith(CACHE_REPOSITORIES) for tag in tags)


def record_use(driver: Images, home_hash: str, images: Iterable[ImageInfo]) -> None:
    """Mark the cached images a run uses (plain images of the user's are left alone)."""
    seen: set[str] = set()
    for image in images:
        if image.id in seen or not is_cached(image.tags):
            continue
        seen.add(image.id)
        driver.tag_image(image.id, use_tag(home_hash, image.id))


@dataclass(frozen=True)
class CacheDecision:
    """What gc does with one cached image: the tags to remove, in order, and why."""
    image_id: str
    untag: tuple[str, ...]
    why: str
    detail: str


def judge_cached(image: CachedImage, *, home_hash: str, now: float, grace_s: int,
                 users: int) -> CacheDecision:
    """The decision for one cached image (``users``: containers that use it)."""
    mine = use_tag(home_hash, image.id)
    marks = [tag for tag in image.tags if tag.startswith(USE_REPOSITORY)]
    if mine not in marks:
        # Another home built it or marks it, or none does: never this home's to remove.
        return CacheDecision(image.id, (), "not_this_home",
                             "this state home neither built nor marks it")
    if users:
        return CacheDecision(image.id, (), "in_use", f"used by {users} container(s)")
    if image.last_tagged is None:
        return CacheDecision(image.id, (), "last_use_unknown",
                             "the engine does not say when it was last used")
    idle = now - image.last_tagged
    if idle < grace_s:
        return CacheDecision(image.id, (), "recently_used",
                             f"last used {int(idle)}s ago (grace {grace_s}s)")
    others = [tag for tag in marks if tag != mine]
    if others:
        # Another home still marks it: only this home's mark goes.
        return CacheDecision(image.id, (mine,), "used_by_another_home",
                             f"{len(others)} other home(s) mark it")
    # A run's tag on a cached image (sbx-installed/: a run that reused it) left by a run that
    # died: no container uses the image, and the tag is older than the grace, so it goes too.
    foreign = [tag for tag in image.tags
               if not tag.startswith((USE_REPOSITORY, RUN_REPOSITORY, *CACHE_REPOSITORIES))]
    if foreign:
        return CacheDecision(image.id, (mine,), "foreign_tag",
                             f"also tagged {foreign[0]}; sbx removes only its own tags")
    cache_tags = tuple(tag for tag in image.tags
                       if tag.startswith((RUN_REPOSITORY, *CACHE_REPOSITORIES)))
    # The mark goes last: if the engine keeps the image (a child image, a container that
    # appeared), it is still this home's and a later gc retries.
    return CacheDecision(image.id, (*cache_tags, mine), "unused",
                         f"unused for {int(idle)}s")


def removal_order(decisions: Sequence[CacheDecision]) -> list[CacheDecision]:
    """Installed images before prepared images before assemblies before kit builds: a child
    image goes first, so its parent is no longer held when its own turn comes."""
    rank = {"sbx-installed/": 0, "sbx-prep/": 1, "sbx-assembled/": 2, "sbx-kit/": 3}

    def key(decision: CacheDecision) -> int:
        ranks = [rank[prefix] for tag in decision.untag for prefix in rank
                 if tag.startswith(prefix)]
        return min(ranks, default=len(rank))

    return sorted(decisions, key=key)


__all__ = ["CACHE_REPOSITORIES", "USE_REPOSITORY", "CacheDecision", "is_cached", "judge_cached",
           "record_use", "removal_order", "use_tag"]
