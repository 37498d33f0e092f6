"""The Docker driver, the only package that imports the docker SDK: one part per engine role
(images, distribution, containers, files, sessions, networks, inventory) on one shared client.

Everything sbx asks of the engine through the SDK goes through :class:`SdkEngine`, which returns
dataclasses and translates every SDK or transport exception into a reason-coded
:class:`~sbx.base.errors.SbxError` at one boundary (:func:`_engine_errors`). The SDK is imported
lazily inside the factory so that ``sbx --help`` and ``sbx explain`` never pay for it.

A local engine's hot-path calls are made by :class:`sbx.seams.enginesocket.SocketEngine` (a
subclass speaking the socket directly); :mod:`sbx.seams.transports` picks the class once, where
the engine is opened. The values and the role protocols live in :mod:`sbx.seams.engine`.

Two SDK conveniences are avoided on purpose: ``containers.run`` (it pulls a missing image — sbx
never pulls at run time) and ``auto_remove`` (sbx needs the exit status before removal and removes
explicitly on every path).
"""

from __future__ import annotations

from sbx.seams.driver.containers import SdkContainers
from sbx.seams.driver.distribution import SdkDistribution
from sbx.seams.driver.files import SdkFiles
from sbx.seams.driver.images import SdkImages
from sbx.seams.driver.inventory import SdkInventory
from sbx.seams.driver.networks import SdkNetworks
from sbx.seams.driver.sessions import SdkSessions
from sbx.seams.engine import Driver


class SdkEngine(SdkInventory, SdkDistribution, SdkImages, SdkContainers, SdkFiles, SdkSessions,
                SdkNetworks, Driver):
    """Every role through the docker SDK: the transport for engines sbx's own client does not
    speak, and the base of those it does (:mod:`sbx.seams.transports` chooses)."""


__all__ = ["SdkEngine"]
