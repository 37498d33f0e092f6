"""One module per user action (run, explain, doctor, pull, gc, named sandboxes, kit
push/init/validate, secrets, config), the shared planning pipeline and the per-invocation
AppContext."""
