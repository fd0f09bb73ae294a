"""The Ray backend (execute.cluster) on a local Ray: a retune on the
cluster's workers makes the choice and records of the plain run for a seed
(the static backend is deterministic), a worker killed mid-run loses only
its candidate, and without Ray `--cluster` is a clear error. Throughput
against the number of workers: benchmarks/parallel.py (timings are not
asserted here)."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from conftest import ROOT, evo_env, kernels_project, run_evo, searched
from nvcc_evo.errors import EnvironmentProblem, UsageError
from nvcc_evo.driver import settings, specs
from nvcc_evo.execute.cluster import gpus_for
from nvcc_evo.execute.store import Store

try:
    import ray  # noqa: F401
    RAY = ""
except ImportError:
    RAY = "needs Ray (pip install 'nvcc-evo[cluster]')"
needs_ray = pytest.mark.skipif(bool(RAY), reason=RAY)

UNIT = "scale.cu"
UNITS = (UNIT, "reduce_sum.cu")          # two searches: one after the other, or at once (--at-once)


@pytest.mark.parametrize("spec,expected", [("local", (None, None)), ("local:3", (None, 3)), ("auto", ("auto", None)),
                                           ("ray://head:10001", ("ray://head:10001", None))])
def test_cluster_spellings(spec, expected):
    assert (specs.ray_place(spec).address, specs.ray_place(spec).workers) == expected and specs.ray_place("") is None
    assert not settings.value_problem(settings.BY_NAME["retune.cluster"], spec)


@pytest.mark.parametrize("spec", ["local:0", "local:x", "ray://", "head:10001", " "])
def test_a_cluster_that_is_not_one_is_a_usage_error(spec):
    with pytest.raises(UsageError, match="expected ray://HEAD:PORT"):
        specs.ray_place(spec)
    assert settings.value_problem(settings.BY_NAME["retune.cluster"], spec)


H100, H200, B200 = ({"name": "NVIDIA H100", "arch": "sm_90"}, {"name": "NVIDIA H200", "arch": "sm_90"},
                    {"name": "NVIDIA B200", "arch": "sm_100"})


@pytest.mark.parametrize("arch,hellos,expected", [
    ("sm_90", [H200, H200], [0, 1]), ("sm_100", [H200, B200, H200, B200], [1, 3]),
    ("sm_90", [B200, H100, H200, H100], [1, 3])])        # one model: the first of the architecture's
def test_a_search_measures_on_the_clusters_gpus_of_its_architecture_and_of_one_model(arch, hellos, expected):
    assert gpus_for(arch, hellos) == expected


def test_a_cluster_without_a_gpu_of_the_target_says_which_it_has():
    with pytest.raises(EnvironmentProblem, match=r"has no GPU of sm_100 \(its GPUs: NVIDIA H200 \(sm_90\)\)"):
        gpus_for("sm_100", [H200, H200])


def _project(folder: Path) -> Path:
    return kernels_project(folder, UNITS)


def _retune(folder: Path, cache: Path, *extra: str, env: dict | None = None, units=(UNIT,)):
    return run_evo("--retune", "--acf", str(folder / "nvcc-evo.acf"), "--backend", "static", "--seed", "3",
                   "--evaluations", "8", "--progress", "lines", *units, *extra, cwd=folder,
                   env=env or evo_env(cache))


def test_without_ray_the_cluster_is_a_clear_error(tmp_path, evo_cache):
    folder = _project(tmp_path)
    hidden = tmp_path / "no-ray"
    (hidden / "ray").mkdir(parents=True)
    (hidden / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")  # Ray absent
    env = evo_env(evo_cache, PYTHONPATH=str(hidden))
    result = _retune(folder, evo_cache, "--cluster", "local:2", env=env)
    assert result.returncode == 3, result.stderr
    assert "--cluster local:2 needs Ray, which is not installed here: pip install 'nvcc-evo[cluster]'" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@needs_ray
def test_no_cluster_to_join_is_a_clear_error(tmp_path, evo_cache):
    folder = _project(tmp_path)
    result = _retune(folder, evo_cache, "--cluster", "auto", env=evo_env(evo_cache, RAY_ADDRESS=""))
    assert result.returncode == 3, result.stderr
    assert "error: --cluster auto: could not connect (ConnectionError: Could not find any running Ray instance" \
        in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_cluster_setting_that_is_not_one_is_located(tmp_path, evo_cache):
    folder = _project(tmp_path)
    (folder / "nvcc-evo.toml").write_text("[retune]\ncluster = 4\n")
    result = _retune(folder, evo_cache)
    assert result.returncode == 1 and "nvcc-evo.toml:2:" in result.stderr and "'retune.cluster' must be a string" \
        in result.stderr, result.stderr


@pytest.fixture(scope="module")
def serial(tmp_path_factory, evo_cache) -> Path:
    """The plain run of both units (no cluster), which each cluster run must repeat: a unit's records
    and entry are the same whatever other units its run searched (conftest.searched)."""
    folder = _project(tmp_path_factory.mktemp("serial"))
    plain = _retune(folder, evo_cache, units=UNITS)
    assert plain.returncode == 0, plain.stderr
    return folder


@needs_ray
def test_a_local_ray_retune_makes_the_serial_runs_choices_and_records(tmp_path, evo_cache, serial):
    """Two units on two workers at once (--at-once 2), as the serial run chose and recorded them. (One
    worker, one unit after the other, was a second run here: the same path, 40 s of CI's time.)"""
    for workers, at_once in (("2", "2"),):
        folder = _project(tmp_path / workers)
        (folder / "nvcc-evo.toml").write_text(f'[retune]\ncluster = "local:{workers}"\n')   # the setting
        ran = _retune(folder, evo_cache, "--at-once", at_once, units=UNITS,   # a Ray of its own, whatever
                      env=evo_env(evo_cache, RAY_ADDRESS="127.0.0.1:1"))    # cluster RAY_ADDRESS names
        assert ran.returncode == 0, ran.stderr
        assert f"cluster = 'local:{workers}' (nvcc-evo.toml:2)" in ran.stderr
        assert f"compiles on {workers} Ray worker(s)" in ran.stderr
        assert ("2 searches, 2 at once" in ran.stderr) == (at_once == "2"), ran.stderr
        assert searched(folder, UNITS) == searched(serial, UNITS)


KILLER = """#!/bin/sh
# nvcc for the test: the compile of a marked candidate kills the Ray worker running it, once for
# BLOCK=512 (Ray's retry compiles it), every time for BLOCK=128 (lost)
# (this script's parent is the compile's process-group guard, a shell; the worker is the guard's parent)
case " $* " in
  *" -DBLOCK=512 "*) [ -e {marker} ] || {{ touch {marker}; kill -9 "$(cut -d' ' -f4 /proc/$PPID/stat)"; sleep 5; }} ;;
  *" -DBLOCK=128 "*) kill -9 "$(cut -d' ' -f4 /proc/$PPID/stat)"; sleep 5 ;;
esac
exec {nvcc} "$@"
"""


def _killer(folder: Path, real_nvcc: Path) -> Path:
    script = folder / "bin" / "nvcc"
    script.parent.mkdir()
    script.write_text(KILLER.format(marker=folder / "killed-once", nvcc=real_nvcc))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@needs_ray
def test_a_killed_worker_loses_only_its_candidate(tmp_path, evo_cache, real_nvcc):
    """One run, two marked candidates: a worker killed once is retried (its candidate ok), one killed
    each time loses its candidate (`lost`, said); every other candidate is measured, and the search
    goes on to its budget."""
    folder = _project(tmp_path / "project")
    script = _killer(tmp_path, real_nvcc)
    ran = _retune(folder, evo_cache, "--cluster", "local:2", "--evaluations", "12",
                  env=evo_env(evo_cache, NVCC_EVO_REAL_NVCC=str(script)))
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "killed-once").exists()                      # a worker was killed and retried
    records = Store(folder / ".nvcc-evo" / "results.jsonl").read()
    assert len(records) == 12 and len({r.genome for r in records}) == 12, "the search went on to its budget"
    block = {r: dict(r.genome.items).get("define.BLOCK") for r in records}
    retried = [r for r in records if block[r] == 512]
    lost = [r for r in records if block[r] == 128]
    assert retried and all(r.measurement.status == "ok" for r in retried), \
        [(r.genome, r.measurement.status, r.measurement.detail) for r in retried]
    assert lost and all(r.measurement.status == "lost" for r in lost), \
        [(r.genome, r.measurement.status, r.measurement.detail) for r in lost]
    assert "the compile's worker was lost" in lost[0].measurement.detail
    assert "lost " in ran.stdout + ran.stderr          # the failures' tally says so
    others = [r for r in records if r not in retried and r not in lost]
    assert others and all(r.measurement.ok for r in others), [(r.genome, r.measurement.status) for r in others]


def test_ray_is_imported_only_when_a_cluster_is_named(tmp_path, evo_cache):
    probe = ("import sys\nfrom nvcc_evo import cli\nfrom nvcc_evo.retune import run\nfrom nvcc_evo.execute import measurers, lanes\n"
             "from nvcc_evo.retune.run import Request, run_retune\n"
             "run_retune(Request(acf=sys.argv[1], globs=('scale.cu',), backend='static', evaluations=2))\n"
             "assert 'ray' not in sys.modules, 'ray imported without --cluster'\n")
    folder = _project(tmp_path)
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", probe, str(folder / "nvcc-evo.acf")], cwd=folder,
                          env=evo_env(evo_cache, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@needs_ray
def test_a_node_lost_mid_retune_costs_no_evaluation_on_a_cluster_of_three_nodes(tmp_path, evo_cache, serial):
    """A real cluster of nodes (a head without CPUs and two worker nodes, each
    its own raylet; `--cluster auto` finds it through RAY_ADDRESS, as on a
    node `ray start` joined): one worker node is removed while the retune
    runs; Ray runs its tasks again on the other, and the unit's records
    and choice are the serial run's."""
    import subprocess
    import time
    from ray.cluster_utils import Cluster
    from conftest import EVO_COMMAND
    folder = _project(tmp_path / "cluster")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        argv = [*EVO_COMMAND, "--retune", "--acf", str(folder / "nvcc-evo.acf"), "--backend", "static", "--seed", "3",
                "--evaluations", "8", "--progress", "lines", "--cluster", "auto", "reduce_sum.cu"]
        running = subprocess.Popen(argv, cwd=folder, env=evo_env(evo_cache, RAY_ADDRESS=cluster.address),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        store = folder / ".nvcc-evo" / "results.jsonl"
        deadline = time.monotonic() + 240
        while running.poll() is None and time.monotonic() < deadline and \
                (not store.exists() or len(store.read_text().splitlines()) < 3):
            time.sleep(0.1)
        assert running.poll() is None, running.communicate()[1]
        cluster.remove_node(nodes[0], allow_graceful=False)         # its raylet and workers killed
        out, err = running.communicate(timeout=300)
    finally:
        cluster.shutdown()
    assert running.returncode == 0, err
    assert "compiles on 2 Ray worker(s)" in err
    assert searched(folder, ("reduce_sum.cu",)) == searched(serial, ("reduce_sum.cu",))


@needs_ray
def test_the_driver_keeps_back_what_the_gpu_actors_confirmation_will_take():
    """A search measured on a cluster's GPU actor keeps back the time its
    Backend there reserves for the steps after the search, as a local one
    does (before, the driver's side reserved nothing)."""
    import ray
    from nvcc_evo.execute.cluster import MeasuringActor, _actor_measurer

    class Driver:
        _get = staticmethod(ray.get)

    def kept_back():           # (made on the actor: a local function travels by value)
        from nvcc_evo.measure.backend import Composed
        return Composed(lambda genome, flags, result: None, ("runtime",), reserve=lambda: 4.5)

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        actor = ray.remote(MeasuringActor).remote()
        made = ray.get(actor.add.remote("k", kept_back))
        measurer = _actor_measurer(Driver(), actor, "k", *made[:-1], races=made[-1])
        assert measurer.reserve() == 4.5
    finally:
        ray.shutdown()
