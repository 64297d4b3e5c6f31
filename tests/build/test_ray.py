"""`--executor ray` on a real two-node Ray cluster, confined to loopback.

The cluster (a head node and a second node, each started by `ray start` with one CPU of its own) and
every build that uses it run inside a network namespace whose only interface is `lo`: Ray binds to
the host's external address when it can, and nothing here may reach beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.projects import REPO, Result, build_json, make_project, run_subprocess

from deployc.cli.reproducibility import compare_trees

pytestmark = pytest.mark.slow

NETNS = f"deployc-ray-{os.getpid()}"
PORT = 20000 + os.getpid() % 20000  # Ray refuses a port that another cluster on this machine uses, any netns
ADDRESS = f"127.0.0.1:{PORT}"
RAY = str(Path(sys.executable).parent / "ray")
TOKEN = secrets.token_hex(32)  # token authentication, as a real cluster should run; no ~/.ray state involved

# Three distinct programs on one target: with one CPU per node, both nodes must take some.
MANIFEST = """\
apiVersion: deployc/v1
name: fanout
version: 0.1.0
targets: [arduino_q]
models:
  a:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 16, classes: 2}}
    inputs:
      x: {shape: [1, 8]}
  b:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 24, classes: 2}}
    inputs:
      x: {shape: [1, 8]}
  c:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 32, classes: 2}}
    inputs:
      x: {shape: [1, 8]}
"""

FAILING = """\
apiVersion: deployc/v1
name: failing
version: 0.1.0
targets: [arduino_q]
models:
  branchy:
    source: {factory: "models.testnets:branchy"}
    inputs:
      x: {shape: [2, 8]}
  fine:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 8, classes: 2}}
    inputs:
      x: {shape: [1, 8]}
"""


@dataclass
class Cluster:
    address: str
    nodes: dict[str, str]  # node id -> the address it registered


def _ns(*cmd: str) -> list[str]:
    return ["ip", "netns", "exec", NETNS, *cmd]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN, **extra}
    for k in ("QNN_SDK_ROOT", "DEPLOYC_TARGETS_PATH", "RAY_ADDRESS"):
        env.pop(k, None)
    return env


def _deployc(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(_ns(sys.executable, "-m", "deployc", *args), cwd=cwd, env=_env(**(env or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 420) -> tuple[Result, dict]:
    out, err = proc.communicate(timeout=timeout)
    return Result(proc.returncode, out, err), json.loads(out) if out.strip() else {}


def _stop_namespace() -> None:
    """End every process in the namespace: this cluster only (`ray stop` stops any Ray on the machine)."""
    def pids() -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", NETNS], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        for pid in pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while pids() and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a loopback-only network namespace needs root and iproute2 (`ip netns`)")
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(_ns("ip", "link", "set", "lo", "up"), check=True)
        common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
        subprocess.run(_ns(RAY, "start", "--head", f"--port={PORT}", "--include-dashboard=false", *common),
                       check=True, env=_env(), capture_output=True, timeout=120)
        subprocess.run(_ns(RAY, "start", f"--address={ADDRESS}", *common), check=True, env=_env(),
                       capture_output=True, timeout=120)
        probe = ("import json, ray; ray.init(address='%s', logging_level='ERROR');"  # noqa: UP031
                 "print(json.dumps({n['NodeID']: n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']}))"
                 % ADDRESS)
        proc = subprocess.run(_ns(sys.executable, "-c", probe), env=_env(), capture_output=True, text=True,
                              timeout=120, check=True)
        nodes = json.loads(proc.stdout.strip().splitlines()[-1])
        assert len(nodes) == 2 and set(nodes.values()) == {"127.0.0.1"}, nodes
        yield Cluster(ADDRESS, nodes)
    finally:
        _stop_namespace()
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)


@pytest.fixture(scope="module")
def fanout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The manifest, and its bundle built by the local executor: what every Ray build must equal."""
    folder = tmp_path_factory.mktemp("fanout")
    manifest = make_project(folder / "project", MANIFEST, "fanout.yaml")
    result, report = build_json(manifest, folder / "local-out", folder / "local-cache", "--jobs", "2")
    assert result.code == 0, result.err[-2000:]
    assert {u["built_on"]["executor"] for u in report["units"]} == {"local"}
    return manifest, folder / "local-out"


@pytest.mark.full  # a two-node cluster and two builds (~50 s): make test-all; make test keeps the executor's refusals
def test_ray_build_spreads_over_both_nodes_and_equals_the_local_build(
        cluster: Cluster, fanout: tuple[Path, Path], tmp_path: Path) -> None:
    manifest, local_out = fanout
    shared = f"file://{tmp_path / 'shared'}"  # workers publish here and return only the key
    r, report = _finish(_deployc("build", str(manifest), "--executor", "ray", "--ray-address", cluster.address,
                                 "--out", str(tmp_path / "out"), "--cache-dir", shared, "--json",
                                 cwd=manifest.parent, env={"DEPLOYC_CACHE_MIRROR": str(tmp_path / "mirror")}))
    assert r.code == 0, r.err[-3000:]
    assert compare_trees(local_out, tmp_path / "out") == []
    units = report["units"]
    assert {u["status"] for u in units} == {"built"} and {u["attempts"] for u in units} == {1}
    assert {u["built_on"]["executor"] for u in units} == {"ray"}
    assert {u["built_on"]["node_id"] for u in units} == set(cluster.nodes)  # both nodes built units
    assert {u["built_on"]["address"] for u in units} == {"127.0.0.1"}
    for model in "abc":  # per-unit status on the driver's console
        assert f"  {model}@arduino_q/cpu: running on node " in r.err
        assert f"  {model}@arduino_q/cpu: built (node " in r.err
    # Another CI machine: its own empty mirror, the same URL, no Ray. Everything is already built.
    again, report2 = build_json(manifest, tmp_path / "out2", shared)  # type: ignore[arg-type]
    assert again.code == 0, again.err[-2000:]
    assert {u["status"] for u in report2["units"]} == {"cached"}
    assert compare_trees(local_out, tmp_path / "out2") == []


@pytest.mark.full  # a further Ray build; the cluster's own test runs in make test
def test_a_killed_worker_is_retried_and_the_bytes_do_not_change(
        cluster: Cluster, fanout: tuple[Path, Path], tmp_path: Path) -> None:
    manifest, local_out = fanout
    proc = _deployc("build", str(manifest), "--executor", "ray", "--ray-address", cluster.address,
                    "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--json",
                    cwd=manifest.parent)
    said = []
    assert proc.stderr is not None
    for line in proc.stderr:  # the driver prints the task's first event: unit b is running, torch not yet loaded
        said.append(line)
        if "b@arduino_q/cpu: running on node " in line:
            break
    found = subprocess.run(["pgrep", "-f", "^ray::deployc:b@arduino_q"], capture_output=True, text=True)
    assert found.stdout.strip(), "unit b never started: " + "".join(said)[-2000:]
    victim = int(found.stdout.split()[0])
    os.kill(victim, signal.SIGKILL)
    r, report = _finish(proc)
    r = Result(r.code, r.out, "".join(said) + r.err)
    assert r.code == 0, r.err[-3000:]
    assert compare_trees(local_out, tmp_path / "out") == []
    attempts = {u["model"]: u["attempts"] for u in report["units"]}
    assert attempts == {"a": 1, "b": 2, "c": 1}
    assert "  b@arduino_q/cpu: retry 1 of 3, running on node " in r.err
    assert next(u for u in report["units"] if u["model"] == "b")["built_on"]["pid"] != victim


@pytest.mark.full  # a further Ray build; the cluster's own test runs in make test
def test_a_unit_that_fails_for_a_real_reason_fails_once(cluster: Cluster, tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", FAILING, "failing.yaml")
    r, report = _finish(_deployc("build", str(manifest), "--executor", "ray", "--ray-address", cluster.address,
                                 "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--json",
                                 cwd=manifest.parent))
    assert r.code == 1, r.err[-3000:]
    units = {u["model"]: u for u in report["units"]}
    assert units["fine"]["status"] == "built"
    failure = units["branchy"]["failure"]
    assert units["branchy"]["status"] == "failed" and failure["step"] == "export"
    assert failure["error"].startswith("torch.export failed:"), failure
    assert "hint: the model branches on tensor values" in failure["error"]
    assert units["branchy"]["attempts"] == 1
    assert r.err.count("branchy@arduino_q/cpu: running on node ") == 1
    assert "Traceback" not in r.err


def test_without_ray_installed_the_ray_executor_says_how_to_install_it(project: Path) -> None:
    manifest = make_project(project, MANIFEST, "fanout.yaml")
    code = ("import sys; sys.modules['ray'] = None; from deployc.cli.app import main;"
            "sys.exit(main(['build', sys.argv[1], '--executor', 'ray', '--out', 'out']))")
    proc = subprocess.run([sys.executable, "-c", code, str(manifest)], capture_output=True, text=True,
                          cwd=project, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: --executor ray needs Ray, which is not installed: "
                                   "pip install 'deployc[ray]' (use the Ray version your cluster runs)")
    assert not (project / "out").exists()


def test_ray_address_without_the_ray_executor_is_refused(cli, project: Path) -> None:
    manifest = make_project(project, MANIFEST, "fanout.yaml")
    r = cli("build", str(manifest), "--ray-address", ADDRESS)
    assert r.code == 2 and r.err.strip() == "error: --ray-address needs --executor ray"


def test_ray_is_never_imported_by_the_local_executor() -> None:
    source = (REPO / "deployc").rglob("*.py")
    importers = sorted(p.relative_to(REPO).as_posix() for p in source
                       if "import ray" in p.read_text() or "from ray" in p.read_text())
    assert importers == ["deployc/build/executors/ray_cluster.py"]


@pytest.mark.full  # a further Ray cluster
def test_a_bad_cpus_per_unit_setting_is_refused(cli, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = make_project(project, MANIFEST, "fanout.yaml")
    monkeypatch.setenv("DEPLOYC_RAY_CPUS_PER_UNIT", "half")
    r = cli("build", str(manifest), "--executor", "ray")
    assert r.code == 2
    assert r.err.strip() == ("error: DEPLOYC_RAY_CPUS_PER_UNIT='half': expected a whole number of CPUs, "
                             "1 or more")


@pytest.mark.full  # a further Ray build; the cluster's own test runs in make test
def test_without_an_address_the_build_starts_and_stops_its_own_cluster(cluster: Cluster, tmp_path: Path) -> None:
    one = MANIFEST.split("  b:")[0]  # model a only
    manifest = make_project(tmp_path / "project", one, "one.yaml")
    raylets = subprocess.run(["pgrep", "-c", "raylet"], capture_output=True, text=True).stdout.strip()
    r, report = _finish(_deployc("build", str(manifest), "--executor", "ray", "--jobs", "1", "--out",
                                 str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--json",
                                 cwd=manifest.parent))
    assert r.code == 0, r.err[-3000:]
    assert "building 1 program(s) with Ray tasks on a local Ray cluster (1 CPU(s))" in r.err
    (unit,) = report["units"]
    assert unit["status"] == "built" and unit["built_on"]["executor"] == "ray"
    assert unit["built_on"]["node_id"] not in cluster.nodes  # its own cluster, not the running one
    assert subprocess.run(["pgrep", "-c", "raylet"], capture_output=True, text=True).stdout.strip() == raylets


@pytest.mark.full  # a further Ray build; the cluster's own test runs in make test
def test_an_unreachable_cluster_fails_in_seconds_with_the_address(project: Path) -> None:
    manifest = make_project(project, MANIFEST, "fanout.yaml")
    r = run_subprocess("build", str(manifest), "--executor", "ray", "--ray-address", "127.0.0.1:1", "--out", "out",
                       cwd=project, timeout=120)  # how fast it gives up: benchmarks, not tests (noisy machines)
    assert r.code == 1
    assert r.err.splitlines()[-1] == ("error: cannot reach the Ray cluster at 127.0.0.1:1: Connection refused "
                                      "(is the head node running, and is this its GCS address?)")
    assert not (project / "out").exists()
