"""The outputs' check on the GPU (measure.pycuda.device_check), its CPU side: the
comparison kernels compile with the real nvcc, one per bench dtype, and are
cached; without nvcc the host check is used. (On the GPU:
tests/test_gpu_check.py.)"""
from __future__ import annotations

import os
import re
import subprocess

from nvcc_evo.acf.bench.spec import DTYPES
from nvcc_evo.measure.pycuda import device_check


def kernel_symbols(cubin: bytes) -> set[str]:
    """The entry names in a cubin (the ELF's .text.NAME sections)."""
    return {m.decode() for m in re.findall(rb"\.text\.(outside_[a-z0-9]+)\x00", cubin)}


def test_the_comparison_kernels_compile_for_each_bench_dtype(tmp_path):
    for arch in ("sm_80", "sm_90"):
        cubin = device_check.compile_kernels(arch, cache=tmp_path)
        assert cubin is not None and cubin[:4] == b"\x7fELF"
        assert kernel_symbols(cubin) == {device_check.kernel_name(d) for d in DTYPES}


def test_the_kernels_are_compiled_once_per_architecture_and_nvcc(tmp_path):
    first = device_check.compile_kernels("sm_90", cache=tmp_path)
    cached = list(tmp_path.glob("check-*.cubin"))
    assert len(cached) == 1 and cached[0].read_bytes() == first
    os.utime(cached[0], (0, 0))
    assert device_check.compile_kernels("sm_90", cache=tmp_path) == first
    assert os.stat(cached[0]).st_mtime == 0                    # read, not rebuilt
    device_check.compile_kernels("sm_80", cache=tmp_path)
    assert len(list(tmp_path.glob("check-*.cubin"))) == 2


def test_without_a_working_nvcc_the_host_check_is_used(tmp_path):
    broken = tmp_path / "nvcc"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    assert device_check.compile_kernels("sm_90", nvcc=str(broken), cache=tmp_path) is None
    assert device_check.compile_kernels("sm_90", nvcc=str(tmp_path / "missing"), cache=tmp_path) is None
    assert not list(tmp_path.glob("check-*.cubin"))


def test_the_source_is_what_nvcc_compiles(tmp_path):
    """The kernels' source is plain CUDA C++ the toolkit's nvcc accepts with warnings as errors."""
    (tmp_path / "check.cu").write_text(device_check.source())
    done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Werror", "all-warnings", "-o",
                           str(tmp_path / "check.cubin"), str(tmp_path / "check.cu")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
