"""Register caps a search leaves out because the binary would not survive
them: the device link refuses a cap under a callee's registers (`link_safe`),
and a kernel that moves registers between its warp groups hangs under a cap
below the registers it launches with (`reconfigure_safe` before the search,
`hangs` before the write); `inert_caps` says where launch bounds keep their
registers over a cap.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from nvcc_evo.acf.knobs import CAPS_OF_KERNELS
from nvcc_evo.cubin.sass import external_functions, resources, shown_name
from nvcc_evo.driver.cmdline.compileplan import RecordedBuild
from nvcc_evo.driver.cmdline.flags import read_facts
from nvcc_evo.engine.space import SearchSpace

if TYPE_CHECKING:
    from nvcc_evo.cubin.compile import CompileResult
    from nvcc_evo.cubin.sass import KernelFacts
    from nvcc_evo.retune.scope.reach import BuildStep


REGISTER_CAPS = CAPS_OF_KERNELS       # a kernel's register caps (nvcc's and ptxas's)
OVERRIDE = "ptxas.override_directive_values"     # whose launch bounds a cap may override


def link_safe(space: SearchSpace, build: BuildStep,
              compiled: Callable[[], CompileResult]) -> tuple[SearchSpace, list[str]]:
    """The space without register caps where the device link would refuse them: a relocatable
    compile (-dc, -rdc=true) whose code calls functions other objects define (the device runtime's,
    another unit's), as the baseline compiles (`compiled()`: its CompileResult, asked only then).
    nvlink refuses a kernel whose cap is under a callee's registers ("entry function 'k' with max
    regcount of 24 calls function 'f' with regcount of 83"), and no compile of the unit alone can
    know the callee's: a cap the search found here broke the project's device link."""
    caps = [d for d in space.dimensions if d.knob in REGISTER_CAPS and not d.pinned
            and any(c is not None and c != d.baseline for c in d.choices)]
    if not caps or not isinstance(build, RecordedBuild) or not read_facts(build.call).relocatable:
        return space, []
    result = compiled()
    callees = external_functions(result.cubin) if result.ok else ()
    if not callees:
        return space, []
    named = ", ".join(callees[:3]) + (f" and {len(callees) - 3} more" if len(callees) > 3 else "")
    notes = [f"{d.knob}: all its values left out of the search: its relocatable code calls "
             f"functions other objects define ({named}), and the device link refuses a kernel "
             f"whose register cap is under a callee's registers" for d in caps]
    return replace(space, dimensions=tuple(d for d in space.dimensions if d not in caps)), notes


def reconfigure_safe(space: SearchSpace, arch: str,
                     compiled: Callable[[], CompileResult]) -> tuple[SearchSpace, list[str]]:
    """The space without register caps under the registers the baseline's kernels that move
    registers between their warp groups (setmaxnreg in PTX, USETMAXREG in SASS) launch with
    (`compiled()`: the baseline's CompileResult, asked only where a cap has a value to leave out).
    Their warp groups share out the block's launch allocation (registers x threads) with
    setmaxnreg.dec/.inc; under a cap that allocation is smaller than what .inc asks for, the
    allocation's retry loop spins for ever and the kernel never ends, and ptxas says nothing (a cap
    of 96 with --override-directive-values on a 384-thread CUTLASS kernel of 168 registers: 36,864
    registers for warp groups that need 64,512)."""
    caps = [d for d in space.dimensions if d.knob in REGISTER_CAPS and not d.pinned
            and any(isinstance(c, int) and c != d.baseline for c in d.choices)]
    if not caps:
        return space, []
    result = compiled()
    kernels = resources(result.stderr, arch, result.cubin) if result.ok else []
    inert = inert_caps(space, caps, kernels)
    moving = [k for k in kernels if k.reconfigures]
    if not moving:
        return space, inert
    floor = max(k.registers for k in moving)
    named = ", ".join(f"{shown_name(k.name)} ({k.registers} registers, "
                      f"{k.threads or 'unbounded'} threads)" for k in moving)
    kept, notes = [], []
    for d in space.dimensions:
        under = [c for c in d.choices
                 if d in caps and isinstance(c, int) and c < floor and c != d.baseline]
        if under:
            left_out = ", ".join(map(str, under))
            notes.append(f"{d.knob}: {left_out} left out of the search: under the {floor} "
                         f"registers a thread that {named} launches with; its warp groups move "
                         f"registers between them (setmaxnreg), and under a smaller allocation "
                         f"setmaxnreg.inc waits for registers for ever: the kernel would never "
                         f"end (ptxas says nothing)")
            d = replace(d, choices=tuple(c for c in d.choices if c not in under))
        if len(d.choices) > 1 or d.pinned:
            kept.append(d)
    return replace(space, dimensions=tuple(kept)), inert + notes


def inert_caps(space: SearchSpace, caps: list, kernels: Sequence[KernelFacts]) -> list[str]:
    """Where the baseline's kernels have launch bounds (__launch_bounds__: .maxntid), whose register
    limit ptxas keeps over a cap unless --override-directive-values is on in the search, that a cap
    leaves them be, said once: searched without a word, it read as a search of registers that
    changed no kernel."""
    override = next((d for d in space.dimensions if d.knob == OVERRIDE), None)
    bounded = [k.name for k in kernels if k.threads]
    if not caps or not bounded or (override is not None and True in override.choices):
        return []
    every = len(bounded) == len(kernels)
    which = "every kernel of the unit" if every else f"{len(bounded)} of its {len(kernels)} kernels"
    named = ", ".join(bounded[:4]) + (" ..." if len(bounded) > 4 else "")
    one = len(bounded) == 1
    verb = "has" if one or every else "have"
    them, they_are = ("it", "it is") if one else ("them", "they are")
    return [f"{', '.join(d.knob for d in caps)}: {which} ({named}) {verb} __launch_bounds__, whose "
            f"register limit ptxas keeps over a cap unless {OVERRIDE} is true: the cap leaves "
            f"{them} as {they_are} (searched anyway; search {OVERRIDE} in {{false, true}} too for "
            f"it to apply)"]


def hangs(settings: dict, kernels: Sequence[KernelFacts], uncapped: Callable[[], CompileResult],
          arch: str) -> str:
    """Why the register cap of `settings` would hang one of `kernels` (a build's KernelFacts with
    the cap): one that moves registers between its warp groups (setmaxnreg) left fewer registers a
    thread than it launches with uncapped (`uncapped()`: that build's CompileResult, asked only
    where such a kernel is capped); "" where none would (reconfigure_safe)."""
    caps = {k: v for k, v in settings.items() if k in REGISTER_CAPS and v is not None}
    moving = [k for k in kernels if k.reconfigures] if caps else []
    if not moving:
        return ""
    plain = uncapped()
    launched = resources(plain.stderr, arch, plain.cubin) if plain.ok else []
    free = {k.name: k.registers for k in launched}
    short = [f"{shown_name(k.name)} gets {k.registers} registers a thread, under the "
             f"{free[k.name]} it launches with uncapped"
             for k in moving if k.registers < free.get(k.name, 0)]
    if not short:
        return ""
    shown = ", ".join(f"{k} = {v}" for k, v in caps.items())
    return (f"{shown} would hang the kernel: {'; '.join(short)}; its warp groups move registers "
            f"between them (setmaxnreg), and under a smaller allocation setmaxnreg.inc waits for "
            f"registers for ever (ptxas says nothing); leave the cap out of this unit's entry")
