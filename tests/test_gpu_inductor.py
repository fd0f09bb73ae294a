"""TorchInductor's cache on a real GPU: an entry of the drop-in ptxas reaches
a hand-written Triton kernel through Triton's cache (the `--version` digest
makes it miss), but not a torch.compile'd kernel that TorchInductor's warm
cache holds (its key holds no ptxas; a hit launches the bundled cubin); it
does with the fresh caches a candidate run gets (dropin_ptxas.afresh) and
with TORCH_COMPILE_CACHE_KEY_TAG set to the digest, as docs/triton.md says.
The registers are those of the kernels that ran (the CUDA profiler's, in
benchmarks/triton/torch_compile.py). Run on a machine with an NVIDIA GPU,
torch and Triton (skipped elsewhere with the reason)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, evo_env
from nvcc_evo.acf.knobs import KNOB_BY_NAME
from nvcc_evo.driver.dropin_ptxas.afresh import STAND_INS, through_stand_ins

pytestmark = pytest.mark.gpu
PROGRAM = ROOT / "benchmarks" / "triton" / "torch_compile.py"
HAND = "rowsoftmax_kernel"
LOWEST_CAP = KNOB_BY_NAME["ptxas.maxrregcount"].low


def stand_ins(folder: Path) -> Path:
    """A folder with nvcc-evo-ptxas and nvcc-evo-ptxas-blackwell: the
    installed ones, else scripts running the tree PYTHONPATH names (the
    GPU machine's `make gpu-test`)."""
    folder.mkdir()
    for _, name, _ in STAND_INS:
        installed = Path(sys.executable).parent / name
        if installed.is_file():
            os.symlink(installed, folder / name)
            continue
        main = "main_blackwell" if name.endswith("blackwell") else "main"
        (folder / name).write_text(f"#!{sys.executable}\nimport sys\n"
                                   f"from nvcc_evo.driver.dropin_ptxas.shim import {main}\nsys.exit({main}())\n")
        (folder / name).chmod(0o755)
    return folder


def run_program(project: Path, env: dict) -> dict:
    """The program run once: the registers of each kernel it launched."""
    log = project / "regs.jsonl"
    done = subprocess.run([sys.executable, PROGRAM.name], cwd=project, env=dict(env, KERNEL_REGS=str(log)),
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0 and done.stdout.startswith("time "), done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(log.read_text().splitlines()[-1])["registers"]


def cap_under(registers: int) -> int:
    """A register cap about two thirds of `registers`, no lower than the knob takes (the ACF
    would have errors: built untuned, as an H100 run found with a 32-register kernel)."""
    cap = max(LOWEST_CAP, registers * 2 // 3 // 8 * 8)
    assert cap < registers, f"a kernel of {registers} registers is too small to cap"
    return cap


def acf(arch: str, caps: tuple[int, int] | None) -> str:
    text = "acf 1\n"
    for glob, cap in zip((HAND, "triton_*"), caps or (None, None)):
        entry = f"    target {arch} {{\n        ptxas.maxrregcount = {cap}\n    }}\n" if cap else ""
        text += f'unit kernel "{glob}" {{\n    pin ptxas.override_directive_values = true\n{entry}}}\n'
    return text


def test_entries_reach_torch_compile_kernels_only_through_a_fresh_inductor_cache(tmp_path, evo_cache, monkeypatch):
    torch = pytest.importorskip("torch", reason="needs PyTorch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}{'a' if major >= 9 else ''}"          # Triton 3.6's --gpu-name
    bin_folder = stand_ins(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_folder}{os.pathsep}{os.environ['PATH']}")     # (through_stand_ins finds them)
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PROGRAM, project / PROGRAM.name)
    (project / "nvcc-evo.acf").write_text(acf(arch, None))
    env = evo_env(evo_cache, TRITON_PTXAS_PATH=bin_folder / "nvcc-evo-ptxas",
                  TRITON_PTXAS_BLACKWELL_PATH=bin_folder / "nvcc-evo-ptxas-blackwell",
                  TORCHINDUCTOR_CACHE_DIR=tmp_path / "warm", TRITON_CACHE_DIR=tmp_path / "warm-triton")
    base = run_program(project, env)
    inductor = {name: count for name, count in base.items() if name.startswith("triton_")}
    assert HAND in base and inductor, base
    caps = cap_under(base[HAND]), cap_under(min(inductor.values()))
    (project / "nvcc-evo.acf").write_text(acf(arch, caps))

    warm = run_program(project, env)
    assert warm[HAND] <= caps[0], (base, warm)                   # Triton's cache missed: the --version digest
    assert {name: warm[name] for name in inductor} == inductor, (base, warm, caps)   # TorchInductor's did not

    fresh = run_program(project, through_stand_ins(env, str(tmp_path / "run")))    # what a candidate run gets
    assert fresh[HAND] <= caps[0] and all(fresh[name] <= caps[1] for name in inductor), (base, fresh, caps)

    said = subprocess.run([str(bin_folder / "nvcc-evo-ptxas"), "--version"], cwd=project, env=env,
                          capture_output=True, text=True).stdout.splitlines()[-1]
    assert said.startswith("nvcc-evo-ptxas: kernel entries ")
    tagged = run_program(project, dict(env, TORCH_COMPILE_CACHE_KEY_TAG=said))       # the warm cache, tagged
    assert all(tagged[name] <= caps[1] for name in inductor), (base, tagged, caps)
