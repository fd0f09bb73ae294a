"""Warm starts: what the project measured before, that a search may start from.

Two kinds of evaluations are known before the search of a (unit, target):

- the same unit's in other contexts (another GPU model, toolkit, source or
  build), measured by the same backend;
- similar units' of the same project: another unit of the ACF, measured by
  the same backend on the same device and target, whose search used largely
  the same knobs (`KNOBS_ALIKE` of the two sets of knob names shared), most
  of its values inside this space's domains (`DOMAINS_ALIKE`), and whose
  kernels are alike: the same source parameters (`PARAMETERS_ALIKE` of the
  smaller set of `define.` knobs shared, one at least: the same kernel
  source tuned per shape, as a thin unit that sets a parameter and includes
  another file), or else alike machine code (`unlike_kernels`: its
  baseline's kernel facts as its latest retune compared them, against this
  unit's baseline, compiled only then). Knobs alike say nothing of the
  kernels: without either evidence no unit is similar.

They are read from the project's results store and from the stores its
settings list (`report.stores`). Each group, one per context, is mapped into
this search's space (a value outside its domains dropped: the knob takes the
space's baseline, as one the other search lacked does) and ranked on its own
(its first record, the baseline its search measured first, is what its
constraints relative to a baseline read): its best seed the first generation
and all of them start the surrogate (engine.evolve, `Known`).

What is trusted: a store read for other units' evaluations (the retune's
own among them) is a regular file of the user's, inside the project folder
(no link followed; another user's file, or a store outside the project, is
not read, and that is said); a record of a unit the ACF does not have (a
store from another project) is left aside.
"""
from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from nvcc_evo.acf.knobs import DEFINE_PREFIX
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
from nvcc_evo.cubin.mix import find_disassembler
from nvcc_evo.cubin.sass import KernelFacts, kernel_facts, with_mix
from nvcc_evo.engine.fronts import Evaluation
from nvcc_evo.engine.space import Genome, SearchSpace
from nvcc_evo.execute.goal import Goal
from nvcc_evo.execute.store import Context, StoredResult, Store

KNOBS_ALIKE = 0.6          # shared knob names over all the two searches name (Jaccard), at least
PARAMETERS_ALIKE = 0.75    # shared source parameters over the fewer of the two, at least
DOMAINS_ALIKE = 0.5        # of the other search's values of the shared knobs, those inside this
                           # space's domains
# the most one kernel's may be the other's
KERNEL_RATIOS = {"registers": 1.25, "instructions": 1.5, "shared": 2.0}
MIX_ALIKE = 0.95           # the least cosine of two kernels' instruction mixes (classes)


@dataclass(frozen=True)
class WarmStart:
    """One group of evaluations known before the search (engine.evolve.Known), in its space."""

    origin: str                              # where they come from, in words
    evaluations: tuple[Evaluation, ...]


Facts = tuple[KernelFacts, ...]
KernelsOf = Callable[[str, str], "Facts | None"]     # (unit, arch) -> its baseline's kernels, where
                                                     # known


def _unknown(unit: str, arch: str) -> Facts | None:
    return None


@dataclass(frozen=True)
class ProjectStores:
    """Where a search finds similar units' evaluations: the ACF's units (as a results store names
    them), the results stores the settings list besides the retune's own that may be read
    (`project_stores`), and each unit's baseline kernels as its latest retune compared them
    (kerneldiff.compare's kernels.jsonl)."""

    units: frozenset[str]
    stores: tuple[Path, ...] = ()
    kernels_of: KernelsOf = _unknown
    own: bool = True  # the retune's own store may be read for other units' (it is the user's)


def project_stores(folder: Path, units: Iterable[str], listed: Iterable[Path], own: Path,
                   say: Callable[[str], None], kernels_of: KernelsOf = _unknown) -> ProjectStores:
    """The project's units and the stores that may be read for other units' evaluations: the
    retune's own, and those listed; each one that may not, said once with why."""
    mine = _untrusted(own, folder) if os.path.lexists(own) else ""
    if mine:
        say(f"results store {own} not read for other units' warm starts: {mine}")
    readable = []
    for path in dict.fromkeys(listed):
        if os.path.abspath(path) == os.path.abspath(own):
            continue
        why = _untrusted(path, folder)
        if why:
            say(f"results store {path} not read for warm starts: {why}")
        else:
            readable.append(path)
    return ProjectStores(frozenset(units), tuple(readable), kernels_of, not mine)


def warm_starts(store: Store, project: ProjectStores | None, context: Context, goal: Goal,
                space: SearchSpace,
                say: Callable[[str], None], baseline: CompileJob | None = None) -> list[WarmStart]:
    """The groups of evaluations this search starts from, the same unit's first; what was found, and
    what was left aside and why, said through `say` (after the search's name, as the retune says
    it). `baseline`: how this unit's baseline is built, compiled only where another unit's kernels
    are known and its search names no source parameters like this one's (its kernels compared
    then)."""
    def tell(words: str) -> None:
        say(f"{context.unit} [{context.arch}]: {words}")

    groups = _by_context(store.read())
    others: dict[str, list[StoredResult]] = {}
    if project is not None:
        for path in project.stores:
            others.update(_by_context(Store(path).read(), exclude=groups if project.own else None))
        others.update(groups if project.own else {})
    found = [WarmStart(_origin(context, group[0].context), _mapped(group, goal, space))
             for group in groups.values() if _same_unit(context, group[0].context)]
    if project is not None:
        found += _similar(others, project, context, goal, space, tell,
                          _facts_of(baseline, context.arch))
    found = [group for group in found if group.evaluations]
    if found:
        tell("warm start from " + "; ".join(f"{len(g.evaluations)} evaluations of {g.origin}"
                                            for g in found))
    return found


def _by_context(records: Iterable[StoredResult],
                exclude: dict | None = None) -> dict[str, list[StoredResult]]:
    groups: dict[str, list[StoredResult]] = {}
    for record in records:
        if exclude is None or record.context.key not in exclude:
            groups.setdefault(record.context.key, []).append(record)
    return groups


def _same_unit(context: Context, other: Context) -> bool:
    return other != context and other.unit == context.unit and other.backend == context.backend


def _origin(context: Context, other: Context) -> str:
    """The same unit's other context, in words: what differs."""
    differs = [other.arch if other.arch != context.arch else "",
               other.device if other.device != context.device else "",
               f"toolkit {other.toolkit}" if other.toolkit != context.toolkit else "",
               "another source" if other.fingerprint != context.fingerprint else "",
               "another build" if other.build != context.build else ""]
    return f"this unit ({', '.join(d for d in differs if d)})"


def _untrusted(path: Path, folder: Path) -> str:
    """Why a listed store is not read ("" where it may be): outside the project, a link, not a
    regular file, another user's."""
    real, inside = os.path.realpath(path), os.path.realpath(folder)
    if real != inside and not real.startswith(inside.rstrip(os.sep) + os.sep):
        return f"it is outside the project folder {folder} (another project's results are not used)"
    try:
        info = os.lstat(path)
    except OSError as error:
        return "" if not os.path.lexists(path) else (error.strerror or str(error))
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link (none is followed)"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_uid != os.geteuid():
        return (f"it is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}): another "
                "user's file is not trusted")
    return ""


def _facts_of(job: CompileJob | None, arch: str) -> Callable[[], Facts | None]:
    """This unit's baseline kernels, compiled once when first asked (None: not known)."""
    known: list[Facts | None] = []

    def facts() -> Facts | None:
        if not known:
            result = compile_candidate(job) if job is not None else None
            known.append(with_mix(kernel_facts(result.stderr, result.cubin, arch), result.cubin,
                                  find_disassembler(job.nvcc if job else None))
                         if result is not None and result.ok else None)
        return known[0]
    return facts


def _similar(groups: dict[str, list[StoredResult]], project: ProjectStores, context: Context,
             goal: Goal,
             space: SearchSpace, say: Callable[[str], None],
             mine: Callable[[], Facts | None]) -> list[WarmStart]:
    """The groups of other units of the ACF measured as this search measures, whose searches are
    alike: largely the same knobs and values, and the same source parameters or alike kernels."""
    found, unlike, foreign = [], {}, 0
    for group in groups.values():
        other = group[0].context
        if other.unit == context.unit or (other.backend, other.arch, other.device) != \
                (context.backend, context.arch, context.device):
            continue
        if other.unit not in project.units:
            foreign += len(group)
            continue
        why = unlike_knobs(space, [r.genome for r in group])
        evidence = unlike_parameters(space, group[0].genome) if not why else why
        if evidence and not why:           # no source parameters alike: their kernels, where both
                                           # are known
            theirs = project.kernels_of(other.unit, other.arch)
            facts = mine() if theirs is not None else None
            kernels = "their kernels not compared"
            if facts is not None and theirs is not None:
                kernels = unlike_kernels(facts, theirs)
            why = f"{evidence}; {kernels}" if kernels else ""
        if why:
            unlike[other.unit] = why
        else:
            words = alike_words(space, group[0].genome,
                                "same source parameters" if not evidence else "alike kernels")
            found.append(WarmStart(f"{other.unit} ({words})", _mapped(group, goal, space)))
    if foreign:
        say(f"{foreign} evaluations of units this ACF does not have left aside (another project's "
            "results)")
    if unlike:
        said = "; ".join(f"{u} ({w})" for u, w in unlike.items())
        say(f"not started from units unlike this one: {said}")
    return found


def _parameters(names: Iterable[str]) -> set[str]:
    return {name for name in names if name.startswith(DEFINE_PREFIX)}


def unlike_search(space: SearchSpace, genomes: list[Genome]) -> str:
    """Why the search that measured `genomes` is unlike this space's by its knobs and source
    parameters ("" where it is alike)."""
    return unlike_knobs(space, genomes) or unlike_parameters(space, genomes[0])


def unlike_knobs(space: SearchSpace, genomes: list[Genome]) -> str:
    """Why the search that measured `genomes` is unlike this space's ("" where it is alike): the
    knobs the two name, its values against this space's domains."""
    mine = {d.knob for d in space.dimensions}
    theirs = {knob for genome in genomes[:1] for knob, _ in genome.items}
    shared = mine & theirs
    if len(shared) < KNOBS_ALIKE * len(mine | theirs):
        return f"{len(shared)} of {len(mine | theirs)} knobs shared"
    choices = {d.knob: d.choices for d in space.dimensions}
    values = [(knob, value) for genome in genomes for knob, value in genome.items if knob in shared]
    inside = sum(value in choices[knob] for knob, value in values)
    if inside < DOMAINS_ALIKE * len(values):
        return f"{len(values) - inside} of {len(values)} values outside this search's domains"
    return ""


def unlike_parameters(space: SearchSpace, genome: Genome) -> str:
    """Why the source parameters of the search that measured `genome` say nothing of its kernels
    being like this unit's ("" where they do: most of the fewer shared, one at least)."""
    mine = _parameters(d.knob for d in space.dimensions)
    theirs = _parameters(knob for knob, _ in genome.items)
    shared, fewer = mine & theirs, min(len(mine), len(theirs))
    if not fewer:
        return "no source parameter searched by both"
    return "" if shared and len(shared) >= PARAMETERS_ALIKE * fewer else \
        f"{len(shared)} of {fewer} source parameters shared"


def unlike_kernels(mine: Facts, theirs: Facts) -> str:
    """Why two builds' kernels are unlike ("" where they are alike): as many kernels, paired by
    size, each pair's registers, instructions and static shared memory within KERNEL_RATIOS, their
    instruction mixes (the classes a reader compares) at least MIX_ALIKE alike (cosine) where both
    are known."""
    if len(mine) != len(theirs) or not mine:
        return f"{len(theirs)} kernel(s) against {len(mine)}"
    for a, b in zip(sorted(mine, key=_size), sorted(theirs, key=_size)):
        for what, ratio in KERNEL_RATIOS.items():
            x, y = getattr(a, what), getattr(b, what)
            if max(x, y) > ratio * max(min(x, y), 1 if what != "shared" else 1024):
                return f"kernels unlike: {what} {y} against {x}"
        if a.mix and b.mix:
            u, v = np.array(list(a.classes().values()), float), np.array(list(b.classes().values()),
                                                                         float)
            cosine = float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v) or 1.0))
            if cosine < MIX_ALIKE:
                return f"kernels unlike: instruction mixes {cosine:.2f} alike"
    return ""


def _size(kernel: KernelFacts) -> tuple[int, int]:
    return kernel.instructions, kernel.registers


def alike_words(space: SearchSpace, genome: Genome, evidence: str) -> str:
    mine, theirs = {d.knob for d in space.dimensions}, {knob for knob, _ in genome.items}
    knobs = "same knobs"
    if mine != theirs:
        knobs = f"{len(mine & theirs)} of {len(mine | theirs)} knobs shared"
    return f"{knobs}, {evidence}"


def _mapped(group: list[StoredResult], goal: Goal, space: SearchSpace) -> tuple[Evaluation, ...]:
    """The group's evaluations in this space (values outside its domains dropped), one per genome
    (the best of those that map to it), scored by this search's goal against the group's first
    record."""
    first = group[0].measurement
    baseline = dict(first.metrics) if first.ok else {}
    best: dict[Genome, Evaluation] = {}
    for record in group:
        measurement, genome = record.measurement, space.genome(dict(record.genome.items))
        if not measurement.ok:
            evaluation = Evaluation(genome, tuple(math.inf for _ in goal.minimize), math.inf,
                                    measurement.status)
        else:
            metrics = dict(measurement.metrics)
            if not all(m in metrics for m in goal.minimize):
                continue                        # measured for another goal: nothing to rank it by
            evaluation = Evaluation(genome, goal.scores(metrics), goal.violation(metrics, baseline))
        kept = best.get(genome)
        if kept is None or _order(evaluation) < _order(kept):
            best[genome] = evaluation
    return tuple(best.values())


def _order(evaluation: Evaluation) -> tuple:
    return (not evaluation.feasible, evaluation.violation, evaluation.objectives)
