"""Correctness of a candidate's outputs: each checked output against a
reference, within the bench spec's tolerances; NaN (and so an element the
kernel never wrote, poisoned before the launch) never passes.

Used in the measuring process (so outputs never cross the pipe) and by the
confirmation on fresh inputs. Numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from nvcc_evo.acf.bench.spec import BenchPlan
from nvcc_evo.measure import Wrong

CHUNK = 1 << 20          # elements compared at a time: temporaries that stay in cache


@dataclass(frozen=True)
class Mismatch:
    """What is wrong with one checked output, as a fact; `str` says it for people."""

    kind: Wrong
    output: str = ""
    elements: int = 0                 # how many elements are wrong
    rtol: float = 0.0                 # the tolerances missed (Wrong.OUTSIDE)
    atol: float = 0.0
    worst: float = 0.0                # the worst relative error (Wrong.OUTSIDE)

    def __str__(self) -> str:
        if self.kind == Wrong.UNWRITTEN:
            return f"{self.output}: {self.elements} NaN or unwritten elements"
        if self.kind == Wrong.UNEQUAL:
            return f"{self.output}: {self.elements} elements differ (exact check)"
        if self.kind == Wrong.OUTSIDE:
            return (f"{self.output}: {self.elements} elements outside rtol {self.rtol} atol "
                    f"{self.atol} (worst relative error {self.worst:.3g})")
        return "no reference here"


def as_float(values: np.ndarray, plan: BenchPlan, name: str) -> np.ndarray:
    """An array's values as float64 (bf16 is stored as its upper 16 bits; a
    reference already made float64 is taken as it is)."""
    dtype = next(a.dtype for a in plan.arrays if a.name == name)
    if dtype == "bf16" and values.dtype != np.float64:
        return (values.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return values.astype(np.float64, copy=False)


def as_reference(outputs: dict, plan: BenchPlan) -> dict:
    """Checked outputs as float64, once, to compare many candidates with."""
    return {c.name: as_float(np.asarray(outputs[c.name]), plan, c.name) for c in plan.checks}


class OutputsAsked(Protocol):
    """What a request asks of a run's outputs (pycuda.pipe.RunRequest, which imports this
    module): its plan, the key they are kept under, the reference they are compared with and one
    handed over first, and whether they are sent back."""

    @property
    def plan(self) -> BenchPlan: ...
    @property
    def keep(self) -> str: ...
    @property
    def compare(self) -> str: ...
    @property
    def reference(self) -> tuple[str, dict] | None: ...
    @property
    def outputs(self) -> bool: ...


def take_reference(request: OutputsAsked, references: dict) -> None:
    """A reference a request (pycuda.pipe.RunRequest) hands the measuring process, kept by its key
    (before the candidate runs, so that it is kept whatever the candidate does)."""
    if request.reference:
        key, given = request.reference
        references[key] = as_reference(given, request.plan)


def checked(request: OutputsAsked, outputs: dict, references: dict) -> dict:
    """The measuring process's answer about a run's outputs (the fields of
    its pycuda.pipe.Answer, by name): kept as a reference (`keep`), compared
    with one (`compare`: "wrong" is None or a Mismatch), sent back (`outputs`)."""
    plan = request.plan
    if request.keep:
        references[request.keep] = as_reference(outputs, plan)
    answer: dict[str, dict | Mismatch | None] = {"outputs": outputs} if request.outputs else {}
    if request.compare:
        reference = references.get(request.compare)
        if reference is None:
            answer["wrong"] = Mismatch(Wrong.UNCHECKED)
        else:
            answer["wrong"] = outputs_match(outputs, reference, plan)
    return answer


def outputs_match(got: dict, reference: dict, plan: BenchPlan) -> Mismatch | None:
    """None when every checked output is within tolerance, else what is wrong with the first
    that is not."""
    for check in plan.checks:
        out = as_float(got[check.name], plan, check.name)
        ref = as_float(reference[check.name], plan, check.name)
        if check.exact:
            if not np.array_equal(out, ref):
                nan = int(np.isnan(out).sum())
                return Mismatch(Wrong.UNWRITTEN, check.name, nan) if nan else \
                    Mismatch(Wrong.UNEQUAL, check.name, int((out != ref).sum()))
            continue
        if _outside(out, ref, check.rtol, check.atol):
            nan = int(np.isnan(out).sum())
            if nan:
                return Mismatch(Wrong.UNWRITTEN, check.name, nan)
            bad = np.abs(out - ref) > check.atol + check.rtol * np.abs(ref)
            worst = float(np.max(np.abs(out - ref) / (np.abs(ref) + check.atol + 1e-30)))
            return Mismatch(Wrong.OUTSIDE, check.name, int(bad.sum()), check.rtol, check.atol,
                            worst)
    return None


def _outside(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether any element is outside |out - ref| <= atol + rtol |ref| (NaN is),
    a chunk at a time into reused buffers (the common case: all inside)."""
    gap, limit = np.empty(min(CHUNK, out.size)), np.empty(min(CHUNK, out.size))
    for start in range(0, out.size, CHUNK):
        o, r = out[start:start + CHUNK], ref[start:start + CHUNK]
        g, lim = gap[:o.size], limit[:o.size]
        np.subtract(o, r, out=g)
        np.abs(g, out=g)
        np.abs(r, out=lim)
        lim *= rtol
        lim += atol
        if not np.less_equal(g, lim, out=np.empty(o.size, bool)).all():
            return True
    return False
