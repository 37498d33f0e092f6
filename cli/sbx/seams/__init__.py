"""What touches the outside: the engine (the only `import docker`), the registry, port
forwarder, keyrings, locks, state files, signals, the terminal session."""
