"""Warm starts from a similar unit on a real GPU (issue 40, execute.warm; run on a machine with an NVIDIA
GPU, skipped elsewhere with the reason): one pycuda retune of the repository's softmax.cu and rmsnorm.cu
(the block reductions of one header, searching the same source parameters) starts rmsnorm.cu from
softmax.cu's timed evaluations (the same GPU model, target and backend), says so, and seeds its first
generation; softmax.cu, searched first, starts from nothing."""
from __future__ import annotations

import re

import pytest

from conftest import evo_env, kernels_project, run_evo
from nvcc_evo.execute.store import Store

pytestmark = pytest.mark.gpu


def test_rmsnorm_starts_from_softmaxs_timed_evaluations(tmp_path, evo_cache):
    kernels_project(tmp_path, ("softmax.cu", "rmsnorm.cu"))
    done = run_evo("--retune", "--backend", "pycuda", "--evaluations", "8", "--seed", "1", "--progress", "lines",
                   "softmax.cu", "rmsnorm.cu", cwd=tmp_path, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    softmax = [r for r in Store(tmp_path / ".nvcc-evo" / "results.jsonl").read() if r.context.unit == '"softmax.cu"']
    assert softmax and softmax[0].context.backend == "pycuda"
    origin = '"softmax.cu" (4 of 5 knobs shared, same source parameters)'
    started = re.search(r'"rmsnorm\.cu" \[(sm_\d+)\]: warm start from (\d+) evaluations of ' + re.escape(origin),
                        done.stderr)
    assert started and int(started.group(2)) >= 2, done.stderr       # its timed candidates, mapped into the space
    assert re.search(r'"rmsnorm\.cu" \[sm_\d+\] gen 1: .*warm start ([1-3]) seed\(s\): \1 from '
                     + re.escape(origin), done.stderr), done.stderr
    assert not [line for line in done.stderr.splitlines() if '"softmax.cu" [' in line and "warm start" in line]
