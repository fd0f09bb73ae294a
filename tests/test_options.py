"""A retune's options are decided once (issue 39 point 4): the command line,
the environment, the settings file and the defaults chosen (retune.scope.options
.choose_settings) and decided (decide_options: auto resolved, the budget, the GPU's
target) into one frozen Options at the start of run_retune, which every
search reads as it is; no stage decides a setting again."""
from __future__ import annotations

import ast
import dataclasses
import math

import pytest

from conftest import ROOT, evo_env
from nvcc_evo.driver import settings
from nvcc_evo.retune.scope import options as retune_options
from nvcc_evo.retune.scope.options import Options, Request, choose_settings, decide_options

KERNEL = "__global__ void scale(float *x, float a, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" \
         "    if (i < n) x[i] *= a;\n}\n"


class Here:
    """Where a retune measures (retune.scope.options.Machine): auto is static here, or pycuda on a GPU of sm_80."""

    def __init__(self, gpu: bool = False):
        self.gpu, self.asked = gpu, []

    def backend(self, asked: str) -> str:
        return ("pycuda" if self.gpu else "static") if asked == "auto" else asked

    def gpu_target(self, device: int) -> str:
        self.asked.append(device)
        return "sm_80"


def test_the_options_are_decided_from_the_settings_precedence_and_the_machine():
    project = settings.Settings("nvcc-evo.toml", {"retune.seed": 7, "retune.population": 20},
                                {"retune.seed": "nvcc-evo.toml:2", "retune.population": "nvcc-evo.toml:3"},
                                {"NVCC_EVO_POPULATION": "16", "NVCC_EVO_GPUS": "count:2"})
    request = Request(population=8, device=1)
    here = Here(gpu=True)
    options = decide_options(request, choose_settings(request, project), here)
    sources = dict(options.sources)
    assert (options.population, sources["retune.population"]) == (8, "--population")          # command line
    assert (options.seed, sources["retune.seed"]) == (7, "nvcc-evo.toml:2")                    # the file
    assert options.gpus is not None and options.gpus.count == 2 and sources["retune.gpus"] == "NVCC_EVO_GPUS"
    assert options.backend == "pycuda" and options.auto
    assert sources["retune.backend"] == "auto, built-in default: PyCUDA and a GPU are there"
    assert (options.target, here.asked) == ("sm_80", [1])          # the GPU's, of the device asked for
    assert (options.seconds, options.evaluations) == (180.0, math.inf)
    assert sources["retune.time-limit"] == "built-in default for the pycuda backend"
    dry = Request(dry_run=True)
    assert decide_options(dry, choose_settings(dry, project), Here(gpu=True)).target is None    # a dry run asks no GPU


def test_the_decided_options_are_frozen():
    request = Request(backend="static")
    options = decide_options(request, choose_settings(request, settings.Settings(None, {}, {}, {})), Here())
    assert dataclasses.fields(Options) and Options.__dataclass_params__.frozen     # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seconds = 1.0                                                        # type: ignore[misc]
    assert not any(isinstance(getattr(options, f.name), (dict, list, set)) for f in dataclasses.fields(Options))


def test_nothing_but_run_retune_decides_the_options_and_nothing_replaces_them():
    """Read from the sources: choose_settings and decide_options are called in run_retune alone, and no
    dataclasses.replace makes another Options (it did seven times, two budgets decided again by callees)."""
    calls: dict[str, list[str]] = {"choose_settings": [], "decide_options": []}
    for path in sorted((ROOT / "nvcc_evo").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else \
                    node.func.attr if isinstance(node.func, ast.Attribute) else ""
                if name in calls:
                    calls[name].append(str(path.relative_to(ROOT)))
                if name == "replace" and node.args and isinstance(node.args[0], ast.Name):
                    assert node.args[0].id != "options", f"{path}:{node.lineno}: the Options replaced"
    assert calls == {"choose_settings": ["nvcc_evo/retune/run.py"], "decide_options": ["nvcc_evo/retune/run.py"]}


def test_no_stage_below_run_retune_names_the_options():
    """Read from the sources: the modules of one search and of its outcome (retune/search/, retune/outcome/)
    never name Options: they are given the narrow values made of it in run_retune (Preparing, Searching,
    Writing). tune._search, _shown_search, prepare and evaluator_for read the whole Options before."""
    named = []
    for path in sorted((ROOT / "nvcc_evo" / "retune").glob("*/*.py")):
        if path.parent.name == "scope":                  # (where Options is declared, and its pieces)
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name) and node.id == "Options" or \
                    isinstance(node, ast.alias) and node.name == "Options":
                named.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not named


def test_a_retune_decides_its_options_once_and_every_search_is_given_values_made_of_it(tmp_path, evo_cache,
                                                                                       monkeypatch):
    """A real static retune, in this process: decide_options runs once, and every search is given the values
    made of that one Options (what prepare needs, what the engine is asked), never the Options itself."""
    from nvcc_evo.retune import run
    from nvcc_evo.retune.search import prepare as stage
    (tmp_path / "scale.cu").write_text(KERNEL)
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "scale.cu" {\n}\n')
    monkeypatch.chdir(tmp_path)
    for key, value in evo_env(evo_cache).items():
        monkeypatch.setenv(key, value)
    made: list[Options] = []
    seen: list[stage.Retune] = []

    def counted(*args):
        made.append(retune_options.decide_options(*args))
        return made[-1]

    def prepare(task, retune, together=None):
        seen.append(retune)
        return stage.prepare(task, retune, together)

    monkeypatch.setattr(run, "decide_options", counted)
    monkeypatch.setattr(run, "prepare", prepare)
    assert run.run_retune(Request(target="sm_90", evaluations=1, progress="lines")) == 0
    assert len(made) == 1 and seen
    options = made[0]
    assert options.backend == "static" and options.auto and options.evaluations == 1 and options.seconds == math.inf
    for retune in seen:
        assert (retune.preparing, retune.searching) == (options.preparing(), options.searching())
        assert not any(isinstance(getattr(retune, f.name), Options) for f in dataclasses.fields(retune))
    searching = seen[0].searching
    assert searching.limits == (1, None, None, math.inf) and searching.backend == "static" and searching.fast
    assert "target sm_90 {" in (tmp_path / "nvcc-evo.acf").read_text()       # searched and written
