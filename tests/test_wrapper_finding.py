"""Finding the real nvcc: explicit setting, CUDA_HOME/CUDA_PATH, PATH; never
ourselves; a clear error (exit 3) when there is none or we would recurse."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import EVO, evo_env


def _shim_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "shim"
    folder.mkdir()
    (folder / "nvcc").symlink_to(EVO)
    return folder


def test_skips_itself_on_path(tmp_path, evo_cache):
    shim = _shim_folder(tmp_path)
    real = Path(shutil.which("nvcc")).resolve().parent
    env = evo_env(evo_cache, PATH=f"{shim}:{real}:/usr/bin:/bin")
    result = subprocess.run([str(shim / "nvcc"), "--version"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and "Cuda compiler driver" in result.stdout


def test_no_real_nvcc_is_a_clear_error(tmp_path, evo_cache):
    shim = _shim_folder(tmp_path)
    env = evo_env(evo_cache, PATH=f"{shim}:/usr/bin:/bin")
    result = subprocess.run([str(shim / "nvcc"), "--version"], env=env, capture_output=True, text=True)
    assert result.returncode == 3 and result.stdout == ""
    assert "nvcc-evo: error: no real nvcc found" in result.stderr


def test_explicit_setting_pointing_at_itself(tmp_path, evo_cache):
    env = evo_env(evo_cache, NVCC_EVO_REAL_NVCC=EVO)
    result = subprocess.run([str(EVO), "--version"], env=env, capture_output=True, text=True)
    assert result.returncode == 3 and "points at nvcc-evo itself" in result.stderr


def test_recursion_guard(tmp_path, evo_cache):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvcc").write_text(f"#!/bin/sh\nexec {EVO} \"$@\"\n")   # a wrapper script around us
    (fake / "nvcc").chmod(0o755)
    env = evo_env(evo_cache, PATH=f"{fake}:/usr/bin:/bin")
    result = subprocess.run([str(EVO), "--version"], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 3 and f"({fake / 'nvcc'}: nvcc-evo itself, or a script that runs it)" in result.stderr


def test_cuda_home_wins_over_path(tmp_path, evo_cache):
    real = Path(shutil.which("nvcc")).resolve()
    env = evo_env(evo_cache, CUDA_HOME=real.parent.parent, PATH="/usr/bin:/bin")
    result = subprocess.run([str(EVO), "--version"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and "release 13.0" in result.stdout
