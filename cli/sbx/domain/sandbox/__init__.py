"""Planning a sandbox: hardening, mounts, capabilities, images, lifecycle, identity, credential
binding, run records, named-sandbox records."""
