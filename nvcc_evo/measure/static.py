"""The static backend: what ptxas and the cubin say, no GPU needed.

registers, spills (spill store + load bytes), stack and shared (bytes) come
from `ptxas -v` for the target architecture, summed or maxed over the unit's
kernels (each kernel's own: nvcc_evo.measure.sass); instructions and
binary_size from the cubin; compile_time is the candidate compile's wall time.
"""
from __future__ import annotations

from dataclasses import replace

from nvcc_evo.measure.candidate import CompileResult
from nvcc_evo.measure.sass import instruction_count
from nvcc_evo.measure import Measurement, failed
from nvcc_evo.measure.occupancy import warps_by_registers
from nvcc_evo.measure.sass import resources

NAME = "static"
OBJECTIVES = ("registers", "spills", "stack", "shared", "instructions", "binary_size", "compile_time")


def measure(result: CompileResult, arch: str, each_kernel: bool = False) -> Measurement:
    """The unit's resources over its kernels for `arch`: the most registers, stack and shared memory of one
    kernel, the spills of all (per kernel: nvcc_evo.measure.sass; the cubin gives relocatable code's shared
    memory); with `each_kernel`, also each kernel's warps per SM (KERNEL_WARPS)."""
    if not result.ok:
        return failed(result.status, result.stderr)
    kernels = resources(result.stderr, arch, result.cubin)
    if not kernels:
        return failed("no-kernel", f"ptxas reported no entry function for {arch}\n{result.stderr}")
    metrics = {
        "registers": max(k.registers for k in kernels), "spills": sum(k.spills for k in kernels),
        "stack": max(k.stack for k in kernels), "shared": max(k.shared for k in kernels),
        "instructions": instruction_count(result.cubin), "binary_size": len(result.cubin),
        "compile_time": round(result.seconds, 3),
    }
    if each_kernel:
        warps = {KERNEL_WARPS + k.name: register_warps(k.registers, arch) for k in kernels}
        metrics.update({name: w for name, w in warps.items() if w is not None})
    return Measurement("ok", tuple((k, float(v)) for k, v in metrics.items()))


# Registers judged by what they buy: the resident warps per SM they allow (a speed-safe static
# search maximises it, nvcc_evo.retune.speedsafe).
REGISTER_WARPS = "register_warps"


def register_warps(registers: float, arch: str) -> int | None:
    """Resident warps per SM the registers per thread allow on `arch`, the
    block size aside (measure.occupancy's rule, checked against CUDA's own
    calculator); None for an architecture its table does not know."""
    return warps_by_registers(arch, int(registers))


# Each kernel's own warps per SM, a metric per kernel (`warps:NAME`, measure(each_kernel=True)): a speed-safe
# static search lets none fall below the baseline's (execute.goal.Goal.kernels_keep_warps), however its worst
# kernel fares.
KERNEL_WARPS = "warps:"


def with_register_warps(measurement: Measurement, arch: str) -> Measurement:
    """A static measurement with the warps per SM its registers allow (its worst kernel's)."""
    if not measurement.ok or measurement.get("registers") == float("inf"):
        return measurement
    warps = register_warps(measurement.get("registers"), arch)
    if warps is None:
        return measurement
    return replace(measurement, metrics=measurement.metrics + ((REGISTER_WARPS, float(warps)),))
