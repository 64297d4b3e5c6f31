"""Image and audio preprocessing steps of a pipeline, as the runtime config declares them, in numpy.

The native runner (native/src/preprocess.cpp) implements the same steps with the same arithmetic; the
two agree to 1e-5 (tests/test_preprocess.py). Resizing reproduces Pillow's 8-bit resampling exactly
(the coefficients, their 22-bit fixed-point form, the rounding and clipping between the horizontal
and vertical passes), and rescale/normalize reproduce transformers' image processors, so that a
checkpoint's `preprocessor_config.json` gives the inputs it was trained on. Log-mel features follow
Whisper's feature extractor (Hann window, centred reflect-padded frames, Slaney mel filters, log10,
8-decade floor, (x + 4) / 4).

Steps (each a dict with `op`):
  image: decode -> resize -> center_crop -> rescale -> normalize -> layout
  audio: decode_wav -> resample -> pad_or_trim -> log_mel
"""

from __future__ import annotations

import io
import math
import struct
from typing import Any

import numpy as np

_PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed-point precision for 8-bit resampling


class PreprocessError(Exception):
    """The input cannot be decoded or processed (the runner names the stage)."""


# ---- images ------------------------------------------------------------------------------------------
def decode_image(data: bytes) -> np.ndarray:
    """PNG or JPEG bytes -> uint8 [H, W, 3] RGB, EXIF orientation applied, alpha dropped, gray spread
    to three channels, 16-bit samples cut to their high byte (what the native decoder does too)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if data[:8] != b"\x89PNG\r\n\x1a\n" and data[:3] != b"\xff\xd8\xff":
        raise PreprocessError("not a PNG or JPEG file")
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            im = ImageOps.exif_transpose(im) if data[:3] == b"\xff\xd8\xff" else im
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
    ksize = int(math.ceil(support)) * 2 + 1
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


def image_steps(data: bytes, steps: list[dict[str, Any]]) -> np.ndarray:
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


# ---- audio -------------------------------------------------------------------------------------------
def decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    """RIFF/WAVE PCM (8-bit unsigned, 16/24/32-bit signed) or IEEE float32 -> (float64 mono samples in
    [-1, 1], sample rate). Channels are averaged."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise PreprocessError("not a RIFF/WAVE file")
    pos, fmt, samples = 12, None, None
    while pos + 8 <= len(data):
        tag, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]
        if tag == b"fmt ":
            if len(body) < 16:
                raise PreprocessError("WAV fmt chunk is too short")
            fmt = struct.unpack("<HHIIHH", body[:16])
        elif tag == b"data":
            samples = body
        pos += 8 + size + (size & 1)
    if fmt is None or samples is None:
        raise PreprocessError("WAV file has no fmt or data chunk")
    code, channels, rate, _, block, bits = fmt
    if code == 0xFFFE and channels and bits in (8, 16, 24, 32):
        code = 1 if bits != 32 else code  # WAVE_FORMAT_EXTENSIBLE: PCM unless float (below)
    if channels < 1 or rate < 1 or bits not in (8, 16, 24, 32) or block != channels * bits // 8:
        raise PreprocessError(f"WAV header is inconsistent ({channels} channels, {bits} bits, block {block})")
    n = len(samples) // block
    raw = samples[:n * block]
    if code == 1 and bits == 8:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128.0) / 128.0
    elif code == 1 and bits == 16:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32768.0
    elif code == 1 and bits == 24:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = np.where(v >= 1 << 23, v - (1 << 24), v).astype(np.float64) / 8388608.0
    elif code == 1 and bits == 32:
        x = np.frombuffer(raw, dtype="<i4").astype(np.float64) / 2147483648.0
    elif code in (3, 0xFFFE) and bits == 32:
        x = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    else:
        raise PreprocessError(f"WAV format {code} with {bits}-bit samples is not supported (PCM 8/16/24/32-bit "
                              "or float32)")
    return x.reshape(n, channels).mean(axis=1), int(rate)


def resample(x: np.ndarray, rate_in: int, rate_out: int, limit: int | None = None, zeros: int = 16) -> np.ndarray:
    """Band-limited resampling: a Hann-windowed sinc with `zeros` zero crossings each side, cut off at
    the lower Nyquist frequency; output sample i sits at input time i * rate_in / rate_out. Only the
    first `limit` output samples are computed (what pad_or_trim keeps)."""
    if rate_in == rate_out:
        return x
    n_out = (len(x) * rate_out) // rate_in
    n_out = n_out if limit is None else min(n_out, limit)
    ratio = min(1.0, rate_out / rate_in)
    half = zeros / ratio
    width = 2 * int(math.ceil(half)) + 2
    out = np.zeros(n_out, dtype=np.float64)
    for start in range(0, n_out, 4096):  # blocks of output samples: [block, width] taps at a time
        i = np.arange(start, min(start + 4096, n_out), dtype=np.int64)
        t = (i * rate_in) / rate_out
        lo = np.ceil(t - half).astype(np.int64)
        j = lo[:, None] + np.arange(width)
        d = j - t[:, None]
        keep = (j >= 0) & (j < len(x)) & (j <= np.floor(t + half)[:, None])
        w = ratio * np.sinc(ratio * d) * (0.5 + 0.5 * np.cos(np.pi * d / half))
        out[i] = np.where(keep, w * x[np.clip(j, 0, len(x) - 1)], 0.0).sum(axis=1)
    return out


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    mel = 3.0 * f / 200.0
    log_part = 15.0 + 27.0 * np.log(np.maximum(f, 1e-300) / 1000.0) / np.log(6.4)
    return np.where(f >= 1000.0, log_part, mel)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), 200.0 * m / 3.0)


def mel_filters(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """[n_fft // 2 + 1, n_mels] triangular filters, Slaney-normalised (transformers' mel_filter_bank
    with norm="slaney", mel_scale="slaney")."""
    freqs = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    points = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    diff = np.diff(points)
    slopes = points[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (points[2:n_mels + 2] - points[:n_mels]))[None, :]


def log_mel(x: np.ndarray, step: dict[str, Any]) -> np.ndarray:
    """Whisper's log-mel spectrogram of float64 samples: [n_mels, frames] float32."""
    n_fft, hop = int(step["n_fft"]), int(step["hop_length"])
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    padded = np.pad(x, n_fft // 2, mode="reflect")
    frames = 1 + (len(padded) - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    spectrum = np.abs(np.fft.rfft(padded[idx] * window, n=n_fft, axis=1)) ** 2  # [frames, bins]
    filters = mel_filters(int(step["sample_rate"]), n_fft, int(step["n_mels"]), float(step["fmin"]),
                          float(step["fmax"]))
    mel = np.log10(np.maximum(spectrum @ filters, 1e-10)).T[:, :-1]  # Whisper drops the last frame
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)


def audio_steps(data: bytes, steps: list[dict[str, Any]]) -> np.ndarray:
    """Run a stage's audio steps on a WAV file: float32 [1, n_mels, frames]."""
    x, rate = np.zeros(0), 0
    for step in steps:
        op = step["op"]
        if op == "decode_wav":
            x, rate = decode_wav(data)
        elif op == "resample":
            kept = next((int(s["samples"]) for s in steps if s["op"] == "pad_or_trim"), None)
            x, rate = resample(x, rate, int(step["sample_rate"]), kept), int(step["sample_rate"])
        elif op == "pad_or_trim":
            n = int(step["samples"])
            x = np.pad(x[:n], (0, max(0, n - len(x))))
        elif op == "log_mel":
            if rate != int(step["sample_rate"]):
                raise PreprocessError(f"audio at {rate} Hz, log_mel expects {step['sample_rate']} Hz")
            x = log_mel(x, step)
        else:
            raise PreprocessError(f"unknown audio step {op!r} (a bundle from a newer deployc?)")
    return np.ascontiguousarray(x[None].astype(np.float32))
