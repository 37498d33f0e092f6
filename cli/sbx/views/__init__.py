"""Per-command output: each function prints one use case's result through the renderer's
primitives (human lines or the JSON envelope)."""
