"""Kit descriptors: decoding, rules, args, composition, resolution, lock."""
