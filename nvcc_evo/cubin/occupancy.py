"""Occupancy: how many blocks and warps of a kernel one SM holds at once,
from its registers, shared memory and barriers, for an architecture and a
block size.

The rules are CUDA's occupancy calculator's (cuda_occupancy.h, the default
shared-memory carveout, partitioned global caching off): registers are
allocated per warp in units of 256 in each of the SM's 4 sub-partitions;
shared memory per block is its static and dynamic bytes plus the bytes the
driver reserves per block, rounded up to the allocation unit; the SM's
limits on warps and blocks cap both. The table holds one row per compute
capability; an architecture without a row has no occupancy (None), never a
guess. `launch_problem`: why the driver would refuse a launch (a block over
the device's or the kernel's limits, a `LaunchRefusal`), asked before any data moves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

KIB = 1024
WARP = 32
SUB_PARTITIONS = 4
REGISTER_UNIT = 256          # registers are allocated per warp in units of this many
MAX_REGISTERS_PER_THREAD = 255


@dataclass(frozen=True)
class Sm:
    """What one SM of a compute capability holds."""

    max_warps: int
    max_blocks: int
    shared: int                  # bytes of shared memory per SM (the largest carveout)
    shared_per_block: int        # the most one block may use (opted in), reserved bytes aside
    shared_unit: int = 128       # allocation granularity of shared memory, bytes
    reserved: int = KIB          # bytes the driver keeps per block
    registers: int = 64 * KIB
    registers_per_block: int = 64 * KIB
    barriers_per_block_slot: int = 2    # barriers per block slot (sm_90 on); 0: barriers limit
                                        # nothing


SMS = {
    "7.5": Sm(32, 16, 64 * KIB, 64 * KIB, shared_unit=256, reserved=0, barriers_per_block_slot=0),
    "8.0": Sm(64, 32, 164 * KIB, 163 * KIB, barriers_per_block_slot=0),
    "8.6": Sm(48, 16, 100 * KIB, 99 * KIB, barriers_per_block_slot=0),
    "8.7": Sm(48, 16, 164 * KIB, 163 * KIB, barriers_per_block_slot=0),
    "8.9": Sm(48, 24, 100 * KIB, 99 * KIB, barriers_per_block_slot=0),
    "9.0": Sm(64, 32, 228 * KIB, 227 * KIB),
    "10.0": Sm(64, 32, 228 * KIB, 227 * KIB),
    "10.3": Sm(64, 32, 228 * KIB, 227 * KIB),
    "12.0": Sm(48, 24, 100 * KIB, 99 * KIB, barriers_per_block_slot=1),
    "12.1": Sm(48, 24, 100 * KIB, 99 * KIB, barriers_per_block_slot=1),
}


@dataclass(frozen=True)
class Occupancy:
    blocks: int                  # resident blocks per SM
    warps: int                   # resident warps per SM
    max_warps: int               # the SM's most
    limiter: str                 # what allows no more: warps, blocks, registers, shared, barriers

    @property
    def fraction(self) -> float:
        return self.warps / self.max_warps

    def __str__(self) -> str:
        return (f"{self.blocks} blocks, {self.warps}/{self.max_warps} warps "
                f"({self.fraction:.0%}; {self.limiter})")


def compute_capability(arch: str) -> str:
    """'sm_90a' -> '9.0', 'sm_100' -> '10.0'."""
    digits = arch.removeprefix("sm_").rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}" if digits.isdigit() and len(digits) >= 2 else ""


def occupancy(arch: str, threads: int, registers: int, shared: int = 0, dynamic_shared: int = 0,
              barriers: int = 0) -> Occupancy | None:
    """Resident blocks and warps per SM of a kernel launched with `threads`
    per block on `arch`; None where the table has no row for it, or the
    block cannot be launched at all (too many threads, registers or shared
    bytes) is 0 blocks, with what stops it."""
    sm = SMS.get(compute_capability(arch))
    if sm is None or threads <= 0:
        return None
    warps_per_block = -(-threads // WARP)
    limits = {"warps": sm.max_warps // warps_per_block if threads <= 1024 else 0,
              "blocks": sm.max_blocks, "registers": _by_registers(sm, registers, warps_per_block),
              "shared": _by_shared(sm, shared + dynamic_shared),
              "barriers": sm.max_blocks * sm.barriers_per_block_slot // barriers
              if barriers and sm.barriers_per_block_slot else sm.max_blocks}
    limiter = min(limits, key=lambda name: limits[name])  # the first named of the least, on ties
    blocks = limits[limiter]
    return Occupancy(blocks, blocks * warps_per_block, sm.max_warps, limiter)


def warps_by_registers(arch: str, registers: int) -> int | None:
    """The most resident warps per SM that `registers` per thread allow on
    `arch`, the block size aside (None: no row for it)."""
    sm = SMS.get(compute_capability(arch))
    if sm is None:
        return None
    return min(sm.max_warps, _by_registers(sm, registers, 1)) if registers > 0 else sm.max_warps


def _by_registers(sm: Sm, registers: int, warps_per_block: int) -> int:
    per_warp = -(-registers * WARP // REGISTER_UNIT) * REGISTER_UNIT
    if per_warp == 0:
        return sm.max_blocks
    # as the hardware checks
    assumed = per_warp * -(-warps_per_block // SUB_PARTITIONS) * SUB_PARTITIONS
    if registers > MAX_REGISTERS_PER_THREAD or assumed > sm.registers_per_block:
        return 0
    warps = sm.registers // SUB_PARTITIONS // per_warp * SUB_PARTITIONS
    return warps // warps_per_block


def _by_shared(sm: Sm, shared: int) -> int:
    if shared > sm.shared_per_block:
        return 0
    per_block = -(-(shared + sm.reserved) // sm.shared_unit) * sm.shared_unit
    return sm.shared // per_block if per_block else sm.max_blocks


class LaunchRefusal(NamedTuple):
    """Why the driver would refuse a launch, as a fact (`limit`: what the
    block is over: threads, x, y or z, registers, shared); str() says it to
    people, code reads the fields."""

    block: tuple[int, int, int]
    limit: str
    most: int                   # the limit: threads per block or along the axis, threads the kernel
                                # may launch, bytes
    registers: int = 0          # per thread (registers)
    block_registers: int = 0    # the device's registers per block (registers)
    static: int = 0             # shared bytes the kernel declares (shared)
    dynamic: int = 0            # shared bytes the launch asks for (shared)

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def __str__(self) -> str:
        shown = "x".join(str(b) for b in self.block)
        if self.limit == "threads":
            return (f"block {shown} is {self.threads} threads; the device allows at most "
                    f"{self.most} per block")
        if self.limit in AXES:
            return (f"block {shown}: {self.block[AXES.index(self.limit)]} threads in {self.limit}; "
                    f"the device allows at most {self.most}")
        if self.limit == "registers":
            return (f"block {shown} is {self.threads} threads; with {self.registers} registers per "
                    f"thread this kernel launches at most {self.most} ({self.block_registers} "
                    "registers per block)")
        return (f"{self.static + self.dynamic} bytes of shared memory per block ({self.static} "
                f"static + {self.dynamic} dynamic); the device allows at most {self.most}")


AXES = "xyz"


def launch_problem(block: tuple[int, ...], dynamic_shared: int, kernel: dict,
                   device: dict) -> LaunchRefusal | None:
    """Why the driver would refuse this launch (None if it would not): more
    threads than the device or this kernel's registers allow, a block
    dimension over its limit, more shared memory than a block may have."""
    shape = (block[0], block[1], block[2])
    threads = block[0] * block[1] * block[2]
    if threads > device["threads"]:
        return LaunchRefusal(shape, "threads", device["threads"])
    for axis, size, most in zip(AXES, block, device["dims"]):
        if size > most:
            return LaunchRefusal(shape, axis, most)
    if threads > kernel["threads"]:
        return LaunchRefusal(shape, "registers", kernel["threads"], kernel["registers"],
                             device["registers"])
    if kernel["shared"] + dynamic_shared > device["shared"]:
        return LaunchRefusal(shape, "shared", device["shared"], static=kernel["shared"],
                             dynamic=dynamic_shared)
    return None
