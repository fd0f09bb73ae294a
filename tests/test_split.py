"""nvcc's own steps, run split so that each ptxas gets its architecture's
options: the same build as nvcc's where the options agree, nvcc's exit status
and messages where a step fails, nothing left behind. Real nvcc and ptxas."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, sass, toolkits
from nvcc_evo.driver.cmdline.nvcc_options import parse_call
from nvcc_evo.driver.cmdline.split import SCRIPT_NAME, Steps, plan_launch, read_steps, step_input, why_not, with_options

TWO_ARCHS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]


def each(source: str, sm_80: tuple = (), sm_90: tuple = ()) -> dict:
    """ptxas options per (input, arch) for one input built for both."""
    return {(source, "sm_80"): sm_80, (source, "sm_90"): sm_90}


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "regs.cu")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_split(nvcc: Path, argv: list[str], options: dict) -> subprocess.CompletedProcess:
    import os
    launch = plan_launch(str(nvcc), parse_call(argv, {}), [], options, dict(os.environ))
    assert not isinstance(launch, str), launch
    return subprocess.run(launch.argv, env=launch.env, capture_output=True, text=True)


@pytest.mark.parametrize("real_nvcc", toolkits())
def test_the_steps_build_what_nvcc_builds(work, real_nvcc):
    argv = [*TWO_ARCHS, "-c", "regs.cu", "-o", "split.o"]
    assert why_not(parse_call(argv, {})) == ""
    split = run_split(real_nvcc, argv, each("regs.cu", ("-maxrregcount=40",), ("-maxrregcount=40",)))
    plain = subprocess.run([str(real_nvcc), *TWO_ARCHS, "-Xptxas", "-maxrregcount=40", "-c", "regs.cu",
                            "-o", "plain.o"], capture_output=True, text=True)
    assert (split.returncode, split.stdout, split.stderr) == (0, "", "") and plain.returncode == 0
    # Identical code; only the note of ptxas options that nvcc keeps for a JIT of the PTX differs (the
    # split run gives them per architecture, so it records none).
    subprocess.run([str(real_nvcc), *TWO_ARCHS, "-c", "regs.cu", "-o", "uncapped.o"], check=True)
    code = [[line for line in sass(work / name).splitlines() if "ptxasOptions" not in line]
            for name in ("split.o", "plain.o", "uncapped.o")]
    assert code[0] == code[1] and code[0] != code[2]
    assert list((work / "tmp").iterdir()) == []


def test_a_failing_step_ends_as_nvcc_ends(work, real_nvcc):
    (work / "regs.cu").write_text((work / "regs.cu").read_text().replace("float sum = 0.0f;", "float sum = 0.0f"))
    argv = [*TWO_ARCHS, "-c", "regs.cu", "-o", "split.o"]
    split = run_split(real_nvcc, argv, each("regs.cu", ("-maxrregcount=32",)))
    plain = subprocess.run([str(real_nvcc), *argv], capture_output=True, text=True)
    assert (split.returncode, split.stderr) == (plain.returncode, plain.stderr) and split.returncode == 2
    assert "error: expected a \";\"" in split.stderr and not (work / "split.o").exists()
    assert list((work / "tmp").iterdir()) == []


def test_an_executable_built_in_one_call(work, real_nvcc):
    (work / "app.cu").write_text('#include <cstdio>\n#include "regs.cu"\nint main() { puts("ran"); }\n')
    argv = [*TWO_ARCHS, "app.cu", "-o", "app", "-MD", "-MF", "app.d"]
    assert run_split(real_nvcc, argv, each("app.cu", ("-maxrregcount=32",))).returncode == 0
    assert subprocess.run(["./app"], capture_output=True, text=True).stdout == "ran\n"
    subprocess.run([str(real_nvcc), *argv[:-1], "nvcc.d"], check=True, capture_output=True)
    assert (work / "app.d").read_text() == (work / "nvcc.d").read_text()
    assert list((work / "tmp").iterdir()) == []


def test_reading_and_changing_nvccs_steps(work, real_nvcc):
    shutil.copy(work / "regs.cu", work / "regs.two.cu")
    keep = str(work / "tmp")
    inputs = ("regs.cu", "regs.two.cu")
    shown = subprocess.run([str(real_nvcc), *TWO_ARCHS, "-c", *inputs, "--dryrun", "--keep", "--keep-dir", keep],
                           capture_output=True, text=True)
    steps = read_steps(shown.stderr)
    assert steps.variables["CICC_PATH"].endswith("nvvm/bin") and steps.variables["_SPACE_"] == " "
    ptxas = [c for c in steps.commands if c.startswith("ptxas ")]
    assert len(ptxas) == 4 and not any(c.startswith("#") for c in steps.commands)
    assert [step_input(c, keep, inputs) for c in ptxas] == ["regs.cu", "regs.cu", "regs.two.cu", "regs.two.cu"]
    options = {**each("regs.cu", ("-maxrregcount=32",), ("--dlcm=cg",)), **each("regs.two.cu", sm_90=("-O1",))}
    changed = with_options(steps, options, keep, inputs)
    assert [c for c in changed.commands if c.startswith("ptxas ")] == [
        ptxas[0].replace("ptxas ", "ptxas -maxrregcount=32 ", 1), ptxas[1].replace("ptxas ", "ptxas --dlcm=cg ", 1),
        ptxas[2], ptxas[3].replace("ptxas ", "ptxas -O1 ", 1)]
    assert "regs.two.cu [sm_80]" in with_options(steps, each("regs.cu"), keep, inputs)   # a step not asked for
    assert "internal" in with_options(Steps({}, ("-- Filter Dependencies -- > a.d",)), {}, keep, inputs)
    assert "no ptxas" in with_options(Steps({}, ("gcc -c a.cpp",)), {}, keep, inputs)
    user_ptx = with_options(Steps({}, ("rm /tmp/x.c", 'ptxas -arch=sm_90 -m64 "k.ptx" -o "k.cubin"')),
                            {("k.ptx", "sm_90"): ()}, keep, ("k.ptx",))
    assert user_ptx.commands[0] == "rm -f /tmp/x.c"


@pytest.mark.parametrize("argv, why", [
    (["-c", "a.cu", "-v"], "--verbose"),
    (["-c", "a.cu", "--keep"], "--keep"),
    (["-c", "a.cu", "sub/a.cu"], "two inputs of the same name"),
    (["-c", "a.cu", "b.cu", "-MD", "-MF", "x.d"], "several inputs"),
    (["-c", "a.cu", "-MD"], "without -MF"),
    (["-dlink", "-dlto", "a.o"], "--dlink-time-opt"),
])
def test_calls_whose_steps_are_not_split(argv, why):
    assert why in why_not(parse_call(argv, {}))


def test_a_signal_ends_the_steps_and_removes_their_folder(work, real_nvcc):
    import os
    import time
    from nvcc_evo.system.leftovers import LOCK_NAME
    launch = plan_launch(str(real_nvcc), parse_call([*TWO_ARCHS, "-c", "regs.cu", "-o", "x.o"], {}), [],
                         each("regs.cu", ("-maxrregcount=32",)), dict(os.environ))
    running = subprocess.Popen(launch.argv, env=launch.env, stderr=subprocess.DEVNULL)
    folder = next((work / "tmp").glob("nvcc-evo-steps-*"))
    deadline = time.monotonic() + 30
    begun = lambda: any(p.name not in (SCRIPT_NAME, LOCK_NAME) for p in folder.iterdir())   # (its lock is there at once)
    while not begun() and time.monotonic() < deadline:
        time.sleep(0.01)
    running.terminate()
    assert running.wait(timeout=60) == 143 and not folder.exists()
