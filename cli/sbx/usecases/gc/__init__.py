"""`sbx gc`: remove what crashed or killed runs left behind, by label only (SPEC §2.5).

The algorithm follows DuDuClaw's sweep (PEERS A.7), with sbx's additions (run records with pids,
proxies, networks, volumes, per-run images and host firewall rules). In order:

1. **Skip** a state home that never ran a sandbox (no ``runs/`` directory and no audit log)
   without contacting the engine: cron on a fresh machine costs nothing.
2. **Lock** ``<state>/gc.lock`` with a non-blocking ``flock``; when another gc holds it, do
   nothing and exit 0 (a dry run reads only and takes no lock).
3. **List** containers (all states), networks, volumes and images (all, untagged included)
   labelled with this home's hash, and parse every entry strictly. A failed listing or one
   entry that does not parse means **nothing is deleted** — not even run directories — and the
   failure is reported and audited.
4. **Decide** per object (pure functions, unit-tested on their own). Whatever its state, an
   object whose run's owner is alive (it holds ``runs/<id>/owner.lock``, taken before the run
   creates anything) is never touched; the lock is looked at again right before each removal,
   so a run that started after gc read its run directories is seen too.

   - a container is removed when it is ``exited``/``dead``; or when its deadline label is more
     than the grace in the past; or when it is ``created`` (never started) and the sbx process
     recorded in its run directory is gone (*abandoned*). A missing or unreadable deadline is
     **never guessed**: the container is kept and reported. Every other container is kept: a
     live run is never touched inside its deadline + grace. A running container whose sbx was
     killed is removed once its deadline + grace has passed (the deadline is the backstop);
   - a network or volume is removed when no container uses it (other than containers removed
     in the same pass) and its run is over: its deadline + grace has passed, or its run
     directory records an sbx process that is gone. Without a readable deadline it is kept and
     reported;
   - a per-run image (``sbx-run/<run id>:1``, committed by the create step with the run's
     labels) is removed by the same rule as a network or volume once no container uses it
     (judged after this pass's containers are gone). An image of this home tagged with anything
     else than its run's ``sbx-run/`` name is never removed;
   - a host firewall rule (INPUT, commented ``sbx-run-<run id>``) is removed only when its run
     is **known to this home** (a run directory, or a labelled object of this home, carries
     that id) and that run is not live and over: its deadline + grace passed, its recorded sbx
     process is gone, or the bridge the rule names no longer exists. Rules of any other run are
     never touched (another home may own them). Without iptables or root the rules are not
     checked (a note under ``-v``/``--json``, never a failure); a rule listing that fails or
     has one line that does not parse removes no rule and keeps every run directory (they are
     what tells a later pass which rules are this home's);
   - a run directory (``runs/<32 hex>``, a real directory, never a symlink; other entries are
     never touched) is removed when no remaining object (a firewall rule included) carries its
     run id, the process it records is gone, and it is older than the grace. A record that
     cannot be read makes it wait at least :data:`UNREADABLE_RECORD_FLOOR_S` whatever the
     grace, because a starting run writes it a moment after creating the directory;
   - a proxy process recorded in a run directory (``proxy_pid``) is stopped before that
     directory is removed, and only if it is alive **and** its ``/proc/<pid>/cmdline`` contains
     the run id: an unrelated process that reused the pid is never signalled.

5. **Remove** in batches of ``[gc] batch_size`` (at most :data:`MAX_BATCHES` per invocation;
   the rest is deferred to the next one), confirming after each batch, with one listing, that
   every removed object is gone. Failures are audited as ``cleanup_failed {reason, count}``.
"""

