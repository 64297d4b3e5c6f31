"""`deployc native build`: configure and build the C++ reference runner against the installed executorch, and
(`--jni`) the Java API's JNI library and jar from the same sources."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deployc.core.errors import BuildError

SOURCE = Path(__file__).resolve().parents[2] / "native"
DEBIAN_PACKAGES = ("cmake g++ pkg-config libflatbuffers-dev flatbuffers-compiler nlohmann-json3-dev libssl-dev "
                   "libutf8proc-dev libpcre2-dev libsentencepiece-dev libpng-dev libjpeg-dev")
JDK_PACKAGES = "openjdk-17-jdk-headless junit4"


@dataclass(frozen=True)
class JavaApi:
    library: Path  # libdeployc_jni.so: System.load it, or -Ddeployc.library=PATH
    jar: Path      # deployc.jar: the dev.deployc classes


def java_home() -> Path:
    """The JDK of the javac on PATH (JAVA_HOME when set): its jni.h is what the library compiles against."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    javac = shutil.which("javac")
    if javac is None:
        raise BuildError(f"javac not found: --jni needs a JDK, e.g. `apt-get install {JDK_PACKAGES}`")
    return Path(javac).resolve().parents[1]


def build_java_api(build_dir: Path, progress: Callable[[str], None], jobs: int | None = None) -> JavaApi:
    """The runner, and beside it the JNI library and the jar (CMake's DEPLOYC_JNI), in one build folder."""
    home = java_home()
    build_runner(build_dir, progress, jobs, cmake_args=("-DDEPLOYC_JNI=ON",),
                 env={**os.environ, "JAVA_HOME": str(home)})
    api = JavaApi(build_dir / "libdeployc_jni.so", build_dir / "deployc.jar")
    for path in (api.library, api.jar):
        if not path.is_file():
            raise BuildError(f"the build finished but {path} is missing")
    return api


def executorch_prefix() -> Path:
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("executorch is not installed in this Python environment")
    return Path(next(iter(spec.submodule_search_locations)))


def build_runner(build_dir: Path, progress: Callable[[str], None], jobs: int | None = None,
                 prefixes: tuple[Path, ...] = (), cmake_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> Path:
    """prefixes: where CMake finds executorch (default: the installed wheel) and other libraries;
    cmake_args, env: more configure arguments and environment (a cross build's toolchain file, pkg-config path)."""
    if not (SOURCE / "CMakeLists.txt").is_file():
        raise BuildError(f"the runner's sources are not at {SOURCE} (a checkout of the deployc repository has them)")
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        raise BuildError(f"{' and '.join(missing)} not found; install them, e.g. "
                         f"`apt-get install {DEBIAN_PACKAGES}`")
    steps = [
        ["cmake", "-S", str(SOURCE), "-B", str(build_dir),
         f"-DCMAKE_PREFIX_PATH={';'.join(str(p) for p in prefixes or (executorch_prefix(),))}",
         "-DCMAKE_BUILD_TYPE=Release", *cmake_args],
        ["cmake", "--build", str(build_dir), "-j", str(jobs or os.cpu_count() or 1)],
    ]
    for cmd in steps:
        progress("$ " + " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            hint = (f" (missing packages? `apt-get install {DEBIAN_PACKAGES}`)"
                    if "Could not find" in tail or "not found" in tail else "")
            raise BuildError(f"{cmd[0]} {cmd[1]} failed{hint}:\n{tail}")
    runner = build_dir / "deployc-runner"
    if not runner.is_file():
        raise BuildError(f"the build finished but {runner} is missing")
    return runner
