"""A comparison of two builds' kernels (nvcc_evo.kerneldiff.compare) as words:
a table per kernel, baseline against chosen, for the terminal (`lines`:
the end-of-retune summary, `--sass`); the report (nvcc_evo.report.page)
draws the same `rows` as HTML: registers, occupancy, spills, stack, shared
memory, barriers, instructions, then each class of the instruction mix that
either build has."""
from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Iterable

from nvcc_evo.cubin.occupancy import Occupancy
from nvcc_evo.cubin.mix import CLASS_ORDER
from nvcc_evo.cubin.sass import KernelFacts
from nvcc_evo.kerneldiff.compare import Comparison

FACTS = (("registers", "registers"), ("spills (bytes)", "spills"), ("stack (bytes)", "stack"),
         ("shared (bytes)", "shared"), ("barriers", "barriers"), ("instructions", "instructions"))


def _occupancy(found: Occupancy | None, threads: int) -> str:
    if found is None:
        return "—"
    return f"{found.warps}/{found.max_warps} ({found.blocks} x {threads} threads; {found.limiter})"


def change(before: float | None, after: float | None) -> str:
    """The change cell of every table (the end-of-retune summary, the kernels' view, the report):
    the relative change in percent; nothing where a side is missing or the two are the same; '—'
    where a side failed (not finite); 'new' where the baseline's is 0."""
    if before is None or after is None or before == after:
        return ""
    if not (math.isfinite(before) and math.isfinite(after)):
        return "—"
    return f"{(after - before) / before:+.1%}" if before else "new"


def _fact_row(label: str, before: float | None, after: float | None) -> tuple[str, ...]:
    shown = lambda v: "—" if v is None else str(v)
    return label, shown(before), shown(after), change(before, after)


def rows(comparison: Comparison, base: KernelFacts | None,
         mine: KernelFacts | None) -> list[tuple[str, ...]]:
    """(what, baseline, chosen, change) for one kernel."""
    value = lambda facts, name: getattr(facts, name) if facts is not None else None
    table = [_fact_row(label, value(base, name), value(mine, name)) for label, name in FACTS]
    sides = ((comparison.baseline, base), (comparison.chosen, mine))
    occupancy = [build.occupancy(facts, comparison.arch) if facts else None
                 for build, facts in sides]
    if any(occupancy):
        cells = [_occupancy(o, build.threads(facts) if facts else 0)
                 for o, (build, facts) in zip(occupancy, sides)]
        table.insert(1, ("occupancy (warps/SM)", *cells,
                         change(*(o.warps if o else None for o in occupancy))))
    classes = [facts.classes() if facts is not None and facts.mix else {} for facts in (base, mine)]
    table += [_fact_row(f"  {name}", classes[0].get(name), classes[1].get(name))
              for name in CLASS_ORDER
              if classes[0].get(name) or classes[1].get(name)]
    return table


def demangled(names: list[str]) -> dict[str, str]:
    """Kernel names as a C++ reader knows them (c++filt where found; else as they are)."""
    tool = shutil.which("c++filt")
    if not tool or not any(n.startswith("_Z") for n in names):
        return {n: n for n in names}
    try:
        done = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True,
                              timeout=30)
        said = done.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        said = []
    return dict(zip(names, said)) if len(said) == len(names) else {n: n for n in names}


def lines(comparison: Comparison, indent: str = "  ", note: bool = True) -> list[str]:
    """One table per kernel, for a terminal (`note`: with the comparison's
    note; a listing of several units says it once, after them: `notes`)."""
    pairs = comparison.pairs()
    names = demangled([name for name, _, _ in pairs])
    out = [f"{indent}per kernel, baseline -> chosen [{comparison.arch}]:"]
    for name, base, mine in pairs:
        table = [("", "baseline", "chosen", "change")] + rows(comparison, base, mine)
        widths = [max(len(r[i]) for r in table) for i in range(4)]
        out.append(f"{indent}  {names[name]}" + ("" if names[name] == name else f"  ({name})"))
        for row in table:
            cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:],
                                                                                  widths[1:])]
            out.append((f"{indent}    " + "  ".join(cells)).rstrip())
    if not pairs:
        out.append(f"{indent}  (ptxas reported no kernel)")
    if note and comparison.note:
        out.append(f"{indent}  note: {comparison.note}")
    return out


def notes(comparisons: Iterable[Comparison | None]) -> list[str]:
    """The comparisons' notes, each once (no nvdisasm: the same words for every unit)."""
    noted = dict.fromkeys(c.note for c in comparisons if c is not None and c.note)
    return [f"note: {n}" for n in noted]

