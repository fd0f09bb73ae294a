"""The static backend: what ptxas and the cubin say, no GPU needed.

registers, spills (spill store + load bytes), stack and shared (bytes) come
from `ptxas -v` for the target architecture, summed or maxed over the unit's
kernels (each kernel's own: nvcc_evo.cubin.sass); instructions and
binary_size from the cubin; compile_time is the candidate compile's wall time.
"""
from __future__ import annotations

from dataclasses import replace

from nvcc_evo.cubin.compile import CompileResult
from nvcc_evo.cubin.sass import instruction_count
from nvcc_evo.measure import Measurement, failed
from nvcc_evo.cubin.occupancy import occupancy, warps_by_registers
from nvcc_evo.cubin.sass import KernelFacts, resources, shown_name
from nvcc_evo.status import Status

OBJECTIVES = ("registers", "spills", "stack", "shared", "instructions", "binary_size",
              "compile_time")


def measure(result: CompileResult, arch: str, each_kernel: bool = False,
            launches: dict[str, tuple[int, int]] | None = None) -> Measurement:
    """The unit's resources over its kernels for `arch`: the most registers, stack and shared memory
    of one kernel, the spills of all (per kernel: nvcc_evo.cubin.sass; the cubin gives relocatable
    code's shared memory); with `each_kernel`, also each kernel's warps per SM (KERNEL_WARPS: whole
    resident blocks, see `kernel_warps`; `launches`: a kernel's (threads, dynamic shared bytes) as
    its bench launches it) and the fewest of them (REGISTER_WARPS)."""
    if not result.ok:
        return failed(result.status, result.stderr, overflow=result.overflow)
    kernels = resources(result.stderr, arch, result.cubin)
    if not kernels:
        return failed(Status.NO_KERNEL,
                      f"ptxas reported no entry function for {arch}\n{result.stderr}")
    metrics = {
        "registers": max(k.registers for k in kernels), "spills": sum(k.spills for k in kernels),
        "stack": max(k.stack for k in kernels), "shared": max(k.shared for k in kernels),
        "instructions": instruction_count(result.cubin), "binary_size": len(result.cubin),
        "compile_time": round(result.seconds, 3),
    }
    if each_kernel:
        warps = {KERNEL_WARPS + k.name: kernel_warps(k, arch, (launches or {}).get(k.name))
                 for k in kernels}
        metrics.update({name: w for name, w in warps.items() if w is not None})
        if warps and None not in warps.values():
            metrics[REGISTER_WARPS] = min(w for w in warps.values() if w is not None)
    return Measurement(Status.OK, tuple((k, float(v)) for k, v in metrics.items()))


def kernel_warps(kernel: KernelFacts, arch: str,
                 launch: tuple[int, int] | None = None) -> int | None:
    """The warps per SM of a kernel's resident blocks (cubin.occupancy: its registers, shared memory
    and barriers, whole blocks): of `launch`'s block (threads, dynamic shared bytes: the bench's),
    else of its bound (.maxntid from __launch_bounds__, .reqntid); where neither is known, as if its
    blocks were one warp each (`register_warps`: what `unknown_blocks` says). 0 where no block fits
    (too many registers for the block: the driver refuses the launch); None for an architecture the
    table does not know."""
    threads, dynamic = launch if launch else (kernel.threads, 0)
    if not threads:
        return register_warps(kernel.registers, arch)
    found = occupancy(arch, threads, kernel.registers, kernel.shared, dynamic, kernel.barriers)
    return found.warps if found is not None else None


def unknown_blocks(result: CompileResult, arch: str, launches: dict | None = None) -> str:
    """What is assumed of the kernels whose block size nothing says ("" where every kernel's is
    known)."""
    kernels = resources(result.stderr, arch, result.cubin) if result.ok else ()
    launched = launches or {}
    unknown = [shown_name(k.name) for k in kernels if not k.threads and k.name not in launched]
    if not unknown:
        return ""
    shown = ", ".join(unknown[:4]) + (f" and {len(unknown) - 4} more" if len(unknown) > 4 else "")
    return (f"block size unknown for {shown} (no __launch_bounds__ or .reqntid, no kernel bench "
            f"launching it): warps per SM counted as if its blocks were one warp each")


# Registers judged by what they buy: the resident warps per SM they allow (a speed-safe static
# search maximises it, nvcc_evo.retune.search.speedsafe).
REGISTER_WARPS = "register_warps"


def register_warps(registers: float, arch: str) -> int | None:
    """Resident warps per SM the registers per thread allow on `arch`, the
    block size aside (cubin.occupancy's rule, checked against CUDA's own
    calculator); None for an architecture its table does not know."""
    return warps_by_registers(arch, int(registers))


# Each kernel's own warps per SM, a metric per kernel (`warps:NAME`, measure(each_kernel=True)): a
# speed-safe static search lets none fall below the baseline's
# (execute.goal.Goal.kernels_keep_warps), however its worst kernel fares.
KERNEL_WARPS = "warps:"


def with_register_warps(measurement: Measurement, arch: str) -> Measurement:
    """A static measurement with the warps per SM its registers allow (its worst kernel's, block
    size aside; one measured with each kernel's resident blocks keeps theirs)."""
    if not measurement.ok or measurement.get("registers") == float("inf"):
        return measurement
    if REGISTER_WARPS in dict(measurement.metrics):
        return measurement
    warps = register_warps(measurement.get("registers"), arch)
    if warps is None:
        return measurement
    return replace(measurement, metrics=measurement.metrics + ((REGISTER_WARPS, float(warps)),))
