"""What a retune tells its user: failures where they happen, by status with
an example; each unit's own time; why a chosen point is off the printed
front; values spelled as the ACF spells them."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import DATA, evo_env, run_evo
from nvcc_evo.engine.space import Genome

# A define that breaks the compile for one value: candidates fail with a
# message the user must see.
GUARDED = """#ifndef WIDTH
#define WIDTH 4
#endif
#if WIDTH > 8
#error "WIDTH above 8 is not supported"
#endif
extern "C" __global__ void scale(float* y, const float* x)
{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * WIDTH;
#pragma unroll
    for (int k = 0; k < WIDTH; ++k) y[i + k] = 2.0f * x[i + k];
}
"""


@pytest.fixture
def project(tmp_path) -> Path:
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "guarded.cu").write_text(GUARDED)
    return tmp_path


def retune(project: Path, cache: Path, *args: str):
    return run_evo("--retune", "--backend", "static", "--target", "sm_90", "--seed", "1", *args, cwd=project,
                   env=evo_env(cache))


def test_a_failed_baseline_shows_the_compilers_words(project, evo_cache):
    (project / "guarded.cu").write_text(GUARDED.replace("#define WIDTH 4", "#define WIDTH 16"))
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "guarded.cu" {\n    search {\n'
                                          '        ptxas.opt_level in 1..3\n    }\n}\n')
    done = retune(project, evo_cache, "--evaluations", "6")
    assert done.returncode == 1
    assert '"guarded.cu" [sm_90]: the baseline (the build\'s own flags) failed, compile-error:' in done.stderr
    assert 'guarded.cu:5:2: error: #error "WIDTH above 8 is not supported"' in done.stderr
    assert "chosen:" not in done.stdout                   # nothing was chosen
    assert "gen 1" not in done.stderr                     # and nothing searched


def test_failures_are_counted_by_status_with_an_example(project, evo_cache):
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "guarded.cu" {\n    search {\n'
                                          '        define.WIDTH in {1, 2, 4, 16, 32}\n    }\n'
                                          '    tune {\n        minimize instructions\n    }\n}\n')
    done = retune(project, evo_cache, "--evaluations", "5")
    assert done.returncode == 0, done.stderr
    example = f'compile-error 2 (e.g. "{project}/guarded.cu:5:2: error: #error "WIDTH above 8 is not supported"")'
    assert re.search(r"gen 1: \d evaluations \(\d same binary, 2 failed: " + re.escape(example), done.stderr), \
        done.stderr
    assert f"  failures: {example}" in done.stdout
    assert "failed; 1 generation, " in done.stdout, done.stdout       # one generation (was "1 generations")


def test_each_unit_reports_its_own_time(project, evo_cache):
    (project / "nvcc-evo.acf").write_text(
        'acf 1\nunit "guarded.cu" {\n    search {\n        ptxas.opt_level in 1..3\n    }\n}\n\n'
        'unit "spill.cu" {\n    search {\n        ptxas.opt_level in 1..3\n'
        '        ptxas.register_usage_level in 0..10\n    }\n}\n')
    done = retune(project, evo_cache, "--evaluations", "12")
    assert done.returncode == 0, done.stderr
    printed = [float(s) for s in re.findall(r"generations?, (\d+) s", done.stdout)]
    recorded = [float(s) for s in re.findall(r"search_seconds = ([0-9.]+)", (project / "nvcc-evo.acf").read_text())]
    assert len(printed) == len(recorded) == 2
    for shown, own in zip(printed, recorded):
        assert abs(shown - own) <= 1, (printed, recorded)
    # its pace too: the first unit's was divided by the time to the end of the whole retune
    evaluated = [int(n) for n in re.findall(r"\n  (\d+) evaluated, ", done.stdout)]
    paces = [float(r) for r in re.findall(r"cost: ([0-9.]+) candidates/min", done.stdout)]
    for count, own, pace in zip(evaluated, recorded, paces):
        assert 0.8 < pace / (count / own * 60) < 1.25, (evaluated, recorded, paces)


def test_a_chosen_point_off_the_front_says_why(project, evo_cache):
    (project / "nvcc-evo.acf").write_text(
        'acf 1\nunit "spill.cu" {\n    search {\n        ptxas.opt_level in 1..3\n    }\n'
        '    tune {\n        minimize spills, registers\n        select spills where registers >= 1000\n    }\n}\n')
    done = retune(project, evo_cache, "--evaluations", "3")
    assert done.returncode == 0, done.stderr
    assert "chosen: (the toolkit's defaults)  (" in done.stdout       # as written: no knob at its default
    assert re.search(r"chosen: .*  \(the baseline, not on the front: no front point meets "
                     r"`select spills where registers >= 1000`\)", done.stdout), done.stdout


def test_values_are_spelled_as_in_the_acf():
    assert str(Genome((("nvcc.use_fast_math", False), ("ptxas.dlcm", "cg"), ("define.T", 2)))) == \
        "nvcc.use_fast_math=false ptxas.dlcm=cg define.T=2"


def test_a_choice_that_gives_up_one_objective_is_not_called_an_improvement():
    """On llm.c's softmax the summary and the ACF said `improved instructions 2936 -> 2928, registers
    40 -> 46`: the registers went up."""
    from types import SimpleNamespace

    from nvcc_evo.measure import Measurement
    from nvcc_evo.execute.goal import Goal
    from nvcc_evo.retune.outcome.writeback import verdict_of
    base = Genome((("ptxas.maxrregcount", None),))
    space = SimpleNamespace(baseline=lambda: base)
    outcome = lambda after: SimpleNamespace(
        settled="", rejected="", baseline=Measurement("ok", (("instructions", 2936.0), ("registers", 40.0))),
        chosen_measurement=Measurement("ok", after), chosen=Genome((("ptxas.maxrregcount", 128),)),
        space=space, goal=Goal(("instructions", "registers")), kernels=None)     # (no comparison of kernels)
    assert verdict_of(outcome((("instructions", 2928.0), ("registers", 46.0)))) == \
        "traded instructions 2936 -> 2928, registers 40 -> 46"
    assert verdict_of(outcome((("instructions", 2928.0), ("registers", 32.0)))) == \
        "improved instructions 2936 -> 2928, registers 40 -> 32"


def test_fewer_knobs_moved_is_said_only_when_fewer_moved():
    """The summary said "with fewer knobs moved from the baseline" of a point that moved as many."""
    from types import SimpleNamespace

    from nvcc_evo.measure import Measurement
    from nvcc_evo.execute.goal import Goal
    from nvcc_evo.engine.evolve import Evaluation
    from nvcc_evo.retune.outcome.summary import _off_front
    from nvcc_evo.engine.space import Dimension, SearchSpace
    space = SearchSpace((Dimension("ptxas.dlcm", (None, "ca", "cg"), None), Dimension("ptxas.fmad", (None, False), None)))
    genome = lambda dlcm, fmad: Genome((("ptxas.dlcm", dlcm), ("ptxas.fmad", fmad)))
    goal = Goal(("spills", "registers"))
    outcome = lambda chosen, front: SimpleNamespace(
        goal=goal, space=space, chosen=chosen, chosen_measurement=Measurement("ok", (("spills", 0.0), ("registers", 32.0))),
        front=[Evaluation(front, (0.0, 32.0))], task=SimpleNamespace(arch="sm_90", entry=None))
    assert _off_front(outcome(genome("ca", None), genome("cg", None))) == \
        "the same scores as a front point, as many knobs moved (1): the first in a fixed order"
    assert _off_front(outcome(genome("ca", None), genome("cg", False))) == \
        "the same scores as a front point, with fewer knobs moved from the baseline"
