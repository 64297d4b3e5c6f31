"""Apply a plan. Takes a `BuildPlan` (made now, or saved and re-hashed); gives a `BuildReport`: programs
built and judged, assets made, bundles packaged, in that order. Never sees the manifest."""
