"""An image stage's steps, as the runtime config declares them, in numpy: decode -> resize -> center_crop ->
rescale -> normalize -> layout.

The native runner (native/src/preprocess.cpp) implements the same steps with the same arithmetic; the two
agree to 1e-5 (tests/pipeline/test_preprocess.py, tests/conformance/). Resizing reproduces Pillow's 8-bit resampling
exactly (the coefficients, their 22-bit fixed-point form, the rounding and clipping between the horizontal
and vertical passes), and rescale/normalize reproduce transformers' image processors, so that a
checkpoint's `preprocessor_config.json` gives the inputs it was trained on.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from deployc.core.errors import PreprocessError

_PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed-point precision for 8-bit resampling


def decode_image(data: bytes) -> np.ndarray:
    """PNG or JPEG bytes -> uint8 [H, W, 3] RGB, EXIF orientation applied, alpha dropped, gray spread
    to three channels, 16-bit samples cut to their high byte (what the native decoder does too)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if data[:8] != b"\x89PNG\r\n\x1a\n" and data[:3] != b"\xff\xd8\xff":
        raise PreprocessError("not a PNG or JPEG file")
    try:
        with Image.open(io.BytesIO(data)) as opened:
            opened.load()
            im: Image.Image = ImageOps.exif_transpose(opened) if data[:3] == b"\xff\xd8\xff" else opened
            if im.mode in ("I;16", "I;16B", "I;16L", "I"):
                gray = (np.asarray(im, dtype=np.uint32) >> 8).astype(np.uint8)
                return np.repeat(gray[:, :, None], 3, axis=2)
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except Image.DecompressionBombError as exc:
        raise PreprocessError(f"the image is too large: {exc}") from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise PreprocessError(f"cannot decode the image: {exc}") from exc


def _bilinear(x: float) -> float:
    x = -x if x < 0 else x
    return 1.0 - x if x < 1.0 else 0.0


def _bicubic(x: float) -> float:
    a = -0.5
    x = -x if x < 0 else x
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    if x < 2.0:
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return 0.0


FILTERS = {"bilinear": (_bilinear, 1.0), "bicubic": (_bicubic, 2.0)}


def _coefficients(in_size: int, out_size: int, filter_name: str) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's precompute_coeffs + normalize_coeffs_8bpc: per output pixel the first input pixel and
    the fixed-point weights of the window (zero past its end)."""
    fn, support = FILTERS[filter_name]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = support * filterscale
    ksize = math.ceil(support) * 2 + 1
    first = np.zeros(out_size, dtype=np.int64)
    fixed = np.zeros((out_size, ksize), dtype=np.int64)
    ss = 1.0 / filterscale
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        weights = [fn((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        total = 0.0
        for w in weights:
            total += w
        for x, w in enumerate(weights):
            k = w / total if total != 0.0 else w
            fixed[xx, x] = int(-0.5 + k * (1 << _PRECISION_BITS)) if k < 0 else int(0.5 + k * (1 << _PRECISION_BITS))
        first[xx] = xmin
    return first, fixed


def _resample_axis(image: np.ndarray, out_size: int, axis: int, filter_name: str) -> np.ndarray:
    in_size = image.shape[axis]
    first, fixed = _coefficients(in_size, out_size, filter_name)
    moved = np.moveaxis(image, axis, 0).astype(np.int64)  # [in, other, C]
    acc = np.full((out_size, *moved.shape[1:]), 1 << (_PRECISION_BITS - 1), dtype=np.int64)
    for k in range(fixed.shape[1]):  # one tap at a time: memory stays at the output's size
        taps = np.minimum(first + k, in_size - 1)  # its weight is 0 past the window's end
        acc += fixed[:, k].reshape(-1, *([1] * (moved.ndim - 1))) * moved[taps]
    out = np.clip(acc >> _PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resize(image: np.ndarray, height: int, width: int, filter_name: str) -> np.ndarray:
    """uint8 [H, W, C] -> [height, width, C], as Pillow's Image.resize (horizontal pass first)."""
    if image.shape[1] != width:
        image = _resample_axis(image, width, 1, filter_name)
    if image.shape[0] != height:
        image = _resample_axis(image, height, 0, filter_name)
    return image


def resize_size(height: int, width: int, step: dict[str, Any]) -> tuple[int, int]:
    """The output size of a resize step: fixed, or the shorter side to `shortest_edge` (the longer one
    scaled and truncated, as transformers does)."""
    if "shortest_edge" in step:
        edge = int(step["shortest_edge"])
        short, long = min(height, width), max(height, width)
        new_long = int(edge * long / short)
        return (edge, new_long) if height <= width else (new_long, edge)
    return int(step["height"]), int(step["width"])


def center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """The centre [height, width] window; an image smaller than that is padded with zeros around it
    (transformers' center_crop)."""
    h, w = image.shape[:2]
    top, left = (h - height) // 2, (w - width) // 2
    if top >= 0 and left >= 0:
        return image[top:top + height, left:left + width]
    nh, nw = max(height, h), max(width, w)
    canvas = np.zeros((nh, nw, *image.shape[2:]), dtype=image.dtype)
    pad_top, pad_left = (nh - h + 1) // 2, (nw - w + 1) // 2
    canvas[pad_top:pad_top + h, pad_left:pad_left + w] = image
    top, left = top + pad_top, left + pad_left
    return canvas[max(0, top):min(nh, top + height), max(0, left):min(nw, left + width)]


def prepare_image(data: bytes, steps: list[dict[str, Any]]) -> np.ndarray:
    """Run a stage's image steps on an encoded image: float32 [1, C, H, W] (NCHW) or [1, H, W, C]."""
    x: np.ndarray = np.zeros(0)
    layout = "NHWC"
    for step in steps:
        op = step["op"]
        if op == "decode":
            x = decode_image(data)
        elif op == "resize":
            h, w = resize_size(x.shape[0], x.shape[1], step)
            x = resize(x, h, w, step["filter"])
        elif op == "center_crop":
            x = center_crop(x, int(step["height"]), int(step["width"]))
        elif op == "rescale":
            x = (x.astype(np.float64) * float(step["factor"])).astype(np.float32)
        elif op == "normalize":
            mean = np.asarray(step["mean"], dtype=np.float32)
            std = np.asarray(step["std"], dtype=np.float32)
            x = ((x.astype(np.float32) - mean) / std).astype(np.float32)
        elif op == "layout":
            layout = step["layout"]
        else:
            raise PreprocessError(f"unknown image step {op!r} (a bundle from a newer deployc?)")
    x = x.astype(np.float32)
    x = np.transpose(x, (2, 0, 1)) if layout == "NCHW" else x
    return np.ascontiguousarray(x[None])
