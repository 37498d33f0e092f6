"""The decisions, with no I/O of their own: planning a sandbox, the egress boundary, kits and
credentials."""
