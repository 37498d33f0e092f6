"""The egress boundary: policy decisions, the egress plan, the proxy's config, CA and OAuth answers.

The egress boundary (SPEC §8).

``sbx.domain.egress.policy`` holds the one decision both the egress proxy (enforcement) and ``sbx
explain`` (explanation) call. This package module imports nothing, so a sibling module can be
imported without pulling in the kit composition.
"""

from __future__ import annotations
