"""The measuring process: one per GPU, started fresh after a candidate breaks
its CUDA context. Runs in a child process (spawn); PyCUDA and NVML are
imported here only, so nothing else of nvcc-evo needs them.

Protocol over a multiprocessing Connection, typed values pickled as they
are: the worker first sends a `Hello` (device name, compute capability,
driver, L2 size, NVML availability) or `NoGpu`, then answers each request
(`RunRequest`: a candidate run, checked, timed; `CopyRate`: the device's copy
bandwidth) with an `Answer`; None asks it to exit.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from nvcc_evo.acf.bench.spec import ArrayPlan, BenchPlan, DTYPES, ScalarPlan
from nvcc_evo.measure import Clock
from nvcc_evo.measure.check import Mismatch, checked, take_reference
from nvcc_evo.measure.device_check import DeviceCheck
from nvcc_evo.cubin.occupancy import LaunchRefusal, launch_problem
from nvcc_evo.measure.stats import (ENERGY_LEAST, clearly_slower, energy_window, race_checkpoints, repetitions,
                                    settled)
from nvcc_evo.status import Status

CACHE_BYTES = 8 << 30        # host copies of inputs kept between requests
DEVICE_CACHE_BYTES = 16 << 30   # device copies of inputs kept between requests

# Errors after which the context cannot be trusted: the worker exits and is replaced.
FATAL_WORDS = ("illegal", "misaligned", "launch failed", "unspecified launch failure", "exception",
               "hardware stack error", "timeout", "context is destroyed")


# ---------------------------------------------------------------- the pipe's values
@dataclass(frozen=True)
class Hello:
    name: str
    cc: str                 # compute capability, "9.0"
    arch: str               # sm_90
    driver: str
    l2: int                 # bytes
    nvml: bool              # energy can be measured

    def as_dict(self) -> dict:      # what a backend's `hello` holds (the results' context, the ACF's provenance)
        return asdict(self)


@dataclass(frozen=True)
class NoGpu:                # the hello of a worker that found no usable device
    detail: str


class Incumbent(NamedTuple):      # what a race is run against
    median: float
    margin: float


@dataclass(frozen=True)
class RunRequest:
    """Run `cubin` on `plan`'s data (`seed`: the inputs' offset); its outputs `keep`t as a reference by key,
    `compare`d with one (a `reference` handed over first: key, outputs), sent back (`outputs`); `time`d
    (racing an incumbent, settling), with `energy`."""

    cubin: bytes
    plan: BenchPlan
    time: bool = False
    min_seconds: float = 0.3
    race: Incumbent | None = None
    settle: bool = False
    energy: bool = False
    outputs: bool = False
    seed: int = 0
    keep: str = ""
    compare: str = ""
    reference: tuple[str, dict] | None = None


@dataclass(frozen=True)
class CopyRate:             # the device-to-device copy rate: a memory-bound kernel's ceiling
    pass


@dataclass(frozen=True)
class Answer:
    status: Status          # ok, or what failed (launch-refused, crash, timeout, ...)
    detail: str = ""
    costs: dict[str, float] = field(default_factory=dict)    # seconds per stage (Clock)
    refusal: LaunchRefusal | None = None    # launch-refused: why, as a fact
    wrong: Mismatch | None = None     # compared: what is wrong; None when right or not compared
    outputs: dict | None = None
    times_us: list[float] | None = None
    planned: int = 0                  # the timed launches planned
    stopped: str = ""                 # why timing stopped early: raced, settled
    energy_mj: float | None = None    # per launch
    power_w: float | None = None
    launches: int = 0                 # in the energy window
    copy_bytes_per_s: float | None = None


def host_array(plan: ArrayPlan, seed_offset: int) -> np.ndarray:
    """Initial data for one array (outputs are poisoned separately)."""
    params = dict(plan.params)
    store = np.dtype(DTYPES[plan.dtype][1])
    values: np.ndarray
    if plan.init == "random":
        rng = np.random.default_rng(int(params["seed"]) + seed_offset)
        if store.kind in "iu" and plan.dtype != "bf16":
            values = rng.integers(int(params["low"]), int(params["high"]) + 1, plan.count)
        else:
            values = rng.uniform(params["low"], params["high"], plan.count)
    elif plan.init == "range":
        values = params["start"] + params["step"] * np.arange(plan.count)
    elif plan.init == "constant":
        values = np.full(plan.count, params["value"])
    else:
        values = np.zeros(plan.count)
    return to_storage(values, plan.dtype)


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":     # round to nearest even, keep the upper 16 bits
        bits = np.asarray(values, dtype=np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.asarray(values).astype(DTYPES[dtype][1])


POISON = 0xFF     # every byte of an output before the launch: NaN in f16, bf16, f32 and f64; all ones in integers


def poison(plan: ArrayPlan) -> np.ndarray:
    """An output as the kernel finds it (POISON bytes): an element it never
    writes stands out."""
    store = np.dtype(DTYPES[plan.dtype][1])
    return np.full(plan.count * store.itemsize, POISON, dtype=np.uint8).view(store)


def _array(plan: BenchPlan, name: str) -> ArrayPlan:
    return next(a for a in plan.arrays if a.name == name)


def _scalar(plan: ScalarPlan):
    return np.dtype(DTYPES[plan.dtype][1]).type(plan.value)


class Device:
    def __init__(self, index: int = 0):
        import pycuda.driver as cuda
        self.cuda = cuda
        cuda.init()
        self.device = cuda.Device(index)
        self.context = self.device.make_context()
        self.l2 = self.device.get_attribute(cuda.device_attribute.L2_CACHE_SIZE)
        self.scratch = cuda.mem_alloc(max(2 * self.l2, 1 << 20))
        self.nvml = _nvml_handle(index)
        self.inputs: dict[tuple[ArrayPlan, int], np.ndarray] = {}
        self.on_device: dict[tuple[ArrayPlan, int], tuple] = {}     # (allocation, bytes)
        self.references: dict[str, dict] = {}                        # key -> float64 outputs to compare with
        major, minor = self.device.compute_capability()
        self.compare = DeviceCheck(cuda, f"sm_{major}{minor}")        # the same comparisons, on the device
        self._limits: dict | None = None

    def host_input(self, plan: ArrayPlan, seed: int) -> np.ndarray:
        """Initial data, made once per (array, seed): candidates of one unit
        share their inputs, and making a GiB of random numbers takes seconds.
        Only copies go to the device, so a kernel cannot alter the original."""
        key = (plan, seed)
        if key not in self.inputs:
            if sum(a.nbytes for a in self.inputs.values()) > CACHE_BYTES:
                self.inputs.clear()
            self.inputs[key] = host_array(plan, seed)
        return self.inputs[key]

    def hello(self) -> Hello:
        major, minor = self.device.compute_capability()
        cuda_api = self.cuda.get_driver_version()
        driver = f"CUDA {cuda_api // 1000}.{cuda_api % 1000 // 10}"
        if self.nvml is not None:
            import pynvml
            version = pynvml.nvmlSystemGetDriverVersion()
            driver = f"{version.decode() if isinstance(version, bytes) else version} ({driver})"
        return Hello(self.device.name(), f"{major}.{minor}", f"sm_{major}{minor}", driver, self.l2,
                     self.nvml is not None)

    def flush(self) -> None:
        self.cuda.memset_d8_async(self.scratch, 0, 2 * self.l2)

    def copy_bandwidth(self, size: int = 1 << 30, repeats: int = 20) -> Answer:
        """Device-to-device copy rate (bytes read + written per second): the
        ceiling a memory-bound kernel is measured against."""
        cuda = self.cuda
        src, dst = cuda.mem_alloc(size), cuda.mem_alloc(size)
        cuda.memset_d8(src, 1, size)
        start, end, times = cuda.Event(), cuda.Event(), []
        for _ in range(repeats):
            start.record()
            cuda.memcpy_dtod_async(dst, src, size)
            end.record()
            end.synchronize()
            times.append(end.time_since(start) / 1e3)
        return Answer(Status.OK, copy_bytes_per_s=2 * size / float(np.median(times)))

    def stage(self, plan: BenchPlan, seed: int) -> dict:
        """Device arrays for one launch: inputs copied on the device from
        copies kept there (a kernel that writes its inputs spoils nothing
        for the next candidate), outputs filled with POISON."""
        cuda, arrays = self.cuda, {}
        for a in plan.arrays:
            size = a.count * np.dtype(DTYPES[a.dtype][1]).itemsize
            arrays[a.name] = cuda.mem_alloc(size)
            if a.init == "output":
                cuda.memset_d8(arrays[a.name], POISON, size)
            else:
                cuda.memcpy_dtod(arrays[a.name], self.device_input(a, seed), size)
        return arrays

    def device_input(self, plan: ArrayPlan, seed: int):
        """An input's initial data on the device, uploaded once per (array, seed)."""
        key = (plan, seed)
        if key not in self.on_device:
            data = self.host_input(plan, seed)
            if sum(size for _, size in self.on_device.values()) + data.nbytes > DEVICE_CACHE_BYTES:
                self.on_device.clear()
            self.on_device[key] = (self.cuda.to_device(data), data.nbytes)
        return self.on_device[key][0]

    def check(self, request: RunRequest, plan: BenchPlan, device: dict) -> dict:
        """The outputs compared here, with a reference kept in this process
        (sent once, or this run's outputs kept as one), so that they need not
        cross the pipe; sent back only when asked for. A comparison alone runs
        on the device (measure.device_check); outputs come to the host only to
        be kept, sent, or to say what is wrong with them. The Answer's fields, by name."""
        if not (request.outputs or request.compare or request.keep):
            return {}
        key = request.compare
        if key in self.references and not (request.outputs or request.keep):
            if self.compare.outside(key, self.references[key], plan, device) == 0:
                return {"wrong": None}
        arrays = {c.name: _array(plan, c.name) for c in plan.checks}
        outputs = {name: self.cuda.from_device(device[name], (a.count,), np.dtype(DTYPES[a.dtype][1]))
                   for name, a in arrays.items()}
        return checked(request, outputs, self.references)

    def limits(self) -> dict:
        """What this device allows one block (read once)."""
        if self._limits is None:
            a = self.cuda.device_attribute
            self._limits = {"threads": self.device.get_attribute(a.MAX_THREADS_PER_BLOCK),
                            "registers": self.device.get_attribute(a.MAX_REGISTERS_PER_BLOCK),
                            "shared": self.device.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                            "dims": tuple(self.device.get_attribute(getattr(a, f"MAX_BLOCK_DIM_{x}"))
                                          for x in "XYZ")}
        return self._limits

    def kernel_facts(self, function) -> dict:
        f = self.cuda.function_attribute
        return {"threads": function.get_attribute(f.MAX_THREADS_PER_BLOCK),
                "registers": function.get_attribute(f.NUM_REGS),
                "shared": function.get_attribute(f.SHARED_SIZE_BYTES)}

    def run(self, request: RunRequest | CopyRate) -> Answer:
        if isinstance(request, CopyRate):
            return self.copy_bandwidth()
        cuda, plan, clock = self.cuda, request.plan, Clock()
        take_reference(request, self.references)
        module = cuda.module_from_buffer(request.cubin)
        function = module.get_function(plan.kernel)
        refused = launch_problem(plan.block, plan.shared, self.kernel_facts(function), self.limits())
        if refused is not None:  # before any data moves; the context is untouched
            return Answer(Status.LAUNCH_REFUSED, str(refused), clock.lap("load"), refusal=refused)
        device = self.stage(plan, request.seed)
        args = [device[a.name] if isinstance(a, ArrayPlan) else _scalar(a) for a in plan.args]
        launch = lambda: function(*args, grid=plan.grid[:2] if plan.grid[2] == 1 else plan.grid,
                                  block=plan.block, shared=plan.shared)
        cuda.Context.synchronize()
        clock.lap("load")
        launch()
        cuda.Context.synchronize()
        answer = self.check(request, plan, device)
        clock.lap("check")
        if request.time:
            answer["times_us"], answer["planned"], answer["stopped"] = self.time(
                launch, plan, request.min_seconds, clock, request.race, request.settle)
        if request.energy and self.nvml is not None:
            answer.update(self.energy(launch, np.median(answer["times_us"]) / 1e6 if answer.get("times_us") else 1e-3))
            clock.lap("energy")
        return Answer(Status.OK, costs=clock.costs, **answer)

    def time(self, launch, plan: BenchPlan, min_seconds: float, clock: Clock, race: Incumbent | None = None,
             settle: bool = False):
        """Events around each launch, after warm-up; the L2 flushed before each
        launch when the data would otherwise stay in it. With `race` (the
        incumbent's median and margin), the launches so far are tested at
        checkpoints and timing stops once this candidate is clearly slower;
        with `settle`, it also stops there once the median is known well
        enough (stats.settled). Returns (times in us, the launches planned,
        why timing stopped early: "raced", "settled" or "")."""
        cuda = self.cuda
        flush = plan.bytes_moved < 4 * self.l2
        start, end = cuda.Event(), cuda.Event()
        for _ in range(3):
            launch()
        start.record()
        launch()
        end.record()
        end.synchronize()
        count = repetitions(end.time_since(start) / 1e3, min_seconds)
        clock.lap("warm-up")
        times: list[float] = []
        stopped = ""
        for stop in (race_checkpoints(count) if race or settle else (count,)):
            pairs = [(cuda.Event(), cuda.Event()) for _ in range(stop - len(times))]
            for begin, finish in pairs:
                if flush:
                    self.flush()
                begin.record()
                launch()
                finish.record()
            pairs[-1][1].synchronize()
            times += [finish.time_since(begin) * 1e3 for begin, finish in pairs]
            if len(times) >= count:
                break
            if race and clearly_slower(times, race.median, race.margin):
                stopped = "raced"
                break
            if settle and settled(times):
                stopped = "settled"
                break
        clock.lap("timing")
        return times, count, stopped

    def energy(self, launch, kernel: float, seconds: float = 1.0) -> dict:
        """Energy per launch from NVML's total-energy counter, between two of
        its steps (stats.energy_window). Launches run in batches of about a
        millisecond (`kernel`: one launch's seconds), the counter read after
        each, so a step is seen within a batch; a batch's share of the window
        stays under 1% (longer kernels get a longer window, up to `seconds`)."""
        import pynvml
        cuda = self.cuda
        cuda.Context.synchronize()
        per_batch = max(1, min(16, int(1e-3 / max(kernel, 1e-7))))

        def batch() -> int:
            for _ in range(per_batch):
                launch()
            cuda.Context.synchronize()
            return per_batch
        least = min(seconds, max(ENERGY_LEAST, 200 * per_batch * kernel))
        return energy_window(batch, lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(self.nvml), time.monotonic,
                             seconds, least=least)


def _nvml_handle(index: int):
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:   # no NVML library or no permission: energy is dropped, said in hello
        return None


def classify(error: Exception) -> tuple[Status, bool]:
    """(status, fatal) for a CUDA error raised by a candidate."""
    text = str(error).lower()
    if ("too many resources" in text or "out of resources" in text or "cufuncsetblockshape" in text
            or ("launch" in text and "invalid argument" in text)):
        return Status.LAUNCH_REFUSED, False       # the driver said no before running anything: context intact
    if "out of memory" in text:
        return Status.OUT_OF_MEMORY, False
    if "not found" in text and "named symbol" in text:
        return Status.NO_KERNEL, False
    return Status.CRASH, any(word in text for word in FATAL_WORDS) or "launch" in text


def worker_main(connection, index: int = 0, device_type: type | None = None) -> None:
    try:                   # (`device_type`: Device, or what stands in for one in a test without a GPU)
        device = (device_type or Device)(index)
    except Exception as error:
        connection.send(NoGpu(str(error)))
        return
    connection.send(device.hello())
    while True:
        request = connection.recv()
        if request is None:
            return
        try:
            answer = device.run(request)
        except Exception as error:
            status, fatal = classify(error)
            connection.send(Answer(status, f"{type(error).__name__}: {error}"))
            if fatal:
                return
            continue
        connection.send(answer)
