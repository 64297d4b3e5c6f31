"""Resolve and plan. Takes a `Project` and the `Toolchain` found here; gives `ResolvedModel`s (`resolve`),
then the frozen, JSON-serializable `BuildPlan` that build executes as is. Pure: imports no torch and
runs no model code."""
