"""The outputs' check on the GPU agrees with the host check (measure.check)
for every bench dtype: within tolerance, one element outside, NaN, unequal
in an exact check (run on a machine with an NVIDIA GPU; skipped elsewhere
with the reason)."""
from __future__ import annotations

import numpy as np
import pytest

from nvcc_evo.acf.bench.spec import DTYPES, ArrayPlan, BenchPlan, CheckPlan
from nvcc_evo.measure.check import as_reference, outputs_match
from nvcc_evo.measure.pycuda.data import POISON, to_storage

pytestmark = pytest.mark.gpu

COUNT = 3 * 1024 * 1024 + 17
INTEGERS = {d for d in DTYPES if not d.startswith(("f", "bf"))}      # checked exactly          # more than one grid-stride pass, and not a multiple of the block


@pytest.fixture(scope="module")
def device():
    from nvcc_evo.measure.pycuda.worker import Device
    device = Device(0)
    yield device
    device.context.pop()


def plan_for(dtype: str, exact: bool) -> BenchPlan:
    out = ArrayPlan("y", dtype, COUNT, "output", ())
    check = CheckPlan("y", 0.0 if exact else 1e-2, 0.0 if exact else 1e-3, exact)
    return BenchPlan(kernel="k", args=(out,), grid=(1, 1, 1), block=(1, 1, 1), shared=0, checks=(check,))


def values(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dtype in INTEGERS:
        return to_storage(rng.integers(0, 100, COUNT), dtype)
    return to_storage(rng.uniform(-4, 4, COUNT), dtype)


def spoiled(base: np.ndarray, plan: BenchPlan, dtype: str, how: str) -> np.ndarray:
    out = base.copy()
    if how == "one-off":          # the last element, 50 more (integers: modulo 100, as they were drawn)
        last = as_reference({"y": base}, plan)["y"][-1] + 50
        out[COUNT - 1] = to_storage(np.array([last % 100 if dtype in INTEGERS else last]), dtype)[0]
    elif how == "unwritten":
        out.view(np.uint8)[:out.itemsize] = POISON
    return out


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("how", ["same", "one-off", "unwritten"])
def test_the_device_check_agrees_with_the_host_check(device, dtype, how):
    plan = plan_for(dtype, exact=dtype in INTEGERS)
    base = values(dtype)
    reference = as_reference({"y": base}, plan)
    got = spoiled(base, plan, dtype, how)
    on_device = {"y": device.cuda.to_device(got)}
    wrong = device.compare.outside(f"ref-{dtype}", reference, plan, on_device)
    said = outputs_match({"y": got}, reference, plan)
    assert wrong is not None
    assert (wrong == 0) == (said is None) == (how == "same"), (wrong, said)
    assert wrong == (0 if how == "same" else 1)


def test_noise_within_the_tolerance_passes_and_beyond_it_fails(device):
    plan = plan_for("f32", exact=False)
    base = values("f32")
    reference = as_reference({"y": base}, plan)
    inside = (base.astype(np.float64) * (1 + 5e-3)).astype(np.float32)
    outside = (base.astype(np.float64) * (1 + 5e-2) + 1e-2).astype(np.float32)
    for got, expected in ((inside, 0), (outside, None)):
        wrong = device.compare.outside("noise", reference, plan, {"y": device.cuda.to_device(got)})
        said = outputs_match({"y": got}, reference, plan)
        assert (wrong == 0) == (said is None) == (expected == 0)


def test_a_reference_replaced_under_its_key_is_uploaded_again(device):
    plan = plan_for("f32", exact=False)
    first, second = values("f32"), values("f32") + np.float32(1)
    got = {"y": device.cuda.to_device(second)}
    assert device.compare.outside("again", as_reference({"y": first}, plan), plan, got) > 0
    assert device.compare.outside("again", as_reference({"y": second}, plan), plan, got) == 0
