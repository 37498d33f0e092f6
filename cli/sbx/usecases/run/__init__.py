"""`sbx run`: the request, the one planner (its inputs from the kits or from the plan cache),
the terminal session (shared with attach and exec), the network, the execution and its cleanup.

`sbx run`: check everything, build, run one hardened sandbox, and always clean up.

Order (SPEC §2.1): the pipeline's first stage (config, kits: strict, args, selection,
resolution) → the run's own arguments (access, session, workspace, mounts) → the pipeline's
second stage (engine, image, effective kits, capabilities, credentials: sbx.usecases.pipeline,
the planning `sbx explain` and `sbx doctor` report) → the host side (mount checks, user, HOME,
command, spec) → create → start → stream → wait/timeout → remove. Nothing is created before
every check passed; once something is created, the ``finally`` of
:func:`sbx.usecases.run.execute.execute` removes it on every path. What a hard kill leaves
behind is ``sbx gc``'s job, found by the labels every object carries.

The modules, each importing only those before it:

- :mod:`.request`: what a run is asked (:class:`~.request.RunRequest`) and its own checks;
- :mod:`.recipe`: what planning decided that holds for every run of the same request, which the
  plan cache (sbx.usecases.plancache) stores;
- :mod:`.plan`: the one planner: this moment's checks, the admission, the container spec;
- :mod:`.fromkits` and :mod:`.fromcache`: the planner's inputs, from the kits (a full plan) or
  from a cached recipe;
- :mod:`.session`: the terminal session, shared with ``sbx attach`` and ``sbx exec``;
- :mod:`.rundir`, :mod:`.network`, :mod:`.createstep`, :mod:`.cleanup`, :mod:`.execute`: what a
  run creates, and its removal; :mod:`.result`: what it reports;
- :mod:`.start`: a one-shot run from request to result, fully planned or from the cache;
  :mod:`.entry`: ``sbx run``'s choice between that and a named sandbox (sbx.usecases.named).
"""
