"""Run one program of a bundle with ExecuTorch's event tracer on, in its own process (a runtime crash ends
only it), and write the ETDump:
    python -m deployc.runtime.profile_worker PROGRAM DATA_OR_- VECTORS CASE METHOD RUNS ETDUMP

The inputs are case CASE of the program's self-test vectors. One warm-up call, then RUNS timed calls;
prints each call's wall time in ms, one per line (`call MS`), the warm-up's first.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from deployc.core import self_test_vectors
    from deployc.graph.host_runtime import load_program

    program_path, data, vectors, case, method_name, runs, etdump = argv
    import torch

    case_doc = self_test_vectors.read(Path(vectors))[int(case)]
    inputs = [torch.as_tensor(self_test_vectors.decode_tensor(t)) for t in case_doc["inputs"]]
    program = load_program(Path(program_path), None if data == "-" else Path(data), etdump=True)
    method = program.load_method(method_name)
    for _ in range(1 + int(runs)):
        t = time.perf_counter()
        method(list(inputs))
        print(f"call {(time.perf_counter() - t) * 1000.0:.6f}", flush=True)
    program.write_etdump_result_to_file(etdump, etdump + ".debug")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
