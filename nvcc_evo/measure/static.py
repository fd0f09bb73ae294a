"""The static backend: what ptxas and the cubin say, no GPU needed.

registers, spills (spill store + load bytes), stack and shared (bytes) come
from `ptxas -v` for the target architecture, summed or maxed over the unit's
kernels; instructions and binary_size from the cubin; compile_time is the
candidate compile's wall time.
"""
from __future__ import annotations

import re

from nvcc_evo.driver.candidate import CompileResult, instruction_count
from nvcc_evo.measure import Measurement, failed

NAME = "static"
OBJECTIVES = ("registers", "spills", "stack", "shared", "instructions", "binary_size", "compile_time")

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def ptxas_report(stderr: str, arch: str) -> dict[str, int]:
    """Resources of the entry functions compiled for `arch`, from ptxas -v."""
    report = {"registers": 0, "spills": 0, "stack": 0, "shared": 0, "kernels": 0}
    current = None
    for line in stderr.splitlines():
        entry = ENTRY.search(line)
        if entry:
            current = entry.group(2) == arch
            report["kernels"] += int(current)
            continue
        if not current:
            continue
        frame = FRAME.search(line)
        if frame:
            report["stack"] = max(report["stack"], int(frame.group(1)))
            report["spills"] += int(frame.group(2)) + int(frame.group(3))
        used = USED.search(line)
        if used:
            report["registers"] = max(report["registers"], int(used.group(1)))
            report["shared"] = max(report["shared"], int(used.group(2) or 0))
            current = None
    return report


def measure(result: CompileResult, arch: str) -> Measurement:
    if not result.ok:
        return failed(result.status, result.stderr)
    report = ptxas_report(result.stderr, arch)
    if report["kernels"] == 0:
        return failed("no-kernel", f"ptxas reported no entry function for {arch}\n{result.stderr}")
    metrics = {
        "registers": report["registers"], "spills": report["spills"], "stack": report["stack"],
        "shared": report["shared"], "instructions": instruction_count(result.cubin),
        "binary_size": len(result.cubin), "compile_time": round(result.seconds, 3),
    }
    return Measurement("ok", tuple((k, float(v)) for k, v in metrics.items()))
