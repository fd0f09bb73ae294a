"""Shared fixtures: the real nvcc, temporary projects, and the GPU marker."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def pytest_collection_modifyitems(config, items):
    reason = _gpu_missing_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _gpu_missing_reason() -> str | None:
    try:
        import pycuda.driver as driver  # noqa: F401
    except ImportError:
        return "needs PyCUDA and an NVIDIA GPU (run on the H200 through the device tool)"
    try:
        driver.init()
        if driver.Device.count() == 0:
            return "no CUDA device on this machine"
    except Exception as error:  # the driver's own error types vary by version
        return f"CUDA driver unavailable: {error}"
    return None


@pytest.fixture(scope="session")
def real_nvcc() -> Path:
    found = shutil.which("nvcc")
    if found is None:
        pytest.fail("the real nvcc must be on PATH for the test suite")
    return Path(found).resolve()


def run_evo(*args: str, cwd: Path | None = None, env: dict | None = None, input: str | None = None):
    """Run the installed `nvcc-evo` command as a user would."""
    exe = Path(sys.executable).parent / "nvcc-evo"
    return subprocess.run([str(exe), *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True)
