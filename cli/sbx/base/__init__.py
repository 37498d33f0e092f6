"""What every layer shares: reason codes, errors, config, paths, labels, the renderer's
primitives (the only `import rich`)."""
