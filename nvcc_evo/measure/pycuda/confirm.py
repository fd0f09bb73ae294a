"""The pycuda backend's confirmation: the winner re-measured against the
baseline, interleaved A B A B, each pair holding the GPU, then checked once
more on fresh random inputs."""
from __future__ import annotations

from nvcc_evo.acf.bench.spec import BenchPlan
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.measure.check import outputs_match
from nvcc_evo.measure.pycuda.pipe import Answer, RunRequest
from nvcc_evo.measure.pycuda.pool import WorkerPool
from nvcc_evo.measure.stats import Summary, Verdict, faster, summarize
from nvcc_evo.status import Status

CONFIRM_ROUNDS = 10     # the confirmation's A B pairs
CONFIRM_SECONDS = 0.2   # the timing window of each of their runs


def timed(answer: Answer) -> Summary:
    """The times of an ok answer to a timed RunRequest, summarised."""
    assert answer.times_us is not None
    return summarize(answer.times_us)


def verify(pool: WorkerPool, baseline: tuple[bytes, BenchPlan], chosen: tuple[bytes, BenchPlan],
           rounds: int = CONFIRM_ROUNDS) -> tuple[Verdict, str]:
    """Re-measure the winner against the baseline, interleaved A B A B, and
    check the winner once more on fresh random inputs. Each A B pair holds
    the GPU (nothing else runs between its two timings); between pairs the
    other searches at once take their turn, so a confirmation does not
    stop their searches for its whole length."""
    medians: dict[str, list[float]] = {"a": [], "b": []}
    for _ in range(rounds):
        with pool.lock:
            for side, (cubin, plan) in (("a", baseline), ("b", chosen)):
                answer = pool.request(RunRequest(cubin, plan, time=True,
                                                 min_seconds=CONFIRM_SECONDS))
                if answer.status != Status.OK:
                    raise EnvironmentProblem("verification run failed: "
                                             f"{answer.detail or answer.status}")
                medians[side].append(timed(answer).median)
    with pool.lock:
        fresh = [pool.request(RunRequest(cubin, plan, outputs=True, seed=1000))
                 for cubin, plan in (baseline, chosen)]
    problem = "" if all(f.status == Status.OK for f in fresh) else "fresh-input run failed"
    if not problem:
        outputs = [f.outputs for f in fresh]
        # (ok answers to RunRequest(outputs=True))
        assert outputs[0] is not None and outputs[1] is not None
        problem = str(outputs_match(outputs[1], outputs[0], chosen[1]) or "")
    return faster(medians["a"], medians["b"]), problem
