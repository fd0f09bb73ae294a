"""`nvcc-evo --hot` as a user meets it, beyond tests/test_hot.py: a
launcher that starts two CUDA processes at once (an MPI-like pair), no
CUPTI through the console script, the Triton advice naming both of
Triton's ptxas variables (Blackwell), and the harness-free bench
(`metric time kernels`) judging a candidate by its exit status and the
user's `check` as the command backend does. No GPU here: the processes add
their kernels to the real injection library themselves, as the driver's
CUPTI records would."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (DATA, EVO, EVO_COMMAND, cmake_build, cmake_configure, evo_env, run_evo,
                      run_evo_without_gpu_check)

ROOT = Path(__file__).resolve().parents[1]

RANK = """\
import ctypes, os, sys, time
# One rank of a pair the launcher starts at once: both are up before either records a kernel.
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
rank = int(sys.argv[1])
open(f"up{rank}", "w").close()
for _ in range(1000):
    if os.path.exists(f"up{1 - rank}"):
        break
    time.sleep(0.01)
else:
    sys.exit(f"rank {rank}: the other rank never started")
# the same kernel at the same shape in both ranks (its times add up), one more in rank 1
lib.nvcc_evo_add(b"_Z4tilePf", 8, 1, 1, 256, 1, 1, 40, 0, ctypes.c_ulonglong(2000000 + 1000000 * rank))
if rank == 1:
    lib.nvcc_evo_add(b"_Z5scalePffi", 4, 1, 1, 128, 1, 1, 16, 0, ctypes.c_ulonglong(500000))
print(f"rank {rank} done", file=sys.stderr)
raise SystemExit(lib.nvcc_evo_write())
"""


def test_a_launcher_script_s_two_processes_are_both_profiled_and_their_files_merged(tmp_path, monkeypatch, capfd):
    """`sh launch.sh` starts two ranks side by side and waits (as mpirun does): the injection reaches both
    through the environment, each writes its own file, the table adds them up and the profile is saved."""
    from nvcc_evo.hot import run
    from nvcc_evo.measure.profile import clock
    monkeypatch.setattr(clock, "gpu_missing", lambda: "")            # (the GPU check stood aside: no GPU here)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rank.py").write_text(RANK)
    (tmp_path / "launch.sh").write_text(f"#!/bin/sh\n{sys.executable} rank.py 0 &\n{sys.executable} rank.py 1 &\n"
                                        "wait\n")
    assert run.run_hot(None, None, ["sh", "launch.sh"], False, 0.05, None, None) == 0
    shown = capfd.readouterr()
    assert "rank 0 done" in shown.err and "rank 1 done" in shown.err and "done" not in shown.out
    assert "2 kernel(s), 5.500 ms on the GPU" in shown.out, shown.out
    assert "  90.9%       5.000        2     2500.00  tile(float*)\n" in shown.out, shown.out    # 2 + 3 ms, 2 calls
    assert "   9.1%       0.500        1      500.00  scale(float*, float, int)\n" in shown.out, shown.out
    saved = (tmp_path / ".nvcc-evo" / "hot" / "profile.json").read_text()
    assert '"command": [\n  "sh",\n  "launch.sh"\n ]' in saved and '"calls": 2' in saved, saved


@pytest.mark.gpu
def test_on_the_gpu_a_launcher_s_two_real_processes_are_profiled_and_bad_runs_are_said(tmp_path, evo_cache):
    """The real thing (run on the H200): a launcher script runs the nvcc-built app twice at once (2 and 3
    repeats: tile_gemm<32> runs 5 times in all, one row, both processes' CUPTI records merged); a command
    that ran CUDA and then fails is said with its status and stderr, nothing saved; one that runs no kernel
    is said."""
    folder = tmp_path / "app"
    shutil.copytree(DATA / "projects" / "hot", folder)
    env = evo_env(evo_cache)
    built = subprocess.run(["make", "-s", f"NVCC={shlex.join(EVO_COMMAND)}"], cwd=folder, env=env,
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (folder / "launch.sh").write_text("#!/bin/sh\n./app 256 2 &\n./app 256 3 &\nwait\n")
    result = run_evo("--hot", "--", "sh", "launch.sh", cwd=folder, env=env)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "tile_gemm<32>" in line)
    assert re.match(r"\s+[\d.]+%\s+[\d.]+\s+5\s", row), result.stdout          # 2 + 3 calls
    assert len(re.findall(r"^time [0-9.]+ ms$", result.stdout, re.M)) == 2     # (both apps' own stdout)
    saved = folder / ".nvcc-evo" / "hot" / "profile.json"
    assert saved.is_file()
    saved.unlink()
    failed = run_evo("--hot", "--", "sh", "-c", "./app 64 1 && echo broken >&2 && exit 5", cwd=folder, env=env)
    assert failed.returncode == 1 and "exited with status 5: no profile saved, nothing written" in failed.stderr
    assert "    | broken" in failed.stderr and not saved.exists()
    # stdout holds the app's own line, passed through as it ran, and no table of kernels
    assert re.fullmatch(r"sum [-0-9.e+]+\ntime [0-9.]+ ms\n", failed.stdout), failed.stdout
    idle = run_evo("--hot", "--", "true", cwd=folder, env=env)
    assert idle.returncode == 1 and "ran no kernel on the GPU" in idle.stderr and not saved.exists()


CMAKE = """cmake_minimum_required(VERSION 3.18)
project(hot LANGUAGES CXX CUDA)
set(CMAKE_CUDA_ARCHITECTURES 90)
add_library(kernels OBJECT src/gemm.cu src/vector.cu)
target_compile_options(kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda>)
"""


@pytest.mark.skipif(shutil.which("cmake") is None, reason="CMake is not installed")
def test_a_cmake_project_s_kernels_map_to_its_units_and_write_asks_how_it_rebuilds(tmp_path, evo_cache):
    """The hot project's gemm.cu and vector.cu built by CMake (CMAKE_CUDA_COMPILER=nvcc-evo, absolute
    paths, CMake's own object names): the same units as Make's build (templates, a lambda, extern "C", the
    static kernel of one name in both); --write asks for --build where no Makefile is, and with it writes
    CMake's build command into the bench."""
    folder = tmp_path / "app"
    shutil.copytree(DATA / "projects" / "hot", folder)
    (folder / "Makefile").unlink()
    (folder / "CMakeLists.txt").write_text(CMAKE)
    env = evo_env(evo_cache)
    cmake_configure(folder, folder / "build", env)
    cmake_build(folder / "build", env)
    result = run_evo("--hot", "--from", str(DATA / "hot" / "profile.json"), cwd=folder, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    origin = {line.split("  ")[-1].strip(): lines[i + 1].strip() for i, line in enumerate(lines[:-1])
              if line.startswith("  ") and "%" in line}
    assert origin["void app::tile_gemm<32>(float const*, float const*, float*, int)"].startswith(
        "from src/gemm.cu [sm_90]; unit \"src/*.cu\""), result.stdout
    assert origin["saxpy"].startswith("from src/vector.cu [sm_90]"), result.stdout
    assert origin["scale(float*, float, int)"].startswith("defined by 2 units"), result.stdout
    assert "nvcc-evo reaches 92.0% of the GPU time through 2 recorded unit(s)" in result.stdout  # (not reduce.cu)
    asked = run_evo("--hot", "--from", str(DATA / "hot" / "profile.json"), "--write", cwd=folder, env=env)
    assert asked.returncode == 2 and "--write needs --build 'COMMAND'" in asked.stderr, asked.stderr
    written = run_evo("--hot", "--from", str(DATA / "hot" / "profile.json"), "--write", "--build",
                      "cmake --build build", "--run", "./build/app 1024 20", cwd=folder, env=env)
    assert written.returncode == 0, written.stderr
    acf = (folder / "nvcc-evo.acf").read_text()
    assert acf.count('command "cmake --build build && ./build/app 1024 20"') == 2, acf
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=folder, env=env).returncode == 0


ANONYMOUS = ("namespace {\n__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n}\n"
             "void run_NAME(float *x) { k<<<1, 32>>>(x); }\n")


def _hot_from_summary(folder, env, kernel):
    """What `--hot --from k.csv` shows of an Nsight Systems kernel summary (written in `folder`) whose one
    row is `kernel`."""
    (folder / "k.csv").write_text("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
                                  "StdDev (ns),Name\n"
                                  f'100.0,4000,4,1000.0,1000.0,900,1100,5.0,"{kernel}"\n')
    result = run_evo("--hot", "--from", "k.csv", cwd=folder, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_an_anonymous_namespace_kernel_of_two_files_is_listed_with_each_unit(tmp_path, evo_cache):
    """Nsight Systems writes `<unnamed>::k(float *)` for the kernel of either file (only the mangled symbol
    tells them apart): the kernel is listed with both units, its time shown together."""
    env = evo_env(evo_cache)
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit "*.cu" {\n}\n')
    for name in ("a", "b"):
        (tmp_path / f"{name}.cu").write_text(ANONYMOUS.replace("NAME", name))
        built = run_evo("-arch=sm_90", "-c", f"{name}.cu", "-o", f"{name}.o", cwd=tmp_path, env=env)
        assert built.returncode == 0, built.stderr
    shown = _hot_from_summary(tmp_path, env, "<unnamed>::k(float *)")
    assert "  <unnamed>::k(float *)\n" \
           "                                 defined by 2 units (one name in each: their time is shown together):\n" \
           "                                   a.cu [sm_90]; unit \"*.cu\"" in shown, shown
    assert "\n                                   b.cu [sm_90]; unit \"*.cu\"" in shown


def test_no_cupti_and_no_gpu_exit_3_saying_both_and_how_to_get_cupti(tmp_path, evo_cache):
    """The console script in a fresh folder, with a toolkit that holds no CUPTI (and no cupti wheel): exit 3,
    what is missing and how to get it, nothing on stdout, no traceback, nothing saved."""
    from nvcc_evo.measure.profile.clock import gpu_missing
    toolkit = tmp_path / "toolkit"
    (toolkit / "bin").mkdir(parents=True)
    nvcc = toolkit / "bin" / "nvcc"                  # (answers the dry run with a TOP of no CUPTI)
    nvcc.write_text(f'#!/bin/sh\necho "#\\$ TOP={toolkit}" >&2\n')
    nvcc.chmod(0o755)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    env = evo_env(evo_cache, nvcc)
    from nvcc_evo.errors import EnvironmentProblem
    from nvcc_evo.measure.profile.library import find_cupti
    try:
        find_cupti({}, None)                        # (a wheel of CUPTI, where one is installed: found first)
        has_wheel = True
    except EnvironmentProblem:
        has_wheel = False
    result = run_evo("--hot", "--", "./app", cwd=fresh, env=env)
    assert result.returncode == 3 and result.stdout == "", result
    if not has_wheel:
        assert "no CUPTI found: kernel times need NVIDIA's CUPTI library: pip install 'nvcc-evo[profile]' (or " \
               "name a folder holding include/cupti.h and lib/libcupti.so in NVCC_EVO_CUPTI)" in result.stderr
    if gpu_missing():
        assert "no CUDA driver" in result.stderr and "use --hot --from FILE" in result.stderr
    assert result.stderr.startswith("nvcc-evo: error: --hot cannot record kernel times here: ")
    assert "Traceback" not in result.stderr and list(fresh.iterdir()) == []


def test_a_cupti_folder_named_without_cupti_is_said_not_passed_by(tmp_path, evo_cache):
    """NVCC_EVO_CUPTI names a folder of no CUPTI: exit 3 saying so (before: the wheel's or the toolkit's
    CUPTI was taken in its place, silently, and only the GPU was said missing)."""
    empty = tmp_path / "cupti"
    empty.mkdir()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    result = run_evo("--hot", "--", "./app", cwd=fresh, env=evo_env(evo_cache, NVCC_EVO_CUPTI=empty))
    assert result.returncode == 3 and result.stdout == "" and "Traceback" not in result.stderr
    assert f"NVCC_EVO_CUPTI={empty} holds no include/cupti.h and lib/libcupti.so (or lib64/): name a folder " \
           "that does, or unset it to use the nvidia-cuda-cupti wheel (pip install 'nvcc-evo[profile]') or the " \
           "toolkit's CUPTI" in result.stderr, result.stderr


def test_the_triton_advice_and_docs_name_both_of_triton_s_ptxas_variables(tmp_path, evo_cache):
    """Triton 3.6 runs TRITON_PTXAS_BLACKWELL_PATH from sm_100 on: what --hot prints when nothing is recorded,
    and the docs' --hot and Triton pages, name it beside TRITON_PTXAS_PATH (before: the advice and
    docs/retune.md's --hot section named TRITON_PTXAS_PATH alone)."""
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit kernel "*" {\n}\n')
    shutil.copy(DATA / "hot" / "profile.json", tmp_path / "profile.json")
    result = run_evo("--hot", "--from", "profile.json", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert "TRITON_PTXAS_PATH=nvcc-evo-ptxas, for sm_100 and later " \
           "TRITON_PTXAS_BLACKWELL_PATH=nvcc-evo-ptxas-blackwell too" in result.stderr, result.stderr
    retune = (ROOT / "docs" / "retune.md").read_text()
    hot = retune[retune.index("## From an application to its hot kernels"):retune.index("## Worked example")]
    triton = (ROOT / "docs" / "triton.md").read_text()
    for page in (hot, triton):
        assert "TRITON_PTXAS_PATH=$(which nvcc-evo-ptxas)" in page
        assert "TRITON_PTXAS_BLACKWELL_PATH=$(which nvcc-evo-ptxas-blackwell)" in page


STAND_IN = """\
import ctypes, os, sys
# A CUDA program's kernels as the injection library records them (no GPU here: the program adds them itself).
# -O1 and -O0 make `mix` faster, but -O1's program fails (exit 7) and -O0's answer fails the user's check.
if "CUDA_INJECTION64_PATH" not in os.environ:
    sys.exit(0)                                     # (the run that records the build first: no kernel times)
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
flags = os.environ["NVCC_EVO_CANDIDATE_FLAGS"]
mine = 3.0e6 if "-O1" in flags or "-O0" in flags else 5.0e6
for _ in range(10):
    lib.nvcc_evo_add(b"mix", 64, 1, 1, 1024, 1, 1, 32, 0, ctypes.c_ulonglong(int(mine)))
open("answer", "w").write("wrong\\n" if "-O0" in flags else "right\\n")
lib.nvcc_evo_write()
sys.exit(7 if "-O1" in flags else 0)
"""


def test_the_kernel_metric_bench_judges_by_the_exit_status_and_the_user_s_check(tmp_path, evo_cache):
    """`metric time kernels` takes the command backend's checks: a candidate whose run exits non-zero is
    command-failed and one that fails `check command` a wrong answer, however fast its kernels; the
    baseline stays."""
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "app.py").write_text(STAND_IN)
    acf = f"""acf 1
unit "spill.cu" {{
    search {{
        ptxas.opt_level in {{0, 1, 3}}
    }}
    tune {{
        minimize time
    }}
    bench {{
        command "{EVO} -arch=sm_90 -cubin spill.cu -o spill.cubin && {sys.executable} app.py"
        check command "grep -q right answer"
        metric time kernels
    }}
}}
"""
    (tmp_path / "nvcc-evo.acf").write_text(acf)
    result = run_evo_without_gpu_check("--retune", "--target", "sm_90", "--backend", "command", "--evaluations",
                                       "3", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert "candidate -Xptxas -O1: command-failed after" in result.stderr, result.stderr
    assert "candidate -Xptxas -O0: wrong-answer after" in result.stderr
    assert "failures: command-failed 1 (e.g. \"exit 7: " in result.stdout
    assert "wrong-answer 1 (e.g. \"`check command \"grep -q right answer\"` exited 1" in result.stdout
    assert "baseline kept: no candidate beat it" in result.stdout
    from nvcc_evo.acf.parse import parse_text
    target = parse_text((tmp_path / "nvcc-evo.acf").read_text()).units[0].targets[0]
    assert {s.knob: s.value for s in target.settings} == {}, result.stdout      # the baseline, not -O1 or -O0


def test_a_command_without_its_dashes_and_a_share_out_of_range_are_usage_errors(tmp_path, evo_cache):
    """`nvcc-evo --hot ./app 10` (the `--` forgotten) says where the command goes (before: argparse's
    usage and `unrecognized arguments`); --min-share outside 0-100, or NaN, is refused (before: -5 wrote every
    unit, NaN and 200 none, each with exit 0 or 1 as the rest of the run went); --run or --build without
    --write is refused (before: ignored, nothing written)."""
    env = evo_env(evo_cache)
    result = run_evo("--hot", "./app", "10", cwd=tmp_path, env=env)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("nvcc-evo: error: --hot ./app 10: the command to run goes after `--`: nvcc-evo --hot "
                             "[options] -- ./app 10\n"), result.stderr
    shutil.copy(DATA / "hot" / "profile.json", tmp_path / "profile.json")
    for share in ("-5", "nan", "200"):
        result = run_evo("--hot", "--from", "profile.json", "--write", "--min-share", share, cwd=tmp_path, env=env)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr == f"nvcc-evo: error: --hot --min-share {share}: a percentage of the GPU time, from 0 " \
                                "to 100\n", result.stderr
    for option in ("--run", "--build"):                # (before: the table, nothing written, exit 0)
        result = run_evo("--hot", "--from", "profile.json", option, "./app", cwd=tmp_path, env=env)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr == ("nvcc-evo: error: --hot --build and --run say how the bench --write writes builds "
                                 "and runs the program: without --write nothing is written (add --write)\n")
    unknown = run_evo("--hot", "--frm", "profile.json", cwd=tmp_path, env=env)     # (an unknown option: argparse's)
    assert unknown.returncode == 2 and "unrecognized arguments: --frm" in unknown.stderr


# `nsys stats --format csv report.nsys-rep` with its default reports: each one's banner and table in turn, the OS
# runtime's and the CUDA API's tables beginning with Time (%) too, the memory operations' after the kernels'
NSYS_STATS = """\
Generating SQLite file report1.sqlite from report1.nsys-rep
Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/host-linux-x64/reports/nvtx_sum.py]...
SKIPPED: report1.sqlite does not contain NV Tools Extension (NVTX) data.

Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/host-linux-x64/reports/osrt_sum.py]...

 ** OS Runtime Summary (osrt_sum):

Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
61.2,1038473045,20,51923652.3,100116208.0,2416,100181457,50478740.9,poll
38.8,658101432,573,1148519.0,11376.0,1007,62467395,4946064.9,ioctl

Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/host-linux-x64/reports/cuda_api_sum.py]...

 ** CUDA API Summary (cuda_api_sum):

Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
90.0,243000000,1,243000000.0,243000000.0,243000000,243000000,0.0,cudaDeviceSynchronize
10.0,27000000,3,9000000.0,9000000.0,8000000,10000000,1000000.0,cudaMalloc

Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/host-linux-x64/reports/cuda_gpu_kern_sum.py]...

 ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):

Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
98.7,233937000,306,764500.0,763900.0,2100,1520000,400000.0,"void sgemmWarptiling<(int)128, (int)128, (int)16, (int)64, (int)64, (int)4, (int)8, (int)4, (int)128>(int, int, int, float, float *, float *, float, float *)"
1.3,3371000,7,481571.4,480000.0,3000,1000000,300000.0,sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas

Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/host-linux-x64/reports/cuda_gpu_mem_time_sum.py]...

 ** CUDA GPU MemOps Summary (by Time) (cuda_gpu_mem_time_sum):

Time (%),Total Time (ns),Count,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Operation
100.0,5000000,3,1666666.7,1600000.0,1500000,1900000,200000.0,[CUDA memcpy Host-to-Device]
"""


def test_the_kernel_summary_among_the_reports_of_nsys_stats_is_read_alone(tmp_path):
    """`nsys stats --format csv` of every default report, kept in one file: the kernels' table is found by its
    columns and read to its end (before: the OS runtime's table, the first to begin with Time (%), was taken
    for it: 'the kernel summary lacks the column(s) Instances'); a file of those other tables alone is still a
    located error naming the missing column."""
    from nvcc_evo.errors import LocatedError
    from nvcc_evo.hot.profile import read_profile
    (tmp_path / "stats.csv").write_text(NSYS_STATS)
    profile = read_profile(str(tmp_path / "stats.csv"))
    assert [(k.name[:20], k.calls, k.total_ns) for k in profile.kernels] == [
        ("void sgemmWarptiling", 306, 233937000), ("sm90_xmma_gemm_f32f3", 7, 3371000)]
    others = NSYS_STATS[:NSYS_STATS.index("Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/2024.5.1/"
                                          "host-linux-x64/reports/cuda_gpu_kern_sum.py]")]
    (tmp_path / "others.csv").write_text(others)
    with pytest.raises(LocatedError, match=r"others.csv:9:1: error: the kernel summary lacks the column\(s\) "
                                           r"Instances"):
        read_profile(str(tmp_path / "others.csv"))


def test_a_dry_run_after_write_says_the_bench_builds_the_new_unit_first(tmp_path, evo_cache):
    """A unit --write adds has no compile record of its own yet (the build's were the recording unit's): a
    retune runs its bench once first and tunes it as that build compiles it; its dry run, which runs nothing,
    says so (before: 'compiled as `nvcc -c SOURCE` for sm_90 ..., without the build's own flags', which the
    retune does not do)."""
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit "spill.cu" {\n    search {\n        ptxas.opt_level in '
                                           '{1, 3}\n    }\n    tune {\n        minimize time\n    }\n    bench {\n'
                                           '        command "make -s NVCC=nvcc-evo && ./app"\n        metric time '
                                           'kernels\n    }\n}\n')
    result = run_evo("--retune", "--backend", "command", "--dry-run", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert ('nvcc-evo: "spill.cu": never built through nvcc-evo for this ACF: a retune runs its bench command once '
            'first, so that the build it measures is recorded (make -s NVCC=nvcc-evo && ./app), and tunes it for '
            "that build's architectures and flags; this dry run runs nothing, so it lists it as `nvcc -c SOURCE` "
            "for sm_90 builds it\n") in result.stderr, result.stderr
    assert "without the build's own flags" not in result.stderr
    assert (tmp_path / "nvcc-evo.acf").read_text().count("unit") == 1 and not list(tmp_path.glob("app"))


def test_a_source_built_for_several_architectures_is_shown_with_each(tmp_path, evo_cache):
    """A build for several architectures (cuda-samples' CMake lists nine) records one compile for each:
    the table names them all, not the one whose record was written last (before: 'from k.cu [sm_90]'
    for a build of sm_80 and sm_90, '[sm_120]' for cuda-samples' nine)."""
    env = evo_env(evo_cache)
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit "*.cu" {\n}\n')
    (tmp_path / "k.cu").write_text("template <class T> __global__ void k(T *x) { x[threadIdx.x] *= 2; }\n"
                                   "template __global__ void k<float>(float *);\n")
    built = run_evo("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
                    "-c", "k.cu", "-o", "k.o", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    shown = _hot_from_summary(tmp_path, env, "void k<float>(T1 *)")
    assert "  from k.cu [sm_80, sm_90]; unit \"*.cu\"" in shown, shown
