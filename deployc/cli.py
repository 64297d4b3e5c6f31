"""Command line. Commands only wire stages together; `main` is the one error boundary."""

from __future__ import annotations

import os
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import click
import typer

from deployc.console import Console
from deployc.views import (
    render_build,
    render_diff,
    render_inspect,
    render_plan,
    render_profile,
    render_pte,
    render_run,
)
from deployc.errors import DeploycError, UsageError, UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Declarative deployment compiler for on-device AI.")
targets_app = typer.Typer(no_args_is_help=True, help="List and show target device profiles.")
app.add_typer(targets_app, name="targets")
native_app = typer.Typer(no_args_is_help=True, help="The C++ reference runner.")
app.add_typer(native_app, name="native")

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")]


@app.command()
def validate(manifests: Annotated[list[Path], typer.Argument(help="manifest files")]) -> None:
    """Load and check manifests and the profiles they name. Builds nothing, imports no model code."""
    from deployc.project import load_project

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


CacheOpt = Annotated[Optional[str], typer.Option(
    "--cache-dir", help="cache directory or fsspec URL shared between machines (file://, s3://, gs://, ...); "
                        "default: $DEPLOYC_CACHE_DIR or ~/.cache/deployc")]
class ExecutorName(str, Enum):
    local = "local"
    ray = "ray"


TargetOpt = Annotated[Optional[str], typer.Option("--target", help="only this target")]


@app.command()
def plan(manifest: Path, target: TargetOpt = None, cache_dir: CacheOpt = None, json_out: JsonOpt = False) -> None:
    """Print the build plan: what would be built, where, and why alternatives were skipped. Builds nothing."""
    from deployc.cache import cache_spec, open_cache, unit_id
    from deployc.plan import make_plan, plan_json
    from deployc.project import load_project
    from deployc.toolchain import detect

    console = Console(json_mode=json_out)
    build_plan = make_plan(load_project(manifest), detect(), target)
    cache = open_cache(cache_spec(cache_dir))
    status = {u.program_key: cache.status(u.program_key, unit_id(u.model, u.target, u.unit))
              for u in build_plan.units()}
    status.update({a.key: "cached" if cache.of_kind("indexes").has(a.key) else "new"
                   for t in build_plan.targets for a in t.assets if a.kind == "vector_index"})
    if json_out:
        console.document({"plan": plan_json(build_plan), "cache": status})
        return
    render_plan(console, build_plan, status)


@app.command("build")
def build_cmd(
    manifest: Path,
    target: TargetOpt = None,
    out: Annotated[Path, typer.Option("--out", help="output directory")] = Path("dist"),
    jobs: Annotated[int, typer.Option("--jobs", min=0, help="parallel worker processes (0: one per core); with "
                                      "--executor ray and no --ray-address, the local cluster's CPUs")] = 0,
    cache_dir: CacheOpt = None,
    executor: Annotated[ExecutorName, typer.Option(
        "--executor", help="where units are built: worker processes here, or Ray tasks")] = ExecutorName.local,
    ray_address: Annotated[Optional[str], typer.Option(
        "--ray-address", help="Ray cluster to run on (default: $RAY_ADDRESS, else a local cluster for this build)")
    ] = None,
    json_out: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing release with other content")] = False,
    check_reproducible: Annotated[bool, typer.Option(
        "--check-reproducible", help="build again in a fresh process with an empty cache and compare bytes")] = False,
) -> None:
    """Build, verify and package bundles (default out dir dist/)."""
    from deployc.build import BuildReport, build
    from deployc.cache import cache_spec, open_cache
    from deployc.errors import BuildError
    from deployc.executors import make_executor
    from deployc.packaging.assets import build_assets
    from deployc.packaging.bundle import write_bundle
    from deployc.plan import make_plan
    from deployc.project import load_project
    from deployc.toolchain import detect

    console = Console(json_mode=json_out)
    if ray_address and executor is not ExecutorName.ray:
        raise UsageError("--ray-address needs --executor ray")
    runner = make_executor(executor.value, jobs or os.cpu_count() or 1, ray_address)
    project = load_project(manifest)
    build_plan = make_plan(project, detect(), target)
    cache = open_cache(cache_spec(cache_dir))
    results = build(build_plan, project, cache, runner, console.status, console.warn)
    bundles: dict[str, dict[str, str]] = {}
    not_written: dict[str, str] = {}
    for t in build_plan.targets:
        units = [results[f"{u.model}@{u.target}"] for u in t.units]
        failed = [u for u in units if u.status == "failed"]
        if failed:
            not_written[t.profile] = f"{len(failed)} unit(s) failed: " + ", ".join(u.unit.model for u in failed)
            continue
        assets = build_assets(project, t, results, cache, console.status)
        bundles[t.profile] = write_bundle(build_plan, t, units, project, out, force, assets)
    report = BuildReport(list(results.values()), bundles, not_written)
    differences: list[str] | None = None
    if check_reproducible and not report.failed:
        from deployc.reproducibility import rebuild_and_compare

        console.status("checking reproducibility: a second build in a fresh process with an empty cache")
        differences = rebuild_and_compare(manifest, target, bundles)
    if json_out:
        console.document({**report.to_json(), **({"reproducible": not differences, "differences": differences}
                                                 if differences is not None else {})})
    else:
        render_build(console, report)
        if differences is not None:
            console.result("reproducible: byte-identical" if not differences else "NOT reproducible:")
            for line in differences:
                console.result(f"  {line}")
    if report.failed:
        raise BuildError(f"{len(report.failed)} of {len(report.units)} unit(s) failed")
    if differences:
        raise BuildError(f"the second build differs in {len(differences)} file(s)")


@app.command()
def inspect(path: Path, json_out: JsonOpt = False) -> None:
    """Describe a bundle directory, a bundle archive or a .pte file; verify a bundle against its lock."""
    import tempfile

    from deployc.errors import BuildError
    from deployc.packaging.inspection import describe_bundle, describe_pte, open_bundle, verify_bundle

    console = Console(json_mode=json_out)
    if not path.exists():
        raise UserError.at(path, "no such file or directory")
    if path.is_file() and path.suffix == ".pte":
        info = describe_pte(path)
        if json_out:
            console.document(info)
            return
        render_pte(console, info)
        return
    with tempfile.TemporaryDirectory(prefix="deployc-inspect-") as scratch_dir:
        scratch = tempfile.TemporaryDirectory(dir=scratch_dir)
        folder = open_bundle(path, scratch)
        problems = verify_bundle(folder)
        info = describe_bundle(folder) if not any("lock" in p for p in problems) else {"path": str(path)}
        info["verified"] = not problems
        info["problems"] = problems
        info["path"] = str(path)
        if json_out:
            console.document(info)
        else:
            render_inspect(console, info)
    if problems:
        raise BuildError(f"{path}: {len(problems)} mismatch(es) against bundle.lock.json")


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
        fa = open_bundle(a, tempfile.TemporaryDirectory(dir=scratch_dir))
        fb = open_bundle(b, tempfile.TemporaryDirectory(dir=scratch_dir))
        result = diff_bundles(fa, fb)
    result["a"], result["b"] = str(a), str(b)
    if json_out:
        console.document(result)
        return
    render_diff(console, result)


@app.command()
def run(
    bundle: Path,
    inputs: Annotated[list[str], typer.Option("--input", help="pipeline input NAME=VALUE (repeatable)")] = [],  # noqa: B006
    json_out: JsonOpt = False,
) -> None:
    """Execute a bundle's pipeline on this host, from the bundle alone."""
    from deployc.runtime.pipeline_runner import Bundle, jsonable

    console = Console(json_mode=json_out)
    if not (bundle / "runtime.json").is_file():
        raise UserError.at(bundle, "not a bundle directory (no runtime.json)")
    values = {}
    for item in inputs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserError.at(bundle, f"--input {item!r}: expected NAME=VALUE")
        values[name] = value
    result = Bundle(bundle).run(values)
    if json_out:
        console.document(jsonable(result))
        return
    render_run(console, result)


@native_app.command("build")
def native_build(build_dir: Annotated[Path, typer.Option("--build-dir", help="CMake build directory")] = Path(
        "native/build")) -> None:
    """Configure and build the C++ reference runner (native/) against the installed executorch wheel."""
    from deployc.native_build import build_runner

    console = Console()
    runner = build_runner(build_dir, console.status)
    console.result(f"built {runner}")


@targets_app.command("list")
def targets_list(json_out: JsonOpt = False) -> None:
    """Profiles found on the search path (./targets and ancestors, then DEPLOYC_TARGETS_PATH)."""
    from deployc.targets.profile import available_profiles, search_path

    console = Console(json_mode=json_out)
    found = available_profiles(search_path(Path.cwd()))
    if json_out:
        console.document({name: str(p) for name, p in found.items()})
        return
    for name, p in found.items():
        console.result(f"{name}\t{p}")


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
    render_profile(console, loaded)


@app.command()
def schema(out: Annotated[Path, typer.Option(help="directory to write the schemas to")] = Path("schemas")) -> None:
    """Write JSON Schemas of the manifest and the profile (for editors)."""
    from deployc.schemas import write_schemas

    console = Console()
    for path in write_schemas(out):
        console.result(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    console = Console()
    try:
        app(args=args, prog_name="deployc", standalone_mode=False)
        return 0
    except DeploycError as exc:
        if debug:
            traceback.print_exc()
        console.error_lines(exc.lines())
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except OSError as exc:  # disk full, permissions, a vanished file: the user's environment, not a bug
        where = f"{exc.filename}: " if exc.filename else ""
        console.error_lines([f"error: {where}{exc.strerror or exc}",
                             "    hint: check free space and permissions; finished outputs were left as they were"])
        return 1
    except click.ClickException as exc:
        console.error_lines([f"error: {exc.format_message()}"])
        return 2
    except (KeyboardInterrupt, click.exceptions.Abort):
        console.error_lines(["interrupted"])
        return 130
    except Exception as exc:  # the boundary: a bug must still exit cleanly with code 3
        if debug:
            traceback.print_exc()
        console.error_lines([f"internal error: {type(exc).__name__}: {exc}",
                             "    hint: rerun with --debug for the traceback, and please report it"])
        return 3


def entry() -> None:
    sys.exit(main())
