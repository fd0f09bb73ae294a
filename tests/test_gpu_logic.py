"""The GPU backend's logic on the CPU: arguments from bench specs, data,
poison, output checks, and the worker pool's replacement of a dead worker."""
from __future__ import annotations

import os
import threading
from dataclasses import replace
import time

import numpy as np
import pytest

from nvcc_evo.acf.bench.spec import ExprError, plan_bench
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.measure import Wrong
from nvcc_evo.measure.check import Mismatch
from nvcc_evo.measure.check import outputs_match
from nvcc_evo.measure.pycuda.pool import WorkerPool
from nvcc_evo.measure.pycuda.data import host_array, poison, to_storage
from nvcc_evo.measure.pycuda.pipe import Answer, CopyRate, Hello, NoGpu, RunRequest
from nvcc_evo.measure.pycuda.timing import Incumbent
from nvcc_evo.measure.pycuda.worker import classify, Device, worker_main
from nvcc_evo.cubin.occupancy import launch_problem

BENCH = parse_text('''acf 1
unit "k.cu" {
    bench {
        kernel saxpy
        let N = 1000 * TILE
        arg n : i32 = N
        arg a : f32 = 2.5
        arg x : f32[N] = random(seed=3, low=0, high=2)
        arg h : bf16[N / 2] = range(start=1, step=0.5)
        arg c : i32[4] = constant(7)
        arg y : f32[N] = output
        grid (cdiv(N, TILE * 32), 2)
        block (TILE * 32)
        shared TILE * 64
        check y rtol 1e-5 atol 1e-6
    }
}
''').units[0].bench


def test_plan_evaluates_every_expression_with_the_defines():
    plan = plan_bench(BENCH, {"TILE": 4})
    assert [type(a).__name__ for a in plan.args] == ["ScalarPlan", "ScalarPlan", "ArrayPlan", "ArrayPlan",
                                                     "ArrayPlan", "ArrayPlan"]
    n, a, x, h, c, y = plan.args
    assert (n.value, a.value, x.count, h.count, c.count, y.count) == (4000, 2.5, 4000, 2000, 4, 4000)
    assert dict(x.params) == {"seed": 3, "low": 0, "high": 2} and dict(c.params) == {"value": 7}
    assert plan.grid == (32, 2, 1) and plan.block == (128, 1, 1) and plan.shared == 256
    assert plan.checks[0].rtol == 1e-5 and plan.bytes_moved == 4000 * 4 * 2 + 2000 * 2 + 16   # y: output only


def test_plan_without_a_needed_define_is_a_clear_error():
    with pytest.raises(ExprError, match="undefined name 'TILE'"):
        plan_bench(BENCH, {})


def test_a_bench_at_another_shape_replaces_its_lets_and_everything_after_follows():
    plan = plan_bench(BENCH, {"TILE": 4}, lets={"N": 64})
    assert plan.args[0].value == 64 and plan.args[2].count == 64 and plan.grid == (1, 2, 1)
    assert dict(plan.sizes)["N"] == 64
    with pytest.raises(ValueError, match="no `let M`"):
        plan_bench(BENCH, {"TILE": 4}, lets={"M": 1})


def test_host_data_is_seeded_typed_and_poisoned():
    plan = plan_bench(BENCH, {"TILE": 1})
    x, h, c, y = plan.arrays
    first, again, fresh = host_array(x, 0), host_array(x, 0), host_array(x, 1000)
    assert first.dtype == np.float32 and np.array_equal(first, again) and not np.array_equal(first, fresh)
    assert 0 <= first.min() and first.max() <= 2 and first.std() > 0.3        # never zeros
    assert np.array_equal(host_array(c, 0), np.full(4, 7, dtype=np.int32))
    bits = host_array(h, 0)
    assert bits.dtype == np.uint16 and (bits[:3] == [0x3F80, 0x3FC0, 0x4000]).all()   # 1.0, 1.5, 2.0 in bf16
    assert np.isnan(poison(y)).all()
    assert to_storage(np.array([1.00390625]), "bf16")[0] == 0x3F80             # ties round to even


def test_output_checks_catch_wrong_unwritten_and_nan():
    plan = plan_bench(BENCH, {"TILE": 1})
    ref = {"y": np.linspace(1, 2, 1000, dtype=np.float32)}
    assert outputs_match({"y": ref["y"].copy()}, ref, plan) is None
    assert outputs_match({"y": ref["y"] * (1 + 5e-6)}, ref, plan) is None
    outside = outputs_match({"y": ref["y"] * 1.001}, ref, plan)
    assert outside is not None and outside.kind == Wrong.OUTSIDE and outside.elements == 1000
    assert "1000 elements outside rtol" in str(outside)
    unwritten = ref["y"].copy()
    unwritten[::2] = np.nan
    found = outputs_match({"y": unwritten}, ref, plan)
    assert found is not None and (found.kind, found.output, found.elements) == (Wrong.UNWRITTEN, "y", 500)
    assert str(found) == "y: 500 NaN or unwritten elements"


def test_bf16_outputs_are_checked_against_a_kept_reference():
    """A reference kept by the measuring process is float64 already (as_reference):
    bf16 outputs compared with it were read as raw bits twice, and always wrong."""
    from nvcc_evo.measure.check import as_reference
    plan = plan_bench(BENCH, {"TILE": 1})
    plan = replace(plan, args=tuple(replace(a, dtype="bf16") if getattr(a, "name", "") == "y" else a
                                    for a in plan.args))
    got = to_storage(np.linspace(1, 2, 1000), "bf16")
    kept = as_reference({"y": got}, plan)
    assert outputs_match({"y": got.copy()}, kept, plan) is None
    spoiled = got.copy()
    spoiled[3] = to_storage(np.array([7.0]), "bf16")[0]
    assert "1 elements outside rtol" in str(outputs_match({"y": spoiled}, kept, plan))


def test_cuda_errors_are_classified():
    assert classify(RuntimeError("cuLaunchKernel failed: too many resources requested for launch")) == \
        ("launch-refused", False)
    assert classify(RuntimeError("cuFuncSetBlockShape failed: invalid argument")) == ("launch-refused", False)
    assert classify(RuntimeError("cuCtxSynchronize failed: an illegal memory access was encountered")) == \
        ("crash", True)


# Stand-ins for the GPU, top-level so that a spawned process can import them: the measuring
# process's own loop (pycuda.worker.worker_main) runs with them, over a real pipe.
FAKE = Hello("fake", "0.0", "sm_00", "0", 0, False)


def ask(what: bytes = b"") -> RunRequest:
    return RunRequest(what, None)


class DyingDevice:
    """Dies on a request for b"die", hangs on b"hang", else answers with its process id."""

    def __init__(self, index: int):
        pass

    def hello(self) -> Hello:
        return FAKE

    def run(self, request: RunRequest) -> Answer:
        if request.cubin == b"die":
            os._exit(17)
        if request.cubin == b"hang":
            time.sleep(60)
        return Answer("ok", str(os.getpid()))


class NoDevice:
    def __init__(self, index: int):
        raise RuntimeError("cuInit failed: no CUDA-capable device is detected")


def worker_that_dies_on_request(connection, device):
    worker_main(connection, device, DyingDevice)


def worker_without_gpu(connection, device):
    worker_main(connection, device, NoDevice)


def test_a_worker_that_dies_is_recorded_and_replaced():
    pool = WorkerPool(target=worker_that_dies_on_request, timeout=30)
    try:
        first = pool.request(ask())
        died = pool.request(ask(b"die"))
        assert died.status == "crash" and "exit code 17" in died.detail
        after = pool.request(ask())
        assert after.status == "ok" and after.detail != first.detail and pool.replaced == 1
        hung = pool.request(ask(b"hang"), timeout=2)
        assert hung.status == "timeout" and pool.request(ask()).status == "ok" and pool.replaced == 2
    finally:
        pool.close()


class StandInCuda:
    """The one CUDA call a stand-in device's `run` reaches: the module load, which
    fails with the error the request's cubin names (as pycuda raises it)."""

    def module_from_buffer(self, cubin: bytes):
        raise RuntimeError(cubin.decode())


class StandInDevice(Device):
    """pycuda.worker.Device without a GPU: its own `run` (the request's type decides
    what is done), the copy rate and the module load answered here."""

    def __init__(self, index: int):
        self.cuda, self.references = StandInCuda(), {}

    def hello(self) -> Hello:
        return FAKE

    def copy_bandwidth(self, size: int = 0, repeats: int = 0) -> Answer:
        return Answer("ok", copy_bytes_per_s=4e12)


def stand_in_worker(connection, device):
    worker_main(connection, device, StandInDevice)


def test_the_pipes_values_cross_a_real_pipe_as_they_are():
    """What the pool and the measuring process send each other pickles through
    a multiprocessing pipe (spawn's, as WorkerPool's) and comes back equal."""
    import multiprocessing
    plan = plan_bench(BENCH, {"TILE": 1})
    near, far = multiprocessing.get_context("spawn").Pipe()
    outputs = {"y": np.linspace(1, 2, 1000, dtype=np.float32)}
    sent = [FAKE, NoGpu("no device"), CopyRate(), RunRequest(b"\x7fELF", plan, time=True, min_seconds=0.2,
            race=Incumbent(10.5, 0.02), settle=True, energy=True, outputs=True, seed=1000, compare="k"),
            Answer("ok", costs={"load": 0.1}, wrong=Mismatch(Wrong.UNWRITTEN, "y", 3), times_us=[1.0, 2.0], planned=9,
                   stopped="raced", energy_mj=2.0, power_w=500.0, launches=16), None]
    try:
        for value in sent:
            near.send(value)
            assert far.recv() == value
        near.send(RunRequest(b"", plan, reference=("k", outputs)))
        got = far.recv()
        assert got.reference[0] == "k" and np.array_equal(got.reference[1]["y"], outputs["y"])
        assert got.plan == plan and got.race is None and got.time is False and got.min_seconds == 0.3
    finally:
        near.close()
        far.close()
    assert FAKE.as_dict() == {"name": "fake", "cc": "0.0", "arch": "sm_00", "driver": "0", "l2": 0, "nvml": False}


def test_the_measuring_process_answers_each_request_type_and_a_cuda_error_in_its_words():
    """The measuring process's own loop and Device.run, over a real pipe: a copy
    rate asked is measured; a candidate whose load fails is answered with the
    error's status (pycuda.worker.classify), the process kept after a recoverable
    error and replaced after a fatal one; its hello is the pool's `hello`."""
    plan = plan_bench(BENCH, {"TILE": 1})
    pool = WorkerPool(target=stand_in_worker, timeout=30)
    try:
        assert pool.hello == FAKE.as_dict()
        assert pool.request(CopyRate()) == Answer("ok", copy_bytes_per_s=4e12)
        memory = pool.request(RunRequest(b"cuMemAlloc failed: out of memory", plan, time=True))
        assert memory == Answer("out-of-memory", "RuntimeError: cuMemAlloc failed: out of memory")
        assert pool.replaced == 0
        crashed = pool.request(RunRequest(b"cuCtxSynchronize failed: an illegal memory access was encountered", plan))
        assert crashed.status == "crash" and "illegal memory access" in crashed.detail and pool.replaced == 1
        assert pool.request(CopyRate()).status == "ok"
    finally:
        pool.close()


def test_no_gpu_is_a_clear_environment_error():
    with pytest.raises(EnvironmentProblem, match="no usable GPU: cuInit failed"):
        WorkerPool(target=worker_without_gpu, timeout=30)


def test_choosing_pycuda_without_pycuda_says_so(tmp_path):
    from conftest import evo_env, run_evo, DATA
    import shutil
    try:
        import pycuda  # noqa: F401
        pytest.skip("PyCUDA is installed here")
    except ImportError:
        pass
    shutil.copy(DATA / "cuda" / "faulty.cu", tmp_path / "faulty.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "faulty.cu" { }\n')
    result = run_evo("--retune", "--backend", "pycuda", cwd=tmp_path, env=evo_env(tmp_path / "cache"))
    assert result.returncode == 3 and "needs PyCUDA" in result.stderr and "Traceback" not in result.stderr


def test_an_array_read_and_written_counts_twice():
    bench = parse_text('acf 1\nunit "k.cu" { bench { kernel k arg y : f32[100] = random(seed=1) '
                       'grid (1) block (32) check y rtol 0 } }').units[0].bench
    assert plan_bench(bench, {}).bytes_moved == 800


H200 = {"threads": 1024, "registers": 65536, "shared": 232448, "dims": (1024, 1024, 64)}


def test_launches_the_driver_would_refuse_are_named_before_data_moves():
    roomy = {"threads": 1024, "registers": 32, "shared": 0}
    assert launch_problem((256, 1, 1), 0, roomy, H200) is None
    assert "2048 threads; the device allows at most 1024" in str(launch_problem((2048, 1, 1), 0, roomy, H200))
    assert str(launch_problem((1, 1, 128), 0, roomy, H200)) == \
        "block 1x1x128: 128 threads in z; the device allows at most 64"
    # 128 registers x 1024 threads exceed the 64K register file: the kernel itself launches at most 512
    heavy = {"threads": 512, "registers": 128, "shared": 0}
    assert str(launch_problem((1024, 1, 1), 0, heavy, H200)) == (
        "block 1024x1x1 is 1024 threads; with 128 registers per thread this kernel launches at most 512 "
        "(65536 registers per block)")
    assert "bytes of shared memory" in str(launch_problem((128, 1, 1), 200_000, {**roomy, "shared": 40_000}, H200))


@pytest.mark.parametrize("tune, wanted", [
    ("minimize runtime", False),
    ("minimize runtime\n require registers <= 64", False),
    ("minimize runtime, energy", True),
    ("minimize runtime\n require power <= 500", True),
    ("minimize runtime, registers\n select runtime where energy <= 1.05 * baseline", True),
])
def test_energy_is_measured_only_where_the_tune_block_names_it(tune, wanted):
    from nvcc_evo.execute.measurers import uses_energy
    unit = parse_text(f'acf 1\nunit "k.cu" {{\n tune {{\n {tune}\n }}\n}}\n').units[0]
    assert uses_energy(unit.tune) is wanted
    assert uses_energy(None) is False


class CountingPool:
    """What GpuBench reads of a pool to know which measuring process it talks to."""

    hello = {"name": "fake", "nvml": False}
    replaced = 0
    lock = threading.RLock()         # WorkerPool's: one request at a time


def test_the_reference_is_sent_to_the_measuring_process_once_and_again_after_a_replacement():
    from nvcc_evo.measure.pycuda.references import References
    references = References("unit:")
    plan = plan_bench(BENCH, {"TILE": 1})
    process = 0
    asked = [references.comparison(plan, True, process)]
    references.baseline = {"y": np.ones(1000)}              # (the baseline's run kept its outputs)
    asked += [references.comparison(plan, False, process) for _ in range(2)]
    process += 1                                             # the worker died and was replaced
    asked.append(references.comparison(plan, False, process))
    key = "unit:baseline"
    assert asked[0] == {"keep": key}                         # the baseline's own outputs kept there
    assert asked[1] == asked[2] == {"compare": key}          # ...so nothing is sent for the next ones
    assert asked[3]["compare"] == key and asked[3]["reference"][0] == key   # a new process gets it once


def test_the_measuring_process_keeps_compares_and_sends_back_outputs_only_when_asked():
    from nvcc_evo.measure.check import checked, take_reference
    plan = plan_bench(BENCH, {"TILE": 1})
    right = {"y": np.linspace(1, 2, 1000, dtype=np.float32)}
    wrong = {"y": right["y"] * 1.01}
    held = {}
    assert checked(RunRequest(b"", plan, keep="base"), right, held) == {}          # nothing crosses back
    assert checked(RunRequest(b"", plan, compare="base"), right, held) == {"wrong": None}
    assert checked(RunRequest(b"", plan, compare="base"), wrong, held)["wrong"].kind == Wrong.OUTSIDE
    unchecked = checked(RunRequest(b"", plan, compare="other"), right, held)["wrong"]
    assert unchecked.kind == Wrong.UNCHECKED and str(unchecked) == "no reference here"
    take_reference(RunRequest(b"", plan, reference=("other", wrong)), held)
    asked = RunRequest(b"", plan, compare="other", outputs=True)
    assert checked(asked, wrong, held) == {"outputs": wrong, "wrong": None}


def test_the_gpu_confirmation_builds_its_own_pair_and_stops_at_a_failed_build(tmp_path, real_nvcc):
    """GpuBench.confirm compiles the baseline and the winner itself (real
    nvcc, the Backend's `build`); a side that does not compile ends it before
    anything is sent to the measuring process, in the backend's words."""
    from dataclasses import replace
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate
    from nvcc_evo.measure.pycuda.bench import GpuBench
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k(float* y) { y[0] = BROKEN; }\n')
    job = CompileJob(str(real_nvcc), ("-c", "k.cu"), str(tmp_path), "k.cu", "sm_90")
    built = []

    def build(genome):
        built.append(genome)
        return compile_candidate(replace(job, flags=("-DBROKEN=1.0f",) if genome == "baseline" else ()))

    class NoRequests(CountingPool):
        def request(self, message, timeout=None):
            raise AssertionError("nothing may be measured after a failed build")

    found = GpuBench(BENCH, NoRequests(), "sm_90", lambda g: {"TILE": 1}, energy=False).confirm(
        "baseline", "chosen", build)
    assert built == ["baseline", "chosen"]
    assert found.verdict is None and found.problem == "recompiling for the verification failed (chosen compile-error)"


class LoggingDevice(StandInDevice):
    """Answers every RunRequest after 5 ms (with times when timed, zeros as the
    outputs when asked) and logs its cubin; b"log" is answered with the log."""

    def run(self, request):
        if request.cubin == b"log":
            return Answer("ok", ",".join(self.__dict__.setdefault("log", [])))
        self.__dict__.setdefault("log", []).append(request.cubin.decode() if len(request.cubin) < 16 else "cubin")
        time.sleep(0.005)
        outputs = {"y": np.zeros(request.plan.args[-1].count, np.float32)} if request.outputs else None
        times = [100.0 if request.cubin == b"a" else 90.0] * 5 if request.time else None
        return Answer("ok", outputs=outputs, times_us=times)


def logging_worker(connection, device):
    worker_main(connection, device, LoggingDevice)


def test_a_confirmation_holds_the_gpu_for_each_pair_and_lets_another_search_take_turns_between():
    """verify's A B pairs are adjacent on the GPU; another search at once
    asking meanwhile is served between pairs, not after the whole confirmation
    (before, its candidates waited for all the rounds)."""
    from nvcc_evo.measure.pycuda.confirm import verify
    plan = plan_bench(BENCH, {"TILE": 1})
    pool = WorkerPool(target=logging_worker, timeout=30)
    done = threading.Event()
    verdicts = []

    def confirm() -> None:
        verdicts.append(verify(pool, (b"a", plan), (b"b", plan), rounds=6))
        done.set()

    try:
        pool.request(RunRequest(b"warm", plan))
        thread = threading.Thread(target=confirm)
        with pool.lock:               # the other search is measuring when the confirmation starts
            thread.start()
            time.sleep(0.05)
        while not done.is_set():
            pool.request(RunRequest(b"other", plan))
        thread.join(30)
        log = pool.request(ask(b"log")).detail.split(",")[1:]
    finally:
        pool.close()
    timed = [name for name in log if name in "ab"]
    assert timed == ["a", "b"] * 7, log                     # 6 timed pairs, then the fresh-input pair
    pairs = [i for i, name in enumerate(log) if name == "a"]
    assert all(log[i + 1] == "b" for i in pairs), log
    between = log[pairs[0]:pairs[-1]]
    assert between.count("other") >= 5, log                 # a turn between every two pairs
    verdict, problem = verdicts[0]
    assert problem == "" and verdict.rounds == 6 and verdict.effect == pytest.approx(100 / 90) and verdict.significant


def test_the_numpy_reference_is_computed_while_another_search_measures(tmp_path, real_nvcc):
    """A bench's numpy reference (seconds on a large bench) is computed before
    the GPU is held: another search at once is measured meanwhile (before, it
    waited for the reference, and its own budget ran out waiting)."""
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate
    from nvcc_evo.measure.pycuda.bench import GpuBench
    (tmp_path / "k.cu").write_text('extern "C" __global__ void saxpy(int n, float a, const float* x, '
                                   'const unsigned short* h, const int* c, float* y) { y[0] = a; }\n')
    built = compile_candidate(CompileJob(str(real_nvcc), ("-c", "k.cu"), str(tmp_path), "k.cu", "sm_90"))
    assert built.ok, built.detail

    def slow_reference(x, **_):
        time.sleep(1.5)
        return {"y": np.zeros_like(x)}

    pool = WorkerPool(target=logging_worker, timeout=30)
    bench = GpuBench(BENCH, pool, "sm_90", lambda g: {"TILE": 1}, energy=False, expected_fn=slow_reference)
    measured = []
    try:
        pool.request(RunRequest(b"warm", bench.plan(None)))
        thread = threading.Thread(target=lambda: measured.append(bench.measure(None, (), built)))
        thread.start()
        time.sleep(0.2)
        asked = time.monotonic()
        pool.request(RunRequest(b"other", bench.plan(None)))
        waited = time.monotonic() - asked
        thread.join(30)
    finally:
        pool.close()
    assert measured[0].ok, measured[0]
    assert waited < 0.8, f"the other search waited {waited:.2f} s for the GPU"


class WindowDevice(LoggingDevice):
    """A LoggingDevice whose timed runs take their timing window, as the GPU's do."""

    def run(self, request):
        if request.time:
            time.sleep(request.min_seconds)
        return super().run(request)


def window_worker(connection, device):
    worker_main(connection, device, WindowDevice)


def test_the_time_kept_for_the_confirmation_covers_it(tmp_path, real_nvcc):
    """The pycuda backend's reserve (kept back from a time budget, so that a
    search that runs out of time still confirms within it) is 0 before the
    baseline, then covers a real confirmation: two real builds and the timed
    pairs on a measuring process whose runs take their windows, without
    keeping back more than twice what it takes (before, nothing was kept)."""
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate
    from nvcc_evo.measure.pycuda.bench import GpuBench
    (tmp_path / "k.cu").write_text('extern "C" __global__ void saxpy(int n, float a, const float* x, '
                                   'const unsigned short* h, const int* c, float* y) { y[0] = a; }\n')
    build = lambda genome: compile_candidate(CompileJob(str(real_nvcc), ("-c", "k.cu"), str(tmp_path), "k.cu", "sm_90"))
    pool = WorkerPool(target=window_worker, timeout=30)
    bench = GpuBench(BENCH, pool, "sm_90", lambda g: {"TILE": 1}, energy=False)
    try:
        assert bench.reserve() == 0.0
        assert bench.measure(None, (), build(None)).ok
        kept = bench.reserve()
        started = time.monotonic()
        confirmation = bench.confirm("baseline", "chosen", build)
        took = time.monotonic() - started
    finally:
        pool.close()
    assert confirmation.verdict is not None and confirmation.problem == "", confirmation
    assert took <= kept <= 2 * took, (took, kept)


class SteppedCounter:
    """A GPU drawing `watts` whose total-energy counter (mJ) moves every
    `step` s, on a clock that launches move (`each` s a launch)."""

    def __init__(self, watts: float, step: float, each: float, phase: float):
        self.watts, self.step, self.each, self.now = watts, step, each, phase

    def batch(self) -> int:
        self.now += 16 * self.each
        return 16

    def read(self) -> float:
        return 1e3 * self.watts * (self.now // self.step) * self.step

    def clock(self) -> float:
        return self.now


@pytest.mark.parametrize("phase", [0.0, 0.013, 0.031, 0.049])
def test_energy_is_measured_between_two_of_the_counters_steps(phase):
    """NVML's counter moves every 20-100 ms: a window between two of its steps
    gives each launch's energy within 1% in a fifth of a second or so (between
    two reads, either end can be a step stale: 5% of a 1 s window at 50 ms steps)."""
    from nvcc_evo.measure.stats import energy_window
    gpu = SteppedCounter(watts=400.0, step=0.05, each=70e-6, phase=phase)
    started = gpu.clock()
    found = energy_window(gpu.batch, gpu.read, gpu.clock)
    assert found["energy_mj"] == pytest.approx(400.0 * 70e-6 * 1e3, rel=0.01)
    assert found["power_w"] == pytest.approx(400.0, rel=0.01)
    assert gpu.clock() - started <= 0.3


def test_a_counter_that_barely_moves_is_read_over_the_whole_window():
    """With fewer than two steps in `seconds`, the reads' difference over it all."""
    from nvcc_evo.measure.stats import energy_window
    gpu = SteppedCounter(watts=400.0, step=0.8, each=70e-6, phase=0.5)
    found = energy_window(gpu.batch, gpu.read, gpu.clock, seconds=1.0)
    assert 1.0 <= gpu.clock() - 0.5 < 1.01
    assert found["launches"] == pytest.approx(1.0 / 70e-6, rel=0.01)
    assert found["energy_mj"] == pytest.approx(400.0 * 0.8 * 1e3 / found["launches"])   # one step in the window


def test_a_thread_that_stops_waiting_for_the_gpu_does_not_stop_those_behind_it():
    """A search interrupted while it waits for its turn (Ctrl-C: an exception
    where it waits) gives the turn up: the next search still gets the GPU
    (before, its turn was never served, and every search after it waited for ever)."""
    import signal
    from nvcc_evo.measure.pycuda.pool import TurnLock
    lock, served = TurnLock(), threading.Event()
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            holding.set()
            release.wait(10)

    def behind() -> None:
        time.sleep(0.3)                 # asks after the interrupted one
        with lock:
            served.set()

    def interrupt(*_):
        raise KeyboardInterrupt

    first, second = threading.Thread(target=holder), threading.Thread(target=behind)
    first.start()
    holding.wait(5)
    second.start()
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            with lock:
                pass
    finally:
        signal.signal(signal.SIGALRM, previous)
    time.sleep(0.3)
    release.set()
    first.join(5)
    second.join(5)
    assert served.is_set()


def test_the_numpy_reference_is_started_before_the_baseline_is_built(tmp_path, real_nvcc):
    """The pycuda backend starts the baseline's numpy reference in a thread
    when it is made (GpuBench.prefetch), so the baseline's compile and the
    reference run at once: its first measurement waits only for what is left
    of the reference (before, for all of it, after the compile)."""
    from nvcc_evo.cubin.compile import CompileJob, compile_candidate
    from nvcc_evo.measure.pycuda.bench import GpuBench
    (tmp_path / "k.cu").write_text('extern "C" __global__ void saxpy(int n, float a, const float* x, '
                                   'const unsigned short* h, const int* c, float* y) { y[0] = a; }\n')
    calls = []

    def slow_reference(x, **_):
        calls.append(threading.current_thread())
        time.sleep(1.5)
        return {"y": np.zeros_like(x)}

    pool = WorkerPool(target=logging_worker, timeout=30)
    bench = GpuBench(BENCH, pool, "sm_90", lambda g: {"TILE": 1}, energy=False, expected_fn=slow_reference)
    try:
        bench.prefetch({"TILE": 1})
        built = compile_candidate(CompileJob(str(real_nvcc), ("-c", "k.cu"), str(tmp_path), "k.cu", "sm_90"))
        time.sleep(max(0.0, 1.5 - built.seconds))       # a baseline that takes as long to build as the reference
        started = time.monotonic()
        measured = bench.measure(None, (), built)
        waited = time.monotonic() - started
    finally:
        pool.close()
    assert measured.ok, measured
    assert len(calls) == 1 and calls[0] is not threading.main_thread()
    assert waited < 0.7, f"the baseline's measurement waited {waited:.2f} s for its reference"


class SpinningDevice(LoggingDevice):
    """A GPU whose kernel of cubin b"spin" never ends: the request never returns (the process sleeps, as a
    process waiting in the driver on a deadlocked kernel does)."""

    def run(self, request):
        if request.cubin == b"spin":
            time.sleep(3600)
        return super().run(request)


def spinning_worker(connection, device):
    worker_main(connection, device, SpinningDevice)


def test_a_candidate_that_never_ends_is_stopped_within_the_retunes_timeout_and_the_next_is_measured():
    """The watchdog: a candidate's run past --timeout (the retune's, handed to the pycuda backend) is a
    `timeout` failure, its measuring process killed (its CUDA context with it) and a fresh one measures the
    next candidate, the baseline's outputs sent to it again. Before, the backend waited the pool's own 120 s
    whatever --timeout said."""
    from nvcc_evo.cubin.compile import CompileResult
    from nvcc_evo.measure.pycuda.bench import GpuBench
    pool = WorkerPool(target=spinning_worker, timeout=30)
    try:
        bench = GpuBench(BENCH, pool, "sm_90", lambda g: {"TILE": 1}, energy=False, timeout=3)
        built = lambda cubin: CompileResult("ok", 0.1, "", cubin)
        assert bench.measure(None, (), built(b"baseline")).ok
        first = pool.process.pid
        started = time.monotonic()
        hung = bench.measure(None, (), built(b"spin"))
        assert time.monotonic() - started < 10 and hung.status == "timeout", hung
        assert "no answer within 3 s (a kernel that never ends?)" in hung.detail
        after = bench.measure(None, (), built(b"next"))
        assert after.ok and pool.replaced == 1 and pool.process.pid != first
        assert pool.request(RunRequest(b"log", None)).detail == "next"      # the fresh process measured it
    finally:
        pool.close()
