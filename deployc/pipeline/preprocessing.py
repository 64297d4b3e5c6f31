"""Image and audio stages resolved into the steps the runtime config declares: the manifest's fields,
with the ones left out taken from a Hugging Face `preprocessor_config.json`. Pure Python (reads JSON);
validate reports the problems, the planner writes the steps into the bundle's pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployc.load.manifest import AudioStage, ImageStage

# PIL's resampling codes, as transformers writes them into preprocessor configs.
_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
Problem = tuple[str, str]  # (field of the stage, message)


def _config(path: str | None, folder: Path) -> tuple[dict[str, Any], list[Problem]]:
    if path is None:
        return {}, []
    if Path(path).is_absolute() or ".." in Path(path).parts:
        return {}, [("preprocessor", f"{path!r} must stay inside the manifest's folder")]
    file = folder / path
    try:
        data = json.loads(file.read_text())
    except OSError:
        return {}, [("preprocessor", f"file not found: {path}")]
    except ValueError as exc:
        return {}, [("preprocessor", f"{path} is not valid JSON: {exc}")]
    if not isinstance(data, dict):
        return {}, [("preprocessor", f"{path} is not a JSON object")]
    return data, []


def _hw(value: Any) -> tuple[int, int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, dict) and isinstance(value.get("height"), int) and isinstance(value.get("width"), int):
        return value["height"], value["width"]
    return None


def image_steps(stage: ImageStage, folder: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    cfg, problems = _config(stage.preprocessor, folder)
    steps: list[dict[str, Any]] = [{"op": "decode"}]
    crop = (stage.crop.height, stage.crop.width) if stage.crop else (
        _hw(cfg.get("crop_size")) if cfg.get("do_center_crop", bool(cfg.get("crop_size"))) else None)
    if stage.resize is not None:
        r = stage.resize
        fixed = r.height is not None and r.width is not None
        if (r.shortest_edge is None) != fixed or (r.height is None) != (r.width is None):
            problems.append(("resize", "give either shortest_edge, or both height and width"))
        size = {"shortest_edge": r.shortest_edge} if r.shortest_edge else {"height": r.height, "width": r.width}
        steps.append({"op": "resize", **size, "filter": r.filter})
    elif cfg.get("do_resize", "size" in cfg) and "size" in cfg:
        size_cfg = cfg["size"]
        code = cfg.get("resample", 3)
        name = _RESAMPLE.get(code, str(code))
        if name not in ("bilinear", "bicubic"):
            problems.append(("preprocessor", f"{stage.preprocessor}: resample {code} ({name}) is not supported; "
                             "bilinear (2) and bicubic (3) are"))
        if isinstance(size_cfg, dict) and isinstance(size_cfg.get("shortest_edge"), int):
            size: dict[str, Any] = {"shortest_edge": size_cfg["shortest_edge"]}
        elif isinstance(size_cfg, int) and crop is not None:  # CLIP-era configs: the shorter side
            size = {"shortest_edge": size_cfg}
        elif (hw := _hw(size_cfg)) is not None:
            size = {"height": hw[0], "width": hw[1]}
        else:
            problems.append(("preprocessor", f"{stage.preprocessor}: size {size_cfg!r} is not understood "
                             "(shortest_edge, or height and width)"))
            size = {}
        if size:
            steps.append({"op": "resize", **size, "filter": name if name in ("bilinear", "bicubic") else "bicubic"})
    if crop is not None:
        steps.append({"op": "center_crop", "height": crop[0], "width": crop[1]})
    factor = stage.rescale if stage.rescale is not None else (
        float(cfg.get("rescale_factor", 1 / 255)) if cfg.get("do_rescale", True) else None)
    if factor is not None:
        steps.append({"op": "rescale", "factor": factor})
    mean = stage.mean if stage.mean is not None else (cfg.get("image_mean") if cfg.get("do_normalize", True) else None)
    std = stage.std if stage.std is not None else (cfg.get("image_std") if cfg.get("do_normalize", True) else None)
    if (mean is None) != (std is None):
        problems.append(("mean" if mean is None else "std", "give mean and std together (3 values each)"))
    elif mean is not None and std is not None:
        if not (_floats(mean, 3) and _floats(std, 3)) or min(std) <= 0:
            problems.append(("preprocessor", "image_mean and image_std must be 3 numbers each, std > 0"))
        else:
            steps.append({"op": "normalize", "mean": [float(v) for v in mean], "std": [float(v) for v in std]})
    steps.append({"op": "layout", "layout": stage.layout})
    return steps, problems


def _floats(v: Any, n: int) -> bool:
    return isinstance(v, list) and len(v) == n and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                       for x in v)


def image_shape(steps: list[dict[str, Any]]) -> tuple[int | str, ...]:
    """The pixel tensor's shape: static where a crop or a fixed resize decides it."""
    h: int | str = "height"
    w: int | str = "width"
    layout = "NCHW"
    for s in steps:
        if s["op"] == "resize" and "height" in s:
            h, w = s["height"], s["width"]
        elif s["op"] == "resize":
            h, w = "height", "width"
        elif s["op"] == "center_crop":
            h, w = s["height"], s["width"]
        elif s["op"] == "layout":
            layout = s["layout"]
    return (1, 3, h, w) if layout == "NCHW" else (1, h, w, 3)


def audio_steps(stage: AudioStage, folder: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    cfg, problems = _config(stage.preprocessor, folder)
    kind = cfg.get("feature_extractor_type")
    if cfg and kind not in (None, "WhisperFeatureExtractor"):
        problems.append(("preprocessor", f"{stage.preprocessor}: feature extractor {kind} is not supported; "
                         "log-mel features as WhisperFeatureExtractor makes them are"))
    rate = stage.sample_rate or cfg.get("sampling_rate")
    n_fft = stage.n_fft or cfg.get("n_fft")
    hop = stage.hop_length or cfg.get("hop_length")
    n_mels = stage.n_mels or cfg.get("feature_size")
    seconds = stage.seconds or cfg.get("chunk_length")
    values = {"sample_rate": rate, "n_fft": n_fft, "hop_length": hop, "n_mels": n_mels, "seconds": seconds}
    missing = [k for k, v in values.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0]
    if missing:
        problems.append((missing[0], f"{', '.join(missing)} must be given (here or by a preprocessor config)"))
        return [], problems
    assert rate and n_fft and hop and n_mels and seconds
    samples = int(round(float(seconds) * int(rate)))
    fmax = stage.fmax if stage.fmax is not None else int(rate) / 2.0
    if fmax > int(rate) / 2.0:
        problems.append(("fmax", f"fmax {fmax:g} Hz is above the Nyquist frequency {int(rate) / 2:g} Hz"))
    if stage.fmin >= fmax:
        problems.append(("fmin", f"fmin {stage.fmin:g} Hz must be below fmax {fmax:g} Hz"))
    if int(n_fft) > samples:
        problems.append(("n_fft", f"n_fft {n_fft} is longer than the clip ({samples} samples)"))
    mel = {"op": "log_mel", "sample_rate": int(rate), "n_fft": int(n_fft), "hop_length": int(hop),
           "n_mels": int(n_mels), "fmin": float(stage.fmin), "fmax": float(fmax)}
    return [{"op": "decode_wav"}, {"op": "resample", "sample_rate": int(rate)},
            {"op": "pad_or_trim", "samples": samples}, mel], problems


def audio_shape(steps: list[dict[str, Any]]) -> tuple[int | str, ...]:
    """[1, n_mels, frames]: centred frames over the padded clip, less the last (as Whisper)."""
    if not steps:
        return (1, "mels", "frames")
    samples, mel = steps[2]["samples"], steps[3]
    frames = (samples + 2 * (mel["n_fft"] // 2) - mel["n_fft"]) // mel["hop_length"]
    return (1, mel["n_mels"], frames)
