"""Odd setups said plainly (issue 38, case 9), each run as it happens: a
bad NVCC_EVO_STALE (a build took it, the verbs refused it: now one rule), a
project folder whose name holds a newline (its units "matched no file"), a
plain file named `.nvcc-evo` (called "a FIFO, device or socket"), and a
stand-in ptxas that does not answer `--version` ("internal error" with a
Python exception). Real nvcc, ptxas and the installed commands."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import DATA, EVO, evo_env

ACF = 'acf 1\nunit "spill.cu" {\n    search {\n        ptxas.maxrregcount in {32, 64}\n    }\n}\n'
BUILD = ("-arch=sm_90", "-c", "spill.cu", "-o", "spill.o")


def project(folder: Path, acf: str = ACF) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(DATA / "cuda" / "spill.cu", folder / "spill.cu")
    (folder / "nvcc-evo.acf").write_text(acf)
    return folder


def evo(folder: Path, cache: Path, *args: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(EVO), *args], cwd=folder, env=evo_env(cache, **extra), capture_output=True,
                          text=True, timeout=300)


def test_a_bad_stale_policy_is_one_rule_for_builds_and_verbs(tmp_path, evo_cache):
    folder = project(tmp_path / "p", ACF.replace("    }\n}", "    }\n    target sm_90 {\n        "
                                                 "ptxas.maxrregcount = 32\n    }\n}"))
    said = "NVCC_EVO_STALE=bogus: expected one of keep, default"
    built = evo(folder, evo_cache, *BUILD, NVCC_EVO_STALE="bogus", NVCC_EVO_LOG=str(tmp_path / "log"))
    assert built.returncode == 0 and (folder / "spill.o").is_file(), built.stderr
    assert f"{said}; building without tuned flags" in built.stderr                 # (was: taken as keep)
    assert '"added": []' in (tmp_path / "log").read_text()
    explained = evo(folder, evo_cache, "--explain", *BUILD, NVCC_EVO_STALE="bogus")
    assert explained.returncode == 0 and "NVCC_EVO_STALE is not keep or default" in explained.stdout
    for verb in (("--retune", "--dry-run"), ("--sass", "--target", "sm_90"), ("--report",)):
        refused = evo(folder, evo_cache, *verb, NVCC_EVO_STALE="bogus")
        assert refused.returncode == 2 and f"nvcc-evo: error: {said}" in refused.stderr, (verb, refused.stderr)
    good = evo(folder, evo_cache, *BUILD, NVCC_EVO_STALE="default")
    assert good.returncode == 0 and good.stderr == ""


def test_a_newline_in_the_projects_folder_name(tmp_path, evo_cache):
    folder = project(tmp_path / "my\nproject")
    checked = evo(folder, evo_cache, "--acf-check", "nvcc-evo.acf")
    assert checked.returncode == 0 and "matches no file" not in checked.stderr, checked.stderr
    listed = evo(folder, evo_cache, "--retune", "--dry-run", "--backend", "static")
    assert listed.returncode == 0 and "1 to retune" in listed.stderr, listed.stderr


def test_a_plain_file_where_the_nvcc_evo_folder_belongs(tmp_path, evo_cache):
    folder = project(tmp_path / "p")
    (folder / ".nvcc-evo").write_text("notes\n")
    built = evo(folder, evo_cache, *BUILD)
    assert built.returncode == 0, built.stderr
    assert f"{folder / '.nvcc-evo'} is not a folder (a regular file)" in built.stderr, built.stderr
    retune = evo(folder, evo_cache, "--retune", "--backend", "static", "--evaluations", "2")
    assert retune.returncode == 3 and f"{folder / '.nvcc-evo'} is not a folder (a regular file)" in retune.stderr
    assert "FIFO" not in built.stderr + retune.stderr


def test_a_stand_in_ptxas_that_tells_no_release(tmp_path, evo_cache):
    folder = tmp_path / "p"
    folder.mkdir()
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90a", str(DATA / "cuda" / "regs.cu"), "-o", "k.ptx"], cwd=folder,
                   check=True)
    (folder / "nvcc-evo.acf").write_text('acf 1\nunit kernel "*" {\n    target sm_90a {\n        '
                                         'ptxas.opt_level = 1\n    }\n}\n')
    standin = folder / "standin"
    standin.write_text(f'#!/bin/sh\ncase "$1" in --version) exit 0;; esac\nexec {shutil.which("ptxas")} "$@"\n')
    standin.chmod(0o755)
    done = subprocess.run([str(Path(sys.executable).parent / "nvcc-evo-ptxas"), "--gpu-name=sm_90a", "k.ptx", "-o",
                           "k.cubin"], cwd=folder, env=evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=str(standin)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and (folder / "k.cubin").is_file(), done.stderr
    assert f"{standin} is not a ptxas that tells its release (`ptxas --version`); compiling exactly as asked" \
        in done.stderr
    assert "internal error" not in done.stderr and "OSError" not in done.stderr
