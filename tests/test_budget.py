"""Budgets in time (issue 26, point 1): the backend's default budget when
none is given, `--evaluations N` alone as it always was, a time alone with
no cap on evaluations, the time left in the progress line, and a real
static retune given only a time."""
from __future__ import annotations

import math
import re
import time

import pytest

from conftest import DATA, compile_seconds, evo_env, run_evo
from nvcc_evo import backends
from nvcc_evo.driver import settings
from nvcc_evo.engine import budget
from nvcc_evo.retune.scope.options import Request, choose_settings, decide_options, describe
from nvcc_evo.retune.search.progress import ProgressLine
from nvcc_evo.system.clock import Deadline


class Here:
    """Where a retune measures (retune.scope.options.Machine), as a test says: auto is static, no GPU asked."""

    def backend(self, asked: str) -> str:
        return "static" if asked == "auto" else asked

    def gpu_target(self, device: int) -> str:
        raise AssertionError("no GPU target is asked where one is given")


def _decided(backend: str, **given):
    request = Request(backend=backend, target="sm_90", **given)
    return decide_options(request, choose_settings(request, settings.Settings(None, {}, {}, {})), Here())


@pytest.mark.parametrize("backend, seconds, evaluations", [
    ("pycuda", 180.0, math.inf), ("command", 300.0, math.inf), ("static", math.inf, 60), ("replay", math.inf, 60)])
def test_with_no_budget_given_the_backend_decides_it(backend, seconds, evaluations):
    options = _decided(backend)
    assert (options.seconds, options.evaluations) == (seconds, evaluations)
    assert dict(options.sources)["retune.time-limit"] == f"built-in default for the {backend} backend"
    assert options.patience is None                    # no stop rule unless asked for
    said = describe(options)
    assert said.startswith("budget ") and f"built-in default for the {backend} backend" in said
    assert said.endswith(f"backend: {backends.row(backend).budget_why})")      # why, from its row


def test_evaluations_alone_keep_their_meaning_and_a_time_alone_has_no_cap():
    alone = _decided("pycuda", evaluations=36)
    assert (alone.evaluations, alone.seconds) == (36, math.inf)        # as `make tune` always ran
    assert budget.budget_of(alone).evaluations == 36 and budget.budget_of(alone).deadline.search_left() == math.inf
    timed = _decided("static", seconds=20.0)
    assert (timed.evaluations, timed.seconds) == (math.inf, 20.0)
    both = _decided("pycuda", evaluations=50, seconds=90.0)
    assert (both.evaluations, both.seconds) == (50, 90.0)
    assert describe(both) == "budget 90 s or 50 evaluations"
    patient = _decided("pycuda", patience=3)
    assert budget.budget_of(patient).patience == 3 and "stopping after 3 generations" in describe(patient)


def test_the_search_gets_the_time_the_baseline_and_the_confirmation_leave():
    """Bounds from the clock read around each call, so that a test process the machine sets aside
    for a while (a loaded machine) still knows what was left."""
    options = _decided("command", seconds=100.0)
    said = []
    started = time.monotonic()
    deadline = Deadline(started - 10.0, options.seconds, 30.0)     # the baseline took 10 s
    limit = budget.budget_of(options, deadline, said.append)
    left = deadline.search_left()
    waited = time.monotonic() - started
    assert limit.deadline is deadline and 60.0 - waited <= left <= 60.0
    assert said[0] in [f"30 s of the 100 s budget kept for the steps after the search (the backend's "
                       f"confirmation, drift runs, ship check, comparison builds): {seconds} s to search"
                       for seconds in range(math.floor(60.0 - waited), 61)], said
    started = time.monotonic()
    late = Deadline(started - 10.0, options.seconds, 95.0)
    assert budget.budget_of(options, late, said.append).deadline.search_left() == 0.0
    assert "raise --time-limit" in said[-1]
    left = late.left()
    assert 90.0 - (time.monotonic() - started) <= left <= 90.0     # the steps after the search still have the rest


def test_the_progress_line_says_the_time_left():
    line = ProgressLine("u", 3, 20, math.inf, 0, (), 1, (("runtime", 1.0),), (("runtime", 1.2),), 30.0, 20,
                        seconds_left=150.4)
    assert "150 s left" in line.text() and "150 s left" in line.bar_text()
    assert "left" not in ProgressLine("u", 3, 20, 20, 0, (), 1, (), (), 30.0, 20).text()


def test_a_static_retune_given_a_time_alone_ends_at_it_and_says_so(tmp_path, evo_cache):
    """No cap on evaluations: the search runs until its time is up (the space's 660 points (speed-safe:
    no lower -O levels) would take far longer), the time counted from the unit's start (its baseline
    included). The time is set in this machine's compiles of the unit, measured here: the steps after
    the search keep back 3 x 1.2 of the baseline's compile (execute.measurers.STATIC_AFTER_COMPILES)
    and the baseline takes one, so fourteen leave the search about nine: room for a generation even
    where the retune's compiles run twice as slow as the one measured here (a CI run's other tests
    compiling beside it: eight left it 1 s and no generation; a fixed 8 s left it none once a compile
    took over 2 s)."""
    import shutil
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n}\n')
    compiling = compile_seconds(tmp_path / "spill.cu")
    limit = max(14, math.ceil(14 * compiling))
    started = time.monotonic()
    done = run_evo("--retune", "--target", "sm_90", "--backend", "static", "--time-limit", str(limit),
                   "--seed", "1", cwd=tmp_path, env=evo_env(evo_cache))
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert f"space 660 points, 5 knobs; budget {limit} s" in done.stderr
    # its steps after the search (the ship check's and the comparison's builds) kept inside the budget,
    # the rest (less the baseline) given to the search
    kept = re.search(rf"(\d+) s of the {limit} s budget kept for the steps after the search \(.*\): "
                     r"(\d+) s to search\n", done.stderr)
    assert kept and int(kept[1]) > 0 and int(kept[2]) > 0, (compiling, done.stderr)
    assert int(kept[1]) + int(kept[2]) <= limit, done.stderr
    assert " s left" in done.stderr                         # each generation's line
    generations = re.search(r"; (\d+) generations?, ", done.stdout)
    assert generations and int(generations[1]) >= 1, done.stdout
    assert took < limit + 20 * compiling, (took, compiling)       # start-up, probes, a batch compiling
