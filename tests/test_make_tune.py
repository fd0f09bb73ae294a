"""`make tune`, the README's main command, on a machine without a GPU: it
retunes what is stale on its copy (a second run right after is quick),
says where the result is and how to build with it, and installs no test
tools for it. Run on a copy of the repository whose kernels/ is one small
kernel, with the project's own virtual environment."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DATA, ROOT, evo_env, tracked_tree

ACF = """acf 1
unit "spill.cu" {
    search {
        ptxas.opt_level in 1..3
        ptxas.register_usage_level in {0, 5, 10}
    }
}
"""
VENV = ROOT / ".venv"


@pytest.fixture
def repo(tmp_path) -> Path:
    stamp = VENV / ".base"
    if not stamp.is_file() or stamp.stat().st_mtime < (ROOT / "pyproject.toml").stat().st_mtime:
        # (make would rebuild the project's own environment from the copy)
        pytest.skip("the project's .venv is not up to date with this Makefile (make test makes it)")
    tree = tracked_tree(tmp_path / "repo")
    shutil.rmtree(tree / "kernels")
    (tree / "kernels").mkdir()
    shutil.copy(DATA / "cuda" / "spill.cu", tree / "kernels" / "spill.cu")
    (tree / "kernels" / "nvcc-evo.acf").write_text(ACF)
    return tree


def make_tune(repo: Path, cache: Path):
    env = evo_env(cache)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not (Path(p) / "nvidia-smi").exists())     # a machine without a GPU
    started = time.monotonic()
    done = subprocess.run(["make", "--no-print-directory", "tune", f"VENV={VENV}", "EVALUATIONS=6"], cwd=repo,
                          env=env, capture_output=True, text=True)
    return done, time.monotonic() - started


def test_make_tune_twice(repo, evo_cache):
    first, _ = make_tune(repo, evo_cache)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "tune: no GPU here: tuning static objectives" in first.stdout
    assert "speed-safe: lower -O levels left out" in first.stderr        # a static search that costs no speed
    assert "ptxas.opt_level = 1" not in (repo / "out" / "static" / "nvcc-evo.acf").read_text()
    assert "tune: the static result is in out/static/nvcc-evo.acf" in first.stdout
    assert "tune: build with it: make kernels SRC=out/static NVCC=" in first.stdout
    assert "backend = static" in (repo / "out" / "static" / "nvcc-evo.acf").read_text()
    assert (repo / "kernels" / "nvcc-evo.acf").read_text() == ACF          # the committed ACF untouched
    assert (repo / "out" / "static" / "obj" / "spill.o").is_file()

    second, seconds = make_tune(repo, evo_cache)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "nothing to retune" in second.stderr and seconds < 30
    assert "Nothing to be done for 'kernels'" in second.stdout

    with open(repo / "kernels" / "spill.cu", "a") as source:
        source.write("// an edit\n")
    third, _ = make_tune(repo, evo_cache)
    assert third.returncode == 0, third.stdout + third.stderr
    assert '"spill.cu" [sm_90]: source changed' in third.stderr


def test_make_tune_installs_no_test_tools(tmp_path):
    fresh = tracked_tree(tmp_path / "fresh")            # no .venv: make would create it
    planned = subprocess.run(["make", "-n", "tune"], cwd=fresh, capture_output=True, text=True)
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line]
    assert installs and not any("cuda135" in line or "test" in line for line in installs), installs
