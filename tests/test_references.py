"""Numpy references named by bench specs, and how the GPU backend uses them:
on the CPU, with a stand-in for the measuring process that answers canned
outputs (the real one is exercised by tests/test_gpu*.py on the H200)."""
from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from conftest import ROOT
from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.resolve import check, load
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
from nvcc_evo.errors import AcfError
from nvcc_evo.measure.check import checked, take_reference
from nvcc_evo.measure.pycuda.bench import GpuBench
from nvcc_evo.measure.pycuda.data import host_array
from nvcc_evo.measure.pycuda.pipe import Answer
from nvcc_evo.execute.measurers import load_reference

ACF = load(ROOT / "kernels" / "nvcc-evo.acf")
SOFTMAX = next(u for u in ACF.units if u.globs == ("softmax.cu",))


class CannedPool:
    """Answers each request with the next canned output set, checked as the
    measuring process checks them (the references it was sent or kept)."""

    hello = {"nvml": False}
    replaced = 0
    lock = threading.RLock()         # WorkerPool's: one request at a time

    def __init__(self, outputs):
        self.outputs, self.references = list(outputs), {}

    def request(self, message, timeout=None):
        take_reference(message, self.references)
        return Answer("ok", times_us=[10.0, 10.5, 11.0], **checked(message, self.outputs.pop(0), self.references))


def small_softmax_plan():
    bench = parse_text('acf 1\nunit "softmax.cu" { bench { kernel softmax reference "references.py:softmax" '
                       'arg x : f32[8 * 300] = random(seed=5, low=-8, high=8) arg y : f32[8 * 300] = output '
                       'arg rows : i32 = 8 arg cols : i32 = 300 grid (8) block (BLOCK) check y rtol 1e-5 } }'
                       ).units[0].bench
    return bench, plan_bench(bench, {"BLOCK": 256})


def true_softmax(plan):
    x = host_array(plan.arrays[0], 0).astype(np.float64).reshape(8, 300)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32).ravel()


def test_every_kernel_names_a_loadable_reference():
    for unit in ACF.units:
        function = load_reference(unit.bench, ROOT / "kernels")
        assert callable(function), unit


def test_candidates_are_checked_against_numpy_and_a_wrong_baseline_is_caught():
    bench, plan = small_softmax_plan()
    right = true_softmax(plan)
    wrong = right.copy()
    wrong[::7] *= 1.01
    job = CompileJob(shutil.which("nvcc"), ("-c", "softmax.cu"), str(ROOT / "kernels"), "softmax.cu", "sm_90")
    ok = compile_candidate(job)                 # a real cubin: the static facts come along
    reference = load_reference(bench, ROOT / "kernels")
    good = GpuBench(bench, CannedPool([{"y": right}, {"y": wrong}]), "sm_90", lambda g: {"BLOCK": 256},
                    energy=False, expected_fn=reference)
    assert good.measure(None, (), ok).ok
    second = good.measure(None, (), ok)
    assert second.status == "wrong-answer" and "against the numpy reference" in second.detail
    bad = GpuBench(bench, CannedPool([{"y": wrong}]), "sm_90", lambda g: {"BLOCK": 256},
                   energy=False, expected_fn=reference)
    first = bad.measure(None, (), ok)
    assert first.status == "wrong-answer" and "the baseline disagrees with the numpy reference" in first.detail


def test_reference_must_name_a_file_and_function(tmp_path):
    text = 'acf 1\nunit "k.cu" { bench { kernel k reference "nothere.py:f" grid (1) block (1) } }\n'
    with pytest.raises(AcfError, match="reference file 'nothere.py' not found"):
        check(parse_text(text, str(tmp_path / "x.acf")), text)
    text = text.replace("nothere.py:f", "refs")
    with pytest.raises(AcfError, match='a reference reads "FILE.py:FUNCTION"'):
        check(parse_text(text, str(tmp_path / "x.acf")), text)


def test_the_references_agree_with_independent_formulas():
    """The reference functions themselves, on small inputs."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("refs", ROOT / "kernels" / "references.py")
    refs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refs)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 12)
    assert np.allclose(refs.softmax(x=x, rows=3, cols=4)["y"].reshape(3, 4).sum(axis=1), 1)
    y = refs.rmsnorm(x=x, w=np.ones(4), rows=3, cols=4, eps=0.0)["y"].reshape(3, 4)
    assert np.allclose((y ** 2).mean(axis=1), 1)
    q, k, v = rng.uniform(-1, 1, 2 * 4), rng.uniform(-1, 1, 2 * 3 * 4), rng.uniform(-1, 1, 2 * 3 * 4)
    out = refs.decode_attention(q=q, k=k, v=v, scale=0.0, HEADS=2, HEAD_DIM=4, LEN=3)["out"].reshape(2, 4)
    assert np.allclose(out, v.reshape(2, 3, 4).mean(axis=1))          # scale 0: uniform weights
    assert refs.reduce_sum(x=x, total=np.zeros(1))["total"][0] == pytest.approx(x.sum())


def test_attention_reference_masks_the_future_when_causal():
    flash = load_reference(next(u for u in ACF.units if u.globs == ("flash_attention.cu",)).bench, ROOT / "kernels")
    rng = np.random.default_rng(0)
    bh, length, dim = 2, 5, 4
    q, k, v = (rng.uniform(-1, 1, bh * length * dim) for _ in range(3))
    causal = flash(q, k, v, 0.5, 1, BH=bh, L=length, HEAD_DIM=dim)["o"].reshape(bh, length, dim)
    full = flash(q, k, v, 0.5, 0, BH=bh, L=length, HEAD_DIM=dim)["o"].reshape(bh, length, dim)
    values = v.reshape(bh, length, dim)
    assert np.allclose(causal[:, 0], values[:, 0])                # the first position sees only itself
    assert np.allclose(causal[:, -1], full[:, -1])                # the last sees everything
    assert not np.allclose(causal[:, 1:-1], full[:, 1:-1])
    scores = q.reshape(bh, length, dim)[1, 2] @ k.reshape(bh, length, dim)[1, :3].T * 0.5
    weights = np.exp(scores) / np.exp(scores).sum()
    assert np.allclose(causal[1, 2], weights @ values[1, :3])
