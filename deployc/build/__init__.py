"""Build a plan's programs. Takes a `BuildPlan`; gives a judged `UnitResult` per unit through the
content-addressed cache (`cache`), the executors that run `graph` in workers (local, Ray), and the
arm64 and ETRecord passes over built programs."""
