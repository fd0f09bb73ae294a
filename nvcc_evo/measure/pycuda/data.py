"""A bench's data in the measuring process (measure.pycuda.worker): each input
made once per (array, seed) on the host and uploaded once to the device,
copied there for each launch so that a kernel that writes its inputs spoils
nothing for the next candidate; outputs filled with POISON, so that an
element a kernel never writes stands out. numpy only; the CUDA module is the
worker's (PyCUDA, imported there)."""
from __future__ import annotations

from typing import Any

import numpy as np

from nvcc_evo.acf.bench.spec import DTYPES, ArrayPlan, BenchPlan, ScalarPlan

CACHE_BYTES = 8 << 30        # host copies of inputs kept between requests
DEVICE_CACHE_BYTES = 16 << 30   # device copies of inputs kept between requests
# Every byte of an output before the launch: NaN in f16, bf16, f32 and f64; all ones in integers.
POISON = 0xFF


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


def poison(plan: ArrayPlan) -> np.ndarray:
    """An output as the kernel finds it (POISON bytes): an element it never
    writes stands out."""
    store = np.dtype(DTYPES[plan.dtype][1])
    return np.full(plan.count * store.itemsize, POISON, dtype=np.uint8).view(store)


def array_plan(plan: BenchPlan, name: str) -> ArrayPlan:
    return next(a for a in plan.arrays if a.name == name)


def scalar_value(plan: ScalarPlan) -> np.generic:
    return np.dtype(DTYPES[plan.dtype][1]).type(plan.value)


class BenchData:
    """The inputs kept on the host and on the device between requests (`cuda`: pycuda.driver)."""

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda
        self.inputs: dict[tuple[ArrayPlan, int], np.ndarray] = {}
        self.on_device: dict[tuple[ArrayPlan, int], tuple] = {}     # (allocation, bytes)

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

    def device_input(self, plan: ArrayPlan, seed: int) -> Any:      # a DeviceAllocation
        """An input's initial data on the device, uploaded once per (array, seed)."""
        key = (plan, seed)
        if key not in self.on_device:
            data = self.host_input(plan, seed)
            if sum(size for _, size in self.on_device.values()) + data.nbytes > DEVICE_CACHE_BYTES:
                self.on_device.clear()
            self.on_device[key] = (self.cuda.to_device(data), data.nbytes)
        return self.on_device[key][0]

    def stage(self, plan: BenchPlan, seed: int) -> dict:
        """Device arrays for one launch: inputs copied on the device from
        copies kept there, outputs filled with POISON."""
        cuda, arrays = self.cuda, {}
        for a in plan.arrays:
            size = a.count * np.dtype(DTYPES[a.dtype][1]).itemsize
            arrays[a.name] = cuda.mem_alloc(size)
            if a.init == "output":
                cuda.memset_d8(arrays[a.name], POISON, size)
            else:
                cuda.memcpy_dtod(arrays[a.name], self.device_input(a, seed), size)
        return arrays

    def outputs(self, plan: BenchPlan, device: dict) -> dict[str, np.ndarray]:
        """The checked outputs of a launch, copied to the host."""
        arrays = {c.name: array_plan(plan, c.name) for c in plan.checks}
        return {name: self.cuda.from_device(device[name], (a.count,), np.dtype(DTYPES[a.dtype][1]))
                for name, a in arrays.items()}
