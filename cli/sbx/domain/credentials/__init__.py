"""The secret store and OAuth tokens on the host."""
