"""Why a choice is faster, per kernel: the baseline's and the chosen build's
machine code side by side (nvcc_evo.cubin.sass: registers, spills,
shared memory, instructions, the instruction mix) with each kernel's
occupancy (nvcc_evo.cubin.occupancy) at the block size its bench
launches it with.

A retune builds the two once more at its end (`compare`), says them in its
summary and appends them to `.nvcc-evo/kernels.jsonl` beside the results
store (`KernelStore`, keyed by unit, target, device and backend, and by the
SASS hash of each build), where `--report` finds them; `--sass` builds them
for one unit from its ACF entry, without a search.
"""
from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Generic, Protocol, TypeVar

from nvcc_evo.acf import model
from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.sources import define_values
from nvcc_evo.acf.knobs import Scalar
from nvcc_evo.cubin.compile import (CompileJob, CompileResult, PtxCache, SearchTask,
                                    compile_candidate)
from nvcc_evo.cubin.sass import sass_hash
from nvcc_evo.errors import EvoError
from nvcc_evo.cubin.occupancy import Occupancy, occupancy
from nvcc_evo.cubin.mix import MISSING, find_disassembler
from nvcc_evo.cubin.sass import KernelFacts, kernel_facts, with_mix
from nvcc_evo.system.jsonlines import JsonLines

STORE_NAME = "kernels.jsonl"


@dataclass(frozen=True)
class KernelLaunch:
    """How the bench launches its kernel: threads per block, dynamic shared bytes."""

    kernel: str
    threads: int
    dynamic_shared: int = 0


@dataclass(frozen=True)
class BuiltKernels:
    """One build of a unit for one architecture, kernel by kernel."""

    sass_hash: str
    kernels: tuple[KernelFacts, ...]
    launch: KernelLaunch | None = None

    def occupancy(self, kernel: KernelFacts, arch: str) -> Occupancy | None:
        """At the bench's block size for the bench's kernel, else at the block its launch bounds
        name (`threads`: .maxntid, .reqntid, from the cubin); unknown for the others."""
        if self.launch is not None and kernel.name == self.launch.kernel:
            return occupancy(arch, self.launch.threads, kernel.registers, kernel.shared,
                             self.launch.dynamic_shared, kernel.barriers)
        return occupancy(arch, kernel.threads, kernel.registers, kernel.shared, 0,
                         kernel.barriers) \
            if kernel.threads else None

    def threads(self, kernel: KernelFacts) -> int:
        """The block size `occupancy` counts for the kernel (0: none)."""
        if self.launch is not None and kernel.name == self.launch.kernel:
            return self.launch.threads
        return kernel.threads

    def to_json(self) -> dict:
        return {"sass_hash": self.sass_hash, "kernels": [k.to_json() for k in self.kernels],
                "launch": self.launch.__dict__ if self.launch else None}

    @classmethod
    def from_json(cls, data: dict) -> "BuiltKernels":
        launch = data.get("launch")
        return cls(data["sass_hash"], tuple(KernelFacts.from_json(k) for k in data["kernels"]),
                   KernelLaunch(**launch) if launch else None)


@dataclass(frozen=True)
class Comparison:
    """The baseline's and the chosen build's kernels of one unit and target."""

    unit: str
    arch: str
    device: str
    backend: str
    baseline: BuiltKernels
    chosen: BuiltKernels
    note: str = ""                    # what is missing (a disassembler), in words
    time: float = field(default=0.0, compare=False)

    def pairs(self) -> list[tuple[str, KernelFacts | None, KernelFacts | None]]:
        """(kernel, baseline's, chosen's) for every kernel of either build, in order."""
        base = {k.name: k for k in self.baseline.kernels}
        mine = {k.name: k for k in self.chosen.kernels}
        return [(name, base.get(name), mine.get(name)) for name in dict.fromkeys([*base, *mine])]


class SassUnavailable(EvoError):
    """A build to compare failed: its compiler's words."""


def build_of(result: CompileResult, arch: str, launch: KernelLaunch | None,
             nvdisasm: str | None) -> BuiltKernels:
    if not result.ok:
        raise SassUnavailable(f"the build failed ({result.status}): {result.stderr.strip()[-600:]}")
    facts = with_mix(kernel_facts(result.stderr, result.cubin, arch), result.cubin, nvdisasm)
    return BuiltKernels(sass_hash(result.cubin, result.module_id), facts, launch)


def launch_of(bench: model.Bench | None, defines: dict) -> KernelLaunch | None:
    """The bench's kernel and block size for these defines; None for a
    command bench, no bench, or a block the defines cannot size."""
    if bench is None or bench.kernel is None:
        return None
    try:
        plan = plan_bench(bench, defines)
    except (EvoError, ValueError, ArithmeticError, TypeError):
        return None
    return KernelLaunch(plan.kernel, math.prod(plan.block), int(plan.shared))


Side = tuple[dict, Callable[[], CompileResult]]      # a build's knob values, and how to build it


def compare(unit: model.Unit, arch: str, device: str, backend: str, baseline: Side, chosen: Side,
            defaults: dict, nvcc: str | None = None) -> Comparison:
    """Build the baseline and the chosen knob values and set their kernels
    side by side; `defaults` are the source's defines (for the bench's
    block size). SassUnavailable when a build fails."""
    nvdisasm = find_disassembler(nvcc)
    sides = []
    for settings, build in (baseline, chosen):
        launch = launch_of(unit.bench, {**defaults, **define_values(settings)})
        sides.append(build_of(build(), arch, launch, nvdisasm))
    return Comparison(str(unit), arch, device, backend, sides[0], sides[1],
                      "" if nvdisasm else MISSING, time.time())


# What the end of a search gives `after_search` (retune.outcome.choice.Outcome and what it holds),
# as far as a comparison reads it: this layer imports neither the retune, the execution nor the
# engine. G is the search's point (engine.space.Genome); its task is cubin.compile's SearchTask.
class Point(Protocol):
    def settings(self) -> dict[str, Scalar]: ...


G = TypeVar("G", bound=Point)
G_in = TypeVar("G_in", bound=Point, contravariant=True)
G_out = TypeVar("G_out", bound=Point, covariant=True)


class MeasuredContext(Protocol):
    @property
    def device(self) -> str: ...
    @property
    def backend(self) -> str: ...


class MeasuredBuilds(Protocol, Generic[G_in]):
    @property
    def context(self) -> MeasuredContext: ...
    def digest(self, genome: G_in) -> str: ...        # the SASS hash its build measured as


class SearchedSpace(Protocol, Generic[G_out]):
    def baseline(self) -> G_out: ...


class SearchEnd(Protocol, Generic[G]):
    @property
    def task(self) -> SearchTask: ...
    @property
    def space(self) -> SearchedSpace[G]: ...
    @property
    def chosen(self) -> G: ...
    @property
    def measured(self) -> MeasuredBuilds[G]: ...


def after_search(outcome: SearchEnd[G], job_for: Callable[[G], CompileJob], folder: Path,
                 defaults: dict, say: Callable[[str], None], ptx: PtxCache | None = None,
                 slots: ContextManager[object] | None = None) -> Comparison | None:
    """The end of one search: its baseline and its choice built once more
    and compared, for the summary (the outcome's `kernels`) and the report
    (kernels.jsonl in `folder`); a build that fails is said, not raised (None)."""
    task, context, measured = outcome.task, outcome.measured.context, outcome.measured
    kept = KernelStore(folder / STORE_NAME).latest(str(task.unit), task.arch,
                                                   measured.digest(outcome.space.baseline()),
                                                   measured.digest(outcome.chosen))
    if kept is not None:  # these two binaries were compared before: nothing to build
        return kept
    def build(genome: G) -> CompileResult:  # in one of the retune's compile slots, as its
        with slots if slots is not None else nullcontext():        # candidates are
            return compile_candidate(job_for(genome), ptx)

    def side(genome: G) -> Side:
        return genome.settings(), lambda: build(genome)

    try:
        comparison = compare(task.unit, task.arch, context.device, context.backend,
                             side(outcome.space.baseline()),
                             side(outcome.chosen), defaults, task.job.nvcc)
        KernelStore(folder / STORE_NAME).append(comparison)
    except (SassUnavailable, OSError) as error:
        say(f"{task}: the kernels of the baseline and the choice not compared: {error}")
        return None
    return comparison


class KernelStore:
    """`kernels.jsonl`: one line per comparison a retune made (appended)."""

    def __init__(self, path: Path):
        self.path = path
        self.lines = JsonLines(path)

    def append(self, comparison: Comparison) -> None:
        """One line, synced, under the store's lock (system.jsonlines)."""
        self.lines.append(json.dumps({
            "unit": comparison.unit, "arch": comparison.arch, "device": comparison.device,
            "backend": comparison.backend, "note": comparison.note, "time": comparison.time,
            "baseline": comparison.baseline.to_json(), "chosen": comparison.chosen.to_json()}))

    def read(self) -> list[Comparison]:
        """Every comparison stored; a line cut short or of another shape is skipped."""
        return self.lines.read(_comparison)

    def latest(self, unit: str, arch: str, baseline_hash: str,
               chosen_hash: str) -> Comparison | None:
        """The last comparison of these two builds of this unit and target
        (the machine code, whichever device or backend measured it)."""
        mine = [c for c in self.read() if (c.unit, c.arch, c.baseline.sass_hash, c.chosen.sass_hash)
                == (unit, arch, baseline_hash, chosen_hash)]
        return mine[-1] if mine else None


def _comparison(line: str) -> Comparison:
    data = json.loads(line)
    return Comparison(data["unit"], data["arch"], data["device"], data["backend"],
                      BuiltKernels.from_json(data["baseline"]),
                      BuiltKernels.from_json(data["chosen"]),
                      data.get("note", ""), float(data.get("time", 0)))
