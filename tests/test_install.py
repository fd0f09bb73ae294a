"""What a user installs: a wheel built from the checkout's tracked files,
installed into a fresh virtual environment with no source tree on sys.path,
must do everything, retune included (a hand-listed package set once left
nvcc_evo.measure out: `--retune` then ended in ModuleNotFoundError)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import DATA, ROOT, evo_env, tracked_tree


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    tree = tracked_tree(work / "src")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(work / "dist"), str(tree)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    # (setuptools' banner, three times in `make tune`, when the licence was a TOML table)
    assert "deprecated" not in built.stderr, built.stderr
    (found,) = (work / "dist").glob("*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel and its dependencies: the user's install."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return venv


def test_every_package_of_the_tree_is_in_the_wheel(wheel):
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "nvcc_evo").rglob("*.py")
                if "__pycache__" not in p.parts}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        shipped = archive.read("nvcc_evo/acf/grammar/acf.lark").decode()
    assert packages <= {str(Path(n).parent) for n in names}, packages - {str(Path(n).parent) for n in names}
    assert {"nvcc_evo/measure/__init__.py", "nvcc_evo/measure/pycuda/worker.py"} <= names
    assert shipped == (ROOT / "nvcc_evo" / "acf" / "grammar" / "acf.lark").read_text()


def _user_env(venv: Path, cache: Path) -> dict:
    env = evo_env(cache)
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return env


def test_the_installed_package_is_the_one_that_runs(installed, tmp_path, evo_cache):
    probe = ("import nvcc_evo, nvcc_evo.execute.measurers, nvcc_evo.acf.parse as p; p.parse_text('acf 1'); "
             "print(nvcc_evo.__file__); print(p.grammar_location())")
    done = subprocess.run([str(installed / "bin" / "python"), "-c", probe], cwd=tmp_path,
                          env=_user_env(installed, evo_cache), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    module, grammar = done.stdout.split()
    assert Path(module).is_relative_to(installed) and Path(grammar).is_relative_to(installed)


def test_both_drop_in_ptxas_programs_are_installed(installed, tmp_path, evo_cache):
    for name, role in (("nvcc-evo-ptxas", "ptxas"), ("nvcc-evo-ptxas-blackwell", "ptxas-blackwell")):
        done = subprocess.run([str(installed / "bin" / name), "--explain", "--version"], cwd=tmp_path,
                              env=_user_env(installed, evo_cache), capture_output=True, text=True)
        assert done.returncode == 0 and f"stands in for: {role} (Triton's" in done.stdout, done.stdout + done.stderr


def test_installed_console_script_retunes_a_make_project(installed, tmp_path, evo_cache):
    """A user's Make project built through the installed nvcc-evo, then a
    real static retune of its unit: the result lands in the project's ACF."""
    project = tmp_path / "proj"
    shutil.copytree(DATA / "projects" / "make", project)
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "kernel.cu" {\n'
                                          '    search {\n        ptxas.maxrregcount in {32, 64, 128}\n'
                                          '        ptxas.opt_level in {1, 3}\n    }\n'
                                          '    tune {\n        minimize registers\n    }\n}\n')   # (a knob to change)
    evo = installed / "bin" / "nvcc-evo"
    env = _user_env(installed, evo_cache)
    built = subprocess.run(["make", f"NVCC={evo}", "kernel.o"], cwd=project, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    dry = subprocess.run([str(evo), "--retune", "--backend", "static", "--dry-run"], cwd=project, env=env,
                         capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith('"kernel.cu" [sm_90]: no entry for sm_90')
    tuned = subprocess.run([str(evo), "--retune", "--backend", "static", "--evaluations", "6"], cwd=project,
                           env=env, capture_output=True, text=True)
    assert tuned.returncode == 0, tuned.stderr
    assert "Traceback" not in tuned.stderr
    # what to rebuild, and the line that makes a build do it (after a retune, make said "up to date")
    assert "to use the new entries, rebuild what your build compiled before them: kernel.o." in tuned.stderr
    assert "    Make:  $(CUDA_OBJECTS): nvcc-evo.acf\n" in tuned.stderr
    text = (project / "nvcc-evo.acf").read_text()
    assert "target sm_90 {" in text and "backend = static" in text
    check = subprocess.run([str(evo), "--acf-check", "nvcc-evo.acf"], cwd=project, env=env,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    # the report of a user's install, which has no matplotlib (the `report` extra): it refused the whole
    # page ("plots need matplotlib", exit 3), tables and per-kernel facts included; now the page, less its plots
    assert subprocess.run([str(installed / "bin" / "python"), "-c", "import matplotlib"], env=env).returncode != 0
    report = subprocess.run([str(evo), "--report", "--out", "r.html"], cwd=project, env=env,
                            capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    assert report.stdout == "r.html\n"
    assert "note: the report has no plots: they need matplotlib (pip install 'nvcc-evo[report]')" in report.stderr
    page = (project / "r.html").read_text()
    assert "Kernels: baseline against chosen" in page and "<svg" not in page and "no plots: they need" in page


def test_the_makefiles_install_prints_no_setuptools_banner(tmp_path):
    """`make tune` printed setuptools' licence-table deprecation banner three times, then its banner on
    editable installs, then (compat mode, setuptools 84) "The 'compat' editable mode is transitional":
    the test ran the install line alone, with the venv's own old pip, which hides the backend's warnings;
    the Makefile upgrades pip first, and pip 26 shows them. Every pip line of `make -n tune`, in order,
    into a fresh venv (the package's own dependencies left out: they print nothing)."""
    tree = tracked_tree(tmp_path / "src")
    planned = subprocess.run(["make", "-n", "tune"], cwd=tree, capture_output=True, text=True).stdout
    lines = [line for line in planned.splitlines() if "-m pip install" in line]
    assert any("--upgrade pip" in line for line in lines) and any(" -e " in line for line in lines), planned
    subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
    for line in lines:                       # as make runs it, by the shell, in the tree
        line += "" if "--upgrade pip" in line else " --no-deps"
        done = subprocess.run(["sh", "-c", line], cwd=tree, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "!!" not in done.stderr and "deprecated" not in done.stderr and "Editable installation" not in \
            done.stderr and "transitional" not in done.stderr, done.stderr
    imported = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-c", "import nvcc_evo; print(nvcc_evo.__file__)"],
                              cwd=tmp_path, capture_output=True, text=True)
    assert imported.stdout.strip() == str(tree / "nvcc_evo" / "__init__.py"), imported      # editable: the tree's


def test_a_missing_disassembler_is_said_once_not_per_unit(installed, tmp_path, evo_cache):
    """A user's install has no nvdisasm (the `sass` extra): `make tune` said "note: no nvdisasm ..." after
    every unit's kernel tables, ten times, and `--sass` once per unit; now once, after them all."""
    for name in ("one", "two"):
        (tmp_path / f"{name}.cu").write_text(f'extern "C" __global__ void {name}(float* y, float a) '
                                             '{ y[threadIdx.x] *= a; }\n')
    (tmp_path / "nvcc-evo.acf").write_text("acf 1\n" + "".join(
        f'unit "{name}.cu" {{\n    search {{\n        ptxas.maxrregcount in {{32, 64}}\n    }}\n'
        '    tune {\n        minimize registers\n    }\n}\n' for name in ("one", "two")))
    evo, env = installed / "bin" / "nvcc-evo", _user_env(installed, evo_cache)
    nvcc = shutil.which("nvcc", path=env["PATH"])
    missing = not shutil.which("nvdisasm", path=env["PATH"]) and not (Path(nvcc).resolve().parent / "nvdisasm").is_file()
    for verb in (["--retune", "--backend", "static", "--evaluations", "3"], ["--sass"]):
        done = subprocess.run([str(evo), *verb], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("per kernel, baseline -> chosen") == 2, done.stdout
        assert done.stdout.count("no nvdisasm") == (1 if missing else 0), done.stdout
        if missing:
            assert done.stdout.rstrip().splitlines()[-1].startswith("note: no nvdisasm"), done.stdout
