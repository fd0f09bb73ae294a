"""nvcc-evo never runs itself as the real nvcc, even through a wrapper that
clears the environment (issue 38, case 8): a `CUDA_HOME/bin/nvcc` script
that runs `env -i ... nvcc-evo` made nvcc-evo call itself without end (the
NVCC_EVO_ACTIVE guard lives in the environment the wrapper throws away).
Now a script that names nvcc-evo is never taken for the real nvcc, and a
compile that runs a script as nvcc records its process, so that a call of
nvcc-evo it leads to, by any name, in the same process (exec) or below it
(a fork, as sudo makes), stops with exit 3. Real wrapper scripts, real
processes; each run is given a time limit it never needs."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, EVO, evo_env

SAID = "nvcc-evo called itself as nvcc (the nvcc it runs leads back to nvcc-evo)"


def cuda_home(tmp_path: Path, body: str) -> Path:
    """A CUDA_HOME whose bin/nvcc is a wrapper script; `ncc` is nvcc-evo under another name."""
    (tmp_path / "alias").mkdir()
    (tmp_path / "alias" / "ncc").symlink_to(EVO)
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "nvcc"
    script.write_text("#!/bin/sh\n" + body.format(home=home, alias=tmp_path / "alias" / "ncc", evo=EVO) + "\n")
    script.chmod(0o755)
    return home


def compile_in(folder: Path, cache: Path, home: Path) -> subprocess.CompletedProcess:
    env = evo_env(cache, CUDA_HOME=str(home), PATH=f"{home / 'bin'}:/usr/bin:/bin")
    return subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "spill.o"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("with_acf", [False, True])
@pytest.mark.parametrize("body", [
    'exec env -i PATH={home}/bin:/usr/bin:/bin {alias} "$@"',            # in the same process, by another name
    'env -i PATH={home}/bin:/usr/bin:/bin {alias} "$@"',                 # in a child of the wrapper (as sudo runs)
    'exec env -i CUDA_HOME={home} {evo} "$@"',                           # naming nvcc-evo
])
def test_a_wrapper_that_clears_the_environment_stops_at_once(tmp_path, evo_cache, body, with_acf):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "spill.cu").write_text((DATA / "cuda" / "spill.cu").read_text())
    if with_acf:
        (folder / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    pin ptxas.opt_level = 1\n}\n')
    home = cuda_home(tmp_path, body)
    done = compile_in(folder, evo_cache, home)
    assert done.returncode == 3, done.stderr
    assert SAID in done.stderr or f"{home / 'bin' / 'nvcc'}: nvcc-evo itself, or a script that runs it" \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("nvcc-evo: error:") <= 3


def test_a_wrapper_of_the_real_nvcc_still_compiles(tmp_path, evo_cache, real_nvcc):
    """A script that runs the real nvcc is a wrapper like any other: recorded, and the build goes on."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "spill.cu").write_text((DATA / "cuda" / "spill.cu").read_text())
    home = cuda_home(tmp_path, f'exec env -i PATH=/usr/bin:/bin {real_nvcc} "$@"')
    done = compile_in(folder, evo_cache, home)
    assert done.returncode == 0 and (folder / "spill.o").is_file(), done.stderr
    assert os.path.isdir(f"/tmp/nvcc-evo-exec-{os.geteuid()}")
