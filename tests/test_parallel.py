"""Several measuring lanes (execute.lanes): which GPUs, per-GPU baselines,
results in genome order identical to one lane's, and a results store that
takes records from many appenders at once. The lanes here are CPU lanes
(the static backend on real nvcc builds); the GPU's own lanes run in
tests/test_gpu_lanes.py."""
from __future__ import annotations

import multiprocessing
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import ROOT
from nvcc_evo.acf.resolve import load
from nvcc_evo.cubin.compile import CompileJob
from nvcc_evo.errors import UsageError
from nvcc_evo.measure import Measurement, static
from nvcc_evo.measure.backend import Composed
from nvcc_evo.execute.evaluate import Builds, Compiling, Evaluator
from nvcc_evo.execute.measured import Measured
from nvcc_evo.execute.goal import goal_for
from nvcc_evo.driver import settings, specs
from nvcc_evo.execute.lanes import Lane, LaneLost, LaneSet, choose_gpus, scale_to, scaled
from nvcc_evo.engine.space import build_space
from nvcc_evo.execute.store import Context, StoredResult, Store
from nvcc_evo.engine.space import Genome


# ---------------------------------------------------------------- which GPUs
H, A = "NVIDIA H200", "NVIDIA A100"


@pytest.mark.parametrize("spec,names,first,expected", [
    (None, [H], 0, [0]),
    ("all", [H, H, H], 0, [0, 1, 2]),
    ("all", [H, H, H], 2, [2, 0, 1]),             # lane 0 is retune.device
    ("all", [H, A, H], 0, [0, 2]),                # another model is left out, never mixed in
    ("count:2", [H, H, H], 0, [0, 1]),
    ("0,2", [H, A, H], 0, [0, 2]),
    ("0", [H], 0, [0]),
    ("1", [H, H], 0, [1]),                        # a number is a device's, as in CUDA_VISIBLE_DEVICES
])
def test_gpus_named_by_all_a_count_or_numbers(spec, names, first, expected):
    assert choose_gpus(specs.gpus(spec), names, first) == expected


@pytest.mark.parametrize("spec,names,said", [
    ("0,1", [H, A], "different models"),
    ("count:3", [H, H], r"2 GPU\(s\) visible"),
    ("2", [H, H], "devices 0..1"),
    ("0,0", [H, H], "each named once"),
    ("0,5", [H, H], "devices 0..1"),
])
def test_gpus_that_cannot_be_used_together_are_a_usage_error(spec, names, said):
    with pytest.raises(UsageError, match=said):
        choose_gpus(specs.gpus(spec), names)


@pytest.mark.parametrize("spec,parsed", [("all", (0, ())), (" count:2 ", (2, ())), ("0, 2", (0, (0, 2)))])
def test_gpus_are_parsed_once_by_the_form_settings_checks(spec, parsed):
    """retune.gpus is read by one form (driver.specs): the settings' check and the value execute receives."""
    assert (specs.gpus(spec).count, specs.gpus(spec).devices) == parsed and specs.gpus(None) is None
    assert not settings.value_problem(settings.BY_NAME["retune.gpus"], spec)


@pytest.mark.parametrize("spec", ["many", "count:0", "0,", ""])
def test_gpus_of_no_form_are_a_usage_error_and_a_settings_problem(spec):
    with pytest.raises(UsageError, match="--gpus .*expected all, count:N or device numbers"):
        specs.gpus(spec)
    assert settings.value_problem(settings.BY_NAME["retune.gpus"], spec)


# ---------------------------------------------------------------- per-GPU baselines
def test_a_lanes_runtime_is_scaled_by_lane_0s_baseline_over_its_own():
    base0 = Measurement("ok", (("runtime", 100.0), ("energy", 50.0), ("registers", 32.0)))
    base1 = Measurement("ok", (("runtime", 125.0), ("energy", 40.0), ("registers", 32.0)))
    factors = scale_to(base1, base0)
    assert factors == {"runtime": 0.8, "energy": 1.25}
    candidate = Measurement("ok", (("runtime", 110.0), ("energy", 44.0), ("registers", 40.0)),
                            (("runtime", 0.01),))
    seen = scaled(candidate, factors)
    assert dict(seen.metrics) == {"runtime": pytest.approx(88.0), "energy": pytest.approx(55.0), "registers": 40.0}
    assert seen.spreads == candidate.spreads            # relative: the same on every GPU
    assert scaled(Measurement("crash"), factors) == Measurement("crash")
    assert scale_to(Measurement("crash"), base0) == {}


# ---------------------------------------------------------------- lanes on real builds
UNIT_GLOB = "scale.cu"


@pytest.fixture(scope="module")
def suite(tmp_path_factory, real_nvcc):
    folder = tmp_path_factory.mktemp("lanes")
    for name in ("scale.cu", "nvcc-evo.acf", "references.py", "block_reduce.cuh"):
        shutil.copy(ROOT / "kernels" / name, folder / name)
    unit = next(u for u in load(folder / "nvcc-evo.acf").units if u.globs == (UNIT_GLOB,))
    space = build_space(unit, folder / "scale.cu", lambda knob: True)
    job = CompileJob(str(real_nvcc), ("-c", "scale.cu"), str(folder), "scale.cu", "sm_90")
    return folder, space, job


def _flags(genome: Genome) -> tuple[str, ...]:
    settings = genome.settings()
    flags = [f"-D{knob.partition('.')[2]}={value}" for knob, value in settings.items() if knob.startswith("define.")]
    flags += [f"-Xptxas=-dlcm={value}" for knob, value in settings.items() if knob == "ptxas.dlcm"]
    return tuple(flags)


class SlowStatic:
    """The static measurement of a real cubin, as a lane of a GPU would answer:
    runtime is the instruction count times this lane's speed (its GPU's), and
    each answer takes `seconds` (so that lanes overlap)."""

    def __init__(self, speed: float, seconds: float = 0.05):
        self.speed, self.seconds, self.calls = speed, seconds, []

    def __call__(self, genome, flags, result):
        threading.Event().wait(self.seconds)
        self.calls.append(genome)
        measured = static.measure(result, "sm_90")
        if not measured.ok:
            return measured
        runtime = measured.get("instructions") * self.speed
        return replace(measured, metrics=(("runtime", runtime),) + tuple(
            (k, v) for k, v in measured.metrics if k != "compile_time"))


def _evaluate(suite, store_path: Path, lanes: LaneSet | None, measure) -> tuple[list, Evaluator]:
    folder, space, job = suite
    context = Context("13.0", "f", "sm_90", "cpu", "static", UNIT_GLOB, "b")
    evaluator = Evaluator(Measured(goal_for(None, ("runtime",) + static.OBJECTIVES, ("runtime",)), context),
                          Store(store_path), Builds(job, _flags), measure, Compiling(), lanes=lanes)
    points = [space.genome(dict(zip([d.knob for d in space.dimensions], values)))
              for values in [(128, "ca"), (256, "ca"), (512, "cg"), (128, "cs"), (256, "cg"), (512, "ca")]]
    baseline = space.baseline()
    first = evaluator([baseline])
    if lanes is not None:
        from nvcc_evo.cubin.compile import compile_candidate
        lanes.calibrate(baseline, _flags(baseline), compile_candidate(replace(job, flags=_flags(baseline))))
    started = evaluator.start(points + points[:2])               # the last two: binaries measured before
    evaluations = first + evaluator.finish(started, 0, len(points) + 2)
    evaluator.close()
    return evaluations, evaluator


def _records(path: Path) -> list[tuple]:
    return sorted((repr(r.genome), r.measurement.status, r.measurement.metrics, r.sass_hash) for r in Store(path).read())


def test_two_lanes_give_the_records_and_evaluations_of_one_in_genome_order(suite, tmp_path):
    serial, _ = _evaluate(suite, tmp_path / "one.jsonl", None, SlowStatic(1.0))
    fast, slow = SlowStatic(1.0), SlowStatic(2.0)          # the second GPU is half as fast
    lanes = LaneSet([Lane(0, Composed(fast, ("runtime",)), "GPU 0"), Lane(1, Composed(slow, ("runtime",)), "GPU 1")])
    parallel, evaluator = _evaluate(suite, tmp_path / "two.jsonl", lanes, lanes.measurer().measure)
    assert [e.genome for e in parallel] == [e.genome for e in serial]
    assert parallel == serial                    # lane 1's runtimes in lane 0's units: the same objectives
    assert _records(tmp_path / "two.jsonl") == _records(tmp_path / "one.jsonl")
    assert lanes.lanes[1].scale == {"runtime": 0.5}
    assert fast.calls and slow.calls[1:], "both lanes measured candidates"
    assert evaluator.measured.tally.reused == 2           # the repeated genomes' binaries: measured once, on either lane


def test_a_lost_lane_hands_its_candidate_to_another_and_the_last_one_lost_is_a_failed_evaluation(suite):
    def gone(genome, flags, result):
        raise LaneLost("node died")
    working = SlowStatic(1.0, 0.0)
    lanes = LaneSet([Lane(0, Composed(gone, ("runtime",)), "lost"), Lane(1, Composed(working, ("runtime",)), "ok")])
    from nvcc_evo.cubin.compile import compile_candidate
    folder, space, job = suite
    result = compile_candidate(job)
    answers = [lanes.measure(None, (), result) for _ in range(3)]
    assert all(a.ok for a in answers) and len(working.calls) == 3
    assert lanes.alive == 1 and "lost: LaneLost" not in " ".join(lanes.notes) and "node died" in lanes.notes[0]
    def failing(genome, flags, result):
        raise ValueError("a bug in a backend")
    one = LaneSet([Lane(0, Composed(failing, ("runtime",)), "buggy")])
    for _ in range(2):                  # raised to the caller, and the lane is free again (no hang)
        with pytest.raises(ValueError):
            one.measure(None, (), result)
    alone = LaneSet([Lane(0, Composed(gone, ("runtime",)), "lost")], retries=0)
    lost = alone.measure(None, (), result)
    assert lost.status == "lost" and "node died" in lost.detail


# ---------------------------------------------------------------- the store, from many appenders
def _append_many(path: str, writer: int, count: int) -> None:
    store = Store(Path(path))
    context = Context("13.0", "f", "sm_90", "NVIDIA H200", "pycuda", "u", "b")
    for i in range(count):
        genome = Genome((("define.W", writer), ("define.I", i)))
        # long lines: a write of several pages, where unlocked appends would interleave
        store.append(StoredResult(genome, ("-DX",) * 400,
                                  Measurement("ok", (("runtime", float(i)),), detail="x" * 1900), "h", context))


def test_concurrent_appenders_from_threads_and_processes_lose_and_tear_nothing(tmp_path):
    path = str(tmp_path / "results.jsonl")
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=_append_many, args=(path, w, 60)) for w in range(4)]
    threads = [threading.Thread(target=_append_many, args=(path, 10 + w, 60)) for w in range(4)]
    for worker in processes + threads:
        worker.start()
    for worker in processes + threads:
        worker.join()
    lines = Path(path).read_text().splitlines()
    records = Store(Path(path)).read()
    assert len(lines) == len(records) == 8 * 60, "every line whole and decodable"
    seen = {dict(r.genome.items)["define.W"]: set() for r in records}
    for record in records:
        seen[dict(record.genome.items)["define.W"]].add(dict(record.genome.items)["define.I"])
    assert all(found == set(range(60)) for found in seen.values()) and len(seen) == 8


def test_the_retunes_calibration_times_the_baseline_on_every_gpu_lane_and_drops_a_failing_one(suite, capfd):
    from nvcc_evo.execute.devices import calibrate
    folder, space, job = suite
    def broken(genome, flags, result):
        return Measurement("crash", detail="the measuring process died")
    lanes = LaneSet([Lane(0, Composed(SlowStatic(1.0), ("runtime",), hello={}), "GPU 0"),
                     Lane(1, Composed(SlowStatic(1.25), ("runtime",), hello={}), "GPU 1"),
                     Lane(2, Composed(broken, ("runtime",), hello={}), "GPU 2")])
    calibrate(lanes, lanes.measurer(), space.baseline(), job)
    assert [lane.name for lane in lanes.lanes] == ["GPU 0", "GPU 1"] and lanes.lanes[1].scale == {"runtime": 0.8}
    said = capfd.readouterr().err
    assert "the baseline on each lane: GPU 0 " in said and "GPU 2: the baseline failed there (crash)" in said
