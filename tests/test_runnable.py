"""A knob value whose binary cannot run is never searched, written or counted
as a gain (issue 37): a register cap under the allocation that a kernel's
warp groups share out with setmaxnreg hangs it, and ptxas says nothing. Real
nvcc and ptxas on real warp-specialized code (tests/data/cuda/warp_specialized.cu,
sm_90a, the pattern of CUTLASS 3.x's Hopper GEMMs)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from conftest import EVO, evo_env, run_evo

from nvcc_evo.cubin.sass import resources, shown_name

DATA = Path(__file__).parent / "data" / "cuda"
HOPPER = ["-gencode", "arch=compute_90a,code=sm_90a"]
WS = "_Z9ws_kernelPKfPfi"
SEARCH = ("    search {\n        ptxas.maxrregcount in {64, 96, 128, 168, 200}\n"
          "        ptxas.override_directive_values in bool\n    }\n")


def _project(folder: Path, body: str) -> dict:
    shutil.copy(DATA / "warp_specialized.cu", folder / "ws.cu")
    (folder / "nvcc-evo.acf").write_text(f'acf 1\nunit "ws.cu" {{\n{body}}}\n')
    return {}


def _build(folder: Path, env: dict) -> None:
    done = subprocess.run([str(EVO), *HOPPER, "-c", "ws.cu", "-o", "ws.o"], cwd=folder, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_cubin_says_which_kernels_move_registers_and_their_launch_bounds(tmp_path):
    """EIATTR_REG_RECONFIG marks a kernel whose setmaxnreg ptxas honours; EIATTR_MAX_THREADS its
    __launch_bounds__ (.maxntid); EIATTR_CTA_PER_CLUSTER a __cluster_dims__ kernel's blocks."""
    (tmp_path / "c.cu").write_text(
        "__global__ void __cluster_dims__(2, 1, 1) clustered(float *p) { p[threadIdx.x] += 1.f; }\n"
        "__global__ void __launch_bounds__(256, 2) bounded(float *p) { p[threadIdx.x] *= 2.f; }\n")
    facts = {}
    for name in ("c.cu", str(DATA / "warp_specialized.cu")):
        done = subprocess.run(["nvcc", *HOPPER, "-cubin", "-Xptxas", "-v", name, "-o", "k.cubin"], cwd=tmp_path,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        facts.update({k.name: k for k in resources(done.stderr, "sm_90a", (tmp_path / "k.cubin").read_bytes())})
    assert (facts[WS].reconfigures, facts[WS].threads, facts[WS].registers) == (True, 384, 168)
    assert (facts["_Z16reference_kernelPKfPfi"].reconfigures, facts["_Z16reference_kernelPKfPfi"].threads) == (False, 0)
    assert (facts["_Z9clusteredPf"].cluster, facts["_Z7boundedPf"].threads) == (2, 256)
    cutlass = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversal" + "IN4cute5tupleIJNS5_IJiiiiEEE" * 40
    assert len(shown_name(cutlass)) == 72 and shown_name(cutlass).endswith("...") and shown_name(WS) == WS


def test_a_static_retune_writes_no_register_cap_under_a_setmaxnreg_kernels_allocation(tmp_path, evo_cache):
    """The space holds caps of 64..200 with --override-directive-values: under 168 registers the kernel's
    384 threads hold fewer registers than its warp groups take (128 x 40 + 256 x 232), and it would never end.
    Before, the speed-safe static retune wrote ptxas.maxrregcount = 64 with the override ("improved
    register_warps 12 -> 32"; CUTLASS's 51_hopper_gett got 96). Those values are left out, said once with
    why; an entry written by the old rule that is otherwise up to date is not kept."""
    _project(tmp_path, SEARCH)
    env = evo_env(evo_cache)
    _build(tmp_path, env)
    done = run_evo("--retune", "--backend", "static", "--evaluations", "8", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "left out of the search" in line]
    assert said == [f'nvcc-evo: "ws.cu" [sm_90a]: ptxas.maxrregcount: 64, 96, 128 left out of the search: under '
                    f"the 168 registers a thread that {WS} (168 registers, 384 threads) launches with; its warp "
                    "groups move registers between them (setmaxnreg), and under a smaller allocation "
                    "setmaxnreg.inc waits for registers for ever: the kernel would never end (ptxas says "
                    "nothing)"], done.stderr
    written = (tmp_path / "nvcc-evo.acf").read_text()
    assert "ptxas.maxrregcount = 64" not in written and "ptxas.maxrregcount = 96" not in written, written
    assert "tuned.registers = 168" in written, written
    # The entry the old rule wrote, its provenance otherwise current: a retune of it (--all: the staleness of
    # an entry compiles nothing) rewrites it, though its search is within budget.
    bad = written.replace("    target sm_90a {\n", "    target sm_90a {\n        ptxas.maxrregcount = 96\n"
                          "        ptxas.override_directive_values = true\n", 1)
    (tmp_path / "nvcc-evo.acf").write_text(bad)
    again = run_evo("--retune", "--all", "--backend", "static", "--evaluations", "4", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert "its entry is not up to date: the choice is written" in again.stderr, again.stderr
    rewritten = (tmp_path / "nvcc-evo.acf").read_text()
    assert "ptxas.maxrregcount = 96" not in rewritten and "tuned.registers = 168" in rewritten, again.stderr


def test_a_hand_written_cap_that_would_hang_a_kernel_is_a_ship_check_error_and_a_sass_warning(tmp_path, evo_cache):
    """A cap outside the search (the entry's own) is kept as it is by the search, and the retune's ship check
    refuses to write it (exit 1); --sass warns of it. Before, the entry was written again as a baseline kept."""
    entry = ("    target sm_90a {\n        ptxas.maxrregcount = 96\n        ptxas.override_directive_values = true\n"
             "    }\n")
    _project(tmp_path, "    search {\n        ptxas.dlcm in {ca, cg}\n    }\n" + entry)
    env = evo_env(evo_cache)
    _build(tmp_path, env)
    before = (tmp_path / "nvcc-evo.acf").read_text()
    done = run_evo("--retune", "--backend", "static", "--evaluations", "4", cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr
    hang = (f"ptxas.maxrregcount = 96 would hang the kernel: {WS} gets 96 registers a thread, under the 168 it "
            "launches with uncapped; its warp groups move registers between them (setmaxnreg)")
    assert f'not written to the ACF: ship check: "ws.cu" [sm_90a]: {hang}' in done.stderr, done.stderr
    assert (tmp_path / "nvcc-evo.acf").read_text() == before
    sass = run_evo("--sass", cwd=tmp_path, env=env)
    assert f'"ws.cu" [sm_90a]: warning: its entry\'s {hang}' in sass.stderr, sass.stderr
    # occupancy at the block its launch bounds name: 96 registers buy no second 384-thread block
    assert re.search(r"occupancy \(warps/SM\) +12/64 \(1 x 384 threads; registers\) +12/64 \(1 x 384", sass.stdout), \
        sass.stdout
    # --explain compiles nothing: it warns where the sources use setmaxnreg and the cap overrides launch bounds
    explained = run_evo("--explain", *HOPPER, "-c", "ws.cu", "-o", "ws.o", cwd=tmp_path, env=env)
    assert ("warning: ws.cu: ptxas.maxrregcount = 96 with ptxas.override_directive_values, and its sources use "
            f"setmaxnreg ({tmp_path / 'ws.cu'})") in explained.stdout, explained.stdout + explained.stderr
    (tmp_path / "nvcc-evo.acf").write_text(before.replace("        ptxas.override_directive_values = true\n", ""))
    explained = run_evo("--explain", *HOPPER, "-c", "ws.cu", "-o", "ws.o", cwd=tmp_path, env=env)
    assert "setmaxnreg" not in explained.stdout, explained.stdout      # (the bounds keep its registers)


def test_a_choice_that_makes_one_kernel_worse_says_so_in_its_summary_line(tmp_path, evo_cache):
    """MOVE=1 moves work from the heavy kernel to the light one: the unit's registers (its worst kernel's)
    go 48 -> 32 while the light kernel's go 16 -> 32. Before, the line said "improved registers 48 -> 32"
    and the light kernel's loss was seen only in the per-kernel table."""
    shutil.copy(DATA / "two_kernels.cu", tmp_path / "two.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "two.cu" {\n    search {\n        define.MOVE in {0, 1}\n'
                                           '    }\n    tune {\n        minimize registers\n    }\n}\n')
    env = evo_env(evo_cache)
    built = subprocess.run([str(EVO), "-arch=sm_90", "-c", "two.cu", "-o", "two.o"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    done = run_evo("--retune", "--backend", "static", "--evaluations", "2", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    said = r"traded registers 48 -> 32; worse kernels: (light|_Z5lightPKfPf) registers 16 -> 32"   # (c++filt or not)
    assert re.search(r'"two.cu" \[sm_90\]: ' + said, done.stdout), done.stdout
    assert re.search(f'verdict = "{said}"', (tmp_path / "nvcc-evo.acf").read_text())
