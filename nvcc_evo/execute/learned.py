"""What failed, learned: launches the driver refused are not proposed again.

A kernel bench's candidate whose launch the driver would refuse comes back
`launch-refused` after its compile, with why as a fact (the measurement's
`refusal`, cubin.occupancy.LaunchRefusal). Each such refusal teaches a constraint over the unit's
defines, and the engine (engine.evolve, its `avoid`) never proposes a genome known to
break it, so a user who writes no `require` pays for a kind of failure once,
not for every candidate of it:

- too many threads in a block, or in one dimension of it: the block depends
  only on the defines its expressions name, so every genome whose block
  (evaluated with the bench's expressions) is at least as large there is
  refused too;
- too much shared memory: the static part is fixed by the source's defines
  and the dynamic part by the bench's expression, so a genome with the same
  defines is refused too (with no static part, any whose dynamic part is as
  large);
- too many registers for the block: a genome with the same defines whose
  register cap (if any) still lets ptxas use as many registers per thread.

A compile that ptxas refuses for its static shared memory ("uses too much
shared data") teaches the same way (any backend: it fails before a launch).
The static size is fixed by the defines (ptxas's knobs do not change the
arrays the source declares), so a genome with the same defines and the same
other compiler knobs fails too; and, as tiles and stages grow the arrays, so
does one whose every numeric define is at least as large (a define the ACF
declares `unordered` names a choice, not a size: it must be the same). That second rule
is an assumption, checked against what compiled: once a genome that compiled
is at least as large as a refused one everywhere, only the first rule is
kept, and that is said.

A wrong output teaches too (any backend that checks outputs): the defines
decide what the source computes, and of the compiler's knobs only those that
may change results (the knob table's `numeric`: -O, fmad, another ptxas, a
controls file, the approximations) can turn a wrong output right; so a
genome with the same defines and the same such knobs is wrong too. Where the
output had NaN or unwritten elements and no approximating knob was on
(knobs.APPROXIMATING: fast math, ftz, approximate division or square root),
rounding cannot be the cause (a tile that does not cover its row, say): no
genome with those defines and none of them on is proposed either, nor, as
smaller tiles cover less, one whose every numeric define is at most as large:
an assumption checked as SharedData's is (a genome as small whose output was
right ends it, and that is said).

Known before any compile, and avoided the same way: a genome whose knobs
the user's build would not all take (retune.scope.reach.not_shipped: a controls
file under a ptxas that refuses it, say) is never proposed, instead of
spending an evaluation on a `not-shipped` failure.

The avoided genomes are counted (the progress line, the end report).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, NamedTuple

from nvcc_evo.acf import knobs
from nvcc_evo.acf.bench.spec import ExprError, plan_bench
from nvcc_evo.acf.model import Bench
from nvcc_evo.acf.sources import define_values
from nvcc_evo.engine.evolve import Engine, Evaluation
from nvcc_evo.engine.space import Genome, SearchSpace, baseline_defines
from nvcc_evo.execute.measured import Measured
from nvcc_evo.cubin.occupancy import AXES, LaunchRefusal
from nvcc_evo.cubin.compile import SharedOverflow
from nvcc_evo.measure import Wrong
from nvcc_evo.status import BUILT, Status

REFUSED = Status.LAUNCH_REFUSED
REGISTER_CAPS = ("ptxas.maxrregcount", "nvcc.maxrregcount")


class LaunchShape(NamedTuple):
    threads: int
    block: tuple[int, int, int]
    shared: int                 # dynamic bytes


class LaunchLimits:
    """The launch constraints learned from refused launches of one unit's bench."""

    def __init__(self, bench: Bench, defines_for: Callable[[Genome], dict],
                 refusal_of: Callable[[Genome], LaunchRefusal | None]):
        self.bench, self.defines_for, self.refusal_of = bench, defines_for, refusal_of
        self.threads = math.inf                    # a block of this many threads or more is refused
        self.axes = [math.inf, math.inf, math.inf]  # a block this long in x, y, z or more is
                                                    # refused
        self.dynamic = math.inf                    # this much dynamic shared memory or more (no
                                                   # static part)
        self.same_defines: set[tuple] = set()      # defines whose launch is refused (shared memory)
        self.registers: dict[tuple, int] = {}      # defines -> registers per thread that were too
                                                   # many
        self.said: list[str] = []                  # what was learned, in words

    def launch(self, genome: Genome) -> LaunchShape | None:
        try:
            plan = plan_bench(self.bench, self.defines_for(genome))
        except (ExprError, ValueError, ZeroDivisionError):
            return None
        block = plan.block
        return LaunchShape(block[0] * block[1] * block[2], block, plan.shared)

    def learn(self, evaluation: Evaluation) -> None:
        """Told every evaluation; a refused launch's reason becomes a constraint."""
        refusal = self.refusal_of(evaluation.genome) if evaluation.status == REFUSED else None
        if refusal is None:
            return
        genome = evaluation.genome
        if refusal.limit == "threads" and refusal.threads < self.threads:
            self.threads = refusal.threads
            self.said.append(f"blocks of {self.threads} threads or more")
        elif refusal.limit in AXES:
            axis = AXES.index(refusal.limit)
            size = refusal.block[axis]
            if size < self.axes[axis]:
                self.axes[axis] = size
                self.said.append(f"blocks of {size} threads or more in {refusal.limit}")
        elif refusal.limit == "registers":
            self.registers[_defines_of(genome)] = refusal.registers
            self.said.append(f"{refusal.registers} registers per thread at {refusal.threads} "
                             f"threads ({_shown(genome)})")
        elif refusal.limit == "shared":
            if refusal.static == 0 and refusal.dynamic < self.dynamic:
                self.dynamic = refusal.dynamic
            self.same_defines.add(_defines_of(genome))
            self.said.append(f"{refusal.static + refusal.dynamic} bytes of shared memory per block "
                             f"({_shown(genome)})")

    def forbids(self, genome: Genome) -> bool:
        """Known to be refused: it breaks a learned constraint."""
        defines = _defines_of(genome)
        if defines in self.same_defines:
            return True
        if defines in self.registers and _register_cap(genome) >= self.registers[defines]:
            return True
        unbounded = self.threads == math.inf and self.dynamic == math.inf
        if unbounded and all(a == math.inf for a in self.axes):
            return False
        launch = self.launch(genome)
        if launch is None:
            return False
        return (launch.threads >= self.threads or launch.shared >= self.dynamic
                or any(size >= most for size, most in zip(launch.block, self.axes)))


class SharedData:
    """Static shared memory over ptxas's limit, learned from refused compiles of one unit (see the
    module's words); `overflow_of` says what a genome's compile was refused for (cubin.compile's
    fact)."""

    def __init__(self, defines_for: Callable[[Genome], dict],
                 overflow_of: Callable[[Genome], SharedOverflow | None],
                 unordered: frozenset[str] = frozenset()):
        self.defines_for, self.overflow_of = defines_for, overflow_of
        self.unordered = unordered                    # defines compared for equality alone
        self.refused: list[tuple[tuple, dict]] = []   # (other knobs, defines) of the genomes ptxas
                                                      # refused
        self.built: list[tuple[tuple, dict]] = []     # the same, of genomes that compiled
        self.growing = True                           # more of every define never needs less shared
                                                      # memory
        self.said: list[str] = []

    def _key(self, genome: Genome) -> tuple[tuple, dict]:
        others = tuple((k, v) for k, v in genome.items if not knobs.is_define(k) and
                       not k.startswith("ptxas."))
        return others, self.defines_for(genome)

    def learn(self, evaluation: Evaluation) -> None:
        key = self._key(evaluation.genome)
        if evaluation.status in BUILT:
            self.built.append(key)
            contradicted = self.growing and any(_covers(key, r, self.unordered)
                                                for r in self.refused)
        elif (evaluation.status == Status.COMPILE_ERROR
              and (found := self.overflow_of(evaluation.genome))):
            if key in self.refused:
                return  # (learned before its batch was told: engine.evolve's overlap)
            self.refused.append(key)
            if not self.said:
                self.said.append(f"e.g. {found.used} bytes with {_shown(evaluation.genome)}, "
                                 f"ptxas's limit {found.most}")
            contradicted = self.growing and any(_covers(b, key, self.unordered)
                                                for b in self.built)
        else:
            return
        if contradicted:
            self.growing = False
            self.said.append("only the same defines avoided: a genome with defines as large "
                             "compiled")

    def forbids(self, genome: Genome) -> bool:
        if not self.refused:
            return False
        key = self._key(genome)
        return any(key == r or (self.growing and _covers(key, r, self.unordered))
                   for r in self.refused)


WRONG = Status.WRONG_ANSWER


class WrongAnswers:
    """Defines whose output was wrong, learned from one unit's checks (see the module's words);
    `wrong_of` says what a genome's check found (the measurement's `wrong`; None where it did not
    say)."""

    def __init__(self, defines_for: Callable[[Genome], dict],
                 wrong_of: Callable[[Genome], Wrong | None],
                 unordered: frozenset[str] = frozenset()):
        self.defines_for, self.wrong_of = defines_for, wrong_of
        self.unordered = unordered                # defines compared for equality alone
        self.wrong: set[tuple] = set()        # (defines, knobs that may change results) of wrong
                                              # outputs
        self.broken: list[dict] = []          # defines wrong whatever the rounding (NaN or
                                              # unwritten, exact math)
        self.right: list[dict] = []           # defines whose output was right (exact math)
        self.shrinking = True                 # less of every define never covers more of the output
        self.said: list[str] = []

    def learn(self, evaluation: Evaluation) -> None:
        genome = evaluation.genome
        if not _exact(genome) or evaluation.status not in (Status.OK, WRONG):
            return
        defines = self.defines_for(genome)
        if evaluation.status == Status.OK:
            self.right.append(defines)
            contradicted = self.shrinking and any(_at_most(defines, b, self.unordered)
                                                  for b in self.broken)
        else:
            self.wrong.add(_results_key(genome))
            if self.wrong_of(genome) != Wrong.UNWRITTEN or defines in self.broken:
                return
            self.broken.append(defines)
            if not self.said:
                self.said.append(f"e.g. {_shown(genome)}: NaN or unwritten elements")
            contradicted = self.shrinking and any(_at_most(r, defines, self.unordered)
                                                  for r in self.right)
        if contradicted:
            self.shrinking = False
            self.said.append("only the same defines avoided: a genome with defines as small "
                             "was right")

    def forbids(self, genome: Genome) -> bool:
        if _results_key(genome) in self.wrong:
            return True
        if not self.broken or not _exact(genome):
            return False
        defines = self.defines_for(genome)
        return any(defines == b or (self.shrinking and _at_most(defines, b, self.unordered))
                   for b in self.broken)


def _at_most(defines: dict, than: dict, unordered: frozenset[str]) -> bool:
    """Every numeric define of `defines` at most `than`'s (any other value, and the `unordered`
    defines, equal)."""
    return _covers(((), than), ((), defines), unordered)


def _results_key(genome: Genome) -> tuple:
    """The defines and the knobs that may change what a build computes."""
    return tuple((k, v) for k, v in genome.items
                 if knobs.is_define(k) or ((knob := knobs.lookup(k)) is not None and
                                           (knob.numeric or knob.hazard)))


def _exact(genome: Genome) -> bool:
    """No approximating knob on: IEEE arithmetic, as the toolkit's defaults."""
    return all(v is None or v == knobs.KNOB_BY_NAME[k].default
               for k, v in genome.items if k in knobs.APPROXIMATING)


def _covers(key: tuple[tuple, dict], refused: tuple[tuple, dict],
            unordered: frozenset[str]) -> bool:
    """`key`'s defines are at least `refused`'s everywhere (numbers; any other value, and the
    `unordered` defines, equal), its other knobs the same."""
    (others, defines), (refused_others, refused_defines) = key, refused
    if others != refused_others or defines.keys() != refused_defines.keys():
        return False
    for name, value in defines.items():
        least = refused_defines[name]
        numbers = name not in unordered and all(isinstance(v, (int, float)) and
                                                not isinstance(v, bool) for v in (value, least))
        if not (value >= least if numbers else value == least):
            return False
    return True


def _defines_of(genome: Genome) -> tuple:
    return tuple((k, v) for k, v in genome.items if knobs.is_define(k))


def _register_cap(genome: Genome) -> float:
    caps = [float(v) for k, v in genome.items if k in REGISTER_CAPS and v is not None]
    return min(caps) if caps else math.inf


def _shown(genome: Genome) -> str:
    return " ".join(f"{k[len(knobs.DEFINE_PREFIX):]}={v}"
                    for k, v in _defines_of(genome)) or "the defaults"


class Avoiding:
    """Every rule a proposal must pass: the build takes all of its knobs
    (`lost(genome)` says why not, "" when it does) and nothing learned of
    refused launches or compiles refuses it."""

    def __init__(self, lost: Callable[[Genome], str], limits: LaunchLimits | None,
                 shared: SharedData | None = None, wrong: WrongAnswers | None = None):
        self.lost, self.limits, self.shared, self.wrong = lost, limits, shared, wrong
        self.reasons: dict[Genome, str] = {}       # genome -> why the build would drop a knob of it
                                                   # ("": none)

    @property
    def learners(self) -> tuple:
        return tuple(learner for learner in (self.limits, self.shared, self.wrong)
                     if learner is not None)

    def learn(self, evaluation: Evaluation) -> None:
        for learner in self.learners:
            learner.learn(evaluation)

    def forbids(self, genome: Genome) -> bool:
        if genome not in self.reasons:
            self.reasons[genome] = self.lost(genome)
        if self.reasons[genome]:
            return True
        return any(learner.forbids(genome) for learner in self.learners)

    @property
    def unshipped(self) -> list[str]:
        """Why proposals were avoided as the build would drop a knob, one line per genome."""
        return [why for why in self.reasons.values() if why]


def limits_for(bench: Bench | None, source: Path, space: SearchSpace,
               measured: Measured) -> LaunchLimits | None:
    """The learner of a unit with a kernel bench (the backends that launch
    it say `launch-refused`); None for a bench command or no bench."""
    if bench is None or bench.kernel is None:
        return None
    return LaunchLimits(bench, _defines_for(source, space), measured.refusal)


def shared_for(source: Path, space: SearchSpace, measured: Measured) -> SharedData:
    """The learner of refused compiles (every backend compiles): a compile's `overflow` fact,
    measured or refused before its batch was measured (Measured.refuse)."""
    return SharedData(_defines_for(source, space), measured.overflow, _unordered(space))


def wrong_for(source: Path, space: SearchSpace, measured: Measured) -> WrongAnswers:
    """The learner of wrong outputs (every backend that checks them)."""
    return WrongAnswers(_defines_for(source, space), measured.wrong, _unordered(space))


def _unordered(space: SearchSpace) -> frozenset[str]:
    """The names of the defines the ACF declares unordered (as `defines_for` names them)."""
    return frozenset(define_values({d.knob: d for d in space.dimensions if d.unordered}))


def _defines_for(source: Path, space: SearchSpace) -> Callable[[Genome], dict]:
    defaults = baseline_defines(source, space)
    return lambda genome: {**defaults, **define_values(genome.settings())}


def said(engine: Engine, avoiding: Avoiding) -> str:
    """The outcome's words on what was learned and avoided (the end report; "" when nothing was)."""
    parts, limits = [], avoiding.limits
    unshipped = [g for g in engine.avoided if avoiding.reasons.get(g)]
    if unshipped:
        parts.append(f"{len(unshipped)} proposal(s) the build would not take whole, never built "
                     f"(e.g. {avoiding.reasons[unshipped[0]]})")
    refused = len(engine.avoided) - len(unshipped)
    taught = []
    if limits is not None and limits.said:
        taught.append(f"launches refused for {'; '.join(dict.fromkeys(limits.said))}")
    shared = avoiding.shared
    if shared is not None and shared.refused:
        taught.append(f"{len(shared.refused)} compile(s) refused for static shared memory "
                      f"({'; '.join(shared.said)})")
    wrong = avoiding.wrong
    if wrong is not None and wrong.wrong:
        said = f" ({'; '.join(wrong.said)})" if wrong.said else ""
        taught.append(f"{len(wrong.wrong)} wrong output(s){said}")
    if taught and refused:
        parts.append(f"{refused} proposal(s) known to fail: " + "; ".join(taught))
    elif taught:
        parts.append("learned from " + "; ".join(taught) + ", though no later proposal was known "
                                                           "to fail")
    return "; ".join(parts)
