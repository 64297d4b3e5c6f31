"""The torch side, in worker processes. Takes a `UnitPlan` and the manifest's folder; gives a program
(.pte or .tflite) and its `ProgramFacts` in a folder: load, inputs, quantize, export, lower, serialize,
verify against eager PyTorch, and the host runtimes that run programs here."""
