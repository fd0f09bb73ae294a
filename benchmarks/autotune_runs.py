"""Strategies replayed on a brute-forced space, each until the same
simulated budget is spent: nvcc-evo's engine through its ask/tell API, and
Kernel Tuner's own strategies in its simulation mode (`tune_cache`).

Both are charged what Kernel Tuner's simulation runner charges: compile +
verification + benchmark time of each configuration the first time it is
evaluated (a repeat is a cache hit, free), and nothing else. Kernel Tuner's
own budget (`util.TuningBudget`) adds its wall time since the tuning began
to that simulated time and takes the wall time of its start-up (the cache
read, the space built) off the limit, so on a loaded machine its strategies
stopped early (issue 40: genetic_algorithm 0.616 on a quiet machine, 0.164
on one loaded 12 on 2 cores). Here its budget counts the simulated time
alone (`simulated_budget`), so a run is the same on any machine: the
methodology's time limit (the budget and its 10% margin), then, like the
methodology's runner, every run cut at the budget by its simulated time.
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
import tempfile
import warnings
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from datetime import timedelta
from io import StringIO
from pathlib import Path

import numpy as np

from autotune_hub import COST_KEYS, HubSpace
from autotune_score import Trajectory
from nvcc_evo.engine.bayes import Bayes
from nvcc_evo.engine.evolve import Engine, Evaluation
from nvcc_evo.engine.surrogate import Guide

MARGIN = 0.1               # Kernel Tuner's time limit: the budget plus the methodology's margin
NVCC_EVO = "nvcc-evo"
KERNEL_TUNER_DEFAULT = "brute_force"     # tune_kernel's strategy when none is named
# Strategies that take no time limit (they run as they are; the run is cut at the budget).
NO_TIME_LIMIT = {"brute_force"}


@dataclass(frozen=True)
class EngineSettings:
    """What nvcc-evo's engine is built with here (its defaults unless a
    benchmark run says otherwise)."""

    population: int | None = None
    local_share: float | None = None
    guide: Guide | None = None             # the surrogate's settings (None: the operators alone, the default)
    spread: bool | None = None             # the first generation far apart (None: the engine's default)
    bayes: Bayes | None = None             # the Gaussian process's settings (None: it proposes nothing)

    def kwargs(self) -> dict:
        return {"guide": self.guide, "bayes": self.bayes,
                **{k: v for k, v in (("population", self.population),
                                     ("local_share", self.local_share),
                                     ("spread", self.spread)) if v is not None}}


def run_engine(hub: HubSpace, budget: float, seed: int, settings: EngineSettings = EngineSettings()) -> Trajectory:
    """nvcc-evo's engine: ask for a generation, answer each genome from the
    cache in turn, tell; until the simulated budget (ms) is spent."""
    engine = Engine(hub.space, np.random.default_rng(seed), **settings.kwargs())
    spent, times, values = 0.0, [], []
    while spent < budget:
        batch = engine.ask()
        if not batch:
            break                                   # the space is searched whole
        told = []
        for genome in batch:
            if spent >= budget:
                break
            answer = hub.answer(genome)
            spent += answer.cost
            times.append(spent)
            values.append(answer.value)
            told.append(Evaluation(genome, (answer.value,)))
        engine.tell(told)
    return Trajectory(np.array(times), np.array(values))


@contextmanager
def plain_cache(hub: HubSpace):
    """The cache uncompressed in a private folder (Kernel Tuner reads a
    plain JSON file), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="nvcc-evo-methodology-"))
    try:
        path = folder / "cache.json"
        with gzip.open(hub.path, "rb") as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def simulated_budget(seconds: float):
    """Kernel Tuner's budget made one of simulated time alone: `seconds` of
    what its simulation runner charges (`add_time`), no wall time, whatever
    limit its interface computed (it takes its start-up's wall time off)."""
    from kernel_tuner import util

    class Simulated(util.TuningBudget):
        def __init__(self, time_limit=None, max_fevals=None):
            super().__init__(seconds if time_limit is not None else None, max_fevals)

        def get_time_spent(self) -> timedelta:
            return self.time_spent_extra

    original = util.TuningBudget
    util.TuningBudget = Simulated
    try:
        yield
    finally:
        util.TuningBudget = original


def run_kernel_tuner(cache: Path, strategy: str, budget: float, seed: int) -> Trajectory:
    """One of Kernel Tuner's strategies on the cache in its simulation mode
    with a budget of simulated time (its global random state seeded:
    tune_kernel's `seed` is not used)."""
    from kernel_tuner.interface import tune_cache

    random.seed(seed)
    np.random.seed(seed)
    limit = budget * (1 + MARGIN) / 1000
    options = {} if strategy in NO_TIME_LIMIT else {"time_limit": limit}
    with warnings.catch_warnings(), redirect_stdout(StringIO()), simulated_budget(limit):
        warnings.simplefilter("ignore")
        results, _ = tune_cache(str(cache), strategy=strategy, strategy_options=options, quiet=True)
    return _trajectory(results, budget)


def _trajectory(results: list[dict], budget: float) -> Trajectory:
    spent, times, values = 0.0, [], []
    for result in results:
        cost = sum(result.get(k, 0.0) or 0.0 for k in COST_KEYS)
        if cost == 0.0:
            continue                                # a cache hit: nothing new learnt, nothing spent
        spent += cost
        if spent > budget:
            break
        value = result.get("time")
        times.append(spent)
        values.append(float(value) if isinstance(value, (int, float)) else np.inf)
    return Trajectory(np.array(times), np.array(values))
