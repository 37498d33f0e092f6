"""The one registry of reason codes and exit statuses.

Every refusal or failure sbx reports carries a :class:`Reason`. Its title, cause, fix and exit
status live here and nowhere else: errors, ``sbx explain REASON``, the man page and the tests all
read this table.
"""

from __future__ import annotations

from sbx.base.reasons import egress, failures, hosts, refusals
from sbx.base.reasons.codes import (
    REGISTRY,
    DetailInfo,
    EgressCode,
    ExitStatus,
    Reason,
    ReasonInfo,
)
from sbx.base.reasons.details import DETAILS

# In the order `sbx explain` and the man page list them.
REGISTRY.update({**refusals.ENTRIES, **failures.ENTRIES, **egress.ENTRIES, **hosts.ENTRIES})

__all__ = ["DETAILS", "REGISTRY", "DetailInfo", "EgressCode", "ExitStatus", "Reason",
           "ReasonInfo"]
