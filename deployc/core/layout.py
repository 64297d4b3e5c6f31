"""Where things are inside a bundle and under an output directory: the one definition of every
bundle path, used by the planner, packaging, inspection and the host runtime."""

from __future__ import annotations

from pathlib import Path

RUNTIME_JSON = "runtime.json"
RUNTIME_BIN = "runtime.bin"
LOCK_FILE = "bundle.lock.json"


def program_file(model: str, fmt: str = "pte") -> str:
    """The model's program in the bundle: an ExecuTorch .pte or a LiteRT .tflite."""
    return f"{model}.{fmt}"


def program_data_file(model: str) -> str:
    """A program's external weights (ExecuTorch named data), when the model keeps them outside the .pte."""
    return f"{model}.ptd"


def tokenizer_file(name: str, sentencepiece: bool = False) -> str:
    return f"assets/tokenizers/{name}.{'model' if sentencepiece else 'json'}"


def index_file(name: str) -> str:
    return f"assets/indexes/{name}.json"


def index_vectors_file(index_file: str) -> str:
    """The raw float32 vectors beside an index's JSON."""
    return index_file.removesuffix(".json") + ".f32"


def release_dir(name: str, version: str) -> str:
    """Relative to the output directory: every target's bundle of one release."""
    return f"{name}/{version}"


def bundle_dir(name: str, version: str, profile: str) -> str:
    # A profile name is [a-z0-9_-]+: it cannot leave the release directory.
    return f"{release_dir(name, version)}/{profile}"


def archive_file(name: str, version: str, profile: str) -> str:
    return f"{release_dir(name, version)}/{name}-{version}-{profile}.tar.gz"


OUT_STATE_DIR = ".deployc-locks"  # deployc's own bookkeeping in an output directory: file locks, compared releases


def compared_file(archive: str) -> str:
    """Where `build` notes that it rebuilt a release with newer tools and found the same bytes (relative to
    the output directory): the next build with those tools treats the release as unchanged."""
    return f"{OUT_STATE_DIR}/{Path(archive).name.removesuffix('.tar.gz')}.compared.json"


def self_test_file(model: str) -> str:
    """A program's self-test vectors: inputs and the eager outputs they must reproduce."""
    return f"selftest/{model}.json"
