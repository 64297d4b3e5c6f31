"""Run a bundle on this host. Takes a bundle directory; gives its pipeline's outputs (`pipeline_runner`),
its self-tests' verdicts (`self_test`) and per-operator times (`profiler`), through ExecuTorch's Python
runtime."""
