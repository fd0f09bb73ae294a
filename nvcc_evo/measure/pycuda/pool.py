"""The measuring processes of the pycuda backend: one per CUDA device for
the whole retune (`POOLS`), each replaced whenever a candidate breaks it (a
watchdog: a run past its timeout is killed with its CUDA context); one
request at a time, searches at once taking turns in the order they asked
(`TurnLock`)."""
from __future__ import annotations

import multiprocessing
import threading
from typing import Callable

from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.measure.pycuda.pipe import Answer, CopyRate, NoGpu, RunRequest
from nvcc_evo.measure.pycuda.worker import worker_main
from nvcc_evo.status import Status


class TurnLock:
    """A reentrant lock handed over in the order it was asked for: a thread
    that releases it and asks again at once (a confirmation's next round)
    waits behind the threads already waiting (another search's candidate)."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._owner: int | None = None
        self._depth = self._next = self._serving = 0
        self._left: set[int] = set()  # turns whose threads stopped waiting (an exception: Ctrl-C)

    def __enter__(self) -> None:
        me = threading.get_ident()
        with self._turns:
            if self._owner == me:
                self._depth += 1
                return
            ticket, self._next = self._next, self._next + 1
            try:
                self._turns.wait_for(lambda: self._serving == ticket and self._owner is None)
            except BaseException:
                self._left.add(ticket)      # skipped, or the threads behind it would wait for ever
                self._next_turn()
                raise
            self._owner, self._depth = me, 1

    def __exit__(self, *_: object) -> None:
        with self._turns:
            self._depth -= 1
            if self._depth == 0:
                self._owner, self._serving = None, self._serving + 1
                self._next_turn()

    def _next_turn(self) -> None:
        while self._serving in self._left:
            self._left.discard(self._serving)
            self._serving += 1
        self._turns.notify_all()


class WorkerPool:
    """One measuring process, replaced whenever a candidate breaks it. One
    request at a time (`lock`: several searches at once share a GPU, never
    time on it at once, and take turns)."""

    def __init__(self, target: Callable | None = None, timeout: float = 120.0, device: int = 0):
        self.target, self.timeout, self.device = target or worker_main, timeout, device
        self.context = multiprocessing.get_context("spawn")
        self.replaced = 0
        self.lock = TurnLock()
        self.hello = self._start()

    def _start(self) -> dict:
        """The new measuring process's Hello, as the dict a backend's `hello` holds."""
        self.connection, child = self.context.Pipe()
        self.process = self.context.Process(target=self.target, args=(child, self.device),
                                            daemon=True)
        self.process.start()
        child.close()
        if not self.connection.poll(self.timeout):
            self._stop()
            raise EnvironmentProblem("the GPU worker did not start")
        hello = self.connection.recv()
        if isinstance(hello, NoGpu):
            self._stop()
            raise EnvironmentProblem(f"no usable GPU: {hello.detail}")
        return hello.as_dict()

    def _stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def _replace(self) -> None:
        self._stop()
        self.replaced += 1
        self.hello = self._start()

    def request(self, message: RunRequest | CopyRate, timeout: float | None = None) -> Answer:
        with self.lock:
            return self._request(message, timeout)

    def _request(self, message: RunRequest | CopyRate, timeout: float | None) -> Answer:
        try:
            self.connection.send(message)
            if not self.connection.poll(timeout or self.timeout):
                # the watchdog: a kernel that never ends (a deadlock) holds its process in the
                # driver; killed, its CUDA context goes with it, and a fresh process measures the
                # next candidate
                self._replace()
                said = (f"no answer within {timeout or self.timeout:g} s (a kernel that never "
                        "ends?): its measuring process was killed and a fresh one started")
                return Answer(Status.TIMEOUT, said)
            answer = self.connection.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(5)             # reap it, so that its exit code is known
            code = self.process.exitcode
            self._replace()
            return Answer(Status.CRASH, f"the measuring process died (exit code {code})")
        if not self.process.is_alive() or answer.status == Status.CRASH:
            self.process.join(2)
            self._replace()
        return answer

    def close(self) -> None:
        try:
            self.connection.send(None)
        except OSError:
            pass
        self._stop()


class WorkerPools:
    """One measuring process per CUDA device for the whole retune (started on
    first use; `retune.device` is lane 0's, `retune.gpus` names the others),
    shared by the searches that run at once; closed at the retune's end."""

    def __init__(self) -> None:
        self.pools: dict[int, WorkerPool] = {}
        self.lock = threading.Lock()

    def get(self, device: int = 0) -> WorkerPool:
        with self.lock:
            if device not in self.pools:
                try:
                    import pycuda  # noqa: F401
                except ImportError:
                    raise EnvironmentProblem("the pycuda backend needs PyCUDA (pip install "
                                             "'nvcc-evo[gpu]') and a GPU")
                self.pools[device] = WorkerPool(device=device)
            return self.pools[device]

    def close(self) -> None:
        with self.lock:
            while self.pools:
                self.pools.popitem()[1].close()


POOLS = WorkerPools()       # this process's (a retune's, or a cluster's measuring actor's)
