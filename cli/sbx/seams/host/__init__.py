"""What sbx does to its host: processes (the only `import subprocess`) and the programs'
start/ready handshake, mounts and staging, the firewall, private files, path lookups, the
password database's homes, shell commands, the host's git identity, /proc.

What sbx does to the host it runs on, each job in one module: starting processes
(:mod:`~sbx.seams.host.processes`, the package's only ``subprocess``), the programs' start/ready
exchange (:mod:`~sbx.seams.host.handshake`), mounts and staging, the firewall, private files,
what is at a path (:mod:`~sbx.seams.host.lookup`), entries below a directory held open
(:mod:`~sbx.seams.host.dirfds`), the homes in the password database
(:mod:`~sbx.seams.host.accounts`), shell commands, the host's git identity and reading
``/proc``. The layers above decide; these
modules only do."""
