"""What a search has measured (execute.measured.Measured): written only
through its methods, read through read-only views; a binary measured once
stands in for every candidate with the same SASS; relative conditions are
read against the baseline once it is known; failures are counted per status."""
from __future__ import annotations

import pytest

from nvcc_evo.acf.model import Condition
from nvcc_evo.cubin.compile import SharedOverflow
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.goal import Goal
from nvcc_evo.execute.measured import Measured
from nvcc_evo.execute.store import Context, StoredResult
from nvcc_evo.measure import Measurement, failed
from nvcc_evo.status import Status

CONTEXT = Context("13.0", "f", "sm_90", "cpu", "static", "a.cu", "b")
A, B, C = (Genome((("ptxas.maxrregcount", cap),)) for cap in (None, 64, 128))


def test_a_binary_measured_once_is_reused_counted_and_forgotten_with_its_genome():
    measured = Measured(Goal(("runtime",)), CONTEXT)
    first = Measurement(Status.OK, (("runtime", 2.0),))
    measured.remember_binary("hash-a", first)
    measured.record(A, first, "hash-a")
    again = measured.reused("hash-a", (("compile", 0.5),))
    assert again is not None and again.reused and again.costs == (("compile", 0.5),) and again.metrics == first.metrics
    assert measured.tally.reused == 1 and measured.reused("", ()) is None
    measured.forget(A)
    assert A not in measured and measured.reused("hash-a", ()) is None and measured.digest(A) == ""


def test_what_was_measured_is_read_through_views_that_cannot_be_written():
    measured = Measured(Goal(("runtime",)), CONTEXT)
    measured.record(A, Measurement(Status.OK, (("runtime", 2.0),)), "h")
    measured.set_baseline({"runtime": 2.0})
    for view, key, value in ((measured.measurements, B, None), (measured.baseline, "runtime", 1.0),
                             (measured.digests, B, "x")):
        with pytest.raises(TypeError):
            view[key] = value              # type: ignore[index]
    assert dict(measured.measurements) == {A: measured[A]} and dict(measured.baseline) == {"runtime": 2.0}


def test_a_relative_condition_is_read_against_the_baseline_once_it_is_known():
    goal = Goal(("runtime",), require=(Condition("registers", "<=", 1.0, relative=True),))
    measured = Measured(goal, CONTEXT)
    measured.resume([StoredResult(B, (), Measurement(Status.OK, (("runtime", 1.0), ("registers", 40.0))), "h", CONTEXT)])
    assert measured.evaluations(_space_of(A, B))[0].feasible     # no baseline yet: an unbounded bound holds
    measured.set_baseline({"registers": 32.0})
    assert measured.evaluation(B, measured[B]).violation == 8.0
    measured.set_baseline({"registers": 48.0})
    assert measured.evaluation(B, measured[B]).feasible and measured.tally.resumed == 1


def test_failures_are_counted_per_status_most_frequent_first_with_the_first_words():
    measured = Measured(Goal(("runtime",)), CONTEXT)
    measured.record(A, failed(Status.TIMEOUT, "ran past 10 s"), "")
    measured.record(B, failed(Status.COMPILE_ERROR, "note\nptxas error : too many registers\nmore"), "")
    measured.record(C, failed(Status.COMPILE_ERROR, "ptxas error : other"), "")
    assert measured.tally.failed == 3
    assert [(status, seen.count) for status, seen in measured.tally.most_failures()] == \
        [(Status.COMPILE_ERROR, 2), (Status.TIMEOUT, 1)]
    assert measured.tally.failures_text() == \
        'compile-error 2 (e.g. "ptxas error : too many registers"); timeout 1 (e.g. "ran past 10 s")'
    refused = Genome((("ptxas.maxrregcount", 32),))
    measured.refuse(refused, failed(Status.COMPILE_ERROR, "ptxas error : too much shared data",
                                    overflow=SharedOverflow(65536, 49152)))
    assert measured.overflow(refused) == SharedOverflow(65536, 49152) and refused not in measured   # not measured
    assert measured.known(A).detail == "ran past 10 s" and measured.refusal(A) is None and measured.overflow(A) is None


def _space_of(*genomes: Genome):
    class Space:
        def __contains__(self, genome: object) -> bool:
            return genome in genomes

        def baseline(self) -> Genome:
            return genomes[0]
    return Space()
