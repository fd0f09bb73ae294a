"""The measuring process: one per GPU, started fresh after a candidate breaks
its CUDA context. Runs in a child process (spawn); PyCUDA and NVML are
imported here only (and in timing's energy), so nothing else of nvcc-evo
needs them. It answers the requests of its pipe (measure.pycuda.pipe):
launches the driver would refuse refused first (occupancy.launch_problem),
the bench's data kept on the device (data), the outputs' check against
references it holds (on the device: device_check), timing and energy
(timing).
"""
from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from nvcc_evo.acf.bench.spec import ArrayPlan, BenchPlan
from nvcc_evo.cubin.occupancy import launch_problem
from nvcc_evo.measure import Clock
from nvcc_evo.measure.check import checked, take_reference
from nvcc_evo.measure.pycuda.data import BenchData, scalar_value
from nvcc_evo.measure.pycuda.device_check import DeviceCheck
from nvcc_evo.measure.pycuda.pipe import Answer, CopyRate, Hello, NoGpu, RunRequest
from nvcc_evo.measure.pycuda.timing import Timer, copy_rate, energy, nvml_handle
from nvcc_evo.status import Status

# Errors after which the context cannot be trusted: the worker exits and is replaced.
FATAL_WORDS = ("illegal", "misaligned", "launch failed", "unspecified launch failure", "exception",
               "hardware stack error", "timeout", "context is destroyed")


class Device:
    """The measuring process's GPU: its CUDA context, what it allows a block, the bench's data on it
    (data.BenchData), its timer (timing.Timer), the references kept for the outputs' check; a
    request run there (`run`)."""

    def __init__(self, index: int = 0):
        import pycuda.driver as cuda
        self.cuda = cuda
        cuda.init()
        self.device = cuda.Device(index)
        self.context = self.device.make_context()
        self.l2 = self.device.get_attribute(cuda.device_attribute.L2_CACHE_SIZE)
        self.data = BenchData(cuda)
        self.timer = Timer(cuda, self.l2)
        self.nvml = nvml_handle(index)
        self.references: dict[str, dict] = {}           # key -> float64 outputs to compare with
        major, minor = self.device.compute_capability()
        self.compare = DeviceCheck(cuda, f"sm_{major}{minor}")   # the same comparisons, on the GPU
        self._limits: dict | None = None

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

    def copy_bandwidth(self) -> Answer:
        """The device-to-device copy rate: the ceiling a memory-bound kernel is measured against."""
        return Answer(Status.OK, copy_bytes_per_s=copy_rate(self.cuda))

    def check(self, request: RunRequest, plan: BenchPlan, device: dict) -> dict:
        """The outputs compared here, with a reference kept in this process
        (sent once, or this run's outputs kept as one), so that they need not
        cross the pipe; sent back only when asked for. A comparison alone runs
        on the device (measure.pycuda.device_check); outputs come to the host only to
        be kept, sent, or to say what is wrong with them. The Answer's fields, by name."""
        if not (request.outputs or request.compare or request.keep):
            return {}
        key = request.compare
        if key in self.references and not (request.outputs or request.keep):
            if self.compare.outside(key, self.references[key], plan, device) == 0:
                return {"wrong": None}
        return checked(request, self.data.outputs(plan, device), self.references)

    def limits(self) -> dict:
        """What this device allows one block (read once)."""
        if self._limits is None:
            a, attribute = self.cuda.device_attribute, self.device.get_attribute
            self._limits = {"threads": attribute(a.MAX_THREADS_PER_BLOCK),
                            "registers": attribute(a.MAX_REGISTERS_PER_BLOCK),
                            "shared": attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                            "dims": tuple(attribute(getattr(a, f"MAX_BLOCK_DIM_{x}"))
                                          for x in "XYZ")}
        return self._limits

    def kernel_facts(self, function: Any) -> dict:       # (a pycuda Function)
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
        refused = launch_problem(plan.block, plan.shared, self.kernel_facts(function),
                                 self.limits())
        if refused is not None:  # before any data moves; the context is untouched
            return Answer(Status.LAUNCH_REFUSED, str(refused), clock.lap("load"), refusal=refused)
        device = self.data.stage(plan, request.seed)
        args = [device[a.name] if isinstance(a, ArrayPlan) else scalar_value(a) for a in plan.args]
        launch = lambda: function(*args, grid=plan.grid[:2] if plan.grid[2] == 1 else plan.grid,
                                  block=plan.block, shared=plan.shared)
        cuda.Context.synchronize()
        clock.lap("load")
        launch()
        cuda.Context.synchronize()
        answer = self.check(request, plan, device)
        clock.lap("check")
        if request.time:
            answer["times_us"], answer["planned"], answer["stopped"] = self.timer.time(
                launch, plan, request.min_seconds, clock, request.race, request.settle)
        if request.energy and self.nvml is not None:
            kernel = np.median(answer["times_us"]) / 1e6 if answer.get("times_us") else 1e-3
            answer.update(energy(cuda, self.nvml, launch, kernel))
            clock.lap("energy")
        return Answer(Status.OK, costs=clock.costs, **answer)


def classify(error: Exception) -> tuple[Status, bool]:
    """(status, fatal) for a CUDA error raised by a candidate."""
    text = str(error).lower()
    if ("too many resources" in text or "out of resources" in text or "cufuncsetblockshape" in text
            or ("launch" in text and "invalid argument" in text)):
        # the driver said no before running anything: the context is intact
        return Status.LAUNCH_REFUSED, False
    if "out of memory" in text:
        return Status.OUT_OF_MEMORY, False
    if "not found" in text and "named symbol" in text:
        return Status.NO_KERNEL, False
    return Status.CRASH, any(word in text for word in FATAL_WORDS) or "launch" in text


def worker_main(connection: Connection, index: int = 0, device_type: type | None = None) -> None:
    try:  # (`device_type`: Device, or what stands in for one in a test without a GPU)
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
