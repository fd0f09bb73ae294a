"""An ACF that cannot be read is a located error or a clear warning, never a
traceback or silence: a build warns and compiles untuned (verbose or not),
`--explain` and `--retune` say where and why. Through the real wrapper."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import DATA, evo_env, run_evo

LATIN1 = b'acf 1\nunit "regs.cu" {\n    pin ptxas.maxrregcount = 32  # caf\xe9\n}\n'
WHERE = "nvcc-evo.acf:3:39: the file is not UTF-8 text: byte(s) 0xe9 here (save it as UTF-8)"


@pytest.fixture
def project(tmp_path) -> Path:
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "regs.cu")
    return tmp_path


def registers(stderr: str) -> list[int]:
    return [int(n) for n in re.findall(r"Used (\d+) registers", stderr)]


@pytest.mark.parametrize("verbose", [{}, {"NVCC_EVO_VERBOSE": "1"}], ids=["quiet", "verbose"])
def test_a_build_with_a_non_utf8_acf_warns_and_builds_untuned(project, evo_cache, verbose):
    (project / "nvcc-evo.acf").write_bytes(LATIN1)
    built = run_evo("-arch=sm_90", "-Xptxas", "-v", "-c", "regs.cu", "-o", "regs.o", cwd=project,
                    env=evo_env(evo_cache, **verbose))
    assert built.returncode == 0 and (project / "regs.o").is_file() and built.stdout == ""
    assert f"nvcc-evo: warning: the ACF has errors; building without tuned flags: {project}/{WHERE}" in built.stderr
    assert registers(built.stderr) == [56]                       # untuned (the pin would cap it at 32)
    assert ("nvcc-evo: added: (nothing)" in built.stderr) == bool(verbose)
    assert "Traceback" not in built.stderr


def test_explain_and_retune_say_where_the_bad_byte_is(project, evo_cache):
    (project / "nvcc-evo.acf").write_bytes(LATIN1)
    env = evo_env(evo_cache)
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env)
    assert explained.returncode == 1                      # the report, then every located error
    assert f"problem: the ACF has errors; building without tuned flags: {project}/{WHERE}" in explained.stdout
    assert explained.stderr.startswith(f"{project}/nvcc-evo.acf:3:39: error: the file is not UTF-8 text")
    retune = run_evo("--retune", "--backend", "static", "--dry-run", cwd=project, env=env)
    assert retune.returncode == 1 and retune.stdout == ""
    assert retune.stderr == (f"{project}/nvcc-evo.acf:3:39: error: the file is not UTF-8 text: byte(s) 0xe9 here "
                             "(save it as UTF-8)\n    pin ptxas.maxrregcount = 32  # caf\ufffd\n" + " " * 38 + "^\n")


def test_a_bom_is_read_as_nothing(project, evo_cache):
    (project / "nvcc-evo.acf").write_bytes(b"\xef\xbb\xbf" + LATIN1.replace(b"caf\xe9", b"cafe"))
    built = run_evo("-arch=sm_90", "-Xptxas", "-v", "-c", "regs.cu", "-o", "regs.o", cwd=project,
                    env=evo_env(evo_cache))
    assert (built.returncode, registers(built.stderr)) == (0, [32]) and "nvcc-evo:" not in built.stderr


@pytest.mark.parametrize("named", ["missing.acf", "."], ids=["missing", "a folder"])
def test_nvcc_evo_acf_naming_nothing_readable_warns_in_builds_and_stops_the_verbs(project, evo_cache, named):
    path = (project / named).resolve()
    env = evo_env(evo_cache, NVCC_EVO_ACF=path)
    why = "No such file or directory" if named == "missing.acf" else "Is a directory"
    said = f"cannot read the ACF {path} (NVCC_EVO_ACF={path}): {why}"
    built = run_evo("-arch=sm_90", "-c", "regs.cu", "-o", "regs.o", cwd=project, env=env)
    assert built.returncode == 0 and (project / "regs.o").is_file()
    assert built.stderr == f"nvcc-evo: warning: {said}; building without tuned flags\n"
    explained = run_evo("--explain", "-arch=sm_90", "-c", "regs.cu", cwd=project, env=env)
    assert (explained.returncode, explained.stdout, explained.stderr) == (3, "", f"nvcc-evo: error: {said}\n")
    retune = run_evo("--retune", "--backend", "static", "--dry-run", cwd=project, env=env)
    assert (retune.returncode, retune.stderr) == (3, f"nvcc-evo: error: {said}\n")


def test_retune_with_an_acf_that_is_not_there(project, evo_cache):
    retune = run_evo("--retune", "--acf", "gone.acf", "--dry-run", cwd=project, env=evo_env(evo_cache))
    assert (retune.returncode, retune.stderr) == (2, "nvcc-evo: error: --acf gone.acf: No such file or directory\n")
