"""`unit kernel "NAME"`: units that name PTX entries (Triton's kernels,
through nvcc-evo-ptxas) are never taken for source files by the drop-in nvcc."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from conftest import DATA, EVO, evo_env
from nvcc_evo.acf import kernelname
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.sources import unit_sources


def test_a_kernel_unit_never_matches_a_source_file(tmp_path, evo_cache):
    shutil.copy(DATA / "cuda" / "regs.cu", tmp_path / "regs.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit kernel "regs.cu" "*" {\n'
                                           '    target sm_90 {\n        ptxas.maxrregcount = 32\n    }\n}\n')
    done = subprocess.run([str(EVO), "-cubin", "-Xptxas", "-v", "-arch=sm_90", "regs.cu", "-o", "out.cubin"],
                          cwd=tmp_path, env=evo_env(evo_cache), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert re.findall(r"Used (\d+) registers", done.stderr) != ["32"]
    file = parse_text((tmp_path / "nvcc-evo.acf").read_text(), "nvcc-evo.acf")
    assert unit_sources(file.units[0], tmp_path) == []


def test_kernel_globs_match_entry_names_and_narrow_by_digest():
    assert kernelname.matches("matmul_*", ["matmul_kernel"], "ab" * 32)
    assert not kernelname.matches("matmul_*", ["softmax_kernel"], "ab" * 32)
    assert kernelname.matches("softmax_kernel@abababab", ["softmax_kernel"], "ab" * 32)
    assert not kernelname.matches("softmax_kernel@abababac", ["softmax_kernel"], "ab" * 32)
    assert kernelname.matches("Matmul", ["Matmul"], "") and not kernelname.matches("matmul", ["Matmul"], "")


def test_the_triton_pages_acfs_check():
    from conftest import ROOT
    from nvcc_evo.acf.resolve import check
    page = (ROOT / "docs" / "triton.md").read_text()
    readme = (ROOT / "README.md").read_text()
    examples = [page.split("```\nacf 1\n")[1].split("```")[0], page.split("<<'ACF'\n")[1].split("\nACF\n")[0],
                readme.split("<<'ACF'\n")[1].split("\nACF\n")[0]]
    for text in examples:
        text = text if text.startswith("acf 1") else "acf 1\n" + text
        file = parse_text(text, "nvcc-evo.acf")
        check(file, text)
        assert all(unit.is_kernel for unit in file.units)


PTX = (".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry softmax_kernel()\n.reqntid 128\n"
       "{\n\tret;\n}\n")


def test_the_drop_in_ptxas_lets_the_user_s_own_options_win(tmp_path, evo_cache):
    """Triton's `--opt-level 0` (disable_ptxas_opt) beats an entry's opt level; a
    target sm_90 serves --gpu-name=sm_90a; the toolkit's ptxas, no Triton needed."""
    import sys
    ptxas = Path(sys.executable).parent / "nvcc-evo-ptxas"
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit kernel "softmax_*" {\n    target sm_90 {\n'
                                           '        ptxas.opt_level = 1\n        ptxas.dlcm = cg\n    }\n}\n')
    (tmp_path / "k.ptx").write_text(PTX)
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"))
    asked = ["--explain", "--opt-level", "0", "--gpu-name=sm_90a", "k.ptx", "-o", "k.cubin"]
    done = subprocess.run([str(ptxas), *asked], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "target sm_90 (line 3); no entry for sm_90a: the entry for sm_90 serves it" in done.stdout
    assert "added: -dlcm=cg\n" in done.stdout
    assert "left out: ptxas.opt_level: the user sets it (-O0); the user wins" in done.stdout
    built = subprocess.run([str(ptxas), *asked[1:]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert built.returncode == 0 and (tmp_path / "k.cubin").is_file(), built.stderr


def test_a_kernel_unit_searches_only_what_the_drop_in_ptxas_would_pass(tmp_path, evo_cache):
    """A kernel unit's candidates take their ptxas step from the function the
    drop-in ptxas builds its command with (compileplan.ptx_step): a controls
    file the real ptxas refuses is left out of the search, said, as the
    drop-in leaves it out (it was searched, and failed as compile-error),
    and the entry written gives the drop-in's cubin the registers measured.
    The toolkit's ptxas stands for Triton's; no Triton needed."""
    import sys
    from nvcc_evo.cubin.sass import cubin_registers
    ptxas = Path(sys.executable).parent / "nvcc-evo-ptxas"
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float *x, int n)\n{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "    float s = 0;\n    for (int j = 0; j < 4; ++j) s += x[(i + j) % n] * j;\n"
                      "    if (i < n) x[i] = s;\n}\n")
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90a", "k.cu", "-o", "k.ptx"], cwd=tmp_path, check=True)
    (tmp_path / "k.ctl").write_text("not a controls file\n")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit kernel "_Z1kPfi" {\n    search {\n'
                                           '        ptxas.controls in {none, "k.ctl"}\n        ptxas.opt_level in {1, 3}\n'
                                           '    }\n    tune {\n        minimize registers\n    }\n}\n')
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"))
    compile_ptx = [str(ptxas), "-v", "--gpu-name=sm_90a", "k.ptx", "-o", "k.cubin"]
    subprocess.run(compile_ptx, cwd=tmp_path, env=env, check=True, capture_output=True)
    tuned = subprocess.run([str(EVO), "--retune", "--backend", "static", "--evaluations", "6"], cwd=tmp_path,
                           env=env, capture_output=True, text=True)
    assert tuned.returncode == 0, tuned.stderr
    assert re.search(r"ptxas\.controls: all its values left out of the search: the build would not pass it "
                     r"\(ptxas \S+ \(\S+\) does not apply it", tuned.stderr), tuned.stderr
    assert "compile-error" not in tuned.stderr, tuned.stderr
    measured = re.search(r"registers +\d+ +(\d+)", tuned.stdout)
    assert measured and "ptxas.opt_level = 1" in (tmp_path / "nvcc-evo.acf").read_text(), tuned.stdout
    subprocess.run(compile_ptx, cwd=tmp_path, env=env, check=True, capture_output=True)
    assert cubin_registers((tmp_path / "k.cubin").read_bytes()) == int(measured.group(1))
