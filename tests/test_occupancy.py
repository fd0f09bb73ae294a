"""Occupancy as CUDA's occupancy calculator computes it: nvcc_evo's table
and rules against the toolkit's own cuda_occupancy.h (built here with the
real nvcc as a host program), over registers, block sizes, shared memory and
barriers for every architecture of the table; and known cases by hand."""
from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from conftest import DATA
from nvcc_evo.cubin.occupancy import SMS, WARP, compute_capability, occupancy, warps_by_registers

BITS = {"warps": 1, "registers": 2, "shared": 4, "blocks": 8, "barriers": 16}


@pytest.fixture(scope="module")
def calculator(tmp_path_factory) -> Path:
    program = tmp_path_factory.mktemp("occupancy") / "calculator"
    subprocess.run(["nvcc", "-x", "c++", str(DATA / "occupancy" / "calculator.cpp"), "-o", str(program)],
                   check=True, capture_output=True)
    return program


def cases():
    for cc, blocks, registers, shared, barriers in itertools.product(
            SMS, (32, 96, 128, 256, 384, 512, 1024), (16, 32, 40, 64, 65, 96, 128, 168, 255),
            (0, 1, 4096, 16 * 1024, 48 * 1024, 100 * 1024, 160 * 1024), (0, 1, 2)):
        yield cc, blocks, registers, shared, barriers


def test_the_table_and_rules_agree_with_cudas_occupancy_calculator(calculator):
    all_cases = list(cases())
    lines = []
    for cc, threads, registers, shared, barriers in all_cases:
        sm = SMS[cc]
        major, minor = cc.split(".")
        optin = sm.shared_per_block
        lines.append(f"{major} {minor} {sm.max_warps * WARP} {sm.shared} {optin} {sm.reserved} {threads} "
                     f"{registers} 0 {shared if shared <= optin else optin + 1} {barriers}")
    done = subprocess.run([str(calculator)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          check=True)
    wrong = []
    for case, line, answer in zip(all_cases, lines, done.stdout.splitlines()):
        status, blocks, factors = map(int, answer.split())
        if status != 0:
            continue                     # the calculator refuses the input (more shared memory than opted in)
        cc, threads, registers, shared, barriers = case
        ours = occupancy(f"sm_{cc.replace('.', '')}", threads, registers, 0, int(line.split()[9]), barriers)
        if ours.blocks != blocks or (blocks and not factors & BITS[ours.limiter]):
            wrong.append(f"{case}: calculator {blocks} blocks (factors {factors:#x}), ours {ours}")
    assert len(all_cases) > 3000 and not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("arch, threads, registers, shared, expected", [
    ("sm_90", 256, 32, 0, (8, 64, "warps")),            # H100/H200: 2048 threads per SM
    ("sm_90", 256, 128, 0, (2, 16, "registers")),       # 128 registers: 4 warps per sub-partition
    ("sm_90a", 128, 32, 48 * 1024, (4, 16, "shared")),  # 48 KiB + 1 KiB reserved, 228 KiB per SM
    ("sm_80", 1024, 64, 0, (1, 32, "registers")),
    ("sm_80", 1024, 65, 0, (0, 0, "registers")),        # 65 x 32 -> 2304 per warp x 32 warps > 64K: no launch
    ("sm_86", 1024, 32, 0, (1, 32, "warps")),           # 1536 threads per SM: one block of 1024
    ("sm_75", 64, 16, 0, (16, 32, "warps")),
    ("sm_89", 32, 16, 0, (24, 24, "blocks")),
])
def test_known_cases(arch, threads, registers, shared, expected):
    found = occupancy(arch, threads, registers, shared)
    assert (found.blocks, found.warps, found.limiter) == expected


def test_an_architecture_without_a_row_has_no_occupancy():
    assert compute_capability("sm_100a") == "10.0" and compute_capability("sm_121") == "12.1"
    assert occupancy("sm_52", 256, 32) is None and occupancy("sm_90", 0, 32) is None
    assert str(occupancy("sm_90", 256, 128)) == "2 blocks, 16/64 warps (25%; registers)"


def test_warps_the_registers_allow_whatever_the_block():
    assert [warps_by_registers("sm_90", r) for r in (0, 32, 64, 65, 128, 255)] == [64, 64, 32, 28, 16, 8]
    assert warps_by_registers("sm_86", 32) == 48 and warps_by_registers("sm_61", 32) is None
