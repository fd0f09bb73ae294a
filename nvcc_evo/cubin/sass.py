"""What a build's machine code holds, per kernel: registers, spills, stack,
shared memory and barriers from ptxas's resource report (`-v`), instruction
counts from the cubin's `.text.KERNEL` sections, and, where a disassembler
is found, the instruction mix (nvcc_evo.cubin.mix) from nvdisasm's listing;
without one the facts are all there but the mix. The cubin's ELF read
(`cubin_sections`, `launch_bounds`, `instruction_count`, `cubin_registers`)
and the machine code's identity (`sass_hash`).
"""
from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from nvcc_evo.cubin.mix import CLASS_ORDER, class_of, disassemble, mixes

TOOL_NOTE = ".note.nv.tkinfo"     # the section where ptxas writes its own command line
DEBUG_PTX = re.compile(rb"\.nv_debug_ptx_txt\.\d+")
NOT_CODE = ("debug", "nv_debug", "rel.debug", "rela.debug", "rel.nv_debug", "rela.nv_debug")
SYMBOL = struct.Struct("<IBBHQQ")      # an ELF64 symbol: name's offset, info, other, section,
                                       # value, size
# nvcc's module id (CUDA 13.0) where it ends with the compiling process's id:
# _HASH_LEN_NAME_HASH_PID, NAME the source's file name of LEN characters with its dots as
# underscores.
PID_MODULE_ID = re.compile(r"_[0-9a-f]{8}_(?P<length>\d+)_(?P<name>\w+)_[0-9a-f]{8}_(?P<pid>\d+)")
ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
BARRIERS = re.compile(r"used (\d+) barriers")
SMEM = re.compile(r"(\d+) bytes smem")
@dataclass(frozen=True)
class KernelFacts:
    """One kernel of one build."""

    name: str
    registers: int = 0
    spill_stores: int = 0             # bytes
    spill_loads: int = 0
    stack: int = 0
    shared: int = 0                   # static shared memory, bytes
    barriers: int = 0
    instructions: int = 0
    mix: tuple[tuple[str, int], ...] = field(default=())     # opcode -> count; () without a
                                                             # disassembler
    # From the cubin's .nv.info: the most threads a block may have (.maxntid or __launch_bounds__,
    # .reqntid; 0: not bounded), whether its warp groups move registers between them (setmaxnreg),
    # its cluster's blocks.
    threads: int = 0
    reconfigures: bool = False
    cluster: int = 0

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    def classes(self) -> dict[str, int]:
        """The mix in the classes a reader compares (zero where none)."""
        counted = dict.fromkeys(CLASS_ORDER, 0)
        for opcode, count in self.mix:
            counted[class_of(opcode)] += count
        return counted

    def to_json(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "mix"}, "mix": dict(self.mix)}

    @classmethod
    def from_json(cls, data: dict) -> "KernelFacts":
        return cls(**{**data, "mix": tuple(sorted(data.get("mix", {}).items()))})


def shown_name(name: str, width: int = 72) -> str:
    """A kernel's name as a line of words shows it: a template's (CUTLASS's run to 1,500 characters)
    cut."""
    return name if len(name) <= width else name[:width - 3] + "..."


def resources(stderr: str, arch: str, cubin: bytes = b"") -> tuple[KernelFacts, ...]:
    """Each entry function ptxas compiled for `arch`, as its -v report says;
    of relocatable code (-rdc, -dc), the static shared memory its cubin's
    relocations name (ptxas -v says nothing of it there: the link places it)."""
    kernels = _reported(stderr, arch)
    if not kernels or cubin[:4] != b"\x7fELF":
        return kernels
    bounds = launch_bounds(cubin)
    kernels = tuple(replace(k, **bounds.get(k.name, {})) for k in kernels)
    placed = relocatable_shared(cubin)
    if placed is None:
        return kernels
    return tuple(replace(k, shared=placed.get(k.name, k.shared)) for k in kernels)


def _reported(stderr: str, arch: str) -> tuple[KernelFacts, ...]:
    kernels, current = [], None
    for line in stderr.splitlines():
        entry = ENTRY.search(line)
        if entry:
            current = KernelFacts(entry.group(1)) if entry.group(2) == arch else None
            continue
        if current is None:
            continue
        frame = FRAME.search(line)
        if frame:
            current = replace(current, stack=int(frame.group(1)), spill_stores=int(frame.group(2)),
                              spill_loads=int(frame.group(3)))
        used = USED.search(line)
        if used:
            barriers, smem = BARRIERS.search(line), SMEM.search(line)
            kernels.append(replace(current, registers=int(used.group(1)),
                                   barriers=int(barriers.group(1)) if barriers else 0,
                                   shared=int(smem.group(1)) if smem else 0))
            current = None
    return tuple(kernels)


def kernel_facts(stderr: str, cubin: bytes, arch: str) -> tuple[KernelFacts, ...]:
    """ptxas's report of each kernel with its instruction count from the cubin."""
    sizes = {name[len(".text."):]: len(body) for name, body in cubin_sections(cubin).items()
             if name.startswith(".text.")} if cubin else {}
    return tuple(replace(k, instructions=sizes.get(k.name, 0) // 16)
                 for k in resources(stderr, arch, cubin))


ET_REL, SHT_SYMTAB, SHT_RELA, STT_FUNC, STT_CUDA_SHARED, SHN_UNDEF = 1, 2, 4, 2, 13, 0


_Relocatable = tuple[list[tuple], list[tuple], Callable[[int], str] | None]


def _relocatable_symbols(cubin: bytes) -> _Relocatable | None:
    """Of a relocatable cubin (ET_REL): its section headers, its symbols (ELF64's fields) and a
    function from a name's offset to the name; None for linked code, (headers, [], None) with no
    symbol table."""
    if len(cubin) < 0x40 or cubin[:4] != b"\x7fELF":
        return None
    if struct.unpack_from("<H", cubin, 0x10)[0] != ET_REL:
        return None
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    entsize, count = struct.unpack_from("<HH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    symtab = next((h for h in headers if h[1] == SHT_SYMTAB), None)
    if symtab is None:
        return headers, [], None
    names_at = headers[symtab[6]][4]                       # its sh_link: the string table

    def name(at: int) -> str:
        start = names_at + at
        return cubin[start:cubin.index(b"\0", start)].decode(errors="replace")

    symbols = [struct.unpack_from("<IBBHQQ", cubin, symtab[4] + i * 24)
               for i in range(symtab[5] // 24)]
    return headers, symbols, name


# The device's system calls, undefined in every relocatable cubin that calls them: no object defines
# them, and the device link takes a register cap of 16 on their callers (measured, CUDA 13.0,
# sm_90).
SYSTEM_CALLS = frozenset({"vprintf", "malloc", "free", "__assertfail"})


def external_functions(cubin: bytes) -> tuple[str, ...]:
    """The functions a relocatable cubin calls and other objects define (undefined function symbols:
    another translation unit's `__device__` function, the device runtime's; not the SYSTEM_CALLS):
    the device link refuses a kernel whose register cap is under such a callee's registers. () for
    linked code."""
    found = _relocatable_symbols(cubin)
    if found is None:
        return ()
    _, symbols, name = found
    if name is None:
        return ()
    called = (name(s[0]) for s in symbols if s[1] & 0xF == STT_FUNC and s[3] == SHN_UNDEF)
    return tuple(sorted(n for n in called if n not in SYSTEM_CALLS))


def relocatable_shared(cubin: bytes) -> dict[str, int] | None:
    """Of a relocatable cubin (-rdc, -dc), each function's static shared
    memory: the sizes of the distinct `__shared__` variables its code and the
    functions it calls name in their relocations (nvlink gives them their
    places); None for linked code, whose ptxas report says it."""
    found = _relocatable_symbols(cubin)
    if found is None:
        return None
    headers, symbols, name = found
    if name is None:
        return {}
    named: dict[int, set[int]] = {}                        # section index -> the symbols its
                                                           # relocations name
    for _, kind, _, _, offset, size, _, target, _, _ in headers:
        if kind == SHT_RELA:
            named.setdefault(target, set()).update(
                struct.unpack_from("<Q", cubin, offset + i * 24 + 8)[0] >> 32
                for i in range(size // 24))
    shared = {i for i, s in enumerate(symbols) if s[1] & 0xF == STT_CUDA_SHARED}
    calls = {i: named.get(s[3], set()) for i, s in enumerate(symbols) if s[1] & 0xF == STT_FUNC}
    return {name(symbols[f][0]): sum(symbols[v][5] for v in _reached(f, calls) & shared)
            for f in calls}


def _reached(start: int, calls: dict[int, set[int]]) -> set[int]:
    """The symbols a function's relocations name, through the functions it calls."""
    seen, todo = set(), [start]
    while todo:
        for symbol in calls.get(todo.pop(), ()):
            if symbol not in seen:
                seen.add(symbol)
                todo.append(symbol)
    return seen


def with_mix(kernels: tuple[KernelFacts, ...], cubin: bytes,
             nvdisasm: str | None) -> tuple[KernelFacts, ...]:
    """The kernels with their instruction mix (unchanged without a disassembler)."""
    if not nvdisasm or not cubin:
        return kernels
    found = mixes(disassemble(cubin, nvdisasm))
    return tuple(replace(k, mix=tuple(sorted(found.get(k.name, {}).items()))) for k in kernels)


# ---------------------------------------------------------------- cubin (ELF)
def cubin_sections(data: bytes) -> dict[str, bytes]:
    """Section name -> contents of an ELF64 cubin."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names_offset = headers[names_index][4]
    sections = {}
    for name_at, kind, _, _, offset, size, *_ in headers:
        name = data[names_offset + name_at:data.index(b"\0", names_offset + name_at)].decode()
        sections[name] = b"" if kind == 8 else data[offset:offset + size]   # 8: NOBITS
    return sections


def sass_hash(cubin: bytes, module_id: str = "") -> str:
    """Identity of the machine code: every section but ptxas's note of its
    own options, the debug information (-lineinfo's; with --compile-only its
    PTX section is named by a hash of the PTX) and the string tables, whose
    names count where sections and symbols use them. The process id that
    ends nvcc's module id (`module_id`, the compile's), which the names of a
    unit with template kernels alone and a name of internal linkage carry, is
    zeroed: two compiles of it differ there alone."""
    mine, same = _module_id_spellings(module_id)

    def named(text: bytes) -> bytes:
        return DEBUG_PTX.sub(b".nv_debug_ptx_txt", text.replace(mine, same) if mine else text)
    sections = cubin_sections(cubin)
    digest = hashlib.sha256()
    for name, content in sorted(sections.items()):
        if name in (TOOL_NOTE, ".strtab", ".shstrtab") or name.lstrip(".").startswith(NOT_CODE):
            continue
        if name == ".symtab":
            content = _symbols(content, sections.get(".strtab", b""), named)
        else:
            content = named(content)
        digest.update(named(name.encode()) + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:32]


def _symbols(table: bytes, strings: bytes, named: Callable[[bytes], bytes]) -> bytes:
    """An ELF64 symbol table with each symbol's name in place of its offset in the string table."""
    out = []
    for at in range(0, len(table) - SYMBOL.size + 1, SYMBOL.size):
        offset, *rest = SYMBOL.unpack_from(table, at)
        name = strings[offset:strings.index(b"\0", offset)] if offset < len(strings) else b""
        out.append(named(name) + b"\0" + SYMBOL.pack(0, *rest))
    return b"".join(out)


def _module_id_spellings(module_id: str) -> tuple[bytes, bytes]:
    """The module id and the same with its process id zeroed (as long, so the
    offsets of names after it stay); (b"", b"") for one of another form (a
    unit with a kernel of external linkage: `_HASH_LEN_NAME__KERNEL`, or
    `_HASH_LEN_NAME_HASH` for an extern "C" one), which is the same in every compile."""
    found = PID_MODULE_ID.fullmatch(module_id)
    if found is None or len(found["name"]) != int(found["length"]):
        return b"", b""
    return module_id.encode(), (module_id[:found.start("pid")] + "0" * len(found["pid"])).encode()


def instruction_count(cubin: bytes) -> int:
    """SASS instructions: every instruction is 16 bytes on sm_70 and later."""
    return sum(len(body)
               for name, body in cubin_sections(cubin).items() if name.startswith(".text.")) // 16


# .nv.info attributes (EIATTR_*): a kernel's registers, its launch bounds, its cluster, setmaxnreg's
# mark.
MAX_THREADS, REQNTID, REGCOUNT, CTA_PER_CLUSTER, REG_RECONFIG = 0x05, 0x10, 0x2f, 0x3d, 0x54


def _attributes(info: bytes) -> Iterator[tuple[int, bytes]]:
    """(attribute, value) of each record of an .nv.info section: on a 4-byte grid, a format byte and
    an attribute byte, then 2 bytes (no value, a byte, a half word), or a size and a value that
    long."""
    at = 0
    while at + 4 <= len(info):
        form, attribute = info[at], info[at + 1]
        size = struct.unpack_from("<H", info, at + 2)[0] if form == 4 else 0
        yield attribute, info[at + 4:at + 4 + size] if form == 4 else info[at + 2:at + 4]
        at += 4 + size


def launch_bounds(cubin: bytes) -> dict[str, dict]:
    """Per kernel, what its .nv.info section says of how it may launch (KernelFacts' fields):
    `threads` (its .maxntid, from __launch_bounds__, or .reqntid: X*Y*Z), `reconfigures` (setmaxnreg
    moves registers between its warp groups: ptxas marks it only where the launch bounds fix the
    entry's count) and `cluster` (the blocks of its .reqnctapercluster, __cluster_dims__)."""
    found: dict[str, dict] = {}
    for name, info in cubin_sections(cubin).items():
        if not name.startswith(".nv.info."):
            continue
        facts = found.setdefault(name[len(".nv.info."):], {})
        for attribute, value in _attributes(info):
            if attribute in (MAX_THREADS, REQNTID, CTA_PER_CLUSTER) and len(value) >= 12:
                x, y, z = struct.unpack_from("<III", value)
                facts["cluster" if attribute == CTA_PER_CLUSTER else "threads"] = x * y * z
            elif attribute == REG_RECONFIG:
                facts["reconfigures"] = True
    return found


def cubin_registers(cubin: bytes) -> int:
    """The most registers any kernel of the cubin uses, as its .nv.info says ((symbol, registers)
    each)."""
    info = _attributes(cubin_sections(cubin).get(".nv.info", b""))
    counts = [struct.unpack_from("<I", value, 4)[0] for attribute, value in info
              if attribute == REGCOUNT and len(value) == 8]
    return max(counts, default=0)
