"""A call with many inputs whose tuned ptxas knobs differ builds as nvcc
builds it: nvcc's steps for 200 inputs are far more than one argument may
hold (128 KiB), so they run from a script file. Real nvcc and ptxas; PTX
inputs (ptxas and fatbinary only) with long names keep it quick."""
from __future__ import annotations

import re
import shutil
import subprocess

from conftest import DATA, evo_env, run_evo

ACF = """acf 1
unit "a_*.ptx" {
    target sm_90 { ptxas.maxrregcount = 32 }
}
unit "b_*.ptx" {
    target sm_90 { ptxas.maxrregcount = 40 }
}
"""
COUNT = 200


def test_two_hundred_inputs_with_different_ptxas_knobs(tmp_path, evo_cache, real_nvcc):
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path)     # 56 registers uncapped
    subprocess.run([str(real_nvcc), "-arch=sm_90", "-ptx", "regs.cu"], cwd=tmp_path, check=True)
    ptx = (tmp_path / "regs.ptx").read_text()
    names = [f"{'ab'[i % 2]}_{i:03d}_{'x' * 200}.ptx" for i in range(COUNT)]
    for name in names:
        (tmp_path / name).write_text(ptx)
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    (tmp_path / "tmp").mkdir()
    env = evo_env(evo_cache, TMPDIR=tmp_path / "tmp", NVCC_EVO_LOG=tmp_path / "log.jsonl")
    built = run_evo("-arch=sm_90", "-fatbin", "-Xptxas", "-v", *names, cwd=tmp_path, env=env)
    assert built.returncode == 0 and built.stdout == "" and "nvcc-evo" not in built.stderr, built.stderr[-2000:]
    assert '"ptxas_per_step"' in (tmp_path / "log.jsonl").read_text()       # it ran split
    # Each ptxas step had its own unit's cap (nvcc runs them in the order of the inputs).
    assert [int(n) for n in re.findall(r"Used (\d+) registers", built.stderr)] == [32, 40] * (COUNT // 2)
    assert all((tmp_path / name.replace(".ptx", ".fatbin")).is_file() for name in names)
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith(("nvcc-evo", "tmpxft"))] == []
