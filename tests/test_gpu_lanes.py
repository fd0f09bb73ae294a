"""Measuring lanes on a real GPU (execute.lanes; run on a machine with an
NVIDIA GPU, skipped elsewhere with the reason): the lanes path (`--gpus 0`,
and `--cluster local` where Ray is installed) makes the plain path's choice
for a seed, and two lanes (two measuring processes, here on one GPU)
calibrate to one baseline."""
from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from conftest import DATA, FAULTY_BENCH as BENCH, evo_env, run_evo
from nvcc_evo.execute.store import Store

pytestmark = pytest.mark.gpu

try:
    import ray  # noqa: F401
    RAY = ""
except ImportError:
    RAY = "needs Ray (pip install 'nvcc-evo[cluster]')"


ACF = ('acf 1\nunit "faulty.cu" {\n    search {\n        define.BLOCK in {32, 256, 1024}\n'
       '        define.BUG in {0, 1}\n    }\n    tune {\n        minimize runtime\n    }' + BENCH + '}\n')


def _retune(folder, cache, *extra):
    shutil.copy(DATA / "cuda" / "faulty.cu", folder / "faulty.cu")
    (folder / "nvcc-evo.acf").write_text(ACF)
    result = run_evo("--retune", "--backend", "pycuda", "--evaluations", "6", "--seed", "1", "--progress", "lines",
                     *extra, cwd=folder, env=evo_env(cache))
    assert result.returncode == 0, result.stderr
    statuses = sorted((repr(r.genome), r.measurement.status) for r in Store(folder / ".nvcc-evo" / "results.jsonl").read())
    text = (folder / "nvcc-evo.acf").read_text()
    chosen = [line.strip() for line in text.splitlines() if line.strip().startswith("define.") and " = " in line]
    verdict = next((line.strip() for line in text.splitlines() if "verdict" in line), "")
    return statuses, chosen, verdict, result.stderr


@pytest.mark.parametrize("path", ["--gpus 0", "--cluster local"])
def test_the_lanes_path_on_one_gpu_makes_the_plain_paths_choice(tmp_path, evo_cache, path):
    if "cluster" in path and RAY:
        pytest.skip(RAY)
    (tmp_path / "plain").mkdir()
    (tmp_path / "lanes").mkdir()
    plain = _retune(tmp_path / "plain", evo_cache)
    lanes = _retune(tmp_path / "lanes", evo_cache, *path.split())
    assert "1 lane (pycuda on NVIDIA" in lanes[3], lanes[3]
    assert lanes[0] == plain[0], "the same candidates, the same statuses (BUG=1: wrong-answer on both)"
    assert any(status == "wrong-answer" for _, status in lanes[0])
    assert lanes[1] == plain[1], (plain[1:3], lanes[1:3])


def test_two_lanes_calibrate_to_one_baseline_and_share_the_candidates(tmp_path):
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate
    from nvcc_evo.driver.toolkit import load_toolkit
    from nvcc_evo.driver.wrapper import find_real_nvcc
    from nvcc_evo.measure.backend import Composed
    from nvcc_evo.measure.pycuda.bench import GpuBench
    from nvcc_evo.measure.pycuda.pool import WorkerPool
    from nvcc_evo.execute.lanes import Lane, LaneSet
    shutil.copy(DATA / "cuda" / "faulty.cu", tmp_path / "faulty.cu")
    bench = parse_text('acf 1\nunit "faulty.cu" {' + BENCH + '}\n').units[0].bench
    pools, lanes = [WorkerPool(device=0), WorkerPool(device=0)], None     # two measuring processes, as on two GPUs
    try:
        toolkit = load_toolkit(find_real_nvcc())
        job = CompileJob(toolkit.nvcc, ("-c", "faulty.cu"), str(tmp_path), "faulty.cu", pools[0].hello["arch"])
        builds = {block: compile_candidate(replace(job, flags=(f"-DBLOCK={block}",))) for block in (256, 128, 512, 1024)}
        benches = [GpuBench(bench, pool, job.arch, lambda genome: {"BLOCK": genome}, energy=False) for pool in pools]
        lanes = LaneSet([Lane(i, Composed(b.measure, ("runtime",), race=b.race_against), f"lane {i}")
                         for i, b in enumerate(benches)])
        runs = lanes.calibrate(256, ("-DBLOCK=256",), builds[256])
        assert all(run.ok for run in runs), runs
        assert 0.9 < lanes.lanes[1].scale["runtime"] < 1.1, lanes.lanes[1].scale     # one GPU model: about 1
        answers = list(lanes.pool.map(lambda block: lanes.measure(block, (), builds[block]), (128, 512, 1024, 128)))
        assert all(a.ok for a in answers), answers
        assert all(b.references.baseline is not None for b in benches), "each lane holds its own baseline's outputs"
    finally:
        if lanes is not None:
            lanes.close()
        for pool in pools:
            pool.close()


def test_a_resumed_search_compares_its_candidates_with_the_baseline_measured_again(tmp_path, evo_cache):
    """The second run reads 2 evaluations back and measures the rest: the
    baseline first (its outputs are the reference), so every BUG=1 build is
    wrong and every other one right, whichever came first."""
    shutil.copy(DATA / "cuda" / "faulty.cu", tmp_path / "faulty.cu")
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    for budget in ("2", "5"):
        result = run_evo("--retune", "--all", "--backend", "pycuda", "--evaluations", budget, "--seed", "1",
                         "--progress", "lines", cwd=tmp_path, env=evo_env(evo_cache))
        assert result.returncode == 0, result.stderr
    records = Store(tmp_path / ".nvcc-evo" / "results.jsonl").read()
    baseline = [r for r in records if r.genome == records[0].genome]   # a retune stores its baseline first
    assert len(baseline) == 2 and all(r.measurement.ok for r in baseline)     # measured in each run
    for record in records:
        wrong = record.genome.value("define.BUG") == 1
        assert (record.measurement.status == "wrong-answer") == wrong, (record.genome, record.measurement)


KERNELS = ("scale.cu", "reduce_sum.cu")


def _two_units(folder, cache, *extra):
    """scale.cu and reduce_sum.cu of the project's kernels tuned on the GPU:
    (unit -> its candidates' statuses, the report, stderr)."""
    from conftest import kernels_project
    kernels_project(folder, KERNELS)
    result = run_evo("--retune", "--backend", "pycuda", "--evaluations", "6", "--population", "6", "--seed", "1",
                     "--progress", "lines", *KERNELS, *extra, cwd=folder, env=evo_env(cache))
    assert result.returncode == 0, result.stderr
    statuses = {}
    for r in Store(folder / ".nvcc-evo" / "results.jsonl").read():
        statuses.setdefault(r.context.unit, []).append((repr(r.genome), r.measurement.status))
    return {unit: sorted(found) for unit, found in statuses.items()}, result.stdout, result.stderr


@pytest.mark.parametrize("path", ["--at-once 2", "--at-once 2 --cluster local"])
def test_two_units_at_once_on_one_gpu_are_each_checked_against_their_own_reference(tmp_path, evo_cache, path):
    """Both searches share the GPU's measuring process (on the cluster: its one
    GPU actor, which before held the GPU for the first search only)."""
    if "cluster" in path and RAY:
        pytest.skip(RAY)
    plain = _two_units(tmp_path / "plain", evo_cache)
    together = _two_units(tmp_path / "together", evo_cache, *path.split())
    assert "2 searches, 2 at once" in together[2], together[2]
    assert together[0] == plain[0], "the same candidates, the same statuses, unit by unit"
    assert len(together[0]) == 2 and all(len(found) >= 6 for found in together[0].values())
    assert all(status != "wrong-answer" for found in together[0].values() for _, status in found), together[0]
    assert all(f'"{unit}" [' in together[1] for unit in KERNELS), together[1]
