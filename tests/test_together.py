"""Several (unit, target) searches at once (execute.together, `--at-once N`):
the serial run's records and choices for a seed, no more compiles at once
than the retune's jobs, one search cancelling its compiles leaves another's
running, a measuring process answers each thread its own request, and a
Ctrl-C stops every search with nothing killed recorded as a failure."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import re
import threading
import time
from pathlib import Path

import pytest

from conftest import EVO_COMMAND, ROOT, evo_env, interruptible, kernels_project, run_evo, searched
from nvcc_evo.cubin.compile import CompileJob, Compiler
from nvcc_evo.measure.pycuda.pool import WorkerPool
from nvcc_evo.execute.store import Store
from nvcc_evo.execute.together import how_many
from test_leftovers import processes_naming, wait_until

UNITS = ("scale.cu", "reduce_sum.cu", "softmax.cu")

# An nvcc for the tests: each run's start and end appended to a log (O_APPEND: whole lines), then the real one;
# with SLOW set, it waits first.
COUNTING = """#!/bin/sh
echo "start $$ $(date +%s.%N)" >> {log}
[ -n "$SLOW" ] && sleep "$SLOW"
{nvcc} "$@"
code=$?
echo "end $$ $(date +%s.%N)" >> {log}
exit $code
"""


def _project(folder: Path) -> Path:
    return kernels_project(folder, UNITS)


def _counting_nvcc(folder: Path, real_nvcc: Path) -> tuple[Path, Path]:
    log, script = folder / "nvcc-runs.log", folder / "bin" / "nvcc"
    script.parent.mkdir(parents=True)
    script.write_text(COUNTING.format(log=log, nvcc=real_nvcc))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def most_at_once(log: Path) -> int:
    """The most nvcc runs the log shows running at the same time."""
    events = sorted((float(when), 1 if kind == "start" else -1)
                    for kind, _, when in (line.split() for line in log.read_text().splitlines()))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def _retune(folder: Path, env: dict, *extra: str):
    return run_evo("--retune", "--acf", str(folder / "nvcc-evo.acf"), "--backend", "static", "--seed", "3",
                   "--evaluations", "6", "--population", "4", "--jobs", "2", "--progress", "lines", *UNITS, *extra,
                   cwd=folder, env=env)


def test_searches_at_once_make_the_serial_runs_records_and_choices_within_the_jobs(tmp_path, evo_cache, real_nvcc):
    serial = _project(tmp_path / "serial")
    plain = _retune(serial, evo_env(evo_cache))
    assert plain.returncode == 0, plain.stderr
    together = _project(tmp_path / "together")
    script, log = _counting_nvcc(tmp_path, real_nvcc)
    ran = _retune(together, evo_env(evo_cache, NVCC_EVO_REAL_NVCC=script), "--at-once", "3")
    assert ran.returncode == 0, ran.stderr
    assert "3 searches, 3 at once (compiles sharing 2 slots" in ran.stderr
    assert searched(together, UNITS) == searched(serial, UNITS)
    headers = re.compile(r'^"[^"]+" \[sm_90\]: ', re.M)                          # a unit's section of the report
    assert len(headers.findall(ran.stdout)) == len(headers.findall(plain.stdout)) == 3   # the one report, every unit
    assert most_at_once(log) <= 2, "three searches, each with two compile workers, share the two slots"
    assert len(log.read_text().splitlines()) >= 2 * 3 * 6


@pytest.mark.parametrize("asked,tasks,backend,workers,expected", [
    (None, 5, "static", None, 1), (3, 5, "static", None, 3), (9, 2, "pycuda", None, 2),
    (None, 9, "static", 48, 4), (None, 2, "static", 48, 2), (None, 9, "static", 4, 1), (4, 9, "command", None, 1)])
def test_how_many_searches_run_at_once(asked, tasks, backend, workers, expected):
    said = []
    cluster = type("Cluster", (), {"workers": workers})() if workers else None
    assert how_many(asked, tasks, backend, 12, cluster, said.append) == expected
    assert bool(said) == (backend == "command"), said                # why the command backend runs one


def test_one_pools_cancel_leaves_another_pools_compiles_running(tmp_path, real_nvcc):
    shutil.copy(ROOT / "kernels" / "scale.cu", tmp_path / "scale.cu")
    script, log = _counting_nvcc(tmp_path, real_nvcc)
    job = CompileJob(str(script), ("-c", "scale.cu"), str(tmp_path), "scale.cu", "sm_90",
                     env=(("SLOW", "2"),))
    cancelled, kept = Compiler(1), Compiler(1)
    try:
        doomed, wanted = cancelled.submit([job])[0], kept.submit([job])[0]
        assert wait_until(lambda: log.exists() and log.read_text().count("start") == 2, 30)
        cancelled.close(cancel=True)                  # its search ended with a batch still compiling
        assert kept.result(wanted).ok, kept.result(wanted).stderr
        assert doomed.done()
    finally:
        kept.close()


class EchoDevice:
    """A measuring process's device for the test: answers each request with its id (the cubin's bytes),
    after a pause."""

    def __init__(self, index: int):
        pass

    def hello(self):
        from nvcc_evo.measure.pycuda.pipe import Hello
        return Hello("echo", "0.0", "sm_00", "none", 0, False)

    def run(self, request):
        import random
        from nvcc_evo.measure.pycuda.pipe import Answer
        time.sleep(random.random() * 0.004)
        return Answer("ok", request.cubin.decode())


def echo_worker(connection, device: int) -> None:
    from nvcc_evo.measure.pycuda.worker import worker_main
    worker_main(connection, device, EchoDevice)


def test_a_measuring_process_answers_each_thread_its_own_request():
    from nvcc_evo.measure.pycuda.pipe import RunRequest
    pool = WorkerPool(target=echo_worker, timeout=30)
    wrong = []

    def ask(thread: int) -> None:
        for i in range(25):
            asked = f"{thread}:{i}"
            answer = pool.request(RunRequest(asked.encode(), None))
            if answer.detail != asked:
                wrong.append((asked, answer))

    try:
        threads = [threading.Thread(target=ask, args=(t,)) for t in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        pool.close()
    assert wrong == [] and pool.replaced == 0, wrong[:3]


def test_ctrl_c_stops_every_search_and_records_no_killed_compile(tmp_path, evo_cache):
    project = _project(tmp_path / "project")
    (project / "tmp").mkdir()
    acf = (project / "nvcc-evo.acf").read_text()
    env = evo_env(evo_cache, TMPDIR=project / "tmp")
    argv = [*EVO_COMMAND, "--retune", "--backend", "static", "--seed", "3", "--evaluations", "20", "--patience", "99",
            "--population", "4", "--jobs", "2", "--at-once", "2", "--progress", "lines", "reduce_sum.cu", "softmax.cu"]
    store = project / ".nvcc-evo" / "results.jsonl"
    running = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=interruptible)
    stored = lambda: len(store.read_text().splitlines()) if store.exists() else 0
    assert wait_until(lambda: stored() >= 6, 180), running.stderr.read() if running.poll() is not None else "slow"
    os.killpg(running.pid, signal.SIGINT)          # the terminal's Ctrl-C: the retune's group only
    out, err = running.communicate(timeout=60)
    assert running.returncode == 130, err
    assert "interrupted: every finished evaluation is kept" in err and "Traceback" not in err
    assert wait_until(lambda: not processes_naming(project / "tmp"), 5), processes_naming(project / "tmp")
    records = Store(store).read()
    assert records and all(r.measurement.ok for r in records), \
        [(r.genome, r.measurement.status) for r in records if not r.measurement.ok]   # no kill kept as a failure
    assert (project / "nvcc-evo.acf").read_text() == acf, "no search had ended: nothing written"
    resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("resuming with") == len({r.context.unit for r in records})
    for unit in ("reduce_sum.cu", "softmax.cu"):
        genomes = [r.genome for r in Store(store).read() if r.context.unit == f'"{unit}"']
        assert len(genomes) == len(set(genomes)) == 21, unit          # the baseline and 20, nothing twice
