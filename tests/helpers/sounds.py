"""Seeded WAV clips of several rates, sample formats and channel counts."""

from __future__ import annotations

import struct

import numpy as np

RNG = np.random.default_rng(7)


def wav(samples: np.ndarray, rate: int, bits: int, float_samples: bool = False) -> bytes:
    """samples: [n, channels] in [-1, 1]."""
    _, channels = samples.shape
    if float_samples:
        body, code, bits = samples.astype("<f4").tobytes(), 3, 32
    elif bits == 8:
        body, code = np.clip(np.round(samples * 127 + 128), 0, 255).astype(np.uint8).tobytes(), 1
    elif bits == 16:
        body, code = np.round(samples * 32767).astype("<i2").tobytes(), 1
    else:  # 24-bit
        v = np.round(samples * 8388607).astype("<i4").reshape(-1)
        body, code = b"".join(int(x).to_bytes(4, "little", signed=True)[:3] for x in v), 1
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", code, channels, rate, rate * block, block, bits)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(body)) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body)


def tone(seconds: float, rate: int, channels: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    mono = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1870 * t) + RNG.normal(0, 0.02, t.size)
    return np.stack([mono * (1 - 0.3 * c) for c in range(channels)], 1)


# Each clip's samples as written ([n, channels] in [-1, 1]), its rate, bits and whether they are floats.
SAMPLES = {
    "pcm16_16k_mono.wav": (tone(1.3, 16000, 1), 16000, 16, False),
    "pcm8_8k_stereo.wav": (tone(0.7, 8000, 2), 8000, 8, False),
    "pcm24_22k.wav": (tone(0.9, 22050, 1), 22050, 24, False),
    "float_44k_stereo.wav": (tone(0.5, 44100, 2), 44100, 32, True),
}
CLIPS = {name: wav(*written) for name, written in SAMPLES.items()}
