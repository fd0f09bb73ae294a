"""`--sass` in a cloned repository (issue 38 case 6, issue 39 item 6): it
runs the real nvcc found as a build finds it, with the compile record's
options, but no program the record names (a committed record's `-ccbin
tools/g++` ran 8 times) unless `--run-recorded` asks; and it opens the
project as every verb does (driver.project): another user's walked-up ACF,
which `--retune` and `--report` refuse, is refused by `--sass` too. Real
git, g++, nvcc and ptxas; a second uid through `setpriv`."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, EVO, evo_env
from nvcc_evo.driver.cmdline.nvcc_options import without_programs
from test_trust import STRANGER, as_stranger, own_project, shared  # noqa: F401  (the fixture)

ACF = 'acf 1\nunit "spill.cu" {\n    search {\n        ptxas.opt_level in 1..3\n    }\n}\n'
SPY = """#!/bin/sh
echo "$0" >> "{log}"
exec g++ "$@"
"""


def evo(folder: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(EVO), *args], cwd=folder, env=evo_env(cache), capture_output=True, text=True,
                          timeout=300)


def test_sass_runs_no_host_compiler_a_cloned_record_names(tmp_path, evo_cache):
    if shutil.which("g++") is None:
        pytest.skip("needs g++, the host compiler the record's own wraps")
    log = tmp_path / "ran.log"
    origin = tmp_path / "origin"
    (origin / "tools").mkdir(parents=True)
    shutil.copy(DATA / "cuda" / "spill.cu", origin / "spill.cu")
    (origin / "nvcc-evo.acf").write_text(ACF)
    (origin / "tools" / "g++").write_text(SPY.format(log=log))
    (origin / "tools" / "g++").chmod(0o755)
    built = evo(origin, evo_cache, "-ccbin", "tools/g++", "--time", "../victim.csv", "-arch=sm_90", "-c", "spill.cu",
                "-o", "spill.o")
    assert built.returncode == 0 and log.exists(), built.stderr           # the author's own build: it ran
    assert (tmp_path / "victim.csv").exists()                             # (and nvcc wrote --time's file)
    assert list((origin / ".nvcc-evo" / "compile-db").glob("*.json"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(origin)], check=True)
    subprocess.run([*git, "-C", str(origin), "add", "-A", "-f", "spill.cu", "nvcc-evo.acf", "tools",
                    ".nvcc-evo/compile-db"], check=True)
    subprocess.run([*git, "-C", str(origin), "commit", "-qm", "project"], check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    log.unlink()
    (tmp_path / "victim.csv").unlink()
    shown = evo(clone, evo_cache, "--sass", "--target", "sm_90")
    assert shown.returncode == 0, shown.stderr
    assert not log.exists(), f"the record's host compiler ran: {log.read_text()}"
    assert not (tmp_path / "victim.csv").exists()                        # a record's --time FILE is not written
    assert "--sass runs no program a compile record names; left out: -ccbin tools/g++" in shown.stderr
    assert "per kernel, baseline -> chosen [sm_90]" in shown.stdout            # built, with nvcc's own host compiler
    asked = evo(clone, evo_cache, "--sass", "--target", "sm_90", "--run-recorded")
    assert asked.returncode == 0 and log.exists() and "left out" not in asked.stderr, asked.stderr


def test_what_names_a_program_is_left_out(tmp_path):
    (tmp_path / "opts.rsp").write_text("-I include --compiler-bindir=tools/cc -Xcompiler -fplugin=./p.so\n")
    argv = ["-O3", "-ccbin", "tools/g++", "-Xcompiler", "-Wall,-B/tmp/x", "--options-file", "opts.rsp",
            "-Xcompiler=-wrapper,sh", "-Xcompiler", "-fPIC", "-c", "a.cu"]
    kept, left = without_programs(argv, tmp_path)
    assert kept == ["-O3", "-I", "include", "-Xcompiler", "-fPIC", "-c", "a.cu"]
    assert left == ["-ccbin tools/g++", "-Xcompiler -Wall,-B/tmp/x", "--compiler-bindir=tools/cc",
                    "-Xcompiler -fplugin=./p.so", "-Xcompiler=-wrapper,sh"]


def test_sass_refuses_another_users_acf_as_every_verb_does(shared, evo_cache):  # noqa: F811
    as_stranger("sh", "-c", f"printf 'acf 1\\nunit \"**\" {{\\n    pin ptxas.opt_level = 0\\n}}\\n' > "
                f"{shared}/nvcc-evo.acf")
    assert os.stat(shared / "nvcc-evo.acf").st_uid == STRANGER
    project = own_project(shared)
    for verb in (("--sass", "--target", "sm_90"), ("--report",), ("--retune", "--dry-run")):
        done = evo(project, evo_cache, *verb)
        assert done.returncode == 3, (verb, done.stderr)
        assert f"{shared / 'nvcc-evo.acf'} is not used: it is owned by uid {STRANGER}" in done.stderr, verb
        assert "per kernel" not in done.stdout
