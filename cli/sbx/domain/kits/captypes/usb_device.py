"""``usb-device@1``: a USB device passed through to the sandbox, by vendor/product or class.

Descriptor side: exactly one of ``vendorId`` + ``productId`` or ``class``; merged on the exact
entry; on the surface as ``vendor:product`` or ``class:<c>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from sbx.domain.kits.captypes.base import CapabilityEntry, Handler, Merge, Out, merged, missing
from sbx.domain.kits.composed import canonical_config
from sbx.domain.kits.types import USB_DEVICE

if TYPE_CHECKING:
    from sbx.domain.kits.composed import ComposedParts, Origin
    from sbx.domain.kits.surfacetypes import Surface, Widening


class USBDevice(Handler):
    types = (USB_DEVICE,)
    refusal = ("no device passthrough on these engines: sbx never adds host devices to a "
               "sandbox (it would need --device and cgroup device rules the hardened shape "
               "forbids)")

    def check(self, entry: CapabilityEntry, config: Mapping[str, Any], kind: str | None,
              out: Out) -> None:
        vendor, product = "vendorId" in config, "productId" in config
        if (vendor or product) == ("class" in config):
            out.add(entry.at("config"), "declare either vendorId with productId, or class: not "
                                        "both and not neither")
        elif vendor != product:
            out.add(entry.at("config"), "vendorId and productId go together")

    def add(self, merge: Merge, origin: Origin, item: Mapping[str, Any],
            config: Mapping[str, Any], optional: bool) -> None:
        merge.collapse("usb", canonical_config(item.get("config")), origin, item, optional)

    def finish(self, merge: Merge, parts: dict[str, Any]) -> None:
        parts["usb"] = tuple(merged(k) for k in merge.table("usb").values())

    def effective(self, composition: ComposedParts) -> Iterable[tuple[str, Any, bool]]:
        for entry in composition.usb:
            yield entry.type, entry.config, entry.optional

    def project(self, ctype: str, config: Any, lists: dict[str, list[str]],
                flags: dict[str, bool]) -> bool:
        if not isinstance(config, Mapping):
            return False
        usb_class, vendor, product = (config.get("class"), config.get("vendorId"),
                                      config.get("productId"))
        if isinstance(usb_class, str) and usb_class:
            lists["usb"].append(f"class:{usb_class}")
        elif isinstance(vendor, str) and isinstance(product, str):
            lists["usb"].append(f"{vendor}:{product}")
        else:
            return False
        return True

    def widenings(self, granted: Surface, candidate: Surface) -> Iterator[Widening]:
        yield from missing("usb", granted.usb, candidate.usb)


HANDLER: Final = USBDevice()

__all__ = ["HANDLER", "USBDevice"]
