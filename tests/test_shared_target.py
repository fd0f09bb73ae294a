"""One target block for several architectures (`target sm_80, sm_90 { ... }`):
a build gets its knobs for each architecture it names, and a retune of one
of them gives that one a block of its own, the others keeping theirs. Real
nvcc and ptxas throughout."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, EVO, evo_env, run_evo
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.resolve import check
from nvcc_evo.acf.edit.retarget import update_target
from nvcc_evo.acf import model

ACF = """acf 1
unit "regs.cu" {
    search {
        ptxas.opt_level in 1..3
    }
    # Ampere and Hopper alike
    target sm_80, sm_90 {
        ptxas.maxrregcount = 32   # measured by hand
    }
}
"""


@pytest.fixture
def project(tmp_path) -> Path:
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "regs.cu")
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    return tmp_path


def registers(stderr: str) -> list[int]:
    return [int(n) for n in re.findall(r"Used (\d+) registers", stderr)]


def build(project: Path, cache: Path, *archs: str) -> list[int]:
    codes = [f"-gencode=arch={a.replace('sm_', 'compute_')},code={a}" for a in archs]
    done = subprocess.run([str(EVO), *codes, "-Xptxas", "-v", "-c", "regs.cu", "-o", "regs.o"], cwd=project,
                          env=evo_env(cache), capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    return registers(done.stderr)


def test_a_build_gets_the_shared_knobs_on_each_architecture_it_names(project, evo_cache):
    plain = subprocess.run(["nvcc", "-arch=sm_75", "-Xptxas", "-v", "-c", "regs.cu", "-o", "plain.o"],
                           cwd=project, capture_output=True, text=True)
    assert build(project, evo_cache, "sm_80") == [32]
    assert build(project, evo_cache, "sm_80", "sm_90") == [32, 32]
    assert build(project, evo_cache, "sm_75") == registers(plain.stderr) and registers(plain.stderr) != [32]
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=evo_env(evo_cache))
    assert "target sm_80, sm_90" in explained.stdout, explained.stdout


def test_writing_one_architecture_splits_it_out_of_a_shared_block():
    tuned = model.Target("sm_90", None, (model.Setting("ptxas.opt_level", 2),),
                         (model.Record("toolkit", "13.0.88"),))
    text = update_target(ACF, ("regs.cu",), tuned)
    check(parse_text(text, "x.acf"), text)
    assert "    # Ampere and Hopper alike\n    target sm_80 {\n        ptxas.maxrregcount = 32   # measured by hand\n" \
        in text, text
    assert "    target sm_90 {\n        ptxas.opt_level = 2\n        provenance {\n" in text
    unit = parse_text(text, "x.acf").units[0]
    assert [t.archs for t in unit.targets] == [("sm_80",), ("sm_90",)]
    again = update_target(text, ("regs.cu",), tuned)           # now its own block: replaced in place
    assert again == text


def test_a_retune_of_one_architecture_leaves_the_others_their_shared_entry(project, evo_cache):
    done = run_evo("--retune", "--backend", "static", "--target", "sm_90", cwd=project, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    unit = parse_text((project / "nvcc-evo.acf").read_text(), "acf").units[0]
    assert [t.archs for t in unit.targets] == [("sm_80",), ("sm_90",)]
    assert unit.targets[0].settings == (model.Setting("ptxas.maxrregcount", 32),)
    assert unit.targets[1].provenance is not None
    assert build(project, evo_cache, "sm_80") == [32]


def test_a_dry_run_lists_each_architecture_a_shared_block_serves(project, evo_cache):
    done = run_evo("--retune", "--backend", "static", "--dry-run", cwd=project, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    assert re.findall(r"\[(sm_\d+)\]", done.stdout) == ["sm_80", "sm_90"], done.stdout
