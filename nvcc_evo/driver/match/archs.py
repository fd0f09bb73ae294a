"""The SASS architectures an nvcc call builds (`-arch`, `-code`, `-gencode`;
`-arch=native` asks nvidia-smi; `-arch=all` and `all-major` are the toolkit's
probed lists), and a note when that is a guess.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvcc_evo.driver.cmdline.nvcc_options import NvccCall
    from nvcc_evo.driver.toolkit import Toolkit


def _gencode_codes(spec: str) -> list[str]:
    match = re.search(r"code=\[?([^\]]*)\]?", spec.replace('"', ""))
    return [c.strip() for c in match.group(1).split(",")] if match else []


def generated_codes(call: NvccCall) -> list[str]:
    """The `code=` values of every -gencode of the call, in order."""
    return [c for opt in call.all_options() if opt.name == "--generate-code" and opt.value
            for c in _gencode_codes(opt.value)]


def _native_archs() -> list[str]:
    import subprocess
    from nvcc_evo.acf.knobs import arch_order
    from nvcc_evo.system.programs import note
    note("nvidia-smi", "the GPUs' architectures")
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({"sm_" + line.strip().replace(".", "")
                   for line in out.splitlines() if line.strip()}, key=arch_order)


def no_sass_archs(call: NvccCall) -> list[str]:
    """The architectures (as sm_XX) whose code the call ships with no SASS:
    PTX alone (`code=compute_XX`, `-arch=compute_XX`: the driver's JIT
    compiles it) or LTO IR alone (`code=lto_XX`: the device link does)."""
    codes = generated_codes(call) + call.values("--gpu-code")
    arch = call.last("--gpu-architecture")
    if arch is not None and arch.startswith("compute_") and not call.values("--gpu-code"):
        codes.append(arch)                 # (-arch=compute_XX alone: PTX only, as sass_archs says)
    sass = {c for c in codes if c.startswith("sm_")}
    return sorted({"sm_" + c.split("_", 1)[1]
                   for c in codes if c.startswith(("compute_", "lto_"))} - sass)


def sass_archs(call: NvccCall, toolkit: Toolkit) -> tuple[list[str], str]:
    """The SASS targets the call builds, and a note when that is a guess.
    `-arch=all` is nvcc's `-gencode` for each of them (and the newest's PTX):
    each target's entry applies to its own step, as with -gencode."""
    codes = generated_codes(call)
    arch = call.last("--gpu-architecture")
    gpu_codes = call.values("--gpu-code")
    if gpu_codes:
        codes += gpu_codes
    elif arch in ("native",):
        found = _native_archs()
        if not found:
            return [], "-arch=native with no GPU visible: nothing matched"
        codes += found
    elif arch in ("all", "all-major"):
        if not toolkit.archs_of(arch):
            return [], (f"-arch={arch}: CUDA {toolkit.version}'s nvcc did not say which "
                        "architectures it builds")
        codes += toolkit.archs_of(arch)
    elif arch is not None:
        codes.append(arch)
    elif not codes:
        codes.append(toolkit.default_arch)
    from nvcc_evo.acf.knobs import arch_order      # (imported when used: this module's imports stay
                                                   # few)
    sass = sorted({c for c in codes if c.startswith("sm_")}, key=arch_order)
    jit = sorted({c for c in codes if c.startswith("compute_") and c.replace("compute_",
                                                                             "sm_") not in sass},
                 key=lambda c: arch_order(c.replace("compute_", "sm_")))
    if jit:
        return sass, (f"{', '.join(jit)}: PTX only, compiled by the driver's JIT: no ptxas knob "
                      "reaches it")
    return sass, ""
