"""Named sandboxes: created once, started, attached, stopped and removed by name.

``sbx run --name NAME WORKLOAD ...`` creates the sandbox when it does not exist (the same
preparation, checks and hardened shape as a one-shot run: :func:`sbx.usecases.run.start.run_new`)
and keeps it afterwards; when it exists, it is started (if stopped) exactly as it was created and
attached. Options that only make sense at creation (kits, args, workspace, mounts, user, limits,
environment) are refused on a later run, naming the option, never silently ignored.

What persists across stop/start: HOME (a volume of its own: as root a file system of
``[sandbox] home_bytes``, else a Docker volume the engine cannot bound — said in ``sbx ls``),
the ``volume@1`` volumes, the workspace (the host's). The root file system stays read-only and
the container is the same hardened container on every start. Its egress proxy is owned by a
detached keeper (sbx.usecases.keeper) and stops with the sandbox. On every start the host paths it
mounts are checked and opened again (and, as root, staged again at the same points), so a
path swapped while the sandbox was stopped is caught like at creation.
"""
