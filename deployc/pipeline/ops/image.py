"""`image`: decode an image file and turn it into a model's pixel tensor: decode -> resize -> center crop ->
rescale -> normalize -> layout, each setting from the stage or else from a Hugging Face preprocessor config.
The steps are resolved at plan time (pure); they run in pipeline/host/images.py (and native/src/preprocess.cpp)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from deployc.core.records import Frozen
from deployc.pipeline.ops.base import PreprocessingOp, StageBase
from deployc.pipeline.preprocessor_config import Problem, read_config

if TYPE_CHECKING:
    pass

# PIL's resampling codes, as transformers writes them into preprocessor configs.
_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}

class Resize(Frozen):
    """Resize to a fixed size, or the shorter side to `shortest_edge` (aspect ratio kept)."""

    shortest_edge: Annotated[int, Field(ge=1, le=8192)] | None = None
    height: Annotated[int, Field(ge=1, le=8192)] | None = None
    width: Annotated[int, Field(ge=1, le=8192)] | None = None
    filter: Literal["bilinear", "bicubic"] = "bicubic"


class Crop(Frozen):
    height: Annotated[int, Field(ge=1, le=8192)]
    width: Annotated[int, Field(ge=1, le=8192)]


class ImageStage(StageBase):
    """Decode an image file and turn it into a model's pixel tensor: decode -> resize -> center crop ->
    rescale -> normalize -> layout. Fields left out come from `preprocessor` when given."""

    op: Literal["image"]
    input: str = Field(description="a pipeline input of type image")
    preprocessor: str | None = Field(default=None, description="a Hugging Face preprocessor_config.json (relative "
                                     "to the manifest) whose resize, crop, rescale and normalize settings are used")
    resize: Resize | None = None
    crop: Crop | None = None
    rescale: Annotated[float, Field(gt=0.0, le=1.0)] | None = Field(
        default=None, description="factor the 0-255 pixel values are multiplied by (1/255 when left out)")
    mean: Annotated[list[float], Field(min_length=3, max_length=3)] | None = None
    std: Annotated[list[Annotated[float, Field(gt=0.0)]], Field(min_length=3, max_length=3)] | None = None
    layout: Literal["NCHW", "NHWC"] = "NCHW"


def _hw(value: Any) -> tuple[int, int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, dict) and isinstance(value.get("height"), int) and isinstance(value.get("width"), int):
        return value["height"], value["width"]
    return None


def resolve_steps(stage: ImageStage, folder: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    """The stage's steps, the preprocessor config's settings taken for the fields left out; problems."""
    cfg, problems = read_config(stage.preprocessor, folder)
    steps: list[dict[str, Any]] = [{"op": "decode"}]
    crop = (stage.crop.height, stage.crop.width) if stage.crop else (
        _hw(cfg.get("crop_size")) if cfg.get("do_center_crop", bool(cfg.get("crop_size"))) else None)
    if stage.resize is not None:
        r = stage.resize
        fixed = r.height is not None and r.width is not None
        if (r.shortest_edge is None) != fixed or (r.height is None) != (r.width is None):
            problems.append(("resize", "give either shortest_edge, or both height and width"))
        fixed_size = {"shortest_edge": r.shortest_edge} if r.shortest_edge else {"height": r.height, "width": r.width}
        steps.append({"op": "resize", **fixed_size, "filter": r.filter})
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


def pixels_shape(steps: list[dict[str, Any]]) -> tuple[int | str, ...]:
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


class ImageOp(PreprocessingOp):
    name = "image"
    schema = ImageStage
    kind, port = "image", "pixels"

    def resolve_steps(self, stage: Any, folder: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
        return resolve_steps(stage, folder)

    def shape(self, steps: list[dict[str, Any]] | None, stage: Any) -> tuple[int | str, ...]:
        return pixels_shape(steps if steps is not None else [{"op": "layout", "layout": stage.layout}])

    def prepare(self, data: bytes, steps: list[dict[str, Any]]) -> Any:
        from deployc.pipeline.host.images import prepare_image

        return prepare_image(data, steps)


OP = ImageOp()
