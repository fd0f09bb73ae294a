"""Sorting nvcc calls before any ACF is read: which get nothing (`passthrough_reason`:
options nvcc-evo does not understand, CMake's probes, links that run no ptxas,
nothing to tune), which inputs may be tuned, which are LTO device links.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvcc_evo.driver.cmdline.nvcc_options import NvccCall

TUNABLE_SUFFIXES = (".cu", ".ptx")
CMAKE_PROBES = ("CMakeCUDACompilerId.cu", "CMakeCUDACompilerABI.cu", "__cmake_determine_cuda")


def is_cmake_probe(call: NvccCall, cwd: Path) -> bool:
    text = " ".join(call.argv) + " " + str(cwd)
    return any(p in text for p in CMAKE_PROBES) or "cmTC_" in text


def is_lto_link(call: NvccCall) -> bool:
    """`-dlink -dlto`: ptxas runs here, on code compiled earlier with -dlto."""
    return call.has("--device-link") and call.has("--dlink-time-opt")


def is_lto_compile(call: NvccCall) -> bool:
    """A compile for link-time optimisation (`-dc -dlto`, `code=lto_XX`, or
    `-dlto` compiling and linking in one call): ptxas does not compile its
    code on its own; the device link does, with every object of the link."""
    from nvcc_evo.driver.match.archs import generated_codes
    if call.has("--device-link"):
        return False
    codes = generated_codes(call) + call.values("--gpu-code")
    return call.has("--dlink-time-opt") or any(c.startswith("lto_") for c in codes)


def lto_objects(call: NvccCall) -> list[str]:
    return [i for i in call.inputs if i.endswith((".o", ".obj", ".a"))]


def tunable_inputs(call: NvccCall) -> list[str]:
    language_cu = call.last("--x") == "cu"
    return [i for i in call.inputs if i != "-" and (language_cu or i.endswith(TUNABLE_SUFFIXES))]


def passthrough_reason(call: NvccCall, cwd: Path) -> str:
    """Why this call gets nothing, before any ACF is read ("" if it may)."""
    if call.problems:  # (its own words: "cannot read options file X: No such file or directory")
        return f"{'; '.join(call.problems)}: passed through untouched"
    if call.unknown:
        return f"nvcc-evo does not understand {', '.join(call.unknown)}: passed through untouched"
    if is_cmake_probe(call, cwd):
        return "a CMake probe or try-compile: passed through untouched"
    if call.has("--device-link") and not call.has("--dlink-time-opt"):
        return "device link without LTO runs no ptxas"
    if is_lto_link(call):
        return "" if lto_objects(call) else "LTO device link with no object inputs"
    if not tunable_inputs(call):
        return "no .cu or .ptx input to tune"
    return ""
