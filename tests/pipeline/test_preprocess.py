"""Image and audio preprocessing: deployc's Python steps against Pillow and transformers (what a
checkpoint was trained with), and the native runner's steps against the Python ones, to 1e-5, on
images and clips of odd sizes and formats."""

from __future__ import annotations

import io
import json
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.sounds import CLIPS, SAMPLES, tone, wav
from PIL import Image

from deployc.core.errors import PreprocessError
from deployc.pipeline.host import images as I
from deployc.pipeline.host import sounds as S

RNG = np.random.default_rng(7)
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
CLIP_STEPS = [{"op": "decode"}, {"op": "resize", "shortest_edge": 224, "filter": "bicubic"},
              {"op": "center_crop", "height": 224, "width": 224}, {"op": "rescale", "factor": 1 / 255},
              {"op": "normalize", "mean": CLIP_MEAN, "std": CLIP_STD}, {"op": "layout", "layout": "NCHW"}]
WHISPER = {"op": "log_mel", "sample_rate": 16000, "n_fft": 400, "hop_length": 160, "n_mels": 80, "fmin": 0.0,
           "fmax": 8000.0}


def _photo(h: int, w: int) -> np.ndarray:
    """A smooth gradient with noise: resampling has real work, unlike pure noise or flat colour."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), (x + y) * 127 / max(h + w - 2, 1)], -1)
    return np.clip(base + RNG.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


def _encode(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _images() -> dict[str, bytes]:
    rgb = Image.fromarray(_photo(61, 97))
    out = {
        "rgb_61x97.png": _encode(rgb, "PNG"),
        "tall_500x333.png": _encode(Image.fromarray(_photo(500, 333)), "PNG"),
        "small_13x9.png": _encode(Image.fromarray(_photo(13, 9)), "PNG"),
        "gray.png": _encode(rgb.convert("L"), "PNG"),
        "rgba.png": _encode(Image.fromarray(np.dstack([_photo(40, 71), RNG.integers(0, 256, (40, 71), np.uint8)])),
                            "PNG"),
        "palette.png": _encode(rgb.convert("P"), "PNG"),
        "gray16.png": _encode(Image.fromarray((RNG.integers(0, 65536, (33, 47))).astype(np.uint16)), "PNG"),
        "rgb.jpg": _encode(rgb, "JPEG", quality=90),
        "gray.jpg": _encode(rgb.convert("L"), "JPEG", quality=85),
        "subsampled.jpg": _encode(Image.fromarray(_photo(71, 53)), "JPEG", quality=75, subsampling=2),
    }
    for orientation in range(2, 9):  # EXIF-rotated JPEGs: a phone photo held sideways
        exif = Image.Exif()
        exif[0x0112] = orientation
        out[f"exif{orientation}.jpg"] = _encode(Image.fromarray(_photo(45, 80)), "JPEG", quality=90, exif=exif)
    return out


IMAGES = _images()


@pytest.mark.parametrize("filter_name,code", [("bilinear", Image.BILINEAR), ("bicubic", Image.BICUBIC)])
def test_resize_is_pillows(filter_name: str, code: int) -> None:
    for _ in range(25):
        h, w = (int(v) for v in RNG.integers(3, 160, 2))
        oh, ow = (int(v) for v in RNG.integers(2, 240, 2))
        a = _photo(h, w)
        want = np.asarray(Image.fromarray(a).resize((ow, oh), code))
        assert np.array_equal(I.resize(a, oh, ow, filter_name), want), (h, w, oh, ow)


@pytest.mark.parametrize("name", ["rgb_61x97.png", "tall_500x333.png", "gray.png", "rgba.png", "rgb.jpg"])
def test_image_steps_match_transformers_clip_processor(name: str) -> None:
    from transformers import CLIPImageProcessorPil

    with Image.open(io.BytesIO(IMAGES[name])) as im:
        want = CLIPImageProcessorPil()(im.convert("RGB"), return_tensors="np")["pixel_values"]
    got = I.prepare_image(IMAGES[name], CLIP_STEPS)
    assert got.shape == want.shape == (1, 3, 224, 224)
    assert np.abs(got - want).max() < 1e-6


def test_exif_orientation_is_applied() -> None:
    from PIL import ImageOps

    for orientation in range(2, 9):
        data = IMAGES[f"exif{orientation}.jpg"]
        with Image.open(io.BytesIO(data)) as im:
            want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        got = I.decode_image(data)
        assert got.shape == want.shape and np.array_equal(got, want)
        assert got.shape[:2] == ((80, 45) if orientation >= 5 else (45, 80))


def _audio_steps(seconds: float = 2.0) -> list[dict[str, object]]:
    return [{"op": "decode_wav"}, {"op": "resample", "sample_rate": 16000},
            {"op": "pad_or_trim", "samples": int(seconds * 16000)}, WHISPER]


def test_log_mel_matches_whisper_feature_extractor() -> None:
    from transformers import WhisperFeatureExtractor

    x = tone(3.0, 16000, 1)[:, 0]
    extractor = WhisperFeatureExtractor()
    want = extractor(x, sampling_rate=16000, return_tensors="np")["input_features"][0]
    padded = np.pad(x, (0, 480000 - x.size))
    got = S.log_mel(padded, WHISPER)
    assert got.shape == want.shape == (80, 3000)
    # The extractor's default path computes its STFT in float32 through torch, whose rounding moves from
    # run to run (1.8e-5 and 3.2e-5 from us, 2.8e-5 from its own numpy path, measured on one machine);
    # its numpy path is the same arithmetic as ours.
    reference = extractor._np_extract_fbank_features(padded.astype(np.float32)[None], "cpu")[0]
    assert np.abs(got - reference).max() < 1e-5
    assert np.abs(got - want).max() < 1e-4


def test_wav_decoding_and_resampling() -> None:
    x, rate = S.decode_wav(CLIPS["pcm16_16k_mono.wav"])
    written = SAMPLES["pcm16_16k_mono.wav"][0][:, 0]
    assert rate == 16000 and x.size == int(1.3 * 16000) and np.abs(x - written).max() <= 2 / 32768  # a step, and 32768 for 32767
    x8, rate8 = S.decode_wav(CLIPS["pcm8_8k_stereo.wav"])
    assert rate8 == 8000 and x8.ndim == 1
    # A 1 kHz tone resampled 22,050 -> 16,000 Hz stays a 1 kHz tone of the same amplitude.
    t = np.arange(22050) / 22050
    y = S.resample(np.sin(2 * np.pi * 1000 * t), 22050, 16000)
    ref = np.sin(2 * np.pi * 1000 * np.arange(y.size) / 16000)
    assert y.size == 16000 and np.abs(y[200:-200] - ref[200:-200]).max() < 1e-3
    with pytest.raises(PreprocessError, match="not a RIFF/WAVE"):
        S.decode_wav(b"RIFX" + bytes(40))


def _zero_bit_wav() -> bytes:
    """A WAV header claiming 0-bit samples in 0-byte blocks (a division by zero, were it trusted)."""
    return wav(tone(0.1, 8000, 1), 8000, 16).replace(struct.pack("<HH", 2, 16), struct.pack("<HH", 0, 0), 1)


def _png_header(width: int, height: int) -> bytes:
    """A PNG that only claims its size (a decompression bomb's first bytes)."""
    import zlib

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def _native(runner: Path, tmp: Path, steps: list[dict[str, object]], data: bytes, name: str) -> np.ndarray:
    (tmp / "steps.json").write_text(json.dumps(steps))
    (tmp / name).write_bytes(data)
    r = subprocess.run([str(runner), "--preprocess", str(tmp / "steps.json"), str(tmp / name), "--out",
                        str(tmp / "out.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.load(tmp / "out.npy")


@pytest.mark.slow
def test_native_image_preprocessing_matches_python(runner: Path, tmp_path: Path) -> None:
    nhwc_bilinear = [{"op": "decode"}, {"op": "resize", "height": 37, "width": 51, "filter": "bilinear"},
                     {"op": "center_crop", "height": 40, "width": 30}, {"op": "layout", "layout": "NHWC"}]
    worst = 0.0
    for name, data in IMAGES.items():
        for steps in (CLIP_STEPS, nhwc_bilinear):
            want = I.prepare_image(data, steps)
            got = _native(runner, tmp_path, steps, data, name)
            assert got.shape == want.shape and got.dtype == np.float32, name
            worst = max(worst, float(np.abs(got - want).max()))
            assert np.abs(got - want).max() <= 1e-5, name
    assert worst == 0.0  # the same integer resampling and float32 arithmetic: identical, not just close


@pytest.mark.slow
def test_native_audio_preprocessing_matches_python(runner: Path, tmp_path: Path) -> None:
    for name, data in CLIPS.items():
        steps = _audio_steps(1.0)
        want = S.prepare_audio(data, steps)
        got = _native(runner, tmp_path, steps, data, name)
        assert got.shape == want.shape == (1, 80, 100), name
        assert np.abs(got - want).max() <= 1e-5, name


@pytest.mark.slow
def test_native_refuses_undecodable_files(runner: Path, tmp_path: Path) -> None:
    cases = [(CLIP_STEPS, _png_header(20000, 20000), "the image is too large"),
             (_audio_steps(), _zero_bit_wav(), "WAV header is inconsistent"),
             (CLIP_STEPS, IMAGES["rgb_61x97.png"][:200], "broken PNG data"),
             (CLIP_STEPS, IMAGES["rgb.jpg"][:300], "cannot decode the image"),
             (CLIP_STEPS, b"GIF89a" + bytes(30), "not a PNG or JPEG file"),
             (_audio_steps(), b"RIFF\x00\x00\x00\x00WAVEjunk", "no fmt or data chunk")]
    for steps, data, message in cases:
        (tmp_path / "steps.json").write_text(json.dumps(steps))
        (tmp_path / "bad").write_bytes(data)
        r = subprocess.run([str(runner), "--preprocess", str(tmp_path / "steps.json"), str(tmp_path / "bad"), "--out",
                            str(tmp_path / "o.npy")], capture_output=True, text=True)
        assert r.returncode == 2 and message in r.stderr, (message, r.stderr)
        with pytest.raises(PreprocessError):
            (I.prepare_image if steps is CLIP_STEPS else S.prepare_audio)(data, steps)


def test_steps_from_hugging_face_preprocessor_configs(tmp_path: Path) -> None:
    """The configs transformers writes give the steps (and so the pixels and features) it computes."""
    from transformers import CLIPImageProcessorPil, WhisperFeatureExtractor

    from deployc.pipeline.ops.audio import AudioStage
    from deployc.pipeline.ops.audio import features_shape as audio_shape
    from deployc.pipeline.ops.audio import resolve_steps as audio_steps
    from deployc.pipeline.ops.image import ImageStage
    from deployc.pipeline.ops.image import pixels_shape as image_shape
    from deployc.pipeline.ops.image import resolve_steps as image_steps

    (tmp_path / "clip.json").write_text(json.dumps(CLIPImageProcessorPil().to_dict()))
    steps, problems = image_steps(ImageStage(name="px", op="image", input="i", preprocessor="clip.json"), tmp_path)
    assert problems == [] and steps == [{**s, "factor": pytest.approx(1 / 255)} if s["op"] == "rescale" else s
                                        for s in CLIP_STEPS]
    assert image_shape(steps) == (1, 3, 224, 224)
    # Fields in the manifest win; an old-style bare size with a crop is the shorter side.
    (tmp_path / "old.json").write_text(json.dumps({"size": 256, "crop_size": 224, "resample": 2,
                                                   "image_mean": [0.5] * 3, "image_std": [0.5] * 3}))
    steps, problems = image_steps(ImageStage(name="px", op="image", input="i", preprocessor="old.json",
                                             layout="NHWC"), tmp_path)
    assert problems == [] and steps[1] == {"op": "resize", "shortest_edge": 256, "filter": "bilinear"}
    assert image_shape(steps) == (1, 224, 224, 3)
    (tmp_path / "lanczos.json").write_text(json.dumps({"size": {"height": 8, "width": 8}, "resample": 1}))
    _, problems = image_steps(ImageStage(name="px", op="image", input="i", preprocessor="lanczos.json"), tmp_path)
    assert problems == [("preprocessor", "lanczos.json: resample 1 (lanczos) is not supported; bilinear (2) and "
                                         "bicubic (3) are")]
    (tmp_path / "whisper.json").write_text(json.dumps(WhisperFeatureExtractor().to_dict()))
    steps, problems = audio_steps(AudioStage(name="mel", op="audio", input="a", preprocessor="whisper.json"), tmp_path)
    assert problems == [] and steps[2] == {"op": "pad_or_trim", "samples": 480000} and steps[3] == WHISPER
    assert audio_shape(steps) == (1, 80, 3000)
    (tmp_path / "w2v.json").write_text(json.dumps({"feature_extractor_type": "Wav2Vec2FeatureExtractor",
                                                   "sampling_rate": 16000}))
    _, problems = audio_steps(AudioStage(name="mel", op="audio", input="a", preprocessor="w2v.json"), tmp_path)
    assert problems[0][1].startswith("w2v.json: feature extractor Wav2Vec2FeatureExtractor is not supported")
