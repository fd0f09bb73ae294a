"""Results-store lines and compile-database records of any valid-JSON shape
(issue 25, case 7): a line with `genome` a string, a metric "abc", `status`
null or 5, `context.arch` a number was a traceback in `--report` and in a
resuming `--retune`. Each such line is skipped and counted; good ones still
read. Hypothesis draws the shapes; two real runs show the verbs."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import DATA, EVO, evo_env
from nvcc_evo.driver import compiledb
from nvcc_evo.measure import Measurement
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.store import Context, StoredResult, Store, _encode

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)
CONTEXT = Context("13.0.88", "f" * 16, "sm_90", "cpu", "static", '"k.cu"', "b" * 16)
GOOD = StoredResult(Genome((("ptxas.opt_level", 2), ("define.V", "x"))), ("-Xptxas", "-O2"),
              Measurement("ok", (("registers", 20.0),), (), "", costs=(("compile", 0.5),)), "s" * 16, CONTEXT, 1.0)
GOOD_LINE = json.loads(_encode(GOOD))


def _reshaped(good: dict) -> st.SearchStrategy:
    """The good line with some fields (at the top or one level down) replaced by any JSON."""
    def field(value):
        if isinstance(value, dict) and value:
            return st.one_of(JSON, st.fixed_dictionaries({k: st.one_of(st.just(v), JSON) for k, v in value.items()}))
        return st.one_of(st.just(value), JSON)
    return st.one_of(JSON, st.fixed_dictionaries({k: field(v) for k, v in good.items()}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=_reshaped(GOOD_LINE))
def test_a_store_line_of_any_shape_is_skipped_and_good_ones_read(tmp_path, line):
    path = tmp_path / "results.jsonl"
    path.write_text(_encode(GOOD) + "\n" + json.dumps(line) + "\n" + _encode(GOOD) + "\n")
    store = Store(path)
    records = store.read()
    assert records[0] == GOOD and records[-1] == GOOD and len(records) + store.skipped == 3
    for record in records:            # whatever reads is of the shape the rest of nvcc-evo uses
        str(record.genome), record.genome.settings(), record.measurement.get("registers"), hash(record.genome)
        assert all(isinstance(v, float) for _, v in record.measurement.metrics)
        assert all(isinstance(v, str) for v in vars(record.context).values())
    mine, others = store.for_context(CONTEXT)
    assert len(mine) >= 2


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_compile_record_of_any_shape_is_said_and_good_ones_read(compiled, data):
    project, good = compiled
    record = json.loads(good.read_text())
    bad = project / ".nvcc-evo" / "compile-db" / "zz-bad.json"
    bad.write_text(json.dumps(data.draw(_reshaped(record))))
    records, unusable = compiledb.scan(project / "nvcc-evo.acf")
    assert len(records) + len(unusable) == 2 and any(r.input.endswith("spill.cu") for r in records)
    for entry in unusable:
        assert isinstance(entry.why, str) and all(isinstance(g, str) for g in entry.unit_globs)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, evo_cache) -> tuple[Path, Path]:
    """A project built once through nvcc-evo: one good compile record."""
    folder = tmp_path_factory.mktemp("compiled")
    cache = evo_cache
    shutil.copy(DATA / "cuda" / "spill.cu", folder / "spill.cu")
    (folder / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    search {\n        ptxas.opt_level in 1..3\n'
                                         '    }\n}\n')
    done = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "spill.o"], cwd=folder,
                          env=evo_env(cache), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return folder, next((folder / ".nvcc-evo" / "compile-db").glob("*.json"))


ODD_LINES = [{"genome": "ptxas.opt_level"}, {"genome": [["define.V", {"x": 1}]]}, {"metrics": {"registers": "abc"}},
             {"metrics": {"registers": None}}, {"metrics": {"registers": [1]}}, {"status": None}, {"status": 5},
             {"status": "weird detail is not a word"}, {"context": {"arch": 90}}]


def test_report_and_a_resuming_retune_skip_and_count_odd_lines(compiled, evo_cache):
    """The lines the issue lists, each valid JSON: were tracebacks in --report and in a resuming --retune."""
    project, _ = compiled
    retune = ("--retune", "--backend", "static", "--target", "sm_90", "--population", "2", "--jobs", "1")
    first = subprocess.run([str(EVO), *retune, "--evaluations", "2"], cwd=project, env=evo_env(evo_cache),
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    store = project / ".nvcc-evo" / "results.jsonl"
    good = json.loads(store.read_text().splitlines()[0])
    odd = []
    for change in ODD_LINES:
        line = json.loads(json.dumps(good))
        for key, value in change.items():
            if key == "context":
                line["context"].update(value)
            else:
                line[key] = value if not isinstance(value, dict) or key != "metrics" else {**line[key], **value}
        odd.append(json.dumps(line))
    with open(store, "a") as out:
        out.write("\n".join(odd) + "\n")
    said = f"{len(ODD_LINES)} line(s) of the results store {store} skipped"
    report = subprocess.run([str(EVO), "--report"], cwd=project, env=evo_env(evo_cache), capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0 and said in report.stderr and "Traceback" not in report.stderr, report.stderr
    again = subprocess.run([str(EVO), *retune, "--evaluations", "3", "--all"], cwd=project, env=evo_env(evo_cache),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and said in again.stderr and "Traceback" not in again.stderr, again.stderr
