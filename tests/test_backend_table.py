"""The table of backends (nvcc_evo.backends) is the one list: the settings,
the command line, the budgets and the factories read it, each row names the
factory that makes its backend, and each backend a factory makes (those that
run without a GPU) has the capabilities its row says."""
from __future__ import annotations

import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from nvcc_evo import backends
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.driver import specs
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.execute import devices, measurers
from nvcc_evo.execute.store import Context, StoredResult, Store
from nvcc_evo.measure import Measurement
from nvcc_evo.engine.space import Genome

ACF = '''acf 1
unit "k.cu" {
    bench {
        command "true"
        metric "([0-9]+) us"
    }
}
'''


def test_every_row_is_a_setting_a_budget_and_a_factory_and_nothing_else_is():
    assert backends.CHOICES == ("auto", "pycuda", "static", "command", "replay")
    key = next(k for k in specs.KEYS if k.name == "retune.backend")
    assert key.choices == backends.CHOICES
    assert all(row.budget_why and (row.seconds < math.inf or row.evaluations < math.inf) for row in backends.TABLE)
    assert tuple(row.name for row in backends.TABLE if row.times) == ("pycuda", "command")
    for row in backends.TABLE:
        assert (row.bench == "") == (row.bench_form == ""), row
    assert backends.help_text() == (
        "what measures a candidate: pycuda (kernel time and energy on the GPU), static (ptxas facts, no GPU), "
        "command (the unit's bench command), replay (a recorded results store: --replay), or auto (pycuda when "
        "PyCUDA and a GPU are there, else static)")
    assert key.what == backends.help_text()


def _made(name: str, tmp_path: Path):
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text(ACF)
    unit = parse_text(ACF, str(acf)).units[0]
    task = SimpleNamespace(arch="sm_90", unit=unit)
    context = Context("13.0", "print", "sm_90", "cpu", name, str(unit), "build")
    store = tmp_path / "recorded.jsonl"
    Store(store).append(StoredResult(Genome((("ptxas.opt_level", 3),)), (), Measurement("ok", (("registers", 8.0),)),
                               "abc", context))
    wanted = measurers.Wanted(task, acf, context, str(store), 30.0, {}, lambda genome: ())
    return measurers.backend_for(name, wanted)


def test_each_backend_has_the_capabilities_its_row_says(tmp_path):
    for name in ("static", "command", "replay"):
        row, made = backends.BACKENDS[name], _made(name, tmp_path)
        assert made.compiles is row.compiles, name
        said = {"confirm": made.confirm is not None, "drift": made.drift is not None,
                "end_drift": made.end_drift is not None, "race": made.race is not None,
                "fresh_baseline": made.fresh_baseline}
        assert said == {capability: getattr(row, capability) for capability in said}, name


def test_replay_answers_a_measurement_with_the_recorded_sass_hash(tmp_path):
    replay = _made("replay", tmp_path)
    answer = replay.measure(Genome((("ptxas.opt_level", 3),)), (), None)
    assert isinstance(answer, Measurement) and answer.ok and answer.sass_hash == "abc"
    assert answer.get("registers") == 8.0
    missing = replay.measure(Genome((("ptxas.opt_level", 1),)), (), None)
    assert missing.status == "not-recorded" and missing.sass_hash == ""


def test_each_row_names_the_factory_that_makes_it_and_nothing_else_does():
    """A backend is one row and its factory: the row names it ("module:function"), in the layer that makes
    backends (execute, which imports what every factory needs), and a name no row has is no backend."""
    for row in backends.TABLE:
        module, _, function = row.factory.partition(":")
        assert module == "nvcc_evo.execute.measurers" and function, row
        assert measurers.factory_of(row.name) is getattr(measurers, function), row
    made = {row.factory for row in backends.TABLE}
    assert len(made) == len(backends.TABLE)
    assert sorted(name for name in vars(measurers) if name.startswith("make_")) == \
        sorted(row.factory.partition(":")[2] for row in backends.TABLE)
    with pytest.raises(EnvironmentProblem, match="backend 'cuda' is not available"):
        measurers.factory_of("cuda")


def test_auto_stands_for_the_gpu_row_with_a_gpu_else_the_one_that_needs_none():
    assert backends.auto_choice(gpu=True) == "pycuda" and backends.row("pycuda").needs_gpu
    assert backends.auto_choice(gpu=False) == "static" and backends.row("static").facts_only
    assert backends.row("auto") is backends.UNKNOWN and backends.row(None) is backends.UNKNOWN
    unknown = backends.UNKNOWN
    assert not (unknown.times or unknown.facts_only or unknown.needs_gpu or unknown.rebuilds or unknown.confirm
                or unknown.drift or unknown.end_drift or unknown.race or unknown.fresh_baseline or unknown.bench)


@pytest.mark.gpu
@pytest.mark.parametrize("full", [False, True], ids=["fast", "full"])
def test_the_gpu_backend_has_the_capabilities_its_row_says(tmp_path, full):
    """The pycuda row, made on a GPU: what it says, and no racing in the full protocol (every candidate timed
    the whole way)."""
    from conftest import DATA, FAULTY_BENCH
    from nvcc_evo.measure.pycuda.pool import POOLS
    shutil.copy(DATA / "cuda" / "faulty.cu", tmp_path / "faulty.cu")
    text = 'acf 1\nunit "faulty.cu" {' + FAULTY_BENCH + '}\n'
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text(text)
    unit = parse_text(text, str(acf)).units[0]
    try:
        arch = POOLS.get(0).hello["arch"]
        context = Context("13.0", "print", arch, "cpu", "pycuda", str(unit), "build")
        wanted = measurers.Wanted(SimpleNamespace(arch=arch, unit=unit), acf, context, None, 30.0, {},
                                  lambda genome: (), full=full)
        made, row = measurers.backend_for("pycuda", wanted), backends.row("pycuda")
        said = {"confirm": made.confirm is not None, "drift": made.drift is not None,
                "end_drift": made.end_drift is not None, "race": made.race is not None,
                "fresh_baseline": made.fresh_baseline}
        assert made.compiles is row.compiles and made.hello is not None and made.device == made.hello["name"]
        assert said == {capability: getattr(row, capability) and not (full and capability == "race")
                        for capability in said}
    finally:
        devices.close_pool()


def test_a_row_under_another_name_is_made_and_answered_as_the_original(tmp_path, monkeypatch):
    """Adding a backend is one row and its factory: each row copied under another name is made by the same
    factory and asked the same questions with the same answers (no code keys on a backend's name)."""
    from nvcc_evo.execute.together import how_many
    from nvcc_evo.retune.search.speedsafe import search_guard
    copies = {f"{row.name}-copy": row._replace(name=f"{row.name}-copy") for row in backends.TABLE}
    monkeypatch.setattr(backends, "BACKENDS", {**backends.BACKENDS, **copies})
    unit = parse_text(ACF, str(tmp_path / "nvcc-evo.acf")).units[0]
    for name in ("static", "command", "replay"):
        copy, original = _made(f"{name}-copy", tmp_path), _made(name, tmp_path)
        assert (copy.describe, copy.objectives, copy.compiles) == (original.describe, original.objectives,
                                                                   original.compiles), name
        same = lambda ask: ask(f"{name}-copy") == ask(name)
        assert same(lambda backend: search_guard(unit.tune, "sm_90", backend)), name
        assert same(lambda backend: how_many(4, 8, backend, 20)), name
        assert same(lambda backend: devices.measuring_gpu(devices.Measuring(backend), dry_run=False)), name
        assert same(lambda backend: measurers.bench_problem(unit, backend)), name
    assert search_guard(unit.tune, "sm_90", "static-copy") is not None        # (the answers are not all None)
    assert how_many(4, 8, "command-copy", 20) == 1 and how_many(4, 8, "static-copy", 20) == 4
