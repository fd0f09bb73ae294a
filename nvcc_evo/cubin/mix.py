"""The instruction mix of a build's machine code: nvdisasm found (beside the
toolkit's nvcc, then on PATH, then in the pip package: `pip install
nvidia-cuda-nvdisasm`, the `sass` extra) and run on a cubin, its listing
counted per kernel and opcode, and the opcodes in the classes a reader
compares (FFMA, HMMA, global and shared loads and stores, local memory,
branches, ...). Without nvdisasm there is no mix, and `MISSING` says how to
get it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

MISSING = ("no nvdisasm (looked beside nvcc, on PATH and in the nvidia-cuda-nvdisasm package): the "
           "instruction mix is not shown; `pip install nvidia-cuda-nvdisasm` (or nvcc-evo's `sass` "
           "extra) brings it")

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")
SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")

# The classes of the mix a reader compares, each a set of opcodes (without
# their modifiers); `tensor` is every opcode that ends in MMA (HMMA, IMMA,
# HGMMA, UTCHMMA, ...). Opcodes of no class count as `other`.
CLASSES = {
    "fp32": {"FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "FSET", "FCHK", "FRND", "FFMA2",
             "FADD2", "FMUL2"},
    "fp16": {"HFMA2", "HADD2", "HMUL2", "HMNMX2", "HSETP2", "HSET2"},
    "fp64": {"DFMA", "DADD", "DMUL", "DSETP", "DMNMX"},
    "special": {"MUFU"},
    "integer": {"IMAD", "IADD3", "IADD", "LOP3", "SHF", "LEA", "ISETP", "IMNMX", "IABS", "POPC",
                "FLO", "BREV", "BMSK", "IDP", "VIADD", "VIMNMX", "UIMAD", "UIADD3", "ULOP3", "USHF",
                "ULEA", "UISETP"},
    "moves": {"MOV", "UMOV", "SEL", "USEL", "PRMT", "UPRMT", "S2R", "S2UR", "CS2R", "R2UR", "LDC",
              "ULDC", "SHFL", "F2I", "I2F", "F2F", "I2FP", "F2FP"},
    "global load": {"LDG"},
    "global store": {"STG"},
    "shared load": {"LDS", "LDSM"},
    "shared store": {"STS"},
    "local (spills)": {"LDL", "STL"},
    "async copy": {"LDGSTS", "LDGDEPBAR", "UBLKCP", "UTMALDG", "UTMASTG", "UTMAPF"},
    "atomics": {"ATOM", "ATOMG", "ATOMS", "RED", "REDG"},
    "branches": {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "BSSY", "BSYNC", "WARPSYNC"},
    "barriers": {"BAR", "SYNCS", "MEMBAR", "DEPBAR"},
}
CLASS_ORDER = ("tensor", *CLASSES, "other")


def class_of(opcode: str) -> str:
    if opcode.endswith("MMA"):
        return "tensor"
    return next((name for name, members in CLASSES.items() if opcode in members), "other")


def find_disassembler(nvcc: str | None = None) -> str | None:
    """nvdisasm beside nvcc (the toolkit's bin), on PATH, or in the pip package."""
    if nvcc:
        beside = Path(nvcc).parent / "nvdisasm"
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia  # the namespace package pip's CUDA wheels install into
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", ()):
        for candidate in sorted(Path(root).glob("*/bin/nvdisasm")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def disassemble(cubin: bytes, nvdisasm: str, timeout: float = 120) -> str:
    """nvdisasm's listing of the cubin's code; '' when it fails."""
    with tempfile.TemporaryDirectory(prefix="nvcc-evo-sass-") as folder:
        path = Path(folder) / "code.cubin"
        path.write_bytes(cubin)
        try:
            done = subprocess.run([nvdisasm, "--print-code", "--no-dataflow", str(path)],
                                  capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError):
            return ""
    return done.stdout if done.returncode == 0 else ""


def mixes(listing: str) -> dict[str, dict[str, int]]:
    """Kernel name -> opcode -> count, from nvdisasm's listing."""
    found: dict[str, dict[str, int]] = {}
    current = None
    for line in listing.splitlines():
        section = SECTION.match(line)
        if section:
            current = found.setdefault(section.group(1), {})
            continue
        instruction = INSTRUCTION.search(line)
        if instruction and current is not None:
            opcode = instruction.group(1).split(".")[0]
            current[opcode] = current.get(opcode, 0) + 1
    return found
