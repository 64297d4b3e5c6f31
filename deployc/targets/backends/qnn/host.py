"""Qualcomm's QNN host libraries on an x86-64 Linux build machine: where they come from, and how a
process gets to use them to lower QNN programs and to run them on the x86 HTP emulator.

Two sources, tried in this order, never downloaded:
1. a QNN SDK the user installed: `QNN_SDK_ROOT` (with lib/x86_64-linux-clang/libQnnHtp.so), used as is;
2. the PyPI wheel onnxruntime-qnn (`pip install 'deployc[qnn]'`), whose libraries are a newer QNN than
   the one ExecuTorch was compiled against. They need deployc's compatibility layer (qnn_compat.c),
   built with the system C compiler on first use into the user's deployc cache, and made for exactly
   the onnxruntime-qnn releases in LAYERED_RELEASES; any other release is refused.

`activate()` makes this process use them: it points QNN_SDK_ROOT at a directory laid out like an SDK
(ExecuTorch reads the build id there and skips its SDK download), and loads libQnnHtp.so and
libQnnSystem.so by path, so that ExecuTorch's `dlopen("libQnnHtp.so")` finds them already loaded
(no LD_LIBRARY_PATH needed, which a running process could not change). Child processes inherit
DEPLOYC_QNN_LIBRARIES and call `activate_from_env()`.

Nothing here imports torch or executorch.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from deployc.core import installed
from deployc.core.cache_location import cache_spec, local_root
from deployc.core.digests import file_sha256, key_of
from deployc.core.errors import BuildError

HOST_LIB_DIR = "lib/x86_64-linux-clang"
PYPI_DISTRIBUTION = "onnxruntime-qnn"
# onnxruntime-qnn releases whose libraries the compatibility layer was made for -> their QNN version.
LAYERED_RELEASES = {"2.7.0": "2.51.0"}
LAYER_SOURCE = Path(__file__).with_name("qnn_compat.c")
ENV_LIBRARIES = "DEPLOYC_QNN_LIBRARIES"  # ":"-joined libraries a child process loads before QNN starts
INSTALL_HINT = "pip install 'deployc[qnn]' (installs onnxruntime-qnn==2.7.0), or set QNN_SDK_ROOT to a QNN SDK"


@dataclass(frozen=True)
class QnnLibraries:
    source: Literal["sdk", "pypi"]
    origin: str  # for people: "QNN_SDK_ROOT=/opt/qnn" or "onnxruntime-qnn 2.7.0 (PyPI)"
    lib_dir: Path  # holds the real libQnnHtp.so and libQnnSystem.so
    version: str  # the QNN (QAIRT) version of the libraries
    layer: str | None  # sha256 of the compatibility layer's source when it is needed

    @property
    def htp(self) -> Path:
        return self.lib_dir / "libQnnHtp.so"

    @property
    def system(self) -> Path:
        return self.lib_dir / "libQnnSystem.so"

    def facts(self) -> dict[str, str]:
        """What enters the program key of every QNN program built with these libraries."""
        out = {"qnn": self.version, "libraries": self.origin if self.source == "pypi" else "QNN SDK"}
        if self.layer:
            out["compat_layer"] = self.layer
        return out


def _sdk_version(root: Path) -> str:
    for name in ("sdk.yaml", "sdk.yml"):
        f = root / name
        if f.is_file():
            m = re.search(r"^\s*version\s*:\s*['\"]?([0-9][0-9.]*)", f.read_text(errors="replace"), re.M)
            if m:
                return ".".join(m.group(1).split(".")[:3])
    m = re.search(r"(\d+\.\d+\.\d+)", root.resolve().name)
    return m.group(1) if m else "unknown"


def find(env: dict[str, str] | os._Environ[str]) -> QnnLibraries | str:
    """The QNN host libraries to use, or why there are none."""
    root = env.get("QNN_SDK_ROOT", "")
    if root and Path(root, HOST_LIB_DIR, "libQnnHtp.so").is_file() and not _is_layer_dir(Path(root)):
        return QnnLibraries("sdk", f"QNN_SDK_ROOT={root}", Path(root, HOST_LIB_DIR), _sdk_version(Path(root)), None)
    release, site = installed.version(PYPI_DISTRIBUTION), installed.site_folder(PYPI_DISTRIBUTION)
    if release is None or site is None:
        if root and not _is_layer_dir(Path(root)):
            return f"QNN_SDK_ROOT={root} has no {HOST_LIB_DIR}/libQnnHtp.so, and {PYPI_DISTRIBUTION} is not installed"
        return f"no QNN host libraries: {INSTALL_HINT}"
    lib_dir = site / "onnxruntime_qnn"
    if not (lib_dir / "libQnnHtp.so").is_file():
        return f"{PYPI_DISTRIBUTION} {release} is installed but has no onnxruntime_qnn/libQnnHtp.so"
    version = LAYERED_RELEASES.get(release)
    if version is None:
        made_for = ", ".join(f"{PYPI_DISTRIBUTION}=={r} (QNN {q})" for r, q in LAYERED_RELEASES.items())
        return (f"{PYPI_DISTRIBUTION} {release} ships QNN libraries deployc's compatibility layer was not "
                f"made for ({made_for}); install that release: pip install 'deployc[qnn]'")
    if not Path(LAYER_SOURCE).is_file():
        return f"deployc's QNN compatibility layer source {LAYER_SOURCE} is missing (a broken install)"
    if compiler() is None:
        return ("building deployc's QNN compatibility layer needs a C compiler (cc or gcc on PATH), e.g. "
                "`apt-get install gcc`")
    return QnnLibraries("pypi", f"{PYPI_DISTRIBUTION} {release} (PyPI)", lib_dir, version,
                        file_sha256(LAYER_SOURCE))


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def _is_layer_dir(root: Path) -> bool:
    """A directory this module made (an activated process exports it as QNN_SDK_ROOT)."""
    return (root / "deployc-qnn-layer").is_file()


def layer_home() -> Path:
    """Where compatibility layers are built: the local deployc cache (DEPLOYC_CACHE_DIR or ~/.cache/deployc)."""
    return local_root(cache_spec(None)) / "qnn"


def ensure_layer(libs: QnnLibraries) -> Path:
    """An SDK-shaped directory whose libQnnHtp.so is the layer in front of `libs`; built once, atomically."""
    assert libs.layer is not None
    from filelock import FileLock

    key = key_of(libs.layer, libs.version, str(libs.htp), libs.htp.stat().st_size)[:16]
    home = layer_home()
    root = home / key
    if _is_layer_dir(root):
        return root
    home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home / f"{key}.lock")):
        if _is_layer_dir(root):
            return root
        staging = Path(tempfile.mkdtemp(dir=home, prefix=f".{key}-"))
        try:
            lib = staging / HOST_LIB_DIR
            lib.mkdir(parents=True)
            expected = "v" + ".".join(libs.version.split(".")[:2]) + "."
            cmd = [compiler() or "cc", "-shared", "-fPIC", "-O2", "-o", str(lib / "libQnnHtp.so"), str(LAYER_SOURCE),
                   f'-DDEPLOYC_QNN_REAL_HTP="{libs.htp}"', f'-DDEPLOYC_QNN_EXPECTED_BUILD="{expected}"',
                   "-ldl", "-lpthread", "-Wl,-z,nodelete", "-Wl,-soname,libQnnHtp.so"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise BuildError(f"building deployc's QNN compatibility layer failed: {proc.stderr.strip()[-400:]}")
            (lib / "libQnnSystem.so").symlink_to(libs.system)
            (staging / "deployc-qnn-layer").write_text(f"{libs.origin}\n{libs.htp}\nsource {libs.layer}\n")
            os.replace(staging, root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return root


def environment(env: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    """What a process needs in its environment to use the QNN host libraries (building the
    compatibility layer first if it is needed and not built yet). Loads nothing."""
    libs = find(os.environ if env is None else env)
    if isinstance(libs, str):
        raise BuildError(f"QNN: {libs}")
    if libs.layer is None:
        root, htp = libs.lib_dir.parent.parent, libs.htp
    else:
        root = ensure_layer(libs)
        htp = root / HOST_LIB_DIR / "libQnnHtp.so"
    # QNN_SDK_ROOT: ExecuTorch reads the libraries' build id there and never downloads an SDK.
    return {"QNN_SDK_ROOT": str(root), ENV_LIBRARIES: f"{htp}:{libs.system}"}


def activate() -> None:
    """Make this process (and the processes it starts) use the QNN host libraries."""
    os.environ.update(environment())
    activate_from_env()


def activate_from_env() -> bool:
    """Load the libraries a parent process chose (DEPLOYC_QNN_LIBRARIES); False when it chose none."""
    paths = [p for p in os.environ.get(ENV_LIBRARIES, "").split(":") if p]
    if not paths:
        return False
    _load(tuple(paths))
    return True


@functools.cache
def _load(paths: tuple[str, ...]) -> None:
    import ctypes

    # RTLD_LOCAL: the libraries bring their own libc++; global symbols would mix it with torch's.
    for path in paths:
        ctypes.CDLL(path, mode=os.RTLD_LOCAL)


@functools.cache
def soc_table() -> dict[str, int]:
    """SoC name -> HTP architecture, as the installed ExecuTorch's QNN backend knows them; read from its
    source (serialization/qc_schema.py) without importing it. Empty when it cannot be read."""
    try:
        spec = importlib.util.find_spec("executorch")
    except (ImportError, ValueError):
        return {}
    for root in (spec.submodule_search_locations or []) if spec else []:
        schema = Path(root, "backends", "qualcomm", "serialization", "qc_schema.py")
        if schema.is_file():
            return _parse_soc_table(schema.read_text())
    return {}


def _parse_soc_table(source: str) -> dict[str, int]:
    """`_soc_info_table = {QcomChipset.X: SocInfo(QcomChipset.X, HtpInfo(HtpArch.V75, 8)), ...}`."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_soc_info_table"
                                                for t in node.targets) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if not (isinstance(key, ast.Attribute) and isinstance(value, ast.Call) and len(value.args) > 1):
                    continue
                htp = value.args[1]
                if isinstance(htp, ast.Call) and htp.args and isinstance(htp.args[0], ast.Attribute):
                    m = re.fullmatch(r"V(\d+)", htp.args[0].attr)
                    if m:
                        out[key.attr] = int(m.group(1))
    return out
