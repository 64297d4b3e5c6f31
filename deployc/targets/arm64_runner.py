"""The reference runner for arm64 Linux, made and run on an x86-64 Debian build machine: how deployc checks
programs on the kernels a phone's or an UNO Q's CPU runs (XNNPACK's NEON code), not on x86's.

What it is made of, all from package registries (docs/native.md, "The runner for arm64"):
- ExecuTorch's C++ runtime for arm64: the `executorch` wheel for manylinux_2_28_aarch64, the same release
  as the installed executorch, fetched with pip and checked against the sha256 in WHEEL;
- Debian's cross compiler (g++-aarch64-linux-gnu) and arm64 multiarch -dev packages for the runner's
  other libraries; libsentencepiece cannot be installed beside the host's own, so its two arm64 packages
  are fetched with `apt-get download` and unpacked into the toolchain folder instead;
- qemu-aarch64 (Debian's qemu-user) runs the binary with the arm64 C library of `libc6:arm64`. Not with
  `-L /usr/aarch64-linux-gnu`: that folder's loader is the cross package's glibc build, and with a multiarch
  libc6 installed it loads the other build's libc.so.6; the process then spins forever in pthread_create.

Everything lands in the toolchain folder ($DEPLOYC_TOOLCHAINS, default ~/.cache/deployc/toolchains), named by
content: the runner's folder by the sha256 of its sources, the wheel and the compiler, so a changed source
builds a new runner and an unchanged one is reused by every build on the machine.

Nothing here imports torch or executorch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.core import installed
from deployc.core.cache_location import user_cache_home
from deployc.core.digests import file_sha256, key_of
from deployc.core.errors import BuildError, RunError
from deployc.targets.native_build import SOURCE, build_runner

ARCH = "aarch64"
# The aarch64 wheel of the executorch release deployc pins (pyproject.toml), and its sha256 on PyPI.
WHEEL_VERSION = "1.5.1"
WHEEL_FILE = f"executorch-{WHEEL_VERSION}-cp311-cp311-manylinux_2_28_aarch64.whl"
WHEEL_SHA256 = "8ee02348a3ea80ddf770822911ebf78da616b73afce0fbaaa79f23311c88c66a"
# Debian packages the arm64 runner needs on the build machine (after `dpkg --add-architecture arm64`).
DEBIAN_PACKAGES = ("g++-aarch64-linux-gnu qemu-user libc6:arm64 libstdc++6:arm64 libflatbuffers-dev:arm64 "
                   "libssl-dev:arm64 libutf8proc-dev:arm64 libpcre2-dev:arm64 libpng-dev:arm64 libjpeg-dev:arm64")
UNPACKED_PACKAGES = ("libsentencepiece0:arm64", "libsentencepiece-dev:arm64")  # not co-installable with amd64's
TOOLCHAIN_FILE = SOURCE / "cmake" / "aarch64-linux-gnu.cmake"
LOADER = Path("/lib/ld-linux-aarch64.so.1")  # from libc6:arm64
QEMU_ENV = "DEPLOYC_QEMU_AARCH64"  # another qemu-aarch64 than the one on PATH
INSTALL_HINT = (f"dpkg --add-architecture arm64 && apt-get update && apt-get install {DEBIAN_PACKAGES} "
                "(`make system-deps` does this)")


class Unavailable(Exception):
    """The arm64 runner cannot be had on this machine: the reason, for a `not-run`."""


def toolchains_dir() -> Path:
    return Path(os.environ.get("DEPLOYC_TOOLCHAINS") or user_cache_home() / "toolchains")


def _publish(staging: Path, final: Path) -> Path:
    """Moves a finished folder into place; another process that finished first wins (same content)."""
    try:
        staging.rename(final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _staging(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".staging-", dir=root))


def runtime(progress: Callable[[str], None]) -> Path:
    """ExecuTorch's arm64 runtime (the wheel's lib/, include/ and share/), fetched and checked once per machine."""
    have = installed.version("executorch")
    if have != WHEEL_VERSION:
        raise Unavailable(f"the arm64 runtime is pinned to executorch {WHEEL_VERSION}; this environment has "
                          f"executorch {have or 'none'}")
    final = toolchains_dir() / f"executorch-{WHEEL_VERSION}-{ARCH}"
    if (final / "executorch" / "share" / "cmake").is_dir():
        return final / "executorch"
    staging = _staging(toolchains_dir())
    try:
        progress(f"fetching {WHEEL_FILE} with pip")
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                               "--python-version", "3.11", "--platform", "manylinux_2_28_aarch64",
                               f"executorch=={WHEEL_VERSION}", "-d", str(staging / "wheel")],
                              capture_output=True, text=True)
        wheel = staging / "wheel" / WHEEL_FILE
        if proc.returncode != 0 or not wheel.is_file():
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise Unavailable(f"pip could not fetch {WHEEL_FILE}: {lines[-1] if lines else 'no output'}")
        actual = file_sha256(wheel)
        if actual != WHEEL_SHA256:
            raise Unavailable(f"{WHEEL_FILE} has sha256 {actual}, not the pinned {WHEEL_SHA256}")
        with zipfile.ZipFile(wheel) as z:
            kept = ("executorch/lib/", "executorch/include/", "executorch/share/")
            z.extractall(staging, [n for n in z.namelist() if n.startswith(kept) and not n.endswith(".py")])
        wheel.unlink()
        return _publish(staging, final) / "executorch"
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def unpacked_packages(progress: Callable[[str], None]) -> Path:
    """The arm64 packages apt cannot install beside the host's, unpacked (prefix: the folder's usr/)."""
    final = toolchains_dir() / f"debian-arm64-{key_of(UNPACKED_PACKAGES)[:16]}"
    if (final / "usr").is_dir():
        return final / "usr"
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise Unavailable("apt-get and dpkg are needed to fetch libsentencepiece for arm64 (a Debian machine)")
    staging = _staging(toolchains_dir())
    try:
        progress(f"fetching {' '.join(UNPACKED_PACKAGES)} with apt-get download")
        proc = subprocess.run(["apt-get", "download", *UNPACKED_PACKAGES], cwd=staging, capture_output=True, text=True)
        debs = sorted(staging.glob("*.deb"))
        if proc.returncode != 0 or len(debs) != len(UNPACKED_PACKAGES):
            lines = proc.stderr.strip().splitlines()
            raise Unavailable(f"apt-get download {' '.join(UNPACKED_PACKAGES)} failed: "
                              f"{lines[-1] if lines else 'no packages'} ({INSTALL_HINT})")
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(staging)], check=True, capture_output=True)
            deb.unlink()
        # Their pkg-config file names /usr; the libraries are here.
        for pc in (staging / "usr").rglob("*.pc"):
            pc.write_text(pc.read_text().replace("prefix=/usr", f"prefix={final / 'usr'}"))
        return _publish(staging, final) / "usr"
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _qemu() -> str:
    return os.environ.get(QEMU_ENV) or "qemu-aarch64"


def _missing_tools() -> list[str]:
    tools = ("aarch64-linux-gnu-g++", _qemu(), "cmake", "pkg-config", "readelf")
    missing = [t for t in tools if shutil.which(t) is None]
    if not LOADER.exists():
        missing.append(f"{LOADER} (libc6:arm64)")
    return missing


_STARTED: set[Arm64Runner] = set()  # runners qemu has started in this process


@dataclass(frozen=True)
class Arm64Runner:
    binary: Path
    library_dirs: tuple[Path, ...]  # the arm64 runtime's and the unpacked packages' libraries
    identity: str  # what a cached arm64 check depends on: this runner, its libraries and qemu

    def probe(self) -> None:
        """Raises Unavailable unless qemu starts the binary and the binary finds its libraries (once)."""
        if self in _STARTED:
            return
        proc = self.run("max", "--measure", "/nonexistent.pte", "/nonexistent.json", timeout=120)
        if "cannot read" not in proc_text(proc):
            raise Unavailable(f"qemu-aarch64 could not start the arm64 runner: {proc_text(proc)[-300:]}")
        _STARTED.add(self)

    def libraries(self) -> tuple[list[Path], list[str]]:
        """What the binary loads, by ELF NEEDED entries followed through the toolchain folder: (the files
        to copy beside it, the sonames the device's own arm64 libraries provide)."""
        copy: dict[str, Path] = {}
        system: set[str] = set()
        todo = [self.binary]
        while todo:
            for soname in _needed(todo.pop()):
                if soname in copy or soname in system:
                    continue
                found = next((d / soname for d in self.library_dirs if (d / soname).is_file()), None)
                if found is None:
                    system.add(soname)
                else:
                    copy[soname] = found
                    todo.append(found)
        return sorted(copy.values()), sorted(system)

    def self_test(self, bundle: Path, cpu: str) -> dict[str, Any]:
        """The runner's --self-test document for a bundle (exit 1 is a program that missed: still a document)."""
        proc = self.run(cpu, str(bundle), "--self-test")
        return _document(proc, "--self-test")

    def environment(self) -> dict[str, str]:
        return {**os.environ, "LD_LIBRARY_PATH": ":".join(str(d) for d in self.library_dirs)}

    def command(self, cpu: str, *args: str) -> list[str]:
        """The runner under qemu, emulating `cpu` (a qemu-aarch64 -cpu model: what the kernels may use)."""
        return [_qemu(), "-cpu", cpu, str(self.binary), *args]

    def run(self, cpu: str, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(cpu, *args), capture_output=True, text=True, env=self.environment(),
                              timeout=timeout)

    def measure(self, pte: Path, vectors: Path, data: Path | None, cpu: str) -> dict[str, Any]:
        """The program on its self-test vectors, run by the arm64 runtime under qemu: the runner's
        `--measure` document, or {"status": "failed", "reason": ...} when it could not run."""
        args = [str(pte), str(vectors), *(["--data", str(data)] if data else [])]
        proc = self.run(cpu, "--measure", *args)
        doc = _json(proc) if proc.returncode == 0 else None
        return doc or {"status": "failed", "reason": f"the arm64 runner exited {proc.returncode}: {_last_line(proc)}"}


def _needed(elf: Path) -> list[str]:
    proc = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True)
    return [line.split("[", 1)[1].rstrip("]") for line in proc.stdout.splitlines() if "(NEEDED)" in line]


def _sources_key() -> str:
    files = sorted(p for p in SOURCE.rglob("*") if p.is_file() and "build" not in p.relative_to(SOURCE).parts[:1])
    schema = SOURCE.parent / "deployc" / "packaging" / "runtime_config.fbs"
    return key_of([(p.relative_to(SOURCE).as_posix(), file_sha256(p)) for p in files], file_sha256(schema))


def _version(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return (proc.stdout or proc.stderr).strip().splitlines()[0] if proc.returncode == 0 else "unknown"


def prepare(progress: Callable[[str], None], build_dir: Path | None = None) -> Arm64Runner:
    """The arm64 runner, built on first use (about a minute on 2 cores) into the toolchain folder, or
    into build_dir. Raises Unavailable with the reason when this machine cannot have it."""
    missing = _missing_tools()
    if missing:
        raise Unavailable(f"{', '.join(missing)} not found; install: {INSTALL_HINT}")
    executorch = runtime(progress)
    packages = unpacked_packages(progress)
    compiler = _version(["aarch64-linux-gnu-g++", "--version"])
    key = key_of(_sources_key(), WHEEL_SHA256, compiler, UNPACKED_PACKAGES)
    folder = build_dir or toolchains_dir() / f"runner-{ARCH}-{key[:16]}"
    binary = folder / "deployc-runner"
    if build_dir is not None or not binary.is_file():  # a folder of the user's: CMake decides what is stale
        progress(f"building the arm64 runner into {folder}")
        pkg_config = ":".join([str(p) for p in packages.rglob("pkgconfig")] +
                              ["/usr/lib/aarch64-linux-gnu/pkgconfig", "/usr/share/pkgconfig"])
        try:
            build_runner(folder, progress, prefixes=(executorch, packages),
                         cmake_args=(f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN_FILE}",),
                         env={**os.environ, "PKG_CONFIG_LIBDIR": pkg_config})
        except BuildError as exc:
            raise Unavailable(f"the arm64 runner did not build: {str(exc).splitlines()[0]}") from exc
    library_dirs = (executorch / "lib", packages / "lib" / "aarch64-linux-gnu")
    qemu = _version([_qemu(), "--version"])
    return Arm64Runner(binary=binary, library_dirs=library_dirs,
                       identity=key_of(file_sha256(binary), WHEEL_SHA256, qemu, UNPACKED_PACKAGES))


def bundle_cpu(bundle: Path, search_from: Path) -> str:
    """The CPU model to emulate for a bundle: its profile's device.emulated_cpu, the profile found by name
    from `search_from` as a build would find it (runtime.json keeps only the device's identity), else the
    default."""
    from deployc.core.errors import DeploycError
    from deployc.targets.profile import DEFAULT_EMULATED_CPU, load_profile, search_path

    name = json.loads((bundle / "runtime.json").read_text())["bundle"]["profile"]
    try:
        profile = load_profile(name, search_from, search_path(search_from)).profile
    except DeploycError:
        return DEFAULT_EMULATED_CPU
    return profile.device.emulated_cpu or DEFAULT_EMULATED_CPU


def run_pipeline(runner: Arm64Runner, bundle: Path, values: dict[str, str], cpu: str) -> dict[str, Any]:
    """`deployc run --arch aarch64`: the bundle's pipeline by the arm64 runner under qemu (image and audio
    inputs are files; text inputs their value)."""
    config = json.loads((bundle / "runtime.json").read_text())
    pipeline = config.get("pipeline") or {}
    kinds = dict(zip(pipeline.get("inputs", []), pipeline.get("input_types", [])))
    args = [str(bundle), "--pipeline"]
    for name, value in values.items():
        args += ["--file" if kinds.get(name, "text") != "text" else "--text", f"{name}={value}"]
    return _document(runner.run(cpu, *args), "--pipeline")


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The runner's last message (qemu's cpuinfo notes left out)."""
    lines = [line for line in proc.stderr.strip().splitlines() if "cpuinfo" not in line]
    return lines[-1] if lines else "no message"


def _document(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    doc = _json(proc)
    if doc is None:
        raise RunError(f"the arm64 runner ({what}) exited {proc.returncode}: {_last_line(proc)}")
    return doc


def proc_text(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stdout + proc.stderr).strip()
