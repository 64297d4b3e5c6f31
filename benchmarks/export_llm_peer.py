"""ExecuTorch's own LLM export of SmolLM2-135M-Instruct's GGUF weights: the peer program of llm_bench.py.

    .venv/bin/python benchmarks/export_llm_peer.py [--out dist/export_llm]

1. The GGUF file's tensors dequantized as llama.cpp does (deployc's reader), under the names of ExecuTorch's
   Llama (examples/models/llama). No permutation: llama.cpp's converter stores q and k with each head's rotary
   halves interleaved, which is Meta's layout and the one ExecuTorch's Llama rotates by. The tied output
   layer is the embedding table, as ExecuTorch's SmolLM2 converter writes it.
2. params.json from the file's metadata.
3. `python -m executorch.extension.llm.export.export_llm` with the options of ExecuTorch's and
   optimum-executorch's recipes for this model on XNNPACK: KV cache with the custom SDPA, dynamic shape,
   8da4w linears in groups of 32, 4-bit embedding in groups of 32, a context of 512.

Prints the export's wall time and peak resident memory (the largest process it ran), the figures
llm_bench.py's build side compares with deployc's build of manifests/smollm2.yaml.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from llm_bench import gguf_path  # noqa: E402  - llm_bench puts the repository on the path

CONTEXT = 512
_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")
_LAYER_NAMES = {
    "attn_norm.weight": "attention_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "attn_q.weight": "attention.wq.weight", "attn_k.weight": "attention.wk.weight",
    "attn_v.weight": "attention.wv.weight", "attn_output.weight": "attention.wo.weight",
    "ffn_gate.weight": "feed_forward.w1.weight", "ffn_down.weight": "feed_forward.w2.weight",
    "ffn_up.weight": "feed_forward.w3.weight",
}
_TOP_NAMES = {"token_embd.weight": "tok_embeddings.weight", "output_norm.weight": "norm.weight",
              "output.weight": "output.weight"}


def meta_name(gguf_name: str) -> str:
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    m = _LAYER.match(gguf_name)
    if not m or m.group(2) not in _LAYER_NAMES:
        sys.exit(f"{gguf_name}: no place in ExecuTorch's Llama")
    return f"layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"


def write_checkpoint(gguf: Path, out: Path) -> tuple[Path, Path]:
    import torch

    from deployc.core.gguf import read, read_tensor
    from deployc.core.gguf_model import hf_config

    f = read(gguf)
    c = hf_config(f)
    state = {meta_name(t.name): torch.from_numpy(read_tensor(f, t).copy()) for t in f.tensors}
    state.setdefault("output.weight", state["tok_embeddings.weight"])
    params = {"dim": c["hidden_size"], "n_layers": c["num_hidden_layers"], "n_heads": c["num_attention_heads"],
              "n_kv_heads": c["num_key_value_heads"], "vocab_size": c["vocab_size"],
              "hidden_dim": c["intermediate_size"], "norm_eps": c["rms_norm_eps"],
              "rope_theta": c["rope_theta"], "use_scaled_rope": False}
    checkpoint, params_file = out / "smollm2.pth", out / "params.json"
    torch.save(state, checkpoint)
    params_file.write_text(json.dumps(params, indent=1))
    return checkpoint, params_file


def check_mapping(gguf: Path, checkpoint: Path, params: Path) -> float:
    """The largest difference between ExecuTorch's Llama on the checkpoint and deployc's decoder on the file,
    both eager in float32, over the last position's logits of a prompt: the names and the rotary layout are
    right when it is float rounding."""
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    from deployc.core.gguf import read
    from deployc.core.gguf_model import hf_config, state_dict
    from deployc.graph.decoder import decoder_from_weights

    theirs = construct_transformer(ModelArgs(**json.loads(params.read_text()), max_seq_len=64, max_context_len=64))
    theirs.load_state_dict(torch.load(checkpoint), strict=True)
    f = read(gguf)
    ours = decoder_from_weights(hf_config(f), {k: torch.from_numpy(v.copy()) for k, v in state_dict(f).items()},
                                64, str(gguf))
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 28, 2373, 314, 3601, 30, 1, 9690, 26]])
    with torch.no_grad():
        a = theirs.eval()(ids)
        b = ours(ids, torch.arange(ids.shape[1]))
    a = (a[0] if isinstance(a, tuple) else a).reshape(-1, b.shape[-1])[-1]
    return float((a - b[0]).abs().max())


def export(checkpoint: Path, params: Path, out: Path) -> tuple[Path, float, float]:
    """(the .pte, wall seconds, peak RSS in GB of the largest process)."""
    command = [
        sys.executable, "-m", "executorch.extension.llm.export.export_llm",
        "base.model_class=smollm2", f"base.checkpoint={checkpoint}", f"base.params={params}",
        'base.metadata="{\\"get_bos_id\\":1,\\"get_eos_ids\\":[2]}"',
        "model.use_kv_cache=True", "model.use_sdpa_with_kv_cache=True", "model.enable_dynamic_shape=True",
        "backend.xnnpack.enabled=True", "quantization.qmode=8da4w", "quantization.group_size=32",
        'quantization.embedding_quantize="4,32"',
        f"export.max_seq_length={CONTEXT}", f"export.max_context_length={CONTEXT}",
        f"export.output_dir={out}", "export.output_name=smollm2_export_llm.pte",
    ]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=out, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (out / "export_llm.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"export_llm failed (exit {proc.returncode}); its output: {out / 'export_llm.log'}")
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6  # KiB on Linux
    return out / "smollm2_export_llm.pte", wall, peak_gb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "dist" / "export_llm")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint, params = write_checkpoint(gguf_path(), args.out)
    difference = check_mapping(gguf_path(), checkpoint, params)
    print(f"ExecuTorch's Llama on the checkpoint vs deployc's decoder on the file, eager fp32: logits differ by "
          f"at most {difference:.2e}")
    if difference > 1e-3:
        sys.exit("the checkpoint does not compute the file's model: its names or rotary layout are wrong")
    program, wall, peak = export(checkpoint.resolve(), params.resolve(), args.out.resolve())
    print(f"export_llm: {program} ({program.stat().st_size / 1e6:.1f} MB) in {wall:.0f} s, peak RSS {peak:.2f} GB")


if __name__ == "__main__":
    main()
