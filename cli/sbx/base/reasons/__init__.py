"""The one registry of reason codes and exit statuses.

Every refusal or failure sbx reports carries a :class:`Reason`. Its title, cause, fix and exit
status live here and nowhere else: errors, ``sbx explain REASON``, the man page and the tests all
read this table.
"""

from __future__ import annotations

from typing import Final

from sbx.base.reasons import egress, failures, hosts, refusals
from sbx.base.reasons.codes import DetailInfo, EgressCode, ExitStatus, Reason, ReasonInfo
from sbx.base.reasons.details import DETAILS

# One table, in the order `sbx explain` and the man page list it.
REGISTRY: Final[dict[Reason, ReasonInfo]] = {
    **refusals.ENTRIES, **failures.ENTRIES, **egress.ENTRIES, **hosts.ENTRIES}

__all__ = ["DETAILS", "REGISTRY", "DetailInfo", "EgressCode", "ExitStatus", "Reason",
           "ReasonInfo"]
