"""Command line. Commands only wire stages together; `main` is the one error boundary."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import click
import typer
from rich.table import Table

from deployc.console import Console
from deployc.errors import DeploycError, UserError

if TYPE_CHECKING:
    from deployc.build import BuildReport

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


CacheOpt = Annotated[Optional[Path], typer.Option("--cache-dir", help="cache directory (default: $DEPLOYC_CACHE_DIR "
                                                                   "or ~/.cache/deployc)")]
TargetOpt = Annotated[Optional[str], typer.Option("--target", help="only this target")]


@app.command()
def plan(manifest: Path, target: TargetOpt = None, cache_dir: CacheOpt = None, json_out: JsonOpt = False) -> None:
    """Print the build plan: what would be built, where, and why alternatives were skipped. Builds nothing."""
    from deployc.cache import Cache, default_cache_dir, unit_id
    from deployc.plan import make_plan, plan_json
    from deployc.schema_base import format_size
    from deployc.project import load_project
    from deployc.toolchain import detect

    console = Console(json_mode=json_out)
    build_plan = make_plan(load_project(manifest), detect(), target)
    cache = Cache(cache_dir or default_cache_dir())
    status = {u.program_key: cache.status(u.program_key, unit_id(u.model, u.target, u.unit))
              for u in build_plan.units()}
    status.update({a.key: "cached" if cache.of_kind("indexes").has(a.key) else "new"
                   for t in build_plan.targets for a in t.assets if a.kind == "vector_index"})
    if json_out:
        console.document({"plan": plan_json(build_plan), "cache": status})
        return
    m = build_plan.manifest
    console.result(f"{m.name} {m.version}: {len(build_plan.units())} unit(s), "
                   f"{len(build_plan.programs())} distinct program(s)")
    table = Table("model", "target", "unit", "backend", "partitioners", "quantization", "dims", "cache", "program")
    skipped: list[str] = []
    for u in build_plan.units():
        dims = ", ".join(f"{d.name}={d.min}..{d.max}" for d in u.step_of("export").dims) or "static"
        table.add_row(u.model, u.target, u.unit, u.backend, " > ".join(u.step_of("lower").partitioners) or "-",
                      u.quantization, dims, status[u.program_key], u.program_key[:12])
        skipped.extend(f"  {u.model} on {u.target}: skipped {s.unit} ({s.backend}): {s.reason}" for s in u.skipped)
    console.table(table)
    for line in skipped:
        console.result(line)
    for u in build_plan.units():
        budget = u.step_of("budget")
        limit = min((v for k, v in budget.limits.items() if k in ("storage", "flash")), default=None)
        if budget.estimate_bytes is not None and limit is not None and budget.estimate_bytes > limit:
            console.warn(f"{u.model} on {u.target} ({u.unit}): weights alone are estimated at "
                         f"{format_size(budget.estimate_bytes)} from `params`, over the unit's "
                         f"{format_size(limit)} budget; the build will check the real size")
    indexes = cache.of_kind("indexes")
    for t in build_plan.targets:
        for a in t.assets:
            if a.kind == "vector_index":
                state = "cached" if indexes.has(a.key) else "new"
                console.result(f"  {t.target}: index {a.name}: {len(a.corpus)} file(s) embedded by {a.model} "
                               f"({state}, {a.key[:12]})")


@app.command("build")
def build_cmd(
    manifest: Path,
    target: TargetOpt = None,
    out: Annotated[Path, typer.Option("--out", help="output directory")] = Path("dist"),
    jobs: Annotated[int, typer.Option("--jobs", min=0, help="parallel worker processes (0: one per core)")] = 0,
    cache_dir: CacheOpt = None,
    json_out: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing release with other content")] = False,
    check_reproducible: Annotated[bool, typer.Option(
        "--check-reproducible", help="build again in a fresh process with an empty cache and compare bytes")] = False,
) -> None:
    """Build, verify and package bundles (default out dir dist/)."""
    from deployc.build import BuildReport, build
    from deployc.cache import Cache, default_cache_dir
    from deployc.errors import BuildError
    from deployc.packaging.assets import build_assets
    from deployc.packaging.bundle import write_bundle
    from deployc.plan import make_plan
    from deployc.project import load_project
    from deployc.toolchain import detect

    console = Console(json_mode=json_out)
    project = load_project(manifest)
    build_plan = make_plan(project, detect(), target)
    cache = Cache(cache_dir or default_cache_dir())
    results = build(build_plan, project, cache, jobs or os.cpu_count() or 1, console.status, console.warn)
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
        _print_build(console, report)
        if differences is not None:
            console.result("reproducible: byte-identical" if not differences else "NOT reproducible:")
            for line in differences:
                console.result(f"  {line}")
    if report.failed:
        raise BuildError(f"{len(report.failed)} of {len(report.units)} unit(s) failed")
    if differences:
        raise BuildError(f"the second build differs in {len(differences)} file(s)")


def _print_build(console: Console, report: BuildReport) -> None:
    from deployc.schema_base import format_size

    table = Table("model", "target", "unit", "quant", "status", "size", "planned mem", "delegated", "verification",
                  "latency")
    for r in report.units:
        rep = r.report
        v = r.verification
        metrics = v.get("metrics")
        vtext = v.get("status", "-")
        if metrics:
            vtext += f" (cos {metrics['min_cosine']:.5f}, {metrics['min_sqnr_db']:.1f} dB)"
        planned = max((m["planned_memory_bytes"] for m in rep.get("methods", {}).values()), default=None)
        latency = rep.get("verification", {}).get("latency_ms")
        table.add_row(r.unit.model, r.unit.target, f"{r.unit.unit} ({r.unit.backend})", r.unit.quantization,
                      r.status, format_size(rep["size_bytes"]) if rep else "-",
                      format_size(planned) if planned is not None else "-",
                      f"{rep['delegated_share']:.0%}" if rep else "-", vtext,
                      f"{latency:.2f} ms" if latency is not None else "-")
    console.table(table)
    for r in report.failed:
        console.result(f"FAILED {r.unit.model} on {r.unit.target} ({r.unit.unit}) at {r.step}: {r.error}")
    for r in report.units:
        if r.verification.get("status") == "not-run":
            console.result(f"not run: {r.unit.model} on {r.unit.target}: {r.verification['reason']}")
    for t, b in report.bundles.items():
        console.result(f"bundle {t}: {b['dir']}  ({b['archive']})")
    for t, why in report.skipped_bundles.items():
        console.result(f"no bundle for {t}: {why}")


@app.command()
def inspect(path: Path, json_out: JsonOpt = False) -> None:
    """Describe a bundle directory, a bundle archive or a .pte file; verify a bundle against its lock."""
    import tempfile

    from deployc.errors import BuildError
    from deployc.packaging.inspection import describe_bundle, describe_pte, open_bundle, verify_bundle
    from deployc.schema_base import format_size

    console = Console(json_mode=json_out)
    if not path.exists():
        raise UserError.at(path, "no such file or directory")
    if path.is_file() and path.suffix == ".pte":
        info = describe_pte(path)
        if json_out:
            console.document(info)
            return
        console.result(f"{path}: ExecuTorch program, {format_size(info['size_bytes'])}, constants "
                       f"{format_size(info['constant_bytes'])}, delegate segments {format_size(info['segment_bytes'])}")
        for m in info["methods"]:
            console.result(f"  {m['name']}: {m['inputs']} input(s), {m['outputs']} output(s), planned memory "
                           f"{format_size(m['planned_memory_bytes'])}, delegates {', '.join(m['delegates']) or '-'}")
            console.result(f"    operators: {', '.join(m['operators']) or '-'}")
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
            _print_inspect(console, info)
    if problems:
        raise BuildError(f"{path}: {len(problems)} mismatch(es) against bundle.lock.json")


def _print_inspect(console: Console, info: dict) -> None:
    from deployc.schema_base import format_size

    if "bundle" in info:
        b = info["bundle"]
        console.result(f"{info['path']}: {b['name']} {b['version']} for {b['target']} "
                       f"({info['device'].get('soc', '?')}), {format_size(info['total_bytes'])}")
        table = Table("program", "unit", "backend", "quant", "size", "method", "inputs", "outputs", "planned mem",
                      "delegates", "verification")
        for p in info["programs"]:
            v = p["verification"]
            vtext = v["status"] + (f" (cos {v['min_cosine']}, {v['min_sqnr_db']} dB)" if v["status"] != "not-run" else "")
            for m in p["methods"]:
                shape = lambda t: f"{t['name']}:{t['dtype']}[" + ",".join(  # noqa: E731
                    str(d["value"]) if d["value"] >= 0 else f"{d.get('symbol') or '?'}={d['min']}..{d['max']}"
                    for d in t["shape"]) + "]"
                table.add_row(p["name"], p["unit"], p["backend"], p["quantization"], format_size(p["size_bytes"]),
                              m["name"], " ".join(shape(t) for t in m["inputs"]),
                              " ".join(shape(t) for t in m["outputs"]), format_size(m["planned_memory_bytes"]),
                              ", ".join(m["delegates"]) or "-", vtext)
        console.table(table)
        for p in info["programs"]:
            for m in p["methods"]:
                console.result(f"  {p['name']}.{m['name']} operators: {', '.join(m['operators'])}")
    console.result("verified against bundle.lock.json: ok" if info["verified"] else "MISMATCH against bundle.lock.json:")
    for problem in info["problems"]:
        console.result(f"  {problem}")


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
    if result["identical"]:
        console.result("identical")
        return
    for f in result["files"]:
        console.result(f"{f['change']:>8}  {f['file']}  {f['size_a']} -> {f['size_b']}")
    for p in result["programs"]:
        for k, (va, vb) in p["changes"].items():
            console.result(f"  {p['program']}.{k}: {va} -> {vb}")


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
    for name, value in result["outputs"].items():
        if isinstance(value, list) and value and isinstance(value[0], dict) and "text" in value[0]:
            console.result(f"{name}:")
            for c in value:
                console.result(f"  [{c['score']:.3f}] {c['source']}: {c['text'][:100]}")
        else:
            console.result(f"{name}: {value}")
    console.result(f"program load: {result['load_ms']:.0f} ms; stage latency: "
                   + ", ".join(f"{k} {v:.1f} ms" for k, v in result["latency_ms"].items()))


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
    from deployc.schema_base import format_size
    from deployc.targets.profile import load_profile, search_path

    console = Console(json_mode=json_out)
    loaded = load_profile(name, Path.cwd(), search_path(Path.cwd()))
    data = loaded.profile.model_dump(mode="json", by_alias=True)
    if json_out:
        console.document(data)
        return
    p = loaded.profile
    console.result(f"{p.name}: {p.description}".rstrip(": "))
    console.result(f"  from: {' <- '.join(str(f) for f in loaded.files)}")
    console.result(f"  device: {p.device.soc}, {p.device.os}, {p.device.abi}")
    table = Table("unit", "backend", "quantization", "threads", "budgets")
    for u in p.units:
        budgets = u.budgets.model_dump(exclude_none=True) if u.budgets else {}
        table.add_row(u.name, u.backend, ", ".join(u.quantization), str(u.threads or "-"),
                      ", ".join(f"{k}={format_size(v)}" for k, v in budgets.items()) or "-")
    console.table(table)
    overall = ", ".join(f"{k}={format_size(v)}" for k, v in p.budgets.model_dump(exclude_none=True).items())
    console.result(f"  budgets: {overall or '-'}; fallback: {p.fallback}")


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
