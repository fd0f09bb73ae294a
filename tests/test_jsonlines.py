"""The one appender of nvcc-evo's JSON-lines stores (system.jsonlines): the
results store and the kernels' store lock, repair a torn last line, sync and
count what they skip alike; and the one change cell of every table."""
from __future__ import annotations

import math
import os

import pytest

from nvcc_evo.execute.store import Context, StoredResult, Store
from nvcc_evo.engine.space import Genome
from nvcc_evo.measure import Measurement
from nvcc_evo.cubin.sass import KernelFacts
from nvcc_evo.kerneldiff.compare import BuiltKernels, Comparison, KernelStore
from nvcc_evo.kerneldiff.view import change

HERE = Context("13.0.88", "sha256:a", "sm_90", "cpu", "static", '"k.cu"', "b1")


def _record(value: int) -> StoredResult:
    return StoredResult(Genome((("ptxas.opt_level", value),)), (f"-O{value}",), Measurement("ok", (("spills", 1.0),)),
                  f"h{value}", HERE)


def _comparison(value: int) -> Comparison:
    build = BuiltKernels(f"h{value}", (KernelFacts("axpy", registers=value),), None)
    return Comparison('"k.cu"', "sm_90", "cpu", "static", build, build)


STORES = {"results": (Store, _record, lambda r: r.sass_hash),
          "kernels": (KernelStore, _comparison, lambda c: c.baseline.sass_hash)}


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_torn_last_line_is_ended_before_the_next_append_in_every_store(tmp_path, kind):
    """kill -9 mid-write leaves a partial last line: the next line starts on its own (the kernels' store
    glued its next line to it, so both were lost), and a read counts the torn one as skipped."""
    make, item, key = STORES[kind]
    store = make(tmp_path / ".nvcc-evo" / "s.jsonl")
    store.append(item(1))
    store.append(item(2))
    text = store.path.read_text()
    store.path.write_text(text[: len(text) - 25])
    store.append(item(3))
    assert [key(found) for found in store.read()] == ["h1", "h3"]
    assert store.lines.skipped == 1


@pytest.mark.parametrize("kind", sorted(STORES))
def test_every_store_refuses_a_fifo_instead_of_waiting_on_it(tmp_path, kind):
    make, item, _ = STORES[kind]
    (tmp_path / ".nvcc-evo").mkdir()
    path = tmp_path / ".nvcc-evo" / "s.jsonl"
    os.mkfifo(path)
    with pytest.raises(Exception, match="FIFO"):
        make(path).append(item(1))
    assert make(path).read() == []


@pytest.mark.parametrize("before, after, cell", [
    (2.0, 1.0, "-50.0%"), (100, 104, "+4.0%"), (0, 16, "new"), (0, 0, ""), (3.0, 3.0, ""),
    (None, 2.0, ""), (2.0, None, ""), (math.inf, 2.0, "—"), (2.0, math.inf, "—"), (math.inf, math.inf, "")])
def test_one_change_cell_for_every_table(before, after, cell):
    assert change(before, after) == cell
