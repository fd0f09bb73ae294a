"""The kernels of a profile ranked by GPU time, each with where it comes from.

`attribute` joins a profile's kernels to the recorded builds that define
them (hot.origin) and sums them per translation unit (or kernel unit);
`render` is the text `--hot` prints: the kernels (share, total, calls,
mean), each with its unit and the ACF unit that covers it, those of no
recorded build apart with their share, then the units by share.
`jit_warnings`: the hot sources built for no architecture the GPU runs as it
is (its driver compiles their PTX at load: no ptxas knob reaches them).
"""
from __future__ import annotations

import re
from typing import Iterable, NamedTuple

from nvcc_evo.acf import model
from nvcc_evo.hot.names import demangled, shortened
from nvcc_evo.hot.origin import Origin, Origins
from nvcc_evo.hot.profile import Profile
from nvcc_evo.measure.profile.records import KernelTime


class Hot(NamedTuple):
    """One kernel of the profile and the builds that may define it."""

    name: str                      # as the profile names it
    shown: str                     # demangled
    calls: int
    total_ns: int
    shapes: tuple[KernelTime, ...]
    origins: tuple[Origin, ...]


class HotUnit(NamedTuple):
    """A translation unit (or a kernel unit's PTX) and its kernels' time."""

    source: str
    total_ns: int
    kernels: tuple[Hot, ...]
    origins: tuple[Origin, ...]    # its origins (one per kernel), for its record and ACF unit

    @property
    def unit(self) -> model.Unit | None:
        return self.origins[0].unit

    @property
    def registers(self) -> int:
        """The most registers a thread of its kernels uses (the run's, else ptxas's)."""
        measured = [s.registers for k in self.kernels for s in k.shapes if s.registers]
        return max(measured or [o.registers for o in self.origins] or [0])

    @property
    def bounded(self) -> bool:
        """Whether launch bounds fix the block of any of its kernels (a register cap needs the
        override)."""
        return any(o.bounded for o in self.origins)


def attribute(profile: Profile, origins: Origins | None) -> tuple[list[Hot], list[HotUnit]]:
    """The kernels by time, each with its origins; and the units by their kernels' time."""
    rows = profile.by_name()
    spelled = demangled([name for name, *_ in rows])      # (nsys's `:mangled` summary has the
                                                          # symbols too)
    hot = []
    for name, calls, total, shapes in rows:
        found = origins.find(name, profile.mangled)[1] if origins is not None else []
        hot.append(Hot(name, spelled.get(name, name), calls, total, shapes, tuple(found)))
    units: dict[str, list[tuple[Hot, Origin]]] = {}
    for kernel in hot:
        for origin in kernel.origins:
            units.setdefault(origin.source, []).append((kernel, origin))
    summed = [HotUnit(source, sum(k.total_ns for k, _ in pairs),
                      tuple({k.name: k for k, _ in pairs}.values()),
                      tuple(o for _, o in pairs)) for source, pairs in units.items()]
    return hot, sorted(summed, key=lambda u: (-u.total_ns, u.source))


def _unit_words(origin: Origin) -> str:
    if origin.unit is None:
        return "no ACF unit covers it"
    if origin.tuned:
        return f"unit {origin.unit}"
    return f"unit {origin.unit} (no search block, no entry: a build adds nothing)"


def _origin_lines(kernel: Hot) -> list[str]:
    if not kernel.origins:
        return []
    if len(kernel.origins) == 1:
        origin = kernel.origins[0]
        what = "PTX entry of" if origin.is_kernel else "from"
        return [f"{'':>33}{what} {origin.source} [{origin.archs}]; {_unit_words(origin)}"]
    lines = [f"{'':>33}defined by {len(kernel.origins)} units (one name in each: their time is "
             "shown together):"]
    lines += [f"{'':>35}{o.source} [{o.archs}]; {_unit_words(o)}" for o in kernel.origins]
    return lines


def _kernel_line(kernel: Hot, whole: int) -> str:
    share = kernel.total_ns / whole if whole else 0.0
    mean = kernel.total_ns / kernel.calls / 1e3 if kernel.calls else 0.0
    total_ms = kernel.total_ns / 1e6
    name = shortened(kernel.shown)
    return f"{share:7.1%} {total_ms:11.3f} {kernel.calls:8d} {mean:11.2f}  {name}"


def render(profile: Profile, hot: list[Hot], units: list[HotUnit], folder: str | None) -> str:
    whole = profile.total_ns
    ran = ""
    if profile.seconds is not None:
        ended = f"exit {profile.exit}, " if profile.exit is not None else ""
        ran = f" ({ended}{profile.seconds:.2f} s)"
    lines = [f"kernels by GPU time: {profile.source}{ran}: {len(hot)} kernel(s), "
             f"{whole / 1e6:.3f} ms on the GPU", "",
             f"{'share':>7} {'total ms':>11} {'calls':>8} {'mean us':>11}  kernel"]
    mapped = [k for k in hot if k.origins]
    for kernel in mapped:
        lines.append(_kernel_line(kernel, whole))
        lines += _origin_lines(kernel)
    reached = sum(k.total_ns for k in mapped)
    others = [k for k in hot if not k.origins]
    if others:
        share = (whole - reached) / whole if whole else 0.0
        lines += ["", "of no recorded build (libraries, the framework's own, or builds no ACF "
                      f"unit covers): {share:.1%} of the GPU time"]
        lines += [_kernel_line(k, whole) for k in others]
    beside = f" (compile database beside {folder})" if folder else " (no ACF found)"
    lines += ["", f"nvcc-evo reaches {reached / whole if whole else 0.0:.1%} of the GPU time "
                  f"through {len(units)} recorded unit(s){beside}"]
    for unit in units:
        words = _unit_words(unit.origins[0])
        shared = sum(k.total_ns for k in unit.kernels if len(k.origins) > 1)
        also = ""
        if shared:
            also = f" ({shared / whole:.1%} of it in kernels of a name other units define too)"
        lines.append(f"{unit.total_ns / whole if whole else 0.0:7.1%}  {unit.source}: "
                     f"{len(unit.kernels)} kernel(s), {unit.registers} registers at most{also}; "
                     f"{words}")
    return "\n".join(lines) + "\n"



def _capability(arch: str) -> tuple[int, int, str] | None:
    found = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    return (int(found[1]), int(found[2]), found[3]) if found else None


def runs_natively(arch: str, device: str) -> bool:
    """Whether a cubin built for `arch` runs on a GPU of `device` as it is (one major version, a
    minor up to the device's; `sm_90a` on sm_90 alone), not recompiled from its PTX by the driver
    at load. True where either is no `sm_XY` (unknown: nothing said)."""
    built, gpu = _capability(arch), _capability(device)
    if built is None or gpu is None:
        return True
    if built[2] == "a":
        return built[:2] == gpu[:2]
    return built[0] == gpu[0] and built[1] <= gpu[1]


def jit_warnings(units: Iterable[tuple[str, set[str]]], devices: tuple[str, ...]) -> list[str]:
    """For each (source, the architectures its recorded compiles build) whose cubins none of the
    `devices` runs as they are, why a retune of them reaches nothing that runs here."""
    said = []
    for source, archs in units:
        if not archs or not devices or any(runs_natively(a, d) for a in archs for d in devices):
            continue
        built, gpus = ", ".join(sorted(archs)), ", ".join(sorted(set(devices)))
        wanted = sorted(set(devices))[0]
        how = f"nvcc -arch={wanted}; CMake: CUDA_ARCHITECTURES {wanted[3:]}"
        said.append(f"{source} is built for {built} alone (its recorded compiles): this machine's "
                    f"GPU ({gpus}) runs its kernels from their PTX, compiled by the driver when "
                    "the program loads them, so the ptxas knobs of a retune reach none of them "
                    f"here: build it for {wanted} too ({how}), rebuild from clean through nvcc-evo "
                    "and run --hot again")
    return said
