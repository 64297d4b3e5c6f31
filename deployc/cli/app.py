"""Command line. Commands parse their options and call the stages; `main` is the one error boundary."""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click import exceptions as click_exceptions  # typer vendors click (pinned in pyproject.toml)

from deployc.cli.console import Console
from deployc.core.errors import DeploycError, UsageError, UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Declarative deployment compiler for on-device AI.")
targets_app = typer.Typer(no_args_is_help=True, help="List and show target device profiles.")
app.add_typer(targets_app, name="targets")
native_app = typer.Typer(no_args_is_help=True, help="The C++ reference runner.")
app.add_typer(native_app, name="native")

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")]
TargetOpt = Annotated[str | None, typer.Option("--target", help="only this target")]
CacheOpt = Annotated[str | None, typer.Option(
    "--cache-dir", help="cache directory or fsspec URL shared between machines (file://, s3://, gs://, ...); "
                        "default: $DEPLOYC_CACHE_DIR or ~/.cache/deployc")]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", help="show what torch, torchao and the ExecuTorch runtime print (otherwise it goes to log files)")]


class Arch(StrEnum):
    aarch64 = "aarch64"


ArchOpt = Annotated[Arch | None, typer.Option(
    "--arch", help="aarch64: the arm64 Linux runner (cross-built; run here under qemu-aarch64)")]
CpuOpt = Annotated[str | None, typer.Option(
    "--cpu", help="with --arch: the CPU model qemu emulates (default: the bundle's device.emulated_cpu)")]


def _arm64_runner(console: Console, build_dir: Path | None = None) -> Any:
    from deployc.core.errors import BuildError
    from deployc.targets import arm64_runner

    try:
        runner = arm64_runner.prepare(console.status, build_dir)
        runner.probe()
    except arm64_runner.Unavailable as exc:
        raise BuildError(f"no arm64 runner on this machine: {exc}") from exc
    return runner


def _bundle_cpu(bundle: Path) -> str:
    from deployc.targets.arm64_runner import bundle_cpu

    return bundle_cpu(bundle, Path.cwd())


class ExecutorName(StrEnum):
    local = "local"
    ray = "ray"


@app.command()
def validate(manifests: Annotated[list[Path], typer.Argument(help="manifest files")]) -> None:
    """Load and check manifests and the profiles they name. Builds nothing, imports no model code."""
    from deployc.load.project import load_project

    console = Console()
    problems = []
    for path in manifests:
        try:
            project = load_project(path)
        except UserError as exc:
            problems.extend(exc.diagnostics)
            continue
        m = project.manifest
        console.result(f"{path}: ok ({m.name} {m.version}: {len(m.models)} model(s), "
                       f"targets {', '.join(m.targets)})")
    if problems:
        raise UserError(problems)


@app.command()
def init(
    model_dir: Annotated[Path, typer.Argument(
        help="a Hugging Face model directory (config.json, *.safetensors) or a GGUF file")],
    task: Annotated[str | None, typer.Option(
        "--task", help="embedding, text-classification, text-generation, image-classification, image-embedding, "
                       "depth-estimation, object-detection or audio-embedding (default: what config.json's "
                       "architectures say)")] = None,
    targets: Annotated[list[str], typer.Option(
        "--target", help="a target profile (repeatable; default: every profile `deployc targets list` shows)")] = [],  # noqa: B006
    out: Annotated[Path | None, typer.Option(
        "--out", help="the manifest to write (default: <model name>.yaml here); never overwritten")] = None,
) -> None:
    """Write a starter manifest for a model directory or GGUF file that validates and builds as written."""
    from deployc.plan.starter import make_starter, write_new
    from deployc.plan.toolchain import detect

    console = Console()
    starter = make_starter(model_dir, out, task, targets, detect())
    write_new(starter.path, starter.text)
    schemes = ", ".join(f"{t}: {s}" for t, s in starter.schemes.items())
    console.result(f"wrote {starter.path} ({starter.task}; {schemes})")
    console.status(f"next: deployc plan {starter.path}, then deployc build {starter.path}")


@app.command()
def plan(
    manifest: Path,
    target: TargetOpt = None,
    cache_dir: CacheOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="save the plan to this file, for `deployc build --plan`")] = None,
    dist: Annotated[Path, typer.Option(
        "--dist", help="the output directory builds go to, to say which releases would change")] = Path("dist"),
    json_out: JsonOpt = False,
) -> None:
    """Print the build plan: what would be built, where, and why alternatives were skipped. Builds nothing."""
    from deployc.build.cache import open_cache, plan_status
    from deployc.core.cache_location import chosen_cache
    from deployc.load.project import load_project
    from deployc.plan.build_plan import plan_json, save_plan
    from deployc.plan.planner import make_plan
    from deployc.plan.releases import release_status
    from deployc.plan.toolchain import detect

    console = Console(json_mode=json_out)
    cache = open_cache(chosen_cache(cache_dir))
    build_plan = make_plan(load_project(manifest), detect(), target, cache.file_hashes())
    if out is not None:
        save_plan(build_plan, out)
    status = plan_status(build_plan, cache)
    releases = release_status(build_plan, dist)
    if json_out:
        console.document({"plan": plan_json(build_plan), "cache": status,
                          "releases": [r.model_dump(mode="json") for r in releases]})
        return
    from deployc.cli.views import render_plan

    render_plan(console, build_plan, status, releases)
    if out is not None:
        console.status(f"plan saved to {out}; apply it with: deployc build --plan {out}")


@app.command("build")
def build_cmd(
    manifest: Annotated[Path | None, typer.Argument(help="the manifest (or --plan)")] = None,
    plan_file: Annotated[Path | None, typer.Option(
        "--plan", help="apply this saved plan (deployc plan --out) instead of planning a manifest")] = None,
    target: TargetOpt = None,
    out: Annotated[Path, typer.Option("--out", help="output directory")] = Path("dist"),
    jobs: Annotated[int, typer.Option("--jobs", min=0, help="parallel worker processes (0: one per core); with "
                                      "--executor ray and no --ray-address, the local cluster's CPUs")] = 0,
    cache_dir: CacheOpt = None,
    executor: Annotated[ExecutorName, typer.Option(
        "--executor", help="where units are built: worker processes here, or Ray tasks")] = ExecutorName.local,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", help="Ray cluster to run on (default: $RAY_ADDRESS, else a local cluster for this build)")
    ] = None,
    json_out: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing release with other content")] = False,
    check_reproducible: Annotated[bool, typer.Option(
        "--check-reproducible", help="build again in a fresh process with an empty cache and compare bytes")] = False,
    emulate: Annotated[bool, typer.Option(
        "--emulate/--no-emulate", help="also run arm64 devices' CPU programs on ExecuTorch's arm64 runtime under "
        "qemu-aarch64 (--no-emulate: report that check not-run)")] = True,
    verbose: VerboseOpt = False,
    html: Annotated[Path | None, typer.Option(
        "--report", help="also write the build's report as one self-contained HTML file here")] = None,
    etrecord: Annotated[Path | None, typer.Option(
        "--etrecord", help="also write each shipped program's ETRecord to DIR/<target>/<program>.etrecord "
        "(for deployc profile and Model Explorer; lowers a program again the first time)")] = None,
) -> None:
    """Build, verify and package bundles (default out dir dist/): plan the manifest and apply the plan."""
    from deployc.apply.apply_plan import apply, check_inputs
    from deployc.build.cache import open_cache
    from deployc.build.executors import make_executor
    from deployc.core.cache_location import chosen_cache
    from deployc.core.errors import BuildError
    from deployc.core.library_output import captured
    from deployc.plan.build_plan import load_plan
    from deployc.plan.toolchain import detect

    if (manifest is None) == (plan_file is None):
        raise UsageError("give a manifest or --plan PLAN_FILE (one of them)")
    if plan_file is not None and target is not None:
        raise UsageError("--target chooses what to plan; a saved plan has its targets already")
    if ray_address and executor is not ExecutorName.ray:
        raise UsageError("--ray-address needs --executor ray")
    console = Console(json_mode=json_out, verbose=verbose)
    runner = make_executor(executor.value, jobs or os.cpu_count() or 1, ray_address, verbose)
    toolchain = detect()
    cache = open_cache(chosen_cache(cache_dir))
    if plan_file is not None:
        build_plan = load_plan(plan_file)
        check_inputs(build_plan, toolchain, plan_file, cache.file_hashes())
        what = ["--plan", str(plan_file)]
    else:
        from deployc.load.project import load_project
        from deployc.plan.planner import make_plan

        assert manifest is not None
        build_plan = make_plan(load_project(manifest), toolchain, target, cache.file_hashes())
        what = [str(manifest), *(["--target", target] if target else [])]
    with console.progress() as events:
        report = apply(build_plan, out, cache, runner, force=force, events=events, say=console.status, emulate=emulate,
                       warn=console.warn)
    if check_reproducible and not report.failed:
        from deployc.cli.reproducibility import rebuild_and_compare

        console.status("checking reproducibility: a second build in a fresh process with an empty cache")
        differences = rebuild_and_compare(what, report.bundles)
        report = report.model_copy(update={"reproducible": not differences, "differences": differences})
    if etrecord is not None and report.bundles:
        from deployc.build.etrecords import write_etrecords

        with captured(_library_log("etrecord"), f"deployc build --etrecord {etrecord}"):
            records = write_etrecords(build_plan, report, cache, etrecord, console.status)
        report = report.model_copy(update={"etrecords": records})
    if html is not None:
        from deployc.packaging.report_source import sections_from_build

        with captured(_library_log("report"), f"deployc build --report {html}"):  # reading programs imports torch
            _write_report(html, f"{build_plan.manifest.name} {build_plan.manifest.version}",
                          sections_from_build(report))
        console.status(f"report: {html}")
    if json_out:
        console.document(report.to_json())
    else:
        from deployc.cli.views import render_build

        render_build(console, report)
    if report.failed:
        raise BuildError(f"{len(report.failed)} of {len(report.units)} unit(s) failed")
    if report.differences:
        raise BuildError(f"the second build differs in {len(report.differences)} file(s)")


@app.command()
def inspect(path: Path, json_out: JsonOpt = False,
            self_test: Annotated[bool, typer.Option(
                "--self-test", help="also run every program on the bundle's self-test vectors (exit 1 on a miss)",
            )] = False, arch: ArchOpt = None, cpu: CpuOpt = None) -> None:
    """Describe a bundle directory, a bundle archive or a .pte file; verify a bundle against its lock."""
    import tempfile

    from deployc.core.errors import BuildError
    from deployc.core.library_output import captured
    from deployc.packaging.inspection import (
        check_bundle,
        describe_bundle,
        describe_pte,
        open_bundle,
    )

    console = Console(json_mode=json_out)
    if not path.exists():
        raise UserError.at(path, "no such file or directory")
    if path.is_file() and path.suffix == ".pte":
        with captured(_library_log("inspect"), f"deployc inspect {path}"):  # reading it imports torch
            pte = describe_pte(path)
        if json_out:
            console.document(pte)
            return
        from deployc.cli.views import render_pte

        render_pte(console, pte)
        return
    with tempfile.TemporaryDirectory(prefix="deployc-inspect-") as scratch_dir:
        folder = open_bundle(path, Path(scratch_dir))
        check = check_bundle(folder)
        # Reading programs imports torch and torchao, whose import-time notes belong in the log, not here.
        with captured(_library_log("inspect"), f"deployc inspect {path}"):
            info: dict[str, Any] = {}
            if check.lock_readable:
                try:
                    info = describe_bundle(folder)
                except (ValueError, KeyError, TypeError, AttributeError, OSError):
                    if check.ok:  # a file the lock vouches for that cannot be read: not a damaged bundle, a bug
                        raise
                    # a damaged runtime.json or lock: the problems below name it; nothing to describe
            info.update({"path": str(path), "verified": check.ok, "problems": check.problems})
            if self_test and check.ok:  # vectors are only trusted from a bundle that matches its lock
                from deployc.runtime.self_test import run_self_test, run_self_test_arm64

                results = (run_self_test(folder) if arch is None else
                           run_self_test_arm64(folder, _arm64_runner(console), cpu or _bundle_cpu(folder)))
                info["self_test"] = [r.model_dump(mode="json") for r in results]
        if json_out:
            console.document(info)
        else:
            from deployc.cli.views import render_inspect

            render_inspect(console, info)
    if not check.ok:
        raise BuildError(f"{path}: {len(check.problems)} mismatch(es) against bundle.lock.json")
    failed = [r["program"] for r in info.get("self_test", []) if r["status"] == "failed"]
    if failed:
        raise BuildError(f"{path}: self-test failed for {', '.join(failed)}: the programs do not compute what the "
                         "build verified")


@contextmanager
def _opened_bundle(bundle: Path) -> Iterator[Path]:
    """A bundle directory, or an archive checked whole and unpacked into a scratch folder (removed after)."""
    import tempfile

    from deployc.packaging.inspection import open_bundle

    if not bundle.exists():
        raise UserError.at(bundle, "no such file or directory")
    with tempfile.TemporaryDirectory(prefix="deployc-bundle-") as scratch_dir:
        yield open_bundle(bundle, Path(scratch_dir))


@contextmanager
def _checked_bundle(bundle: Path, refusal: str) -> Iterator[Path]:
    """A bundle directory or archive opened (`_opened_bundle`) and checked against its lock: a bundle that
    differs is refused (`refusal` says what is not done)."""
    from deployc.core.errors import BuildError
    from deployc.packaging.inspection import check_bundle

    with _opened_bundle(bundle) as folder:
        check = check_bundle(folder)
        if not check.ok:
            raise BuildError(f"{bundle}: {len(check.problems)} mismatch(es) against bundle.lock.json; {refusal}")
        yield folder


HOST_NOTE = ("Latencies and operator times are this machine's (an NPU program's: the HTP emulator on x86), "
             "not the device's; sizes, memory and accuracy are the programs'.")


def _write_report(path: Path, title: str, sections: list[Any]) -> None:
    from deployc.core.atomic import write_atomic
    from deployc.packaging.html_report import render

    write_atomic(path, render(title, sections, [HOST_NOTE]))


@app.command()
def report(
    bundle: Annotated[Path, typer.Argument(help="a bundle directory or archive")],
    out: Annotated[Path, typer.Option("--out", help="the HTML file to write")] = Path("report.html"),
    with_profile: Annotated[bool, typer.Option(
        "--profile", help="also run every program here with ETDump and chart its time per operator")] = False,
    runs: Annotated[int, typer.Option("--runs", min=1, max=10_000, help="with --profile: timed calls")] = 20,
) -> None:
    """Write a bundle's report as one self-contained HTML file (tables and inline SVG charts, no network)."""
    from deployc.core.library_output import captured
    from deployc.packaging.report_source import section_from_bundle

    console = Console()
    with _checked_bundle(bundle, "no report") as folder:
        with captured(_library_log("report"), f"deployc report {bundle}"):
            profiles = None
            if with_profile:
                from deployc.runtime.profiler import profile_bundle

                profiles = profile_bundle(folder, None, runs, None)
            section = section_from_bundle(folder, profiles)
            section.bundle = f"bundle {bundle}"
        import json

        from deployc.core.layout import RUNTIME_JSON

        meta = json.loads((folder / RUNTIME_JSON).read_text())["bundle"]
        _write_report(out, f"{meta['name']} {meta['version']}", [section])
    console.result(f"report: {out}")


@app.command()
def profile(
    bundle: Annotated[Path, typer.Argument(help="a bundle directory or archive")],
    program: Annotated[str | None, typer.Option("--program", help="only this program (a model's name)")] = None,
    runs: Annotated[int, typer.Option("--runs", min=1, max=10_000, help="timed calls after one warm-up")] = 20,
    trace: Annotated[Path | None, typer.Option("--trace", help="also write a Chrome trace (JSON) here")] = None,
    etdump_dir: Annotated[Path | None, typer.Option(
        "--etdump-dir", help="keep each program's ETDump here (<program>.etdp)")] = None,
    etrecord_dir: Annotated[Path | None, typer.Option(
        "--etrecord-dir", help="read programs' ETRecords from here (deployc build --etrecord DIR: DIR/<target>) "
        "to name the modules operators ran for")] = None,
    runner: Annotated[Path | None, typer.Option(
        "--runner", help="run the programs with this deployc-runner (deployc native build: "
        "native/build/deployc-runner) and its --etdump instead of the Python runtime")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Time per operator and per delegate call of a bundle's programs, from ExecuTorch's ETDump, on this host."""
    import json

    from deployc.core.atomic import write_atomic
    from deployc.core.errors import BuildError
    from deployc.core.library_output import captured
    from deployc.runtime.profiler import chrome_trace, profile_bundle

    console = Console(json_mode=json_out)
    if runner is not None and not os.access(runner, os.X_OK):
        raise UserError.at(runner, "--runner: not an executable (build it with `deployc native build`)")
    with _checked_bundle(bundle, "not profiled") as folder, captured(_library_log("profile"),
                                                                     f"deployc profile {bundle}"):
        profiles = profile_bundle(folder, program, runs, etdump_dir, etrecord_dir, runner)
    if program is not None and not profiles:
        raise UserError.at(bundle, f"--program {program}: no such program in the bundle")
    if trace is not None:
        write_atomic(trace, json.dumps(chrome_trace([p for p in profiles if p.status == "profiled"])) + "\n")
    if json_out:
        console.document({"profiles": [p.model_dump(mode="json", exclude={"trace"}) for p in profiles],
                          "trace": str(trace) if trace else None})
    else:
        from deployc.cli.views import render_profiling

        render_profiling(console, profiles, trace)
    failed = [p for p in profiles if p.status == "failed"]
    if failed:
        raise BuildError(f"{bundle}: " + "; ".join(f"{p.program} failed to run: {p.reason}" for p in failed))


@app.command()
def diff(a: Path, b: Path, json_out: JsonOpt = False) -> None:
    """What changed between two bundles (directories or archives)."""
    import tempfile

    from deployc.packaging.bundle_diff import diff_bundles
    from deployc.packaging.inspection import open_bundle

    console = Console(json_mode=json_out)
    for p in (a, b):
        if not p.exists():
            raise UserError.at(p, "no such file or directory")
    with tempfile.TemporaryDirectory(prefix="deployc-diff-") as scratch_dir:
        fa, fb = open_bundle(a, Path(scratch_dir)), open_bundle(b, Path(scratch_dir))
        result = diff_bundles(fa, fb)
    result["a"], result["b"] = str(a), str(b)
    if json_out:
        console.document(result)
        return
    from deployc.cli.views import render_diff

    render_diff(console, result)


@app.command()
def run(
    bundle: Path,
    inputs: Annotated[list[str], typer.Option("--input", help="pipeline input NAME=VALUE (repeatable)")] = [],  # noqa: B006
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
    arch: ArchOpt = None,
    cpu: CpuOpt = None,
) -> None:
    """Execute a bundle's pipeline on this host, from the bundle alone (--arch aarch64: by the arm64 native
    runner under qemu-aarch64)."""
    from deployc.core.layout import RUNTIME_JSON
    from deployc.core.library_output import captured
    from deployc.runtime.pipeline_runner import Bundle, jsonable

    console = Console(json_mode=json_out, verbose=verbose)
    values = {}
    for item in inputs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserError.at(bundle, f"--input {item!r}: expected NAME=VALUE")
        values[name] = value
    with _opened_bundle(bundle) as folder:
        if not (folder / RUNTIME_JSON).is_file():
            raise UserError.at(bundle, f"not a bundle directory (no {RUNTIME_JSON})")
        if arch is not None:
            from deployc.targets.arm64_runner import run_pipeline

            result = run_pipeline(_arm64_runner(console), folder, values, cpu or _bundle_cpu(folder))
        else:
            with captured(None if verbose else _library_log("run"), f"deployc run {bundle}"):
                result = Bundle(folder).run(values)
    if json_out:
        console.document(jsonable(result))
        return
    from deployc.cli.views import render_run

    render_run(console, result)


@native_app.command("build")
def native_build(build_dir: Annotated[Path | None, typer.Option(
        "--build-dir", help="CMake build directory (default: native/build; with --arch, deployc's toolchain folder)")]
        = None, arch: ArchOpt = None, jni: Annotated[bool, typer.Option(
        "--jni", help="also the Java API: libdeployc_jni.so and deployc.jar (needs a JDK; docs/android.md)")]
        = False) -> None:
    """Configure and build the C++ reference runner (native/) against the installed executorch wheel, or
    (--arch aarch64) cross-compile it for arm64 Linux against the aarch64 wheel's runtime."""
    from deployc.targets.native_build import build_java_api, build_runner

    console = Console()
    if jni and arch is not None:
        raise UsageError("--jni builds for this host's JVM; it does not combine with --arch",
                         hint="docs/android.md says how the same sources build for Android")
    if jni:
        api = build_java_api(build_dir or Path("native/build"), console.status)
        console.result(f"built {api.library.parent / 'deployc-runner'}, {api.library} and {api.jar}")
        console.result(f"run Java with: -Ddeployc.library={api.library.resolve()} -cp {api.jar.resolve()}")
        return
    if arch is None:
        console.result(f"built {build_runner(build_dir or Path('native/build'), console.status)}")
        return
    runner = _arm64_runner(console, build_dir)
    copy, system = runner.libraries()
    console.result(f"built {runner.binary} (arm64 Linux)")
    console.result("copy these beside it on the device and run it with LD_LIBRARY_PATH set to that folder:")
    for library in copy:
        console.result(f"  {library}")
    console.result(f"the device's own arm64 libraries provide the rest: {', '.join(system)}")


@native_app.command("qnn-env")
def native_qnn_env() -> None:
    """Print, as shell exports, what the runner needs to run QNN programs on this host's HTP emulator."""
    import shlex

    from deployc.targets.backends.qnn.host import environment

    console = Console()
    for name, value in environment().items():
        console.result(f"export {name}={shlex.quote(value)}")


@targets_app.command("list")
def targets_list(json_out: JsonOpt = False) -> None:
    """Profiles on the search path: ./targets and its ancestors', DEPLOYC_TARGETS_PATH, then the built-in ones."""
    from deployc.targets.profile import profile_origins

    console = Console(json_mode=json_out)
    found = profile_origins(Path.cwd())
    if json_out:
        console.document({name: {"path": str(p), "from": origin} for name, (p, origin) in found.items()})
        return
    from deployc.cli.views import render_profiles

    render_profiles(console, found)


@targets_app.command("show")
def targets_show(name: str, json_out: JsonOpt = False) -> None:
    """A profile after inheritance."""
    from deployc.targets.profile import load_profile, search_path

    console = Console(json_mode=json_out)
    loaded = load_profile(name, Path.cwd(), search_path(Path.cwd()))
    data = loaded.profile.model_dump(mode="json", by_alias=True)
    if json_out:
        console.document(data)
        return
    from deployc.cli.views import render_profile

    render_profile(console, loaded)


@app.command()
def schema(out: Annotated[Path, typer.Option(help="directory to write the schemas to")] = Path("schemas")) -> None:
    """Write JSON Schemas of the manifest and the profile (for editors)."""
    from deployc.load.json_schemas import write_schemas

    console = Console()
    for path in write_schemas(out):
        console.result(f"wrote {path}")


def _library_log(command: str) -> Path:
    """Where what torch and the ExecuTorch runtime print during `command` goes: the local cache's logs."""
    from deployc.core.cache_location import cache_spec, local_root

    return local_root(cache_spec(None)) / "logs" / f"{command}.log"


# A path the user gave that the file system refuses, as opposed to a failed write.
_INPUT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EISDIR})
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def _os_error_lines(exc: OSError) -> list[str]:
    where = f"{exc.filename}: " if exc.filename else ""
    shown = where if len(where) <= 200 else f"{where[:120]}...{where[-40:]}"
    lines = [f"error: {shown}{exc.strerror or exc}"]
    if exc.errno in _WRITE_ERRNOS:
        lines.append("    hint: check free space and quotas; finished outputs were left as they were")
    elif exc.errno in (errno.EACCES, errno.EPERM):
        lines.append("    hint: check the permissions of that path")
    elif exc.errno == errno.ENAMETOOLONG:
        from deployc.load.paths import MAX_NAME_BYTES

        lines.append(f"    hint: a file name takes at most {MAX_NAME_BYTES} bytes")
    return lines


def _usage_lines(exc: Any) -> list[str]:
    """A usage error as click would show it: the usage line, where to get help, the problem."""
    ctx = getattr(exc, "ctx", None)
    lines = []
    if ctx is not None:
        lines.append(ctx.get_usage())
        lines.append(f"Try '{ctx.command_path} --help' for help.")
    lines.append(f"error: {exc.format_message()}")
    return lines


def _damaged_errors() -> tuple[type[BaseException], ...]:
    import gzip
    import zipfile
    import zlib

    return (EOFError, zlib.error, gzip.BadGzipFile, zipfile.BadZipFile)


_DAMAGED = _damaged_errors()


def _damaged(console: Console, exc: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc)
    console.error_lines([f"error: a file is truncated or damaged ({type(exc).__name__}: {exc or 'it ends early'})",
                         "    hint: rerun with --debug to see which file was being read"])
    return 2


def main(argv: list[str] | None = None) -> int:
    # deployc's records are its own: no pydantic plugin observes them, and looking for plugins scans every
    # installed distribution's entry points (~30 ms a command). A user's own setting is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    console = Console()
    try:
        result = app(args=args, prog_name="deployc", standalone_mode=False)
        return result if isinstance(result, int) else 0  # --help and no-argument runs return their exit code
    except DeploycError as exc:
        if debug:
            traceback.print_exc()
        console.error_lines(exc.lines())
        return exc.exit_code
    except click_exceptions.UsageError as exc:  # unknown option, missing argument, bad value
        if exc.format_message():  # no arguments at all: the help was printed, nothing more to say
            console.error_lines(_usage_lines(exc))
        return 2
    except typer.Exit as exc:
        return int(exc.exit_code)
    except SystemExit as exc:  # rich on a closed pipe (`deployc --help | head`)
        return exc.code if isinstance(exc.code, int) else 1
    except _DAMAGED as exc:  # a reader that did not name its file (those that do raise UserError); before OSError:
        return _damaged(console, exc, debug)  # gzip's BadGzipFile is one
    except OSError as exc:  # the user's environment (a full disk, permissions, a path), not a bug
        console.error_lines(_os_error_lines(exc))
        return 2 if exc.errno in _INPUT_ERRNOS else 1
    except click_exceptions.ClickException as exc:
        console.error_lines([f"error: {exc.format_message()}"])
        return exc.exit_code
    except (KeyboardInterrupt, typer.Abort) as exc:
        if isinstance(exc.__cause__, EOFError):  # click reports a file's early end as an Abort, as it does Ctrl-C
            return _damaged(console, exc.__cause__, debug)
        console.error_lines(["interrupted"])
        return 130
    except Exception as exc:  # the boundary: a bug must still exit cleanly with code 3
        if debug:
            traceback.print_exc()
        console.error_lines([f"internal error: {type(exc).__name__}: {exc}",
                             "    hint: rerun with --debug for the traceback, and please report it"])
        return 3


def entry() -> None:
    """The `deployc` console script."""
    sys.exit(main())
