"""An audio stage's steps, as the runtime config declares them, in numpy: decode_wav -> resample ->
pad_or_trim -> log_mel. Log-mel features follow Whisper's feature extractor (Hann window, centred
reflect-padded frames, Slaney mel filters, log10, 8-decade floor, (x + 4) / 4). The native runner
(native/src/preprocess.cpp) agrees to 1e-5 (tests/pipeline/test_preprocess.py, tests/conformance/).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from deployc.core.errors import PreprocessError


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
    width = 2 * math.ceil(half) + 2
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
    points = _mel_to_hz(np.linspace(_hz_to_mel(np.asarray(fmin)), _hz_to_mel(np.asarray(fmax)), n_mels + 2))
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


def prepare_audio(data: bytes, steps: list[dict[str, Any]]) -> np.ndarray:
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
