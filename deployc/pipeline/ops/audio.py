"""`audio`: decode a WAV file into log-mel features: decode -> resample -> pad or trim -> log-mel (Whisper's
recipe), each setting from the stage or else from a Hugging Face preprocessor config. The steps are resolved
at plan time (pure); they run in pipeline/host/sounds.py (and native/src/preprocess.cpp)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from deployc.pipeline.ops.base import PreprocessingOp, StageBase
from deployc.pipeline.preprocessor_config import Problem, read_config

if TYPE_CHECKING:
    pass


class AudioStage(StageBase):
    """Decode a WAV file into log-mel features: decode -> resample -> pad or trim -> log-mel (Whisper's
    recipe). Fields left out come from `preprocessor` when given."""

    op: Literal["audio"]
    input: str = Field(description="a pipeline input of type audio")
    preprocessor: str | None = Field(default=None, description="a Hugging Face preprocessor_config.json (a "
                                     "Whisper-style feature extractor), relative to the manifest")
    sample_rate: Annotated[int, Field(ge=1000, le=192_000)] | None = None
    n_fft: Annotated[int, Field(ge=16, le=8192)] | None = None
    hop_length: Annotated[int, Field(ge=1, le=8192)] | None = None
    n_mels: Annotated[int, Field(ge=1, le=512)] | None = None
    seconds: Annotated[float, Field(gt=0.0, le=600.0)] | None = Field(
        default=None, description="the clip is cut or zero-padded to this length")
    fmin: Annotated[float, Field(ge=0.0)] = 0.0
    fmax: Annotated[float, Field(gt=0.0)] | None = Field(default=None, description="sample_rate / 2 when left out")


def resolve_steps(stage: AudioStage, folder: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    """The stage's steps, the preprocessor config's settings taken for the fields left out; problems."""
    cfg, problems = read_config(stage.preprocessor, folder)
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
    samples = round(float(seconds) * int(rate))
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


def features_shape(steps: list[dict[str, Any]]) -> tuple[int | str, ...]:
    """[1, n_mels, frames]: centred frames over the padded clip, less the last (as Whisper)."""
    if not steps:
        return (1, "mels", "frames")
    samples, mel = steps[2]["samples"], steps[3]
    frames = (samples + 2 * (mel["n_fft"] // 2) - mel["n_fft"]) // mel["hop_length"]
    return (1, mel["n_mels"], frames)


class AudioOp(PreprocessingOp):
    name = "audio"
    schema = AudioStage
    kind, port = "audio", "features"

    def resolve_steps(self, stage: Any, folder: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
        return resolve_steps(stage, folder)

    def shape(self, steps: list[dict[str, Any]] | None, stage: Any) -> tuple[int | str, ...]:
        return features_shape(steps or [])

    def prepare(self, data: bytes, steps: list[dict[str, Any]]) -> Any:
        from deployc.pipeline.host.sounds import prepare_audio

        return prepare_audio(data, steps)


OP = AudioOp()
