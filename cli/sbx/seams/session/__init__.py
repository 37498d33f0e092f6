"""The interactive session between the user's terminal and a sandbox: the engine's attach
stream, stdin forwarding, the host terminal, detach keys and the output frames."""
