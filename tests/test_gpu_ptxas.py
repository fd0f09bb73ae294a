"""Does the driver load what another ptxas makes? Asked of libcuda itself."""
from __future__ import annotations

import ctypes

import pytest

from nvcc_evo.driver.cmdline import cuda_driver, ptxas
from test_ptxas_choice import PTXAS133, needs_133


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_has_driver(), reason="a CUDA driver is here: the GPU test asks it")
def test_without_a_driver_nothing_is_claimed():
    assert cuda_driver.driver_version() is None
    assert cuda_driver.load_problem(b"not a cubin") is None


@pytest.mark.gpu
@needs_133
def test_the_driver_loads_ptxas_133_cubins_and_says_why_not_for_garbage(evo_cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    assert ptxas.driver_problem(ptxas.probe(str(PTXAS133)), "sm_90") == ""
    problem = cuda_driver.load_problem(b"\x7fELF not a cubin at all")
    assert problem.startswith("CUDA_ERROR_") and f"driver of CUDA {cuda_driver.driver_version()}" in problem
