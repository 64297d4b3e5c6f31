"""Embed passages with a built embedding program, through the ExecuTorch runtime (not eager PyTorch),
so that the index holds exactly what the device computes for queries.
Usage: python -m deployc.packaging.embed_worker PROGRAM TOKENIZER_JSON MAX_TOKENS PAD_TO TEXTS_JSON OUT_NPY
(PAD_TO 0: no padding; else every text is padded to that many tokens, for a static-length program)
   or: python -m deployc.packaging.embed_worker --images PROGRAM STEPS_JSON FILES_JSON OUT_NPY
(each image file prepared by the image stage's steps, as `deployc run` and the native runner do)
   or: python -m deployc.packaging.embed_worker --eager LOAD_JSON FOLDER TOKENIZER_JSON MAX_TOKENS PAD_TO
       TEXTS_JSON OUT_NPY
(eager fp32 PyTorch instead of a program: the model as the plan's LoadModel step loads it from FOLDER, the
reference an index's query set is judged against)
Prints `progress I N` after each tenth of the texts and `embedded N in SECONDS` last (timed after
loading), so the build can show progress and report chunks per second.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    import numpy as np
    import torch

    from deployc.graph.host_runtime import load_any
    from deployc.pipeline.host.tokenizers import encode, load_tokenizer

    eager: Any = None
    if argv[0] == "--images":
        from deployc.pipeline.host.images import prepare_image

        program, steps_path, files_path, out_path = argv[1:]
        steps = json.loads(Path(steps_path).read_text())
        items = json.loads(Path(files_path).read_text())

        def prepare(item: str) -> list[torch.Tensor]:
            return [torch.from_numpy(prepare_image(Path(item).read_bytes(), steps))]
    else:
        if argv[0] == "--eager":
            from deployc.graph.model import load_model
            from deployc.plan.build_plan import LoadModel

            load = LoadModel.model_validate_json(Path(argv[1]).read_text())
            eager = load_model(load, Path(argv[2])).eval()
            argv = ["-", *argv[3:]]
        program, tokenizer, max_tokens, pad_to, texts_path, out_path = argv
        tk = load_tokenizer(Path(tokenizer), int(max_tokens))
        items = json.loads(Path(texts_path).read_text())

        def prepare(item: str) -> list[torch.Tensor]:
            ids, mask = encode(tk, item, int(pad_to))
            return [torch.from_numpy(ids), torch.from_numpy(mask)]
    method = load_any(Path(program)).load_method("forward") if program != "-" else None
    vectors = []
    start = time.perf_counter()
    texts = items
    step = max(1, len(texts) // 10)
    for i, text in enumerate(texts, 1):
        if method is None:
            with torch.no_grad():
                result = eager(*prepare(text))
            out = result[0] if isinstance(result, (tuple, list)) else result
        else:
            out = method(prepare(text))[0]
        vectors.append(out.detach().numpy().reshape(-1).astype(np.float32))
        if i % step == 0 and i < len(texts):
            print(f"progress {i} {len(texts)}", flush=True)
    print(f"embedded {len(vectors)} in {time.perf_counter() - start:.6f}")
    np.save(out_path, np.stack(vectors))
    return 0


if __name__ == "__main__":
    from deployc.graph.host_runtime import take_niceness

    take_niceness()  # before torch starts any thread
    sys.exit(main(sys.argv[1:]))
