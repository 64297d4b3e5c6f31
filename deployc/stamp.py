"""Stamps: an unchanged `validate`, `plan` or no-op `build` answered without running it again.

A run of one of those commands is recorded: every file it opened, listed, stat'ed or found missing
(with its inode, size, mtime and ctime at that moment), every file it wrote, and what it printed. A later
run with the same arguments, working directory, environment, interpreter and terminal whose recorded
observations all still hold prints the same output and exit code without importing deployc's
manifest, plan or CLI machinery (pydantic, typer and rich take most of a no-op's time).

Why this is safe without a hand-kept list of inputs: the list is what the run itself touched, so a new
input (a profile shadowing a built-in one, a new file in a model package, a cache entry, a bundle's
file) is seen because its directory or path was looked at. ctime cannot be set back by a user, so an
edit is seen even when size and mtime are kept. A run that spawned a process, opened a socket,
changed directory, loaded a native library or wrote anything but its declared output (`plan --out`)
and deployc's own hash records is not stamped; nor is one whose inputs changed within a second of it
(timestamps are coarse: an edit in the same tick could keep them). DEPLOYC_STAMP=off turns it off.

This module must stay cheap to import: the fast path runs before anything heavy is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

FORMAT = 2
COMMANDS = frozenset({"validate", "plan", "build"})
RACY_NS = 1_000_000_000  # inputs changed this close to the run are not trusted (coarse timestamps)
MAX_OUTPUT_BYTES = 8 << 20  # a declared output larger than this is not kept in a stamp
ENV_IGNORED = frozenset({"_", "OLDPWD", "SHLVL", "DEPLOYC_STAMP"})  # shells change these between runs
UNSTAMPABLE_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.chdir", "os.fchdir", "socket.connect", "socket.getaddrinfo", "urllib.Request", "ctypes.dlopen",
    "ctypes.dlsym", "sqlite3.connect", "os.startfile",
})
WRITE_EVENTS = frozenset({
    "os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.chown", "os.utime",
    "os.link", "os.symlink", "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
    "shutil.move",
})
# Kernel views (the process's namespaces, CPU counts): they change on every boot or call and are not
# anything a plan is made from.
VIRTUAL = ("/proc/", "/sys/", "/dev/")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# [type, dev, ino, size, mtime_ns, ctime_ns] of a file, ["dir"], ["names", sha256 of a listing], an errno,
# or None: missing
Snapshot = list[Any] | str | None


def enabled() -> bool:
    return os.environ.get("DEPLOYC_STAMP", "on") != "off"


def local_cache() -> str:
    """cache_paths.local_root(cache_spec(None)) for a local cache, without importing it (it loads
    pydantic): $DEPLOYC_CACHE_DIR, else ~/.cache/deployc. A URL there makes no run eligible."""
    spec = os.environ.get("DEPLOYC_CACHE_DIR") or ""
    if spec and "://" not in spec:
        return os.path.abspath(spec)
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(home, "deployc"))


def stamp_dir() -> str:
    """Where stamps are kept: beside deployc's hash records in the local cache."""
    return os.path.join(local_cache(), "stamps")


def eligible(argv: list[str]) -> bool:
    """The commands stamped, minus runs that read what a stamp cannot watch: standard input, a shared
    cache behind a URL (its state is remote)."""
    if not argv or argv[0] not in COMMANDS or "://" in os.environ.get("DEPLOYC_CACHE_DIR", ""):
        return False
    return not any(a in ("--debug", "--help", "-h", "-") or "://" in a for a in argv)


def declared_output(argv: list[str]) -> str | None:
    """`plan --out FILE`: the one file a stamped run may write (and a replay writes again)."""
    if argv[0] != "plan":
        return None
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            return os.path.abspath(argv[i + 1])
        if a.startswith("--out="):
            return os.path.abspath(a[len("--out="):])
    return None


def _terminal(fd: int) -> list[int] | None:
    try:
        if not os.isatty(fd):
            return None
        size = os.get_terminal_size(fd)
        return [size.columns, size.lines]
    except OSError:
        return None


def key(argv: list[str]) -> str:
    """Everything besides files that can change what these arguments print."""
    env = sorted((k, v) for k, v in os.environ.items() if k not in ENV_IGNORED)
    material = {"format": FORMAT, "argv": argv, "cwd": os.getcwd(), "executable": sys.executable,
                "version": sys.version, "path": sys.path, "env": env, "stdout": _terminal(1), "stderr": _terminal(2)}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()


def _stamp_path(k: str) -> str:
    return os.path.join(stamp_dir(), k[:2], f"{k}.json")


def _listed(name: str, hidden: str | None) -> bool:
    """Names a directory's snapshot leaves out: bytecode caches, atomic-write temporaries, and the
    declared output (its own command writes it, and a replay writes it again)."""
    return not (name == "__pycache__" or name == hidden or (name.startswith(".") and name.endswith(".tmp")))


def snapshot(path: str, stat_fn: Callable[..., os.stat_result] = os.stat) -> Snapshot:
    """What a stat or an open saw: a file by inode, size, mtime and ctime; a directory only as one (its
    timestamps change whenever anything in it comes and goes; a listing records its names)."""
    try:
        st = stat_fn(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"errno {exc.errno}"
    if stat.S_ISDIR(st.st_mode):
        return ["dir"]
    return [stat.S_IFMT(st.st_mode), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def listing(path: str, hidden: str | None = None) -> Snapshot:
    """What a directory listing saw: the names in it."""
    try:
        names = "\n".join(sorted(n for n in os.listdir(path) if _listed(n, hidden)))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"errno {exc.errno}"
    return ["names", hashlib.sha256(names.encode("utf-8", "surrogatepass")).hexdigest()]


def _hidden_in(path: str, output: str | None) -> str | None:
    """The name in folder `path` that leads to the declared output (the file itself, or a folder the
    command made for it): left out of the folder's listing, or the run that creates it never matches."""
    if output is None:
        return None
    rel = os.path.relpath(output, path)
    return None if rel == os.curdir or rel.startswith(os.pardir) else rel.split(os.sep, 1)[0]


def replay(argv: list[str]) -> int | None:
    """The exit code of an identical earlier run whose observations all still hold, after printing what
    it printed and rewriting its declared output; None when the command has to run."""
    if not enabled() or not eligible(argv):
        return None
    try:
        with open(_stamp_path(key(argv)), "rb") as f:
            data = json.loads(f.read())
        if data.get("format") != FORMAT:
            return None
        output = data.get("output")
        for path, snap in data["observed"]:
            if snapshot(path) != snap:
                return None
        for path, snap in data["listed"]:
            if listing(path, _hidden_in(path, output)) != snap:
                return None
        for path, content in data["outputs"].items():
            _write_output(path, content)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        for fd, text in data["printed"]:  # in the order printed: both streams may be one terminal
            stream = sys.stdout if fd == 1 else sys.stderr
            stream.write(text)
            stream.flush()
    except BrokenPipeError:  # `deployc plan | head`: what the command itself does on a closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return int(data["code"])


def _write_output(path: str, content: str) -> None:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            if f.read() == content:
                return
    except (OSError, UnicodeDecodeError):
        pass
    _write_atomically(path, content)


def _write_atomically(path: str, content: str) -> None:
    """Through a temp file renamed into place: a reader never sees half of it; the temp never stays."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(content)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class _Tee:
    """A text stream that keeps a copy of what is written through it, in one list with the other stream's
    (fd, text) parts."""

    def __init__(self, stream: TextIO, fd: int, printed: list[tuple[int, str]]) -> None:
        self._stream = stream
        self._fd = fd
        self._printed = printed
        self.binary = False

    def write(self, text: str) -> int:
        self._printed.append((self._fd, text))
        return self._stream.write(text)

    @property
    def buffer(self) -> Any:
        self.binary = True  # bytes written past the text layer are not captured: the run is not stamped
        return self._stream.buffer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _path_of(arg: Any) -> str | None:
    if isinstance(arg, int) or arg is None:
        return None
    try:
        path = os.fsdecode(os.fspath(arg))
    except TypeError:
        return None
    return os.path.abspath(path)


def _is_write(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and flags >= 0 and bool(flags & WRITE_FLAGS)


def _source_of(pyc: str) -> str | None:
    """The .py a bytecode file was compiled from: an edit to it is what matters, not the cache."""
    folder, name = os.path.split(pyc)
    if os.path.basename(folder) != "__pycache__" or not name.endswith(".pyc"):
        return None
    return os.path.join(os.path.dirname(folder), name.split(".", 1)[0] + ".py")


_active: Recorder | None = None
_hooked = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _active is not None:
        _active.audit(event, args)


class Recorder:
    """Watches one run of the CLI in this process and, when it can be replayed, stamps it."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.key = key(argv)
        self.output = declared_output(argv)
        self.started_ns = time.time_ns()
        self.observed: dict[str, Snapshot] = {}
        self.listed: dict[str, Snapshot] = {}
        self.stamps = stamp_dir()
        # deployc's sha256 records of large files: derived from files the run stats, so not inputs themselves
        self.side_records = os.path.join(local_cache(), "hashes")
        self.writes: set[str] = set()
        self.printed: list[tuple[int, str]] = []
        self.refused: str | None = None
        self._stat = os.stat
        self._lstat = os.lstat
        self._tees: tuple[_Tee, _Tee] | None = None
        self._streams: tuple[TextIO, TextIO] | None = None

    def _ignored(self, path: str) -> bool:
        return path.startswith((self.stamps, self.side_records, *VIRTUAL))

    def observe(self, path: str | None) -> None:
        if path is None or path in self.observed or self._ignored(path):
            return
        self.observed[path] = snapshot(path, self._stat)
        source = _source_of(path)
        if source is not None:
            self.observe(source)

    def list(self, path: str | None) -> None:
        if path is None or path in self.listed or self._ignored(path):
            return
        self.listed[path] = None  # our own listing below raises this audit event again
        self.listed[path] = listing(path, _hidden_in(path, self.output))

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path = _path_of(args[0])
            if path is None:
                return
            if _is_write(args[1], args[2] if len(args) > 2 else None):
                self.writes.add(path)
            else:
                self.observe(path)
        elif event in ("os.listdir", "os.scandir"):
            self.list(_path_of(args[0]) if args and args[0] is not None else os.getcwd())
        elif event in WRITE_EVENTS:
            for arg in args[:2] if event in ("os.rename", "os.link", "os.symlink", "shutil.copyfile",
                                             "shutil.move") else args[:1]:
                path = _path_of(arg)
                if path is not None:
                    self.writes.add(path)
        elif event in UNSTAMPABLE_EVENTS and self.refused is None:
            self.refused = event

    def _wrap(self, original: Callable[..., os.stat_result]) -> Callable[..., os.stat_result]:
        def recorded(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if not args and kwargs.get("dir_fd") is None:
                self.observe(_path_of(path))
            return original(path, *args, **kwargs)
        return recorded

    def __enter__(self) -> Recorder:
        global _active, _hooked
        if not _hooked:
            sys.addaudithook(_audit)  # audit hooks cannot be removed: this one idles once the run ends
            _hooked = True
        _active = self
        os.stat, os.lstat = self._wrap(self._stat), self._wrap(self._lstat)  # stat has no audit event
        self._streams = (sys.stdout, sys.stderr)
        self._tees = (_Tee(sys.stdout, 1, self.printed), _Tee(sys.stderr, 2, self.printed))
        sys.stdout, sys.stderr = self._tees  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        _active = None
        os.stat, os.lstat = self._stat, self._lstat
        if self._streams is not None:
            sys.stdout, sys.stderr = self._streams

    def finish(self, code: int) -> None:
        """Write the stamp if this run can be replayed; never fails the command."""
        if not enabled() or code != 0 or self._tees is None:
            return
        try:
            data = self._stamp(code)
            if data is None:
                return
            _write_atomically(_stamp_path(self.key), json.dumps(data))
        except (OSError, ValueError):  # a read-only or full cache: the next run just runs
            return

    def _allowed_write(self, path: str) -> bool:
        if path == self.side_records or path.startswith(self.side_records + os.sep):
            return True
        if "__pycache__" in path.split(os.sep):  # bytecode the interpreter caches
            return True
        if self.output is None:
            return False
        folder, name = os.path.split(self.output)
        if path == self.output or (os.path.dirname(path) == folder
                                   and os.path.basename(path).startswith(f".{name}.")):
            return True
        return self.output.startswith(path + os.sep)  # a parent made for it

    def _stamp(self, code: int) -> dict[str, Any] | None:
        assert self._tees is not None
        out, err = self._tees
        if self.refused is not None or out.binary or err.binary:
            return None
        if not all(self._allowed_write(p) for p in self.writes):
            return None
        if any("\x1b[?25l" in text for _, text in self.printed):  # a live display: its frames depend on timing
            return None
        for folder, files in self._package_files():
            self.list(folder)
            for path in files:
                self.observe(path)
        for entry in sys.path:  # site-packages: an install, upgrade or removal changes its listing
            if entry and os.path.isdir(entry):
                self.list(os.path.abspath(entry))
        observed = {p: s for p, s in self.observed.items() if p not in self.writes}
        if any(isinstance(s, list) and len(s) == 6 and s[5] >= self.started_ns - RACY_NS for s in observed.values()):
            return None
        outputs = {}
        if self.output is not None and self.output in self.writes:
            with open(self.output, "rb") as f:
                raw = f.read(MAX_OUTPUT_BYTES + 1)
            if len(raw) > MAX_OUTPUT_BYTES:
                return None
            outputs[self.output] = raw.decode("utf-8")
        printed: list[list[Any]] = []
        for fd, text in self.printed:  # consecutive writes to one stream joined
            if printed and printed[-1][0] == fd:
                printed[-1][1] += text
            else:
                printed.append([fd, text])
        return {"format": FORMAT, "argv": self.argv, "output": self.output, "code": code, "printed": printed,
                "outputs": outputs,
                "observed": sorted([p, s] for p, s in observed.items()),
                "listed": sorted([p, s] for p, s in self.listed.items())}

    @staticmethod
    def _package_files() -> list[tuple[str, list[str]]]:
        """deployc's own sources, folder by folder: modules imported before the run started are not
        seen opening."""
        root = os.path.dirname(os.path.abspath(__file__))
        found = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            found.append((folder, [os.path.join(folder, f) for f in sorted(files) if not f.endswith(".pyc")]))
        return found
