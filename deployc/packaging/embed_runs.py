"""One run of the embed worker (packaging/embed_worker.py) over a list of texts, split into contiguous shards
with one worker process each, run at once, their vectors joined in the texts' order.

Each text is embedded alone, so the vectors do not depend on how the list is split: a split run gives the
bytes one process would. It pays where a program runs on one core of this host (QNN's HTP emulator takes
seconds per chunk); progress and the rate are said for the whole list.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from deployc.core.events import Say


@dataclass(frozen=True)
class Embedded:
    vectors: Any  # numpy array, one row per text
    log: str  # every process's stdout and stderr, in shard order
    rate: str  # "N chunks/s", or "" when the worker did not say


class EmbedFailed(Exception):
    def __init__(self, code: int, stderr: str, log: str) -> None:
        super().__init__(f"exit {code}")
        self.code, self.stderr, self.log = code, stderr, log


def shards(count: int, processes: int) -> list[range]:
    """Contiguous, near-equal ranges of `count` items over at most `processes` processes (one when empty)."""
    n = max(1, min(processes, count))
    bounds = [count * i // n for i in range(n + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(n)]


def run(worker: list[str], env: dict[str, str], texts: list[str], staging: Path, tag: str, processes: int,
        progress: Say, noun: str) -> Embedded:
    """`worker`: the embed worker's command line up to its TEXTS_JSON and OUT_NPY arguments."""
    import numpy as np  # only when an index is (re)built: a no-op rebuild stays light

    parts = shards(len(texts), processes)
    files = [(staging / f"{tag}-{i}.json", staging / f"{tag}-{i}.npy") for i in range(len(parts))]
    for (texts_file, _), part in zip(files, parts):
        texts_file.write_text(json.dumps(texts[part.start:part.stop]))
    lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
    procs: list[subprocess.Popen[str]] = []
    with contextlib.ExitStack() as stack:
        # Files, not pipes: a full stderr pipe would block its worker.
        errs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in parts]
        try:
            for i, ((texts_file, out), err) in enumerate(zip(files, errs)):
                proc = subprocess.Popen([*worker, str(texts_file), str(out)], stdout=subprocess.PIPE, stderr=err,
                                        text=True, env=env)
                procs.append(proc)
                threading.Thread(target=_read, args=(i, proc.stdout, lines), daemon=True).start()
            stdouts, codes, first = _follow(procs, lines, parts, progress, noun)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        stderrs = []
        for err in errs:
            err.seek(0)
            stderrs.append(err.read())
    log = "".join(out + err for out, err in zip(stdouts, stderrs))
    if first is not None:  # the others were stopped: their exit codes say nothing
        raise EmbedFailed(codes[first], stderrs[first], log)
    vectors = np.concatenate([np.load(out) for _, out in files])
    for texts_file, out in files:
        texts_file.unlink()
        out.unlink()
    return Embedded(vectors, log, _rate(stdouts, noun))


def _read(shard: int, stdout: IO[str] | None, lines: queue.Queue[tuple[int, str | None]]) -> None:
    assert stdout is not None
    for line in stdout:
        lines.put((shard, line))
    lines.put((shard, None))


def _follow(procs: list[subprocess.Popen[str]], lines: queue.Queue[tuple[int, str | None]], parts: list[range],
            progress: Say, noun: str) -> tuple[list[str], list[int], int | None]:
    """Gather each process's stdout, say the whole list's progress at each tenth, and stop the others as soon
    as one fails: (stdouts, exit codes, the shard that failed first)."""
    total = sum(len(p) for p in parts)
    outs: list[list[str]] = [[] for _ in procs]
    done = [0] * len(procs)
    codes = [0] * len(procs)
    shown, running, first = 0, len(procs), None
    while running:
        shard, line = lines.get()
        if line is None:
            running -= 1
            codes[shard] = procs[shard].wait()
            if codes[shard] != 0 and first is None:
                first = shard
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
            continue
        outs[shard].append(line)
        if (count := _progress(line)) is not None:
            done[shard] = count
            tenth = sum(done) * 10 // max(total, 1)
            if tenth > shown and sum(done) < total:
                shown = tenth
                progress(progress_line(f"progress {sum(done)} {total}", noun))
    return ["".join(o) for o in outs], codes, first


def _progress(line: str) -> int | None:
    words = line.split()
    if len(words) != 3 or words[0] != "progress" or not words[1].isdigit() or not words[2].isdigit():
        return None
    return int(words[1])


def progress_line(line: str, noun: str = "chunks") -> str:
    """`progress 40 200` from the embed worker as `40/200 chunks (20%)`; "" for any other line."""
    words = line.split()
    if _progress(line) is None:
        return ""
    done, total = int(words[1]), int(words[2])
    return f"{done}/{total} {noun} ({done * 100 // max(total, 1)}%)"


def _rate(stdouts: list[str], noun: str = "chunks") -> str:
    """Texts per second from each worker's last line (`embedded N in SECONDS`, timed after loading its
    program): all of them over the slowest process's time."""
    count, seconds = 0, 0.0
    for stdout in stdouts:
        last = stdout.strip().splitlines()[-1:] or [""]
        words = last[0].split()
        if len(words) != 4 or words[0] != "embedded":
            return ""
        count, seconds = count + int(words[1]), max(seconds, float(words[3]))
    if seconds <= 0:
        return ""
    rate = count / seconds
    # Slow programs (an NPU's on the HTP emulator: under one chunk a second) keep two digits, not "0".
    return f"{rate:,.0f} {noun}/s" if rate >= 10 else f"{rate:.2g} {noun}/s"
