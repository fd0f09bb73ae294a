"""Several (unit, target) searches at once (`--at-once N`, the setting
`retune.at-once`): each in a thread of its own, sharing what this machine
and the cluster have.

- The compiles of all of them take the retune's compile slots (`jobs`, the
  CPU cores by default): one semaphore, so N searches never run N times as
  many nvcc processes as there are cores; each search cancels only its own.
- The GPUs: a measuring process per device (measure.pycuda.pool.POOLS) or an
  actor per GPU of the cluster, shared, one request at a time: no two
  candidates are ever timed at once on one GPU; each search keeps its own
  baseline and references there.
- The results store takes their records as it takes several lanes' (locked
  appends); each choice is written into the ACF when its search ends, one
  write at a time (the ACF's lock).
- Ctrl-C (the main thread's): every search stops recording (`Stopped`: a
  compile killed by the interrupt is not a failed candidate), the compiles
  are killed, the ACF keeps what was written before; the same command
  resumes from the store. An error in one search stops the others, as a
  serial retune stops at it, and is raised.

Each search is the serial one (the same seed, the same genomes): with a
deterministic backend the records and choices are those of a serial run.
A backend that rebuilds the project (the command backend) runs its bench there:
its searches run one at a time.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from nvcc_evo import backends
from nvcc_evo.execute.cluster import Cluster
from nvcc_evo.execute.evaluate import Stopped
from nvcc_evo.system.leftovers import kill_running

WAIT_AFTER_INTERRUPT = 30.0  # seconds the searches get to stop (a candidate being timed ends first)


@dataclass
class Together:
    """What the searches running at once share."""

    slots: threading.Semaphore                      # the retune's compile slots
    stopping: threading.Event = field(default_factory=threading.Event)
    writing: threading.Lock = field(default_factory=threading.Lock)   # one write into the ACF at a
                                                                      # time
    board: object | None = None             # the searches' progress bars
                                            # (retune.search.progress.Board), if shown


def how_many(asked: int | None, tasks: int, backend: str, population: int,
             cluster: Cluster | None = None,
             say: Callable[[str], None] = lambda _: None) -> int:
    """How many searches run at once: `asked` (retune.at-once), at most the
    tasks; by default one, on a cluster as many as its CPUs keep compiling
    (a generation's compiles each); one for a backend that rebuilds the project."""
    if backends.row(backend).rebuilds:
        if asked and asked > 1:
            say(f"--at-once {asked}: the {backend} backend builds and runs the project's own "
                "bench, so its searches run one at a time")
        return 1
    if asked is None:
        asked = max(1, cluster.workers // max(1, population)) if cluster is not None else 1
    return max(1, min(asked, tasks))


def run_together(tasks: list, count: int, jobs: int | None, one: Callable,
                 board: object | None = None) -> list:
    """`one(task, together)` for every task, `count` at a time; the results
    in the tasks' order (see the module's docstring). `board`: their bars."""
    together = Together(threading.BoundedSemaphore(jobs or os.cpu_count() or 2), board=board)
    pending = list(enumerate(tasks))
    results: dict = {}
    errors: list = []
    lock = threading.Lock()

    def search() -> None:
        while True:
            with lock:
                if not pending or together.stopping.is_set():
                    return
                index, task = pending.pop(0)
            try:
                results[index] = one(task, together)
            except Stopped:
                return
            except BaseException as error:      # the others stop too, as a serial retune stops here
                with lock:
                    errors.append(error)
                together.stopping.set()
                kill_running()
                return

    threads = [threading.Thread(target=search, name=f"search-{i}", daemon=True)
               for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # (a join without a timeout would not see the Ctrl-C)
    except KeyboardInterrupt:
        together.stopping.set()
        kill_running()
        _wait(threads, WAIT_AFTER_INTERRUPT)
        raise
    if errors:
        raise errors[0]
    return [results[i] for i in sorted(results)]


def _wait(threads: list, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
