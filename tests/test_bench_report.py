"""The benchmark report's logic on the CPU: shapes and library ceilings fit
every unit's bench, the Pareto fronts and the GA-vs-random summary come from
the committed H200 records, and the table states what it measured."""
from __future__ import annotations

import re
import sys
import threading

from conftest import ROOT
from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.resolve import load
from nvcc_evo.acf.sources import unit_defines
from nvcc_evo.engine.evolve import dominates

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench  # noqa: E402  (the benchmark's own functions)

UNITS = {u.globs[0]: u for u in load(bench.ACF).units}


def defaults(unit) -> dict:
    return unit_defines(unit, bench.KERNELS / unit.globs[0])


def test_every_shape_and_library_ceiling_fits_its_unit():
    for name, shapes in bench.SHAPES.items():
        for shape in shapes:
            plan = plan_bench(UNITS[name].bench, defaults(UNITS[name]), lets=shape)
            assert {k: v for k, v in plan.sizes if k in shape} == shape
    functions = {u.bench.kernel.text for u in UNITS.values()}
    assert set(bench.LIBRARY) <= functions
    for unit in UNITS.values():
        if unit.bench.kernel.text in bench.LIBRARY:
            case = bench.LIBRARY[unit.bench.kernel.text](dict(plan_bench(unit.bench, defaults(unit)).sizes))
            assert case["kind"] in bench.LIBRARY_NAME and all(v > 0 for k, v in case.items() if k in "mnk")


def test_pareto_fronts_from_the_h200_searches(tmp_path):
    points = bench.measured_points()
    assert len(points) >= 5          # the committed searches of the kernels as they are now
    for unit, measured in points.items():
        front = bench.pareto_front(measured)
        assert front and all(not dominates(a, b) for a in front for b in front)
        assert all(p in front or any(dominates(f, p) or f.objectives == p.objectives for f in front)
                   for p in measured), unit
    written = bench.pareto_plots(tmp_path)
    assert len(written) == len(points)
    for path in written:                                  # matplotlib's SVG, its text kept as text
        text = path.read_text()
        assert text.lstrip().startswith("<?xml") and "<svg" in text
        assert re.search(r"Pareto front \(\d+\)", text) and f"{path.stem[len('pareto-'):]}.cu:" in text, path


def test_pareto_points_leave_out_measurements_of_an_older_source(tmp_path):
    lines = bench.SEARCHES[1].read_text().splitlines()
    softmax = [line for line in lines if '"unit": "\\"softmax.cu\\""' in line]
    current = bench.source_fingerprints()["softmax.cu"]
    now = [line for line in softmax if current in line]
    assert now, "the committed searches hold softmax.cu as it is now"
    older = [line.replace(current, "sha256:" + "0" * 32) for line in now]
    store = tmp_path / "results.jsonl"
    store.write_text("\n".join(older) + "\n")
    assert "softmax.cu" not in bench.measured_points((store,))
    store.write_text("\n".join(older + now) + "\n")
    assert len(bench.measured_points((store,))["softmax.cu"]) == len(bench.measured_points()["softmax.cu"])


def test_ga_against_random_summary_on_the_gpu_recording(tmp_path):
    summary = bench.ga_plot(tmp_path, seeds=3, budget=20)
    assert summary["genomes"] == 400 and set(summary["budgets"]) == {10, 20}
    for row in summary["budgets"].values():
        assert row["ga_median_us"] >= summary["optimum_us"] and row["random_median_us"] >= summary["optimum_us"]
        assert row["ga_better"] + row["ga_worse"] <= 3
    assert (tmp_path / summary["plot"]).exists()
    assert "| 20 |" in bench.ga_text(summary)


def test_the_table_counts_every_correct_row_and_names_wrong_ones():
    side = lambda us: {"median_us": us, "p20_us": us, "p80_us": us, "energy_mj": 1.0, "power_w": 1.0,
                       "bandwidth_fraction": 0.5}
    rows = [{"kernel": "softmax.cu", "shape": "ROWS=1", "knobs": {"define.VEC": 2}, "correct": True, "problems": {},
             "p_value": 0.001, "speedup": 2.0, "significant": True, "evaluations": 5, "search_seconds": 9.0,
             "default": side(2.0), "tuned": side(1.0)},
            {"kernel": "scale.cu", "shape": "N=1", "knobs": {}, "correct": True, "problems": {}, "p_value": 0.5,
             "speedup": 0.5, "significant": False, "evaluations": None, "search_seconds": None,
             "default": side(1.0), "tuned": side(2.0)},
            {"kernel": "rmsnorm.cu", "shape": "ROWS=1", "knobs": {}, "correct": False,
             "problems": {"tuned": "y: 3 NaN"}, "p_value": 0.001, "speedup": 9.0, "significant": True,
             "evaluations": 3, "search_seconds": 1.0, "default": side(9.0), "tuned": side(1.0)}]
    text = bench.markdown({"rows": rows, "gpu": {"name": "G", "cc": "9.0", "driver": "d"}, "toolkit": "13.0",
                           "copy_bytes_per_s": 4e12, "rounds": 8, "date": "today"})
    assert "over the 2 correct rows" in text and "1.000x" in text           # sqrt(2.0 * 0.5)
    assert "0.500x (n.s.)" in text and "not tuned" in text and "NO: tuned: y: 3 NaN" in text
    assert "50% of copy bw" in text


def test_library_calls_are_sized_per_shape_and_the_faster_run_counts():
    cases = dict(bench.library_cases(list(UNITS.values())))
    decode = [case for key, case in cases.items() if key.startswith("hgemm_decode.cu")]
    assert sorted(c["m"] for c in decode) == [16, 64, 128] and {c["dtype"] for c in decode} == {"f16"}
    causal = [case["causal"] for key, case in cases.items() if key.startswith("flash_attention.cu")]
    assert sorted(causal) == [0, 1]
    assert not any(key.startswith(("softmax.cu", "scale.cu")) for key in cases)    # no library counterpart
    fields = bench.library_fields({"kind": "gemm", "dtype": "f16"}, [47.2, 16.8])
    assert fields == {"library": "cuBLAS f16", "library_us": 16.8, "library_runs_us": [47.2, 16.8]}
    assert bench.library_fields({"kind": "sdpa"}, [None, None])["library_us"] is None
    compile(bench.TORCH, "<library timing script>", "exec")                    # at least valid Python


class FakePool:
    """Stands in for the GPU worker: answers with the numpy reference's
    outputs, fixed times (the tuned build faster) and energy, so that the
    bench's wiring is exercised without a GPU."""

    hello = {"name": "fake", "cc": "9.0", "arch": "sm_90", "driver": "none", "nvml": True}
    lock = threading.RLock()         # WorkerPool's: one request at a time

    def __init__(self):
        from nvcc_evo.execute.measurers import load_reference
        self.reference = load_reference(UNITS["hgemm_decode.cu"].bench, bench.KERNELS)
        self.cubins = []

    def request(self, message):
        from nvcc_evo.measure.pycuda.references import reference_outputs
        from nvcc_evo.measure.pycuda.pipe import Answer, CopyRate
        if isinstance(message, CopyRate):
            return Answer("ok", copy_bytes_per_s=4e12)
        if message.cubin not in self.cubins:
            self.cubins.append(message.cubin)
        tuned = self.cubins.index(message.cubin) == 1
        answer = {"status": "ok", "energy_mj": 2.0 if tuned else 3.0, "power_w": 500.0}
        if message.outputs:
            answer["outputs"] = reference_outputs(self.reference, message.plan)
        if message.time:
            answer["times_us"] = [10.0 + i % 3 for i in range(9)] if tuned else [20.0 + i % 3 for i in range(9)]
        return Answer(**answer)

    def close(self):
        pass


def test_the_bench_wiring_with_a_stand_in_for_the_gpu(tmp_path, monkeypatch):
    runs = iter([[30.0, 20.0, 40.0], [15.0, None, 45.0]])                # library before and after our kernels
    monkeypatch.setattr("nvcc_evo.measure.pycuda.pool.WorkerPool", FakePool)
    monkeypatch.setattr(bench, "library_times", lambda cases: next(runs))
    result = bench.run_gpu(tmp_path, rounds=3, only=["hgemm_decode.cu"])
    rows = result["rows"]
    assert [r["shape"] for r in rows] == ["M=64 N=4096 K=4096", "M=16 N=4096 K=4096", "M=128 N=4096 K=4096"]
    assert all(r["correct"] and r["checked_against"] == "numpy reference" for r in rows)
    assert [r["library_us"] for r in rows] == [15.0, 20.0, 40.0] and rows[0]["library_runs_us"] == [30.0, 15.0]
    assert rows[0]["speedup"] > 1.5 and rows[0]["tuned"]["energy_mj"] == 2.0
    entry = next(t for t in UNITS["hgemm_decode.cu"].targets if t.arch == "sm_90")   # the ACF's tuned knobs,
    assert rows[0]["knobs"] == {s.knob: s.value for s in entry.settings}                # its pins left out
    assert not {"define.BM", "define.WARPS_M"} & set(rows[0]["knobs"])
    assert "| hgemm_decode.cu | M=16 N=4096 K=4096 |" in bench.markdown(result)
    assert (tmp_path / "bench.json").exists()
