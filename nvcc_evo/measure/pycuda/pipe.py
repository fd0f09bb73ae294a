"""The values on the measuring process's pipe (measure.pycuda.worker), pickled
as they are: the worker first sends a `Hello` (device name, compute
capability, driver, L2 size, NVML availability) or `NoGpu`, then answers each
request (`RunRequest`: a candidate run, checked, timed; `CopyRate`: the
device's copy bandwidth) with an `Answer`; None asks it to exit."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nvcc_evo.acf.bench.spec import BenchPlan
from nvcc_evo.cubin.occupancy import LaunchRefusal
from nvcc_evo.measure.check import Mismatch
from nvcc_evo.measure.pycuda.timing import Incumbent
from nvcc_evo.status import Status


@dataclass(frozen=True)
class Hello:
    name: str
    cc: str                 # compute capability, "9.0"
    arch: str               # sm_90
    driver: str
    l2: int                 # bytes
    nvml: bool              # energy can be measured

    # what a backend's `hello` holds (the results' context, the ACF's provenance)
    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NoGpu:                # the hello of a worker that found no usable device
    detail: str


@dataclass(frozen=True)
class RunRequest:
    """Run `cubin` on `plan`'s data (`seed`: the inputs' offset); its outputs `keep`t as a reference
    by key, `compare`d with one (a `reference` handed over first: key, outputs), sent back
    (`outputs`); `time`d (racing an incumbent, settling), with `energy`."""

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
