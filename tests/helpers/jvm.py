"""JUnit classes of tests/jvm run on a JVM against the Java API (`deployc native build --jni`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from deployc.targets.native_build import JavaApi, java_home
from helpers.projects import REPO

SOURCES = REPO / "tests" / "jvm"
# Debian's junit4 package (the Makefile installs it with the JDK).
JUNIT = (Path("/usr/share/java/junit4.jar"), Path("/usr/share/java/hamcrest-core.jar"))


def run_junit(api: JavaApi, work: Path, classes: list[str], properties: dict[str, str],
              timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Compiles tests/jvm and runs `classes` with JUnit 4 under -Xcheck:jni (the JVM checks every JNI call the
    library makes); properties become -D system properties."""
    javac = java_home() / "bin" / "javac"
    out = work / "classes"
    path = ":".join(str(p) for p in (api.jar, *JUNIT))
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    subprocess.run([str(javac), "-d", str(out), "-cp", path, *sources], check=True, capture_output=True, text=True)
    flags = [f"-D{k}={v}" for k, v in {"deployc.library": str(api.library), **properties}.items()]
    java = java_home() / "bin" / "java"
    return subprocess.run([str(java), "-Xcheck:jni", *flags, "-cp", f"{out}:{path}", "org.junit.runner.JUnitCore",
                           *classes], capture_output=True, text=True, timeout=timeout)
