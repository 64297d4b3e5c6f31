"""Package. Takes a `BuildPlan` and its `UnitResult`s; gives assets (tokenizers, indexes), bundle directories
with runtime.bin/json and bundle.lock.json, deterministic archives, and reads bundles back (inspect, diff,
the HTML report)."""
