"""benchmarks/sample_efficiency.py's logic (issue 40's H200 proof), without a GPU: the runs' order, their
time caps (the call ends within its wall), the count to within 1% of the reference's best, the table, and
speedups read from a real results store (raced and failed candidates count 0)."""
from __future__ import annotations

import sys

from conftest import ROOT
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.store import Context, Store, StoredResult
from nvcc_evo.measure import Measurement
from nvcc_evo.status import Status

sys.path.insert(0, str(ROOT / "benchmarks"))
import sample_efficiency as se  # noqa: E402  (the benchmark's own functions)


def test_the_reference_runs_first_then_old_and_new_in_turns():
    assert se.plan_of([0, 1, 2], 30) == [("new", 100, 90), ("old", 0, 30), ("new", 0, 30), ("new", 1, 30),
                                         ("old", 1, 30), ("old", 2, 30), ("new", 2, 30)]
    assert se.engines("operators", None) == ("operators", "bayes", "new: bayes (the default)")
    assert se.engines("bayes", None)[:2] == ("bayes", "guided")             # the default is the old engine
    assert se.engines("operators", "guided")[2] == "new: guided (named)"


def test_each_run_is_capped_so_the_runs_after_it_still_fit():
    assert se.time_cap(400.0, None, 90, 6) == 400                   # the reference: what is left
    assert se.time_cap(300.0, 1.0, 30, 5) == 90                     # three times its expected 30 s
    assert se.time_cap(200.0, 1.0, 30, 5) == 50                     # less what the five after it take
    assert se.time_cap(150.0, 1.0, 30, 5) is None                   # under half its expected time: skipped
    # the caps of a call that goes as expected never pass its wall
    left, plan = 420.0, se.plan_of([0, 1, 2], 30)
    per = 100.0 / 91
    left -= 100.0
    for index in range(1, len(plan)):
        cap = se.time_cap(left, per, 30, len(plan) - index - 1)
        assert cap is not None and cap >= per * 30
        left -= min(cap, per * 30 * 1.5)                            # each run half again slower than expected
    assert left >= 0


def test_counts_to_within_one_percent_of_the_references_best_and_the_table():
    assert se.to_best([1.0, 1.2, 1.49, 1.3], 1.5) == 3 and se.to_best([1.0, 1.2], 1.5) is None
    result = {"unit": "softmax.cu", "backend": "pycuda", "target": "sm_90", "old": "operators", "new": "guided",
              "note": "new: guided (named)", "evaluations": 3, "metric": "runtime", "within": 0.01, "runs": [
                  {"engine": "new", "search": "guided", "seed": 100, "evaluations": 9, "wall": 30.0,
                   "speedups": [1.1, 1.5, 1.2]},
                  {"engine": "old", "search": "operators", "seed": 0, "evaluations": 3, "wall": 10.0,
                   "speedups": [1.0, 1.2, 1.3]},
                  {"engine": "new", "search": "guided", "seed": 0, "evaluations": 3, "wall": 10.0,
                   "speedups": [1.49, 1.0, 1.0]},
                  {"engine": "new", "seed": 1, "evaluations": 3, "skipped": True}]}
    text = se.table(result)
    assert "| old (operators) | 0 | >3 | 1.300x | 3 | 10 |" in text
    assert "| new (guided) | 0 | 1 | 1.490x | 3 | 10 |" in text and "| new | 1 | skipped (out of time) |" in text
    assert "- old: reached in 0 of 1 runs, mean 4.0 measurements" in text
    assert "- new: reached in 1 of 1 runs, mean 1.0 measurements" in text


def test_speedups_are_read_in_the_order_measured_from_a_results_store(tmp_path):
    context = Context("13.0", "fp", "sm_90", "NVIDIA H200", "pycuda", '"softmax.cu"', "b")
    store = Store(tmp_path / "results.jsonl")
    for runtime, status, raced in ((100.0, Status.OK, False), (50.0, Status.OK, False), (40.0, Status.OK, True),
                                   (0.0, Status.WRONG_ANSWER, False), (80.0, Status.OK, False)):
        measurement = Measurement(status, (("runtime", runtime),) if runtime else (), raced=raced)
        store.append(StoredResult(Genome((("define.BLOCK", runtime),)), (), measurement, "", context))
    assert se.speedups(tmp_path / "results.jsonl", "runtime") == [2.0, 0.0, 0.0, 1.25]
