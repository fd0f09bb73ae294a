"""What a candidate's outputs are checked against, and where that reference
is: the bench's numpy reference (`reference "file.py:function"`) computed
once on the plan's inputs, started in a thread as soon as the baseline's
defines are known (seconds of numpy on a large bench, which the unit's time
would otherwise wait for, and which is never computed while the GPU is
held); else the baseline's own outputs, kept by the measuring process on
the first run. A measuring process is sent each reference once; a fresh one
(after a candidate broke the last) is sent it again."""
from __future__ import annotations

import threading
from typing import Callable

from nvcc_evo.acf import model
from nvcc_evo.acf.bench.spec import BenchPlan, ExprError, ScalarPlan, plan_bench
from nvcc_evo.measure.check import as_float
from nvcc_evo.measure.pycuda.data import host_array


def reference_outputs(reference: Callable, plan: BenchPlan, seed: int = 0) -> dict:
    """A numpy reference called with the plan's inputs (as float64), scalars,
    sizes and defines, by name."""
    inputs: dict[str, object] = dict(plan.sizes)
    inputs.update({a.name: as_float(host_array(a, seed), plan, a.name)
                   for a in plan.arrays if a.init != "output"})
    inputs.update({s.name: s.value for s in plan.args if isinstance(s, ScalarPlan)})
    return reference(**inputs)


class References:
    """One unit's references (`owner`: the prefix of their keys in a measuring process, which other
    benches' references share): the numpy reference's outputs (`expected_fn`: the bench's function,
    None where it names none) or the baseline's (`baseline`, kept on its first run)."""

    def __init__(self, owner: str, expected_fn: Callable | None = None,
                 baseline: dict | None = None):
        self.owner, self.expected_fn, self.baseline = owner, expected_fn, baseline
        self.expected: dict | None = None
        self.computing: threading.Thread | None = None       # the numpy reference, started early
        # (the measuring process, by pool.replaced; the keys it holds)
        self.sent: tuple[int, set[str]] = (-1, set())

    def prefetch(self, bench: model.Bench, defines: dict) -> None:
        """Start the numpy reference for the bench at `defines` (the baseline's)
        in a thread: it is ready, or nearer, once the baseline is built. A bench
        those defines cannot plan starts nothing: the baseline's measurement says why."""
        if self.expected_fn is None or self.expected is not None or self.computing is not None:
            return
        try:
            plan = plan_bench(bench, defines)
        except ExprError:
            return
        self.computing = threading.Thread(target=self._compute, args=(plan,), daemon=True)
        self.computing.start()

    def _compute(self, plan: BenchPlan) -> None:
        try:
            self.expected_outputs(plan)
        except Exception:               # said where the reference is needed: computed again there
            pass

    def expected_outputs(self, plan: BenchPlan) -> dict:
        """The numpy reference's outputs for the plan's inputs (seed 0), computed once."""
        if self.computing is not None and self.computing is not threading.current_thread():
            self.computing.join()
        if self.expected is None:
            assert self.expected_fn is not None  # (asked only of a bench that names a reference)
            self.expected = reference_outputs(self.expected_fn, plan)
        return self.expected

    def comparison(self, plan: BenchPlan, first: bool, process: int) -> dict:
        """What the measuring process (`process`: which one, by pool.replaced) compares the outputs
        with (RunRequest's fields, by name): the numpy reference's outputs, else the baseline's
        (this run's, when it is the baseline); sent to it once per measuring process."""
        if process != self.sent[0]:
            self.sent = (process, set())          # a new measuring process holds nothing yet
        given: dict | None
        if self.expected_fn is not None:
            key, given = self.owner + "expected", self.expected_outputs(plan)
        elif first:
            self.sent[1].add(self.owner + "baseline")
            return {"keep": self.owner + "baseline"}
        else:
            key, given = self.owner + "baseline", self.baseline
        asked: dict[str, object] = {"compare": key}
        if key not in self.sent[1]:
            asked["reference"] = (key, given)
            self.sent[1].add(key)
        return asked
