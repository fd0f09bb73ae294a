"""A backend that keeps what the baseline's run left (the GPU: the reference
outputs every candidate is compared with) measures the baseline first in
every retune, also one resumed from the results store; the others take it
from the store. (Before, a resumed GPU search took its first new candidate's
outputs as the reference.) Real nvcc; the measure function is the backend's
seam, so it is recorded here."""
from __future__ import annotations

import shutil
from pathlib import Path

from nvcc_evo.cubin.compile import CompileJob
from nvcc_evo.measure import Measurement
from nvcc_evo.measure.backend import Composed
from nvcc_evo.execute.evaluate import Builds, Compiling, Evaluator
from nvcc_evo.execute.measured import Measured
from nvcc_evo.execute.goal import Goal
from nvcc_evo.retune.search.tune import measure_baseline
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.store import Context, Store

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Genome((("ptxas.opt_level", None),))
SAME_BINARY = Genome((("ptxas.opt_level", 3),))      # -O3 is ptxas's default: the baseline's SASS
OTHER = Genome((("ptxas.opt_level", 1),))


def evaluator(real_nvcc, folder: Path, store: Store, asked: list) -> Evaluator:
    job = CompileJob(str(real_nvcc), ("-c", "scale.cu"), str(folder), "scale.cu", "sm_90")

    def measure(genome, flags, result):
        asked.append(genome)
        return Measurement("ok", (("runtime", 10.0 + len(asked)),))

    flags = lambda g: tuple(f"-Xptxas=-O{v}" for k, v in g.items if v is not None)
    return Evaluator(Measured(Goal(("runtime",)), Context("13.0", "f", "sm_90", "H200", "pycuda", "scale.cu", "b")),
                     store, Builds(job, flags), measure, Compiling())


def test_a_resumed_search_measures_the_baseline_again_where_the_backend_keeps_its_run(real_nvcc, tmp_path):
    shutil.copy(ROOT / "kernels" / "scale.cu", tmp_path)
    store = Store(tmp_path / "results.jsonl")
    first: list = []
    before = evaluator(real_nvcc, tmp_path, store, first)
    before([SAME_BINARY, OTHER])                     # stored before the baseline: its binary is known
    before([BASELINE])
    assert sorted(map(str, first)) == sorted(map(str, [SAME_BINARY, OTHER]))   # the baseline's binary: known
    resumed: list = []
    again = evaluator(real_nvcc, tmp_path, store, resumed)
    again.measured.resume(store.read())
    keeps = Composed(lambda *a: None, ("runtime",), fresh_baseline=True)
    measurement = measure_baseline(again, keeps, BASELINE)
    assert resumed == [BASELINE] and not measurement.reused
    plain: list = []
    other = evaluator(real_nvcc, tmp_path, store, plain)
    other.measured.resume(store.read())
    measure_baseline(other, Composed(lambda *a: None, ("runtime",)), BASELINE)
    assert plain == []                                # read back from the store
