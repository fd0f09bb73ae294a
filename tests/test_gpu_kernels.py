"""kernels/ against numpy references, on the GPU (small sizes): the suite's
kernels compute what they claim, so a tuned build compared with the default
build is compared with something right."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import ROOT
from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
from nvcc_evo.measure.pycuda.data import host_array
from nvcc_evo.measure.pycuda.pipe import RunRequest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def pool():
    from nvcc_evo.measure.pycuda.pool import WorkerPool
    pool = WorkerPool()
    yield pool
    pool.close()


def run(pool, source: str, bench: str, defines: dict) -> tuple[dict, dict]:
    """(outputs, host inputs) of one launch of kernels/SOURCE with `bench`."""
    spec = parse_text(f'acf 1\nunit "{source}" {{ bench {{ {bench} }} }}\n').units[0].bench
    plan = plan_bench(spec, defines)
    flags = tuple(f"-D{k}={v}" for k, v in defines.items())
    job = CompileJob(shutil.which("nvcc"), ("-c", source), str(ROOT / "kernels"), source, pool.hello["arch"], flags)
    result = compile_candidate(job)
    assert result.ok, result.stderr
    answer = pool.request(RunRequest(result.cubin, plan, outputs=True))
    assert answer.status == "ok", answer
    inputs = {a.name: host_array(a, 0) for a in plan.arrays if a.init != "output"}
    return answer.outputs, inputs


def test_softmax(pool):
    out, x = run(pool, "softmax.cu", "kernel softmax arg x : f32[64 * 1000] = random(seed=1, low=-8, high=8) "
                 "arg y : f32[64 * 1000] = output arg r : i32 = 64 arg c : i32 = 1000 grid (64) block (256) "
                 "check y rtol 1e-5", {"BLOCK": 256, "VEC": 4, "ITEMS": 1})
    rows = x["x"].astype(np.float64).reshape(64, 1000)
    ref = np.exp(rows - rows.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    assert np.allclose(out["y"].reshape(64, 1000), ref, rtol=1e-5, atol=1e-7)


def test_rmsnorm(pool):
    out, x = run(pool, "rmsnorm.cu", "kernel rmsnorm arg x : f32[32 * 1000] = random(seed=2) "
                 "arg w : f32[1000] = random(seed=3, low=0.5, high=1.5) arg y : f32[32 * 1000] = output "
                 "arg r : i32 = 32 arg c : i32 = 1000 arg eps : f32 = 0.000001 grid (32) block (256) check y rtol 1e-5",
                 {"BLOCK": 256, "VEC": 4})
    rows = x["x"].astype(np.float64).reshape(32, 1000)
    ref = rows / np.sqrt((rows ** 2).mean(axis=1, keepdims=True) + 1e-6) * x["w"]
    assert np.allclose(out["y"].reshape(32, 1000), ref, rtol=1e-5, atol=1e-6)


def test_reduce_sum(pool):
    out, x = run(pool, "reduce_sum.cu", "kernel reduce_sum arg x : f32[1000003] = random(seed=4) "
                 "arg total : f64[1] = constant(0) arg n : i64 = 1000003 grid (8) block (256) check total rtol 1e-9",
                 {"BLOCK": 256, "ITEMS": 4})
    assert out["total"][0] == pytest.approx(x["x"].astype(np.float64).sum(), rel=1e-9, abs=1e-9)


def test_sgemm(pool):
    out, x = run(pool, "sgemm_regblock.cu", "kernel sgemm arg A : f32[192 * 160] = random(seed=5) "
                 "arg B : f32[160 * 200] = random(seed=6) arg C : f32[192 * 200] = output arg m : i32 = 192 "
                 "arg n : i32 = 200 arg k : i32 = 160 grid (cdiv(200, 64), cdiv(192, 64)) block (64) check C rtol 1e-4",
                 {})
    ref = x["A"].astype(np.float64).reshape(192, 160) @ x["B"].astype(np.float64).reshape(160, 200)
    assert np.allclose(out["C"].reshape(192, 200), ref, rtol=1e-4, atol=1e-4)


def test_hgemm_wmma(pool):
    out, x = run(pool, "hgemm_wmma.cu", "kernel hgemm arg A : f16[256 * 512] = random(seed=7) "
                 "arg B : f16[512 * 384] = random(seed=8) arg C : f32[256 * 384] = output arg m : i32 = 256 "
                 "arg n : i32 = 384 arg k : i32 = 512 grid (384 / 128, 256 / 128) block (256) check C rtol 1e-3", {})
    ref = x["A"].astype(np.float64).reshape(256, 512) @ x["B"].astype(np.float64).reshape(512, 384)
    assert np.allclose(out["C"].reshape(256, 384), ref, rtol=1e-3, atol=1e-3)


def test_decode_attention(pool):
    heads, length, dim = 4, 1024, 128
    out, x = run(pool, "decode_attention.cu", f"kernel decode_attention arg q : f16[{heads * dim}] = random(seed=9) "
                 f"arg k : f16[{heads * length * dim}] = random(seed=10) arg v : f16[{heads * length * dim}] = "
                 f"random(seed=11) arg out : f32[{heads * dim}] = output arg scale : f32 = 0.08838834764831845 "
                 f"grid ({heads}) block (256) check out rtol 1e-4", {"LEN": length, "HEAD_DIM": dim})
    q = x["q"].astype(np.float64).reshape(heads, dim)
    k = x["k"].astype(np.float64).reshape(heads, length, dim)
    v = x["v"].astype(np.float64).reshape(heads, length, dim)
    scores = np.einsum("hd,htd->ht", q, k) * 0.08838834764831845
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    ref = np.einsum("ht,htd->hd", p / p.sum(axis=1, keepdims=True), v)
    assert np.allclose(out["out"].reshape(heads, dim), ref, rtol=1e-3, atol=1e-4)


def test_softmax_rows_too_long_for_the_tiling_fail_loudly(pool):
    out, _ = run(pool, "softmax.cu", "kernel softmax arg x : f32[4 * 1000] = random(seed=1) "
                 "arg y : f32[4 * 1000] = output arg r : i32 = 4 arg c : i32 = 1000 grid (4) block (128) "
                 "check y rtol 1e-5", {"BLOCK": 128, "VEC": 1, "ITEMS": 4})
    assert np.isnan(out["y"]).all()


@pytest.mark.parametrize("split_k", [1, 4])
def test_hgemm_decode_shape_with_split_k(pool, split_k):
    m, n, k = 32, 256, 1024
    out, x = run(pool, "hgemm_decode.cu", f"kernel hgemm arg A : f16[{m * k}] = random(seed=12) "
                 f"arg B : f16[{k * n}] = random(seed=13) arg C : f32[{m * n}] = constant(0) arg m : i32 = {m} "
                 f"arg n : i32 = {n} arg k : i32 = {k} grid ({n} / 64, {m} / 16, {split_k}) block (64) "
                 "check C rtol 1e-3",
                 {"BM": 16, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "SPLIT_K": split_k})
    ref = x["A"].astype(np.float64).reshape(m, k) @ x["B"].astype(np.float64).reshape(k, n)
    assert np.allclose(out["C"].reshape(m, n), ref, rtol=1e-3, atol=1e-3)


def attention(q, k, v, scale, causal):
    scores = np.einsum("hqd,hkd->hqk", q, k) * scale
    if causal:
        scores = np.where(np.triu(np.ones(scores.shape[1:], dtype=bool), 1), -np.inf, scores)
    p = np.exp(scores - scores.max(axis=2, keepdims=True))
    return np.einsum("hqk,hkd->hqd", p / p.sum(axis=2, keepdims=True), v)


@pytest.mark.parametrize("dim,causal,warps,bkv", [(128, 0, 4, 64), (128, 1, 4, 32), (64, 1, 2, 128), (64, 0, 8, 16)])
def test_flash_attention(pool, dim, causal, warps, bkv):
    heads, length = 3, 256
    size = heads * length * dim
    source = "flash_attention.cu" if dim == 128 else "flash_attention_d64.cu"
    out, x = run(pool, source, f"kernel flash_attention arg q : f16[{size}] = random(seed=14, low=-3, high=3) "
                 f"arg k : f16[{size}] = random(seed=15) arg v : f16[{size}] = random(seed=16) "
                 f"arg o : f16[{size}] = output arg l : i32 = {length} arg scale : f32 = {dim ** -0.5} "
                 f"arg causal : i32 = {causal} grid ({length // (16 * warps)}, {heads}) block ({32 * warps}) "
                 "check o rtol 1e-2", {"HEAD_DIM": dim, "WARPS": warps, "BKV": bkv})
    q, k, v = (x[name].astype(np.float64).reshape(heads, length, dim) for name in "qkv")
    ref = attention(q, k, v, dim ** -0.5, causal)
    got = out["o"].astype(np.float64).reshape(heads, length, dim)
    assert np.allclose(got, ref, rtol=1e-2, atol=5e-4), float(np.max(np.abs(got - ref)))
    if causal:
        assert np.allclose(got[:, 0], v[:, 0], rtol=1e-3, atol=1e-3)      # the first query sees only key 0


@pytest.mark.parametrize("stages,split_k", [(2, 1), (3, 1), (4, 1), (2, 4)])
def test_hgemm_pipelined(pool, stages, split_k):
    m, n, k = 128, 192, 1024
    out, x = run(pool, "hgemm_wmma.cu", f"kernel hgemm arg A : f16[{m * k}] = random(seed=17) "
                 f"arg B : f16[{k * n}] = random(seed=18) arg C : f32[{m * n}] = constant(0) arg m : i32 = {m} "
                 f"arg n : i32 = {n} arg k : i32 = {k} grid ({n} / 64, {m} / 64, {split_k}) block (128) "
                 "check C rtol 1e-3",
                 {"BM": 64, "BN": 64, "BK": 32, "WARPS_M": 2, "WARPS_N": 2, "STAGES": stages, "SPLIT_K": split_k})
    ref = x["A"].astype(np.float64).reshape(m, k) @ x["B"].astype(np.float64).reshape(k, n)
    assert np.allclose(out["C"].reshape(m, n), ref, rtol=1e-3, atol=1e-3)
