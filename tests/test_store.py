"""The append-only results store: resume, contexts, crash safety."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvcc_evo.measure import Measurement
from nvcc_evo.status import Status
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.store import Context, MixedResults, StoredResult, Store, require_same_context

HERE = Context("13.0.88", "sha256:a", "sm_90", "cpu", "static", '"k.cu"', "b1")
ELSEWHERE = Context("13.0.88", "sha256:a", "sm_90", "NVIDIA H200", "pycuda", '"k.cu"', "b1")


def record(value: int, context: Context = HERE) -> StoredResult:
    genome = Genome((("ptxas.opt_level", value), ("define.T", None)))
    return StoredResult(genome, ("-Xptxas", f"-O{value}"), Measurement("ok", (("spills", 8.0 * value),)), f"h{value}",
                  context)


def test_round_trip_keeps_every_field(tmp_path):
    store = Store(tmp_path / "r.jsonl")
    store.append(record(1))
    (back,) = store.read()
    assert back == record(1)


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path):
    store = Store(tmp_path / "r.jsonl")
    store.append(record(1))
    store.append(record(2))
    text = store.path.read_text()
    store.path.write_text(text[: len(text) - 25])          # kill -9 in the middle of a write
    assert [r.genome.value("ptxas.opt_level") for r in store.read()] == [1]


def test_a_torn_last_line_is_isolated_before_the_next_append(tmp_path):
    """kill -9 mid-write leaves a partial last line; the next record starts on a line of its own."""
    store = Store(tmp_path / "r.jsonl")
    store.append(record(1))
    store.append(record(2))
    text = store.path.read_text()
    torn = text[: len(text) - 25]
    store.path.write_text(torn)
    store.append(record(3))
    assert [r.genome.value("ptxas.opt_level") for r in store.read()] == [1, 3]
    assert store.path.read_text().splitlines()[1] == torn.splitlines()[1]     # the torn part kept, apart


def test_appends_wait_for_the_store_lock(tmp_path):
    """Appenders take turns: the torn-line check and the write are one step (the store's lock file, which
    only its writers may open: never the store, which others may read and so lock)."""
    import subprocess
    import sys
    import time
    from contextlib import ExitStack
    from nvcc_evo.system.locks import Wait, lock_for, locked
    store = Store(tmp_path / "r.jsonl")
    store.append(record(1))
    holder = ExitStack()
    holder.enter_context(locked(store.path, lock_for(store.path), Wait(), "held"))
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; from test_store import record; from nvcc_evo.execute.store import Store; "
            "from pathlib import Path; Store(Path(sys.argv[2])).append(record(2))")
    other = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parent), str(store.path)])
    time.sleep(2.0)
    assert other.poll() is None and len(store.read()) == 1       # waiting for the lock
    holder.close()
    assert other.wait(timeout=60) == 0 and len(store.read()) == 2


def test_other_contexts_are_kept_apart(tmp_path):
    store = Store(tmp_path / "r.jsonl")
    store.append(record(1))
    store.append(record(2, ELSEWHERE))
    mine, others = store.for_context(HERE)
    assert [r.genome.value("ptxas.opt_level") for r in mine] == [1] and others == [ELSEWHERE]


def test_replay_refuses_another_context_naming_both_sides():
    with pytest.raises(MixedResults) as caught:
        require_same_context([record(1, ELSEWHERE)], HERE, "rec.jsonl")
    assert "device: 'NVIDIA H200' there, 'cpu' here" in str(caught.value)
    assert "backend: 'pycuda' there, 'static' here" in str(caught.value)
    require_same_context([record(1)], HERE, "rec.jsonl")    # same context: fine


def test_cache_files_are_replaced_whole_and_a_failed_write_leaves_no_temporary(tmp_path, monkeypatch):
    from nvcc_evo.driver.common import replace_file
    target = tmp_path / "cache.json"
    replace_file(target, "old")
    replace_file(target, "new")
    assert target.read_text() == "new"

    def broken(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr("os.replace", broken)
    import pytest
    with pytest.raises(OSError):
        replace_file(target, "newer")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["cache.json"]


def test_the_cost_of_each_stage_is_kept(tmp_path):
    store = Store(tmp_path / "r.jsonl")
    costed = Measurement("ok", (("runtime", 5.0),), costs=(("compile", 1.25), ("timing", 0.3)))
    store.append(StoredResult(record(1).genome, (), costed, "h", HERE))
    (back,) = store.read()
    assert back.measurement.costs == (("compile", 1.25), ("timing", 0.3))


def test_an_older_store_s_lines_read_back_with_the_status_enum(tmp_path):
    """Statuses are a str-valued enum: a line as stores were written before it (bare words) reads back as its
    member, and is written again word for word."""
    from nvcc_evo.status import Status
    old = Store(tmp_path / "old.jsonl")
    lines = [line.replace('"status": "ok"', f'"status": "{word}"') for word, line in
             zip(("ok", "compile-error", "launch-refused"), _lines_of(tmp_path, 3))]
    old.path.write_text("".join(lines))
    statuses = [r.measurement.status for r in old.read()]
    assert statuses == [Status.OK, Status.COMPILE_ERROR, Status.LAUNCH_REFUSED]
    assert all(type(s) is Status for s in statuses) and old.skipped == 0
    again = Store(tmp_path / "again.jsonl")
    for r in old.read():
        again.append(r)
    assert [line.split('"status": ')[1].split(",")[0] for line in again.path.read_text().splitlines()] == \
        ['"ok"', '"compile-error"', '"launch-refused"']


def _lines_of(tmp_path: Path, count: int) -> list[str]:
    store = Store(tmp_path / "made.jsonl")
    for value in range(1, count + 1):
        store.append(record(value))
    return store.path.read_text().splitlines(keepends=True)


def test_raced_is_a_field_kept_by_the_store_and_read_from_an_older_store_s_detail(tmp_path):
    """`raced` is the measurement's own field (was a prefix of its detail): stored as such, and a line of a store
    written before it, which said it only as its detail's first word, reads back raced."""
    from dataclasses import replace
    store = Store(tmp_path / "r.jsonl")
    fast, raced = record(1), record(2)
    raced = replace(raced, measurement=replace(raced.measurement, detail="stopped after 3 of 50", raced=True))
    store.append(fast)
    store.append(raced)
    assert [r.measurement.raced for r in store.read()] == [False, True]
    old = Store(tmp_path / "old.jsonl")
    old.path.write_text(store.path.read_text().replace(', "raced": true', "").replace(
        '"detail": "stopped after', '"detail": "raced: stopped after'))
    assert [r.measurement.raced for r in old.read()] == [False, True]


def test_what_a_check_found_wrong_is_a_field_kept_by_the_store_and_read_from_an_older_store_s_detail(tmp_path):
    """`wrong` is the measurement's own field (the kind of wrong measure.check found): stored as such, and a
    wrong answer of a store written before it, which said an unwritten output only in its detail's words,
    reads back as Wrong.UNWRITTEN (any other wrong answer there: not said)."""
    from dataclasses import replace
    from nvcc_evo.measure import Wrong, failed
    store = Store(tmp_path / "r.jsonl")
    for value, wrong, said in ((1, Wrong.UNWRITTEN, "y: 5 NaN or unwritten elements"),
                               (2, Wrong.OUTSIDE, "y: 2 elements outside rtol 1e-05 atol 0"), (3, None, "exit 1")):
        store.append(replace(record(value), measurement=failed(Status.WRONG_ANSWER, said, wrong=wrong)))
    store.append(record(4))
    assert [r.measurement.wrong for r in store.read()] == [Wrong.UNWRITTEN, Wrong.OUTSIDE, None, None]
    old = Store(tmp_path / "old.jsonl")
    old.path.write_text(re.sub(r', "wrong": (null|"\w+")', "", store.path.read_text()))
    assert [r.measurement.wrong for r in old.read()] == [Wrong.UNWRITTEN, None, None, None]
    stranger = Store(tmp_path / "stranger.jsonl")
    stranger.path.write_text(store.path.read_text().replace('"wrong": "outside"', '"wrong": "sideways"'))
    assert len(stranger.read()) == 3
