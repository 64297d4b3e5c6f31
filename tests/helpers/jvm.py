"""JUnit classes of tests/jvm run on a JVM against the Java API (`deployc native build --jni`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from deployc.targets.native_build import JavaApi, java_home
from helpers.projects import REPO

SOURCES = REPO / "tests" / "jvm"
# Debian's junit4 package (the Makefile installs it with the JDK).
JUNIT = (Path("/usr/share/java/junit4.jar"), Path("/usr/share/java/hamcrest-core.jar"))


def run_junit(api: JavaApi, work: Path, classes: list[str], properties: dict[str, str],
              timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Compiles tests/jvm and runs `classes` with JUnit 4 under -Xcheck:jni (the JVM checks every JNI call the
    library makes) and a heap of a fixed 96 MB, resident from the start (its growth would blur the leak test's
    resident memory); properties become -D system properties."""
    javac = java_home() / "bin" / "javac"
    out = work / "classes"
    path = ":".join(str(p) for p in (api.jar, *JUNIT))
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    subprocess.run([str(javac), "-d", str(out), "-cp", path, *sources], check=True, capture_output=True, text=True)
    flags = [f"-D{k}={v}" for k, v in {"deployc.library": str(api.library), **properties}.items()]
    java = java_home() / "bin" / "java"
    return subprocess.run([str(java), "-Xcheck:jni", "-Xms96m", "-Xmx96m", "-XX:+AlwaysPreTouch", *flags, "-cp", f"{out}:{path}", "org.junit.runner.JUnitCore",
                           *classes], capture_output=True, text=True, timeout=timeout)


def expected_answers(runner: Path, bundle: Path, input_name: str, questions: list[str]) -> list[dict[str, Any]]:
    """Per question: deployc run's answer, token count and (a RAG bundle) sources, checked equal to
    deployc-runner's first: what the Java API must give."""
    sys.path.insert(0, str(REPO / "manifests"))
    from deployc.runtime.pipeline_runner import Bundle

    python = Bundle(bundle)
    rows = []
    for question in questions:
        outputs = python.run({input_name: question})["outputs"]
        proc = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", f"{input_name}={question}"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        native = json.loads(proc.stdout)
        assert native["outputs"]["answer"] == outputs["answer"]
        row = {"question": question, "answer": outputs["answer"], "tokens": native["generation"]["tokens"]}
        if "sources" in outputs:
            assert [c["id"] for c in native["outputs"]["sources"]] == [c["id"] for c in outputs["sources"]]
            row |= {"source_ids": [c["id"] for c in outputs["sources"]], "first_source": outputs["sources"][0]["source"]}
        rows.append(row)
    return rows


def bundle_test(api: JavaApi, work: Path, bundle: Path, name: str, input_name: str, expected: list[dict[str, Any]],
                flipped: Path) -> subprocess.CompletedProcess[str]:
    """tests/jvm's BundleTest on `bundle`, with a copy whose runtime.bin has a flipped byte and `flipped` (a
    bundle whose mlp_fp32 weight is flipped under a matching lock)."""
    import shutil

    (work / "expected.json").write_text(json.dumps(expected))
    corrupt = work / "corrupt"
    shutil.copytree(bundle, corrupt)
    data = bytearray((corrupt / "runtime.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (corrupt / "runtime.bin").write_bytes(bytes(data))
    return run_junit(api, work, ["dev.deployc.BundleTest"], {
        "deployc.bundle": str(bundle), "deployc.name": name, "deployc.input": input_name,
        "deployc.expected": str(work / "expected.json"), "deployc.corrupt": str(corrupt),
        "deployc.flipped": str(flipped)})


def passed_cleanly(proc: subprocess.CompletedProcess[str], tests: int) -> int:
    """Asserts JUnit's OK for `tests` tests and no -Xcheck:jni warning; the rise of the resident floor the leak
    test printed (kB)."""
    assert proc.returncode == 0, proc.stdout[-6000:]  # JUnit's report; stderr holds the runtime's log lines
    assert f"OK ({tests} tests)" in proc.stdout, proc.stdout[-3000:]
    assert "WARNING in native method" not in proc.stdout + proc.stderr  # -Xcheck:jni found no misuse
    return int(proc.stdout.split("resident floor rise over 150 open/close cycles: ")[1].split()[0])
