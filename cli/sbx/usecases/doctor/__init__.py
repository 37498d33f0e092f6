"""`sbx doctor`: preflight checks, each with a status, a reason code and a fix (SPEC §2.2).

Every check is a :class:`Check` in :data:`CHECKS`: an id, a title and a function from the shared
:class:`DoctorState` to a :class:`Verdict`. More checks (images/kits, egress, credentials) are
added by appending to the table. Each check runs in its own daemon thread with its own timeout,
so a hung engine makes *that* check fail (``docker_unreachable``, "timed out") and doctor itself
always finishes; checks that need the engine report at once when the engine check did not pass.

Doctor starts nothing it does not remove again: the limit probe is one tiny container (labelled
``role=helper`` for this state home, with a run directory recording doctor's pid), removed in a
``finally``; should doctor itself be killed meanwhile, ``sbx gc`` finds it like any run.
"""
