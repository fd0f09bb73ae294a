"""`--hot --write`: unit blocks for the hot units that no ACF unit tunes yet.

A unit is hot when its kernels take at least `least` of the GPU time
(5% by default); units are written most time first. Each block is spelled as
the formatter spells it (acf.edit.format) and holds a search block of the
knobs that reach its recorded build (retune.scope.reach asked, as a retune asks,
with the block in a copy of the ACF) sized for its kernels (register caps
where an SM would hold more of their blocks: cubin.occupancy), `tune { minimize time }`, and a
bench of no harness: the command that rebuilds through nvcc-evo and runs the
program, and `metric time kernels`, the unit's own kernels' GPU time.
Knobs that may change results (the table's `numeric`) are left out: that
bench checks only the exit status. A block goes before the unit that covers
the source now and neither searches nor holds an entry (`unit "**/*.cu" {}`:
it records the compiles, a build adds nothing for it):
the wrapper takes the first unit that matches. Existing units are never
touched; a unit whose source a tuning unit covers already, or whose globs a
unit has, is not written again. The outputs the records of a written unit's
source name are re-dated (as a retune re-dates them), so that the next build
compiles it as its new unit. Written by the one ACF writer (acf.edit.write),
checked before the write as --acf-check checks.
"""
from __future__ import annotations

import hashlib
import math
import os
import shlex
from pathlib import Path

from nvcc_evo.acf import model
from nvcc_evo.acf.edit.format import format_text
from nvcc_evo.acf.edit.spelling import show_domain, show_string
from nvcc_evo.acf.edit.write import rewrite
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.resolve import check
from nvcc_evo.cubin import occupancy
from nvcc_evo.errors import UsageError
from nvcc_evo.hot.origin import Origin, covering
from nvcc_evo.hot.profile import Profile
from nvcc_evo.hot.reaching import reaching
from nvcc_evo.hot.table import HotUnit
from nvcc_evo.measure.command.rebuilt import redate
from nvcc_evo.system.say import log

REPEAT = "2..3"     # adaptive (stats.enough): a third run only where two spread over 1%
SPACE = (("ptxas.register_usage_level", model.RangeDomain(0, 10)),      # beside the register cap
         ("ptxas.dlcm", model.SetDomain(("ca", "cg"))))
GLOB_CHARACTERS = "*?["
LEAST_CAP = 24       # ptxas raises a lower -maxrregcount to this


def register_caps(unit: HotUnit) -> model.Domain | None:
    """Register caps for the unit's kernels: where the run says how they launch (block, registers,
    shared bytes), the caps at which an SM holds more blocks of a launch shape that takes a tenth of
    the unit's time or more, while registers are what limits it, down to half of what it uses (a
    cap that adds no block only spills; one above the use changes nothing); None where registers
    limit none of them. Without shapes (an Nsight Systems summary) or a row of the occupancy
    table for the architecture: caps from half of the most registers up to them."""
    arch = unit.origins[0].arch
    shapes = [s for k in unit.kernels for s in k.shapes if s.registers and s.block[0]]
    if not shapes or occupancy.compute_capability(arch) not in occupancy.SMS:
        return _caps_below(unit.registers)
    caps = {cap for s in shapes if s.total_ns * 10 >= unit.total_ns
            for cap in _more_blocks(arch, math.prod(s.block), s.registers, s.shared)}
    return model.SetDomain(tuple(sorted(caps))) if caps else None


def _more_blocks(arch: str, threads: int, registers: int, shared: int) -> list[int]:
    """The most registers a thread may use for each more block an SM holds, registers the limit."""
    now = occupancy.occupancy(arch, threads, registers, shared)
    if now is None or now.limiter != "registers":
        return []
    caps, blocks = [], now.blocks
    for cap in range((registers - 1) // 8 * 8, max(LEAST_CAP, registers // 2) - 1, -8):
        then = occupancy.occupancy(arch, threads, cap, shared)
        if then is not None and then.blocks > blocks:
            caps.append(cap)
            blocks = then.blocks
            if then.limiter != "registers":
                break
    return caps


def _caps_below(registers: int) -> model.RangeDomain | None:
    """Caps from about half of `registers` up to it, in steps of 8, 16 or 32; None where they use
    too few for a cap to matter (ptxas raises one under 24)."""
    low, high = max(LEAST_CAP, registers // 2 // 8 * 8), min(255, -(-registers // 8) * 8)
    if registers <= LEAST_CAP:
        return None
    step = next(s for s in (8, 16, 32) if (high - low) // s <= 8 or s == 32)
    return model.RangeDomain(low, low + max(1, (high - low) // step) * step, step)


def _glob(source: str) -> str:
    """A unit glob naming exactly `source` (glob characters in a name matched as themselves)."""
    return "".join(f"[{c}]" if c in GLOB_CHARACTERS else c for c in source)


def bench_command(profile: Profile, folder: Path, build: str | None, run: str | None,
                  is_kernel: bool) -> str:
    """The bench's command, run in the ACF's folder: into the run's folder, the build (not for a
    kernel unit: Triton compiles it in the run), the run."""
    if run is None:
        if not profile.command:
            raise UsageError("--write from an Nsight Systems summary needs --run 'COMMAND': how "
                             "the program runs")
        run = shlex.join(profile.command)
    parts = []
    where = os.path.relpath(profile.cwd or os.getcwd(), folder)
    if where != ".":
        parts.append(f"cd {shlex.quote(where)}")
    if not is_kernel:
        if build is None:
            if not any((Path(profile.cwd or os.getcwd()) / name).is_file()
                       for name in ("GNUmakefile", "makefile", "Makefile")):
                raise UsageError("--write needs --build 'COMMAND': how the project rebuilds "
                                 "through nvcc-evo before each candidate's run (a bench command "
                                 "builds the candidate: docs/retune.md)")
            build = "make -s NVCC=nvcc-evo"
            log(f"--write: the bench builds with `{build}` (--build names another way; its "
                "compiles must go through nvcc-evo)")
        parts.append(build)
    return " && ".join(parts + [run])


def unit_text(unit: HotUnit, share: float, command: str,
              space: list[tuple[str, model.Domain]]) -> str:
    """The block, in the formatter's spelling, with a comment saying why it was written."""
    origin = unit.origins[0]
    globs = " ".join(show_string(g) for g in _globs(unit))
    lines = ["acf 1", f"# nvcc-evo --hot: {share:.1%} of the GPU time, {len(unit.kernels)} "
                      f"kernel(s), {unit.registers} registers at most", "# the bench checks the "
                      "exit status alone: add a check before searching knobs that change results",
             f"unit {'kernel ' if origin.is_kernel else ''}{globs} {{"]
    if origin.is_kernel and any(knob == "ptxas.maxrregcount" for knob, _ in space):
        lines.append("pin ptxas.override_directive_values = true")    # (Triton's PTX states its
                                                                      # block size)
    lines.append("search {")
    lines += [f"{knob} in {show_domain(domain)}" for knob, domain in space]
    lines += ["}", "tune {", "minimize time", "}", "bench {", f"command {show_string(command)}",
              "metric time kernels", f"repeat {REPEAT}", "}", "}"]
    return format_text("\n".join(lines) + "\n").split("\n", 2)[2]     # (the header and its blank
                                                                      # line left out)


def _globs(unit: HotUnit) -> tuple[str, ...]:
    origin = unit.origins[0]
    if origin.is_kernel:
        return tuple(dict.fromkeys(k.name for k in unit.kernels))
    return (_glob(unit.source),)


def write_units(acf_path: Path, units: list[HotUnit], profile: Profile, least: float,
                build: str | None, run: str | None) -> None:
    whole = profile.total_ns
    untuned = [u for u in units if whole and not any(o.tuned for o in u.origins)]
    hot = [u for u in untuned if u.total_ns / whole >= least]
    for unit in (u for u in untuned if u not in hot):
        log(f"--write: {unit.source} left out: {unit.total_ns / whole:.1%} of the GPU time, under "
            f"--min-share {least * 100:g}")
    if whole and not untuned:
        tuned = "; ".join(f"{u.source}: unit {next(o.unit for o in u.origins if o.tuned)}"
                          for u in units)
        log(f"--write: no unit to add: every unit of the profile's kernels is tuned already "
            f"({tuned})")
        return
    if not hot:
        log(f"--write: no unit to add: none untuned takes {least * 100:g}% of the GPU time or more "
            "(--min-share)")
        return
    blocks = []
    for unit in hot:
        command = bench_command(profile, acf_path.parent, build, run, unit.origins[0].is_kernel)
        space = _space(acf_path, unit, command)
        blocks.append((unit, unit_text(unit, unit.total_ns / whole, command, space)))
    written: list[str] = []

    def update(text: str) -> str:
        written.clear()
        return _inserted(text, acf_path, blocks, written)

    rewrite(acf_path, update)
    for line in written:
        log(f"--write: {line}")
    if not written:
        log("--write: nothing added: each hot unit has its unit already")
        return
    # The next build compiles them as their new units (and records that): a bench's first build, a
    # retune's.
    redate([Path(o.record.cwd) / o.record.output for unit, _ in blocks for o in unit.origins
            if o.record.output and not o.is_kernel], acf_path.parent)


def _inserted(text: str, acf_path: Path, blocks: list[tuple[HotUnit, str]],
              written: list[str]) -> str:
    """`text` with each block that is not there yet placed before the unit covering its source now
    (else at the end), checked as --acf-check checks."""
    file = parse_text(text, str(acf_path))
    places: dict[int, list[str]] = {}
    for unit, block in blocks:
        origin: Origin = unit.origins[0]
        globs = _globs(unit)
        if any(u.globs == globs for u in file.units):
            continue
        now = covering(file.units, acf_path.parent, origin.record, origin.entries, _digest(origin))
        if now is not None and (now.space or now.targets):
            continue                      # (a unit that tunes it came meanwhile)
        at = _before(text, now.span.start) if now is not None else len(text)
        places.setdefault(at, []).append(block)
        named = " ".join(show_string(g) for g in globs)
        written.append(f"unit {'kernel ' if origin.is_kernel else ''}{named} added"
                       + (f" before unit {now}" if now is not None else ""))
    new = text
    for at in sorted(places, reverse=True):
        joined = "\n".join(places[at])
        new = new[:at] + joined + "\n" + new[at:] if at < len(new) else \
            new.rstrip("\n") + "\n\n" + joined
    if new != text:
        check(parse_text(new, str(acf_path)), new, with_sources=True)
    return new


def _digest(origin: Origin) -> str:
    try:
        if not origin.entries:
            return ""
        return hashlib.sha256(Path(origin.record.input).read_bytes()).hexdigest()
    except OSError:
        return ""


def _before(text: str, start: int) -> int:
    """Where a block goes before the unit starting at `start`: above the comment lines right over
    it."""
    at = text.rfind("\n", 0, start) + 1
    while at > 0:
        above = text.rfind("\n", 0, at - 1) + 1
        if not text[above:at].lstrip().startswith("#"):
            break
        at = above
    return at


def _space(acf_path: Path, unit: HotUnit, command: str) -> list[tuple[str, model.Domain]]:
    """The search block's knobs and domains, each kept where some value of it reaches the recorded
    build."""
    caps = register_caps(unit)
    wanted: list[tuple[str, model.Domain]] = [("ptxas.maxrregcount", caps)] if caps else []
    if caps and unit.bounded and not unit.origins[0].is_kernel:
        # (else ptxas keeps the bounds')
        wanted.append(("ptxas.override_directive_values", model.BoolDomain()))
    wanted += list(SPACE)
    if unit.origins[0].is_kernel:
        return wanted  # (Triton's ptxas takes each; its own options win: driver.dropin_ptxas)
    return reaching(acf_path, unit.origins[0], _globs(unit), wanted,
                    unit_text(unit, 0.0, command, wanted))
