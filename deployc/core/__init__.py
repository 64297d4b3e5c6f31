"""The building blocks every stage shares. Takes nothing from other stages; gives errors and diagnostics,
frozen records, digests, atomic writes, YAML with locations, the quantization vocabulary, and the records
later stages hand each other (program facts, profiles). No torch at module level."""
