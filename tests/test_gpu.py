"""The pycuda backend on a real GPU (run on a machine with an NVIDIA GPU;
skipped elsewhere with the reason)."""
from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from conftest import DATA, FAULTY_BENCH as BENCH, evo_env, run_evo
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
from nvcc_evo.measure import Wrong
from nvcc_evo.measure.stats import summarize

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    from nvcc_evo.driver.toolkit import load_toolkit
    from nvcc_evo.driver.wrapper import find_real_nvcc
    from nvcc_evo.measure.pycuda.bench import GpuBench
    from nvcc_evo.measure.pycuda.pool import WorkerPool
    folder = tmp_path_factory.mktemp("gpu")
    shutil.copy(DATA / "cuda" / "faulty.cu", folder / "faulty.cu")
    pool = WorkerPool()
    bench = parse_text('acf 1\nunit "faulty.cu" {' + BENCH + '}\n').units[0].bench
    toolkit = load_toolkit(find_real_nvcc())
    job = CompileJob(toolkit.nvcc, ("-c", "faulty.cu"), str(folder), "faulty.cu", pool.hello["arch"])
    yield pool, bench, job, GpuBench
    pool.close()


def measure(gpu, defines: dict, reference=None):
    pool, bench, job, GpuBench = gpu
    flags = tuple(f"-D{k}={v}" for k, v in defines.items())
    result = compile_candidate(replace(job, flags=flags))
    assert result.ok, result.stderr
    measurer = GpuBench(bench, pool, job.arch, lambda g: {"BLOCK": defines.get("BLOCK", 256)}, reference=reference)
    return measurer.measure(None, flags, result), measurer


def test_a_correct_kernel_is_timed_with_energy(gpu):
    measurement, bench = measure(gpu, {})
    assert measurement.ok, measurement.detail
    assert 10 < measurement.get("runtime") < 10_000          # us: 384 MB moved
    assert dict(measurement.spreads)["runtime"] < 0.1
    if gpu[0].hello["nvml"]:
        assert measurement.get("energy") > 0 and 50 < measurement.get("power") < 1500
    assert bench.references.baseline is not None


def test_energy_between_the_counters_steps_is_quick_and_repeats(gpu):
    """The energy window (stats.energy_window) opens and closes at NVML's
    counter steps: well under the old 1 s a candidate, and one binary's
    energy measured five times agrees within a few percent."""
    if not gpu[0].hello["nvml"]:
        pytest.skip("no NVML on this machine: energy is not measured")
    runs = [measure(gpu, {})[0] for _ in range(5)]
    energies = sorted(run.get("energy") for run in runs)
    windows = [dict(run.costs)["energy"] for run in runs]
    print(f"energy (mJ a launch) {energies}, windows (s) {windows}")
    assert all(run.ok for run in runs)
    assert max(windows) < 0.7, windows
    assert energies[-1] / energies[0] < 1.05, energies


def test_wrong_and_unwritten_outputs_are_caught(gpu):
    _, baseline = measure(gpu, {})
    wrong, _ = measure(gpu, {"BUG": 1}, reference=baseline.references.baseline)
    assert wrong.status == "wrong-answer" and "outside rtol" in wrong.detail and wrong.wrong == Wrong.OUTSIDE
    # saxpy reads y and writes it back: an element SKIP leaves keeps its random input, not the poison, so
    # the check finds it outside the tolerance (a NaN, unwritten output: tests/test_gpu_check.py)
    skipped, _ = measure(gpu, {"SKIP": 1, "BLOCK": 256}, reference=baseline.references.baseline)
    assert skipped.status == "wrong-answer" and skipped.wrong == Wrong.OUTSIDE, skipped


def test_a_crashing_candidate_is_recorded_and_the_worker_replaced(gpu):
    pool = gpu[0]
    before = pool.replaced
    crashed, _ = measure(gpu, {"CRASH": 1})
    assert crashed.status == "crash", crashed
    assert pool.replaced == before + 1
    again, _ = measure(gpu, {})
    assert again.ok


def test_a_launch_the_driver_refuses_is_found_before_data_moves_and_keeps_the_worker(gpu):
    pool = gpu[0]
    before = pool.replaced
    refused, _ = measure(gpu, {"BLOCK": 2048})
    assert refused.status == "launch-refused", refused
    assert "2048 threads; the device allows at most 1024" in refused.detail
    assert dict(refused.costs)["load"] < 1.0 and "timing" not in dict(refused.costs)
    assert pool.replaced == before
    again, _ = measure(gpu, {})
    assert again.ok


def test_each_stage_is_costed_and_energy_is_left_out_when_not_wanted(gpu):
    pool, bench, job, GpuBench = gpu
    result = compile_candidate(job)
    quiet = GpuBench(bench, pool, job.arch, lambda g: {"BLOCK": 256}, energy=False)
    measurement = quiet.measure(None, (), result)
    costs = dict(measurement.costs)
    assert measurement.ok and "energy" not in dict(measurement.metrics) and "energy" not in costs
    assert {"load", "check", "warm-up", "timing", "other"} <= set(costs)
    assert 0.2 < costs["timing"] < 5                      # the 0.3 s window, and its L2 flushes


def test_a_steady_candidate_settles_before_its_full_count_and_its_median_holds(gpu):
    pool, bench, job, GpuBench = gpu
    result = compile_candidate(job)
    full = GpuBench(bench, pool, job.arch, lambda g: {"BLOCK": 256}, energy=False).measure(None, (), result)
    quick = GpuBench(bench, pool, job.arch, lambda g: {"BLOCK": 256}, energy=False, settle=True)
    quick.measure(None, (), result)                               # the baseline: kept as the reference
    settled = quick.measure(None, (), result)
    assert settled.ok and not settled.raced
    assert dict(settled.costs)["timing"] < dict(full.costs)["timing"] / 2
    assert abs(settled.get("runtime") / full.get("runtime") - 1) < 0.02


def test_a_clearly_slower_candidate_is_raced_out_and_a_faster_one_is_timed_in_full(gpu):
    pool, bench, job, GpuBench = gpu
    result = compile_candidate(job)
    racer = GpuBench(bench, pool, job.arch, lambda g: {"BLOCK": 256}, energy=False)
    full = racer.measure(None, (), result)
    racer.race_against(full.get("runtime") / 2, 0.01)      # an incumbent twice as fast
    raced = racer.measure(None, (), result)
    assert raced.ok and raced.raced and "stopped after" in raced.detail
    assert dict(raced.costs)["timing"] < dict(full.costs)["timing"] / 3
    assert abs(raced.get("runtime") / full.get("runtime") - 1) < 0.05    # still an honest median
    racer.race_against(full.get("runtime") * 2, 0.01)      # an incumbent twice as slow: no race to lose
    timed = racer.measure(None, (), result)
    assert timed.ok and not timed.raced


def test_two_runs_of_one_binary_agree_within_their_spread(gpu):
    pool, bench, job, _ = gpu
    from nvcc_evo.acf.bench.spec import plan_bench
    from nvcc_evo.measure.pycuda.pipe import RunRequest
    result = compile_candidate(job)
    plan = plan_bench(bench, {"BLOCK": 256})
    runs = [summarize(pool.request(RunRequest(result.cubin, plan, time=True)).times_us)
            for _ in range(2)]
    gap = abs(runs[0].median - runs[1].median) / runs[0].median
    assert gap <= max(runs[0].spread, runs[1].spread, 0.01), runs


def test_retune_on_the_gpu_writes_statistics_and_rejects_wrong_answers(tmp_path, evo_cache):
    shutil.copy(DATA / "cuda" / "faulty.cu", tmp_path / "faulty.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "faulty.cu" {\n    search {\n'
                                           '        define.BLOCK in {64, 128, 256, 512, 1024}\n'
                                           '        define.BUG in {0, 1}\n    }\n    tune {\n'
                                           '        minimize runtime\n    }' + BENCH + '}\n')
    result = run_evo("--retune", "--backend", "pycuda", "--evaluations", "10", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "nvcc-evo.acf").read_text()
    assert "define.BUG = 1" not in text
    assert 'test = "mannwhitneyu"' in text or "baseline kept: no candidate beat it" in text
    assert 'gpu = "NVIDIA' in text and "baseline.runtime = " in text and " +- " in text
    store = (tmp_path / ".nvcc-evo" / "results.jsonl").read_text()
    assert '"status": "wrong-answer"' in store
    # up to date on this GPU; measured on another model, stale for a retune on this one
    here = text.split('gpu = "')[1].split('"')[0]
    listed = run_evo("--retune", "--backend", "pycuda", "--dry-run", cwd=tmp_path, env=evo_env(evo_cache))
    assert listed.returncode == 0 and "faulty.cu" not in listed.stdout, listed.stdout + listed.stderr
    (tmp_path / "nvcc-evo.acf").write_text(text.replace(f'gpu = "{here}"', 'gpu = "NVIDIA A100-SXM4-80GB"'))
    listed = run_evo("--retune", "--backend", "pycuda", "--dry-run", cwd=tmp_path, env=evo_env(evo_cache))
    assert f"measured on NVIDIA A100-SXM4-80GB; this GPU is {here}" in listed.stdout + listed.stderr, listed.stdout


def test_two_objectives_give_a_front_and_the_selection_rule_picks(tmp_path, evo_cache):
    shutil.copy(DATA / "cuda" / "faulty.cu", tmp_path / "faulty.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "faulty.cu" {\n    search {\n'
                                           '        define.BLOCK in {32, 64, 128, 256, 512, 1024}\n    }\n'
                                           '    tune {\n        minimize runtime, energy\n'
                                           '        select runtime where energy <= 1.05 * baseline\n    }'
                                           + BENCH + '}\n')
    result = run_evo("--retune", "--backend", "pycuda", "--evaluations", "6", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert "Pareto front (runtime, energy):" in result.stdout
    text = (tmp_path / "nvcc-evo.acf").read_text()
    assert "baseline.energy = " in text and "tuned.energy = " in text


def test_the_confirmation_compiles_the_baseline_and_the_winner_once_each(gpu):
    pool, bench, job, GpuBench = gpu
    built = []

    def build(block):
        built.append(block)
        return compile_candidate(replace(job, flags=(f"-DBLOCK={block}",)))

    measurer = GpuBench(bench, pool, job.arch, lambda block: {"BLOCK": block})
    baseline = build(256)
    assert measurer.measure(256, (), baseline).ok          # the baseline's outputs: the reference
    built.clear()
    found = measurer.confirm(256, 128, build)
    assert built == [256, 128] and found.verdict is not None and found.problem == ""
