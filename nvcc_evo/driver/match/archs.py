"""The SASS architectures an nvcc call builds (`-arch`, `-code`, `-gencode`;
`-arch=native` asks nvidia-smi), and a note when that is a guess.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvcc_evo.driver.build.nvcc_options import NvccCall


def _gencode_codes(spec: str) -> list[str]:
    match = re.search(r"code=\[?([^\]]*)\]?", spec.replace('"', ""))
    return [c.strip() for c in match.group(1).split(",")] if match else []


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
    return sorted({"sm_" + line.strip().replace(".", "") for line in out.splitlines() if line.strip()}, key=arch_order)


def sass_archs(call: NvccCall, default_arch: str) -> tuple[list[str], str]:
    """The SASS targets the call builds, and a note when that is a guess."""
    codes: list[str] = []
    gencode = call.all_options()
    for opt in gencode:
        if opt.name == "--generate-code" and opt.value:
            codes += _gencode_codes(opt.value)
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
        return [], f"-arch={arch} builds every architecture: apply only through -gencode"
    elif arch is not None:
        codes.append(arch)
    elif not codes:
        codes.append(default_arch)
    from nvcc_evo.acf.knobs import arch_order      # (imported when used: this module's imports stay few)
    sass = sorted({c for c in codes if c.startswith("sm_")}, key=arch_order)
    jit = sorted({c for c in codes if c.startswith("compute_") and c.replace("compute_", "sm_") not in sass},
                 key=lambda c: arch_order(c.replace("compute_", "sm_")))
    if jit:
        return sass, f"{', '.join(jit)}: PTX only, compiled by the driver's JIT: no ptxas knob reaches it"
    return sass, ""
