"""`nvcc-evo --hot` with no GPU: the injection library built against the
CUPTI wheel and its table written, a real Make project's kernels (templates
in a namespace, a lambda, extern "C", a static kernel of one name in two
units) mapped from the project's own saved profile and from an Nsight
Systems kernel summary, the units `--write` adds (golden files), bad input,
and the harness-free bench (`metric time kernels`) in a real retune, its
kernel times written by the real library from a stand-in program."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DATA, EVO, EVO_COMMAND, evo_env, run_evo, run_evo_without_gpu_check
from nvcc_evo.errors import EnvironmentProblem, EvoError
from nvcc_evo.hot.names import WIDEST
from nvcc_evo.measure.profile.records import read_run

HOT = DATA / "hot"
GOLDEN = os.environ.get("NVCC_EVO_GOLDEN") == "write"        # rewrite the golden files (then read the diff)


def golden(name: str, text: str) -> None:
    path = HOT / name
    if GOLDEN:
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs (NVCC_EVO_GOLDEN=write rewrites it)"


@pytest.fixture(scope="module")
def project(tmp_path_factory, evo_cache):
    """tests/data/projects/hot built through nvcc-evo (its objects: the compile database records them)."""
    folder = tmp_path_factory.mktemp("hot") / "app"
    shutil.copytree(DATA / "projects" / "hot", folder)
    env = evo_env(evo_cache, PATH=f"{EVO.parent}{os.pathsep}{os.environ['PATH']}")
    built = subprocess.run(["make", "-s", "-j4", "objects", "NVCC=nvcc-evo"], cwd=folder, env=env, capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stderr
    return folder, env


def _hot(project, *args):
    folder, env = project
    result = run_evo("--hot", *args, cwd=folder, env=env)
    return result, result.stdout.replace(str(folder), "PROJECT").replace(str(HOT), "DATA")


# ---------------------------------------------------------------- the injection library
def test_the_injection_library_builds_once_and_writes_a_table_per_process(tmp_path, monkeypatch):
    from nvcc_evo.measure.profile.library import library
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = library(os.environ, "nvcc")
    assert Path(built).parent == tmp_path / "cache" / "nvcc-evo" and Path(built).name.startswith("inject-")
    made = os.stat(built).st_mtime_ns
    assert library(os.environ, "nvcc") == built and os.stat(built).st_mtime_ns == made     # once per release
    symbols = subprocess.run(["nm", "-D", "--defined-only", built], capture_output=True, text=True).stdout
    assert " T InitializeInjection" in symbols            # the entry point CUDA_INJECTION64_PATH's loader calls
    times = tmp_path / "times"
    times.mkdir()
    # two processes (a program and its child, say), each its own file; the same kernel and shape add up
    program = ("import ctypes, os, sys; lib = ctypes.CDLL(sys.argv[1]); ns = ctypes.c_ulonglong\n"
               "for t in (1000, 3000): lib.nvcc_evo_add(b'_Z4tilePf', 8, 1, 1, 256, 1, 1, 40, 1024, ns(t))\n"
               "lib.nvcc_evo_add(b'other\\tname', 1, 1, 1, 32, 1, 1, 8, 0, ns(500))\n"
               "sys.exit(lib.nvcc_evo_write())\n")
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", program, built], env={**os.environ,
                              "NVCC_EVO_KERNEL_TIMES": str(times)}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert len(list(times.glob("kernels-*.tsv"))) == 2 and not list(times.glob("*.tmp"))
    rows, problems = read_run(str(times))
    assert problems == []
    tile = next(r for r in rows if r.name == "_Z4tilePf")
    assert (tile.calls, tile.total_ns, tile.least_ns, tile.most_ns) == (4, 8000, 1000, 3000)
    assert (tile.grid, tile.block, tile.registers, tile.shared) == ((8, 1, 1), (256, 1, 1), 40, 1024)
    assert [r.name for r in rows] == ["_Z4tilePf", "other name"]       # (a tab in a name cannot split a line)


def test_without_cupti_the_run_says_how_to_get_it(monkeypatch):
    import types
    from nvcc_evo.measure.profile import library
    monkeypatch.setitem(sys.modules, "nvidia", types.SimpleNamespace(__path__=[]))
    monkeypatch.delenv("NVCC_EVO_CUPTI", raising=False)
    with pytest.raises(EnvironmentProblem, match=r"no CUPTI found.*pip install 'nvcc-evo\[profile\]'"):
        library.find_cupti(os.environ, None)


def test_a_toolkit_that_holds_cupti_among_its_own_files_is_found_without_the_wheel(monkeypatch):
    """Linux packages of the toolkit (and this machine's, and the H200's) put cupti.h in include/ and libcupti
    in lib64/, not in extras/CUPTI: found there (before: 'no CUPTI found' where no wheel was installed)."""
    import types
    from nvcc_evo.measure.profile import library
    top, _ = library.toolkit_paths("nvcc")
    if top is None or not (Path(top) / "include" / "cupti.h").is_file():
        pytest.skip("this toolkit holds no include/cupti.h")
    monkeypatch.setitem(sys.modules, "nvidia", types.SimpleNamespace(__path__=[]))
    monkeypatch.delenv("NVCC_EVO_CUPTI", raising=False)
    found = library.find_cupti(os.environ, top)
    assert found.include == str(Path(top) / "include") and os.path.basename(found.library).startswith("libcupti.so")


def test_hot_without_a_gpu_exits_3_saying_what_is_missing(tmp_path, evo_cache):
    from nvcc_evo.measure.profile.clock import gpu_missing
    if not gpu_missing():
        pytest.skip("this machine has a GPU")
    result = run_evo("--hot", "--", "true", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 3 and result.stdout == ""
    assert "--hot cannot record kernel times here: no CUDA driver" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_failing_command_says_its_status_and_stderr_and_a_command_of_no_kernel_is_said(tmp_path, monkeypatch,
                                                                                         capsys):
    """(The GPU check stood aside: on this machine no driver loads the library, as a program of no CUDA.)"""
    from nvcc_evo.hot import run
    from nvcc_evo.measure.profile import clock
    monkeypatch.setattr(clock, "gpu_missing", lambda: "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EvoError, match=r"exited with status 4: no profile saved, nothing written; .*\n    \| oops"):
        run.run_hot(None, None, ["sh", "-c", "echo oops >&2; exit 4"], False, 0.05, None, None)
    with pytest.raises(EvoError, match="ran no kernel on the GPU"):
        run.run_hot(None, None, ["true"], False, 0.05, None, None)
    assert not (tmp_path / ".nvcc-evo").exists()


CHILDREN = """\
import ctypes, os, subprocess, sys
# A program and the child it starts, each a CUDA process as the injection library records it (no GPU here).
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
name = b"_ZN3app9tile_gemmILi32EEEvPKfS2_Pfi" if sys.argv[1:] == ["child"] else b"saxpy"
lib.nvcc_evo_add(name, 32, 32, 1, 32, 32, 1, 38, 8192, ctypes.c_ulonglong(3000000))
if not sys.argv[1:]:
    subprocess.run([sys.executable, __file__, "child"], check=True)
print("done")
raise SystemExit(lib.nvcc_evo_write())
"""


@pytest.fixture
def children(project, monkeypatch):
    """The project, run from its folder with CHILDREN as its program.py (removed after) and the GPU check
    stood aside: its folder and the module hot.run."""
    from nvcc_evo.hot import run
    from nvcc_evo.measure.profile import clock
    folder, env = project
    monkeypatch.setattr(clock, "gpu_missing", lambda: "")
    monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])
    monkeypatch.chdir(folder)
    (folder / "program.py").write_text(CHILDREN)
    yield folder, run
    (folder / "program.py").unlink()


def test_a_run_records_the_kernels_of_the_program_and_its_children_and_saves_the_profile(children, capfd):
    """(The processes add their kernels themselves, as the driver's would.)"""
    folder, run = children
    assert run.run_hot(None, None, [sys.executable, "program.py"], False, 0.05, None, None) == 0
    shown = capfd.readouterr()
    assert "2 kernel(s), 6.000 ms on the GPU" in shown.out and "done" not in shown.err
    assert shown.out.startswith("done\ndone\nkernels by GPU time: ")      # the program's stdout, then the table
    assert "void app::tile_gemm<32>(float const*, float const*, float*, int)\n" \
           "                                 from src/gemm.cu [sm_90]" in shown.out
    saved = (folder / ".nvcc-evo" / "hot" / "profile.json").read_text()
    assert '"command": [' in saved and '"registers": 38' in saved


def test_a_run_on_a_gpu_the_build_has_no_cubin_for_says_a_retune_reaches_nothing_there(children, monkeypatch,
                                                                                        capfd):
    """The project is built for sm_90; the GPU stands for an sm_100 (device_archs stood aside, as the GPU
    check): its kernels ran from their PTX, so each hot source is said with the architecture to build for;
    on an sm_90 nothing is said."""
    folder, run = children
    for device, said in ((("sm_100",), True), (("sm_90",), False)):
        monkeypatch.setattr(run, "device_archs", lambda device=device: device)
        assert run.run_hot(None, None, [sys.executable, "program.py"], False, 0.05, None, None) == 0
        err = capfd.readouterr().err
        assert ("nvcc-evo: src/gemm.cu is built for sm_90 alone (its recorded compiles): this machine's GPU "
                "(sm_100) runs its kernels from their PTX" in err) is said, err
        assert ("from their PTX" in err) is said, err


# ---------------------------------------------------------------- the mapping, from saved profiles
def test_a_saved_profile_maps_each_kernel_to_the_unit_that_builds_it(project):
    result, shown = _hot(project, "--from", str(HOT / "profile.json"))
    assert result.returncode == 0, result.stderr
    golden("profile.out", shown)
    assert "defined by 2 units" in shown           # the static kernel of one name in gemm.cu and vector.cu
    again, shown_again = _hot(project, "--from", str(HOT / "profile.json"))
    assert shown_again == shown and "reading the kernels of" not in again.stderr     # (kept: no compile again)


def test_an_nsys_kernel_summary_maps_the_same_kernels(project):
    """Nsight Systems' spelling (`<(int)32>`, `const float *`, `[lambda(int) (instance 1)]`) against c++filt's."""
    result, shown = _hot(project, "--from", str(HOT / "nsys.csv"))
    assert result.returncode == 0, result.stderr
    golden("nsys.out", shown)
    ours = _hot(project, "--from", str(HOT / "profile.json"))[1]
    units = lambda text: re.sub(r"\d+ registers", "N registers", text[text.index("nvcc-evo reaches"):])
    assert units(shown) == units(ours)     # (registers: the run's count in ours, ptxas's for nsys's)


NAMED_A = """namespace {
template <typename T, bool Fast>
__global__ void norm(const T *x, T *y, int n) { int i = threadIdx.x; if (i < n) y[i] = Fast ? x[i] : x[i] * T(2); }
}
template <typename F>
__global__ void apply(int n, F f) { int i = threadIdx.x; if (i < n) f(i); }
void run_a(float *x, float *y, double *u, double *v, int n) {
    norm<float, true><<<1, 32>>>(x, y, n);
    norm<double, false><<<1, 32>>>(u, v, n);
    apply<<<1, 32>>>(n, [=] __device__(int i) { y[i] += x[i]; });
}
"""
NAMED_B = """namespace {
template <typename T, bool Fast>
__global__ void norm(const T *x, T *y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i] + T(Fast); }
}
template <typename F>
__global__ void apply(int n, F f) { int i = threadIdx.x; if (i < n) f(i); }
void run_b(float *x, float *y, int n) {
    norm<float, false><<<1, 32>>>(x, y, n);
    apply<<<1, 32>>>(n, [=] __device__(int i) { x[i] *= 2.0f; });
}
"""
# Nsight Systems' spelling: `<unnamed>` for an anonymous namespace, `(bool)1`, a lambda as `[lambda(int) (instance
# 1)]` in a function of no template (no return type), and each parameter of a template's parameter type as it
# (`T1`, `const T1 *`), where c++filt writes the type
NAMED_CSV = """Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
40.0,400,4,100.0,100.0,90,110,5.0,"void <unnamed>::norm<float, (bool)1>(const T1 *, T1 *, int)"
25.0,250,5,50.0,50.0,45,55,5.0,"void <unnamed>::norm<double, (bool)0>(const T1 *, T1 *, int)"
15.0,150,3,50.0,50.0,45,55,5.0,"void <unnamed>::norm<float, (bool)0>(const T1 *, T1 *, int)"
12.0,120,3,40.0,40.0,35,45,5.0,"void apply<run_a(float *, float *, double *, double *, int)::[lambda(int) (instance 1)]>(int, T1)"
8.0,80,2,40.0,40.0,35,45,5.0,"void apply<run_b(float *, float *, int)::[lambda(int) (instance 1)]>(int, T1)"
"""


def test_nsys_names_of_anonymous_namespaces_and_lambdas_map_to_the_unit_that_defines_each(tmp_path, evo_cache):
    """Real nvcc-built code: one anonymous-namespace template and one template launched with a lambda in each of
    two units. Each kernel maps to its one unit (before: by the qualified name alone, each to both)."""
    env = evo_env(evo_cache)
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit "*.cu" {\n}\n')
    for name, text in (("a", NAMED_A), ("b", NAMED_B)):
        (tmp_path / f"{name}.cu").write_text(text)
        built = run_evo("-arch=sm_90", "--extended-lambda", "-c", f"{name}.cu", "-o", f"{name}.o", cwd=tmp_path,
                        env=env)
        assert built.returncode == 0, built.stderr
    (tmp_path / "nsys.csv").write_text(NAMED_CSV)
    result = run_evo("--hot", "--from", "nsys.csv", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    origins = [lines[i + 1].split(";")[0].strip() for i, line in enumerate(lines) if line.startswith("  ")
               and ("norm<" in line or "apply<" in line)]
    assert origins == ["from a.cu [sm_90]", "from a.cu [sm_90]", "from b.cu [sm_90]", "from a.cu [sm_90]",
                       "from b.cu [sm_90]"], result.stdout
    assert "nvcc-evo reaches 100.0% of the GPU time through 2 recorded unit(s)" in result.stdout
    # `nsys stats --report cuda_gpu_kern_sum:mangled` names the symbols themselves: found as they are, shown demangled
    (tmp_path / "mangled.csv").write_text(NAMED_CSV.splitlines()[0] + "\n8.0,80,2,40.0,40.0,35,45,5.0,"
                                          "_Z5applyIZ5run_bPfS0_iEUliE_EviT_\n")
    mangled = run_evo("--hot", "--from", "mangled.csv", cwd=tmp_path, env=env)
    assert mangled.returncode == 0, mangled.stderr
    lambda_b = "run_b(float*, float*, int)::{lambda(int)#1}"
    assert f"  void apply<{lambda_b}>(int, {lambda_b})\n{'':>33}from b.cu [sm_90]" in mangled.stdout, mangled.stdout


def test_write_adds_the_hot_units_once_before_the_unit_that_only_records(project, tmp_path):
    folder, env = project
    acf = folder / "nvcc-evo.acf"
    before = acf.read_text()
    try:
        result, _ = _hot(project, "--from", str(HOT / "profile.json"), "--write")
        assert result.returncode == 0, result.stderr
        golden("written.acf", acf.read_text())
        from nvcc_evo.measure.command.rebuilt import LONG_AGO      # the written units' objects: built again next time
        assert [(folder / "src" / f"{n}.o").stat().st_mtime for n in ("gemm", "vector", "reduce")][:2] == \
            [LONG_AGO, LONG_AGO] and (folder / "src" / "reduce.o").stat().st_mtime != LONG_AGO
        assert acf.read_text().startswith(before[:before.index("# every other")])      # existing units untouched
        again, _ = _hot(project, "--from", str(HOT / "profile.json"), "--write")
        assert again.returncode == 0 and "--write: no unit to add: every unit of the profile's kernels is tuned " \
            "already (src/gemm.cu: unit \"src/gemm.cu\"; src/vector.cu: unit \"src/vector.cu\"; src/reduce.cu: " \
            "unit \"src/reduce.cu\")\n" in again.stderr, again.stderr     # (before: "none untuned takes 5%")
        assert acf.read_text() == (HOT / "written.acf").read_text()
        checked = run_evo("--acf-check", str(acf), cwd=folder, env=env)
        assert checked.returncode == 0, checked.stderr
        # the next --hot names the new units as covering their kernels
        assert 'from src/gemm.cu [sm_90]; unit "src/gemm.cu"\n' in _hot(project, "--from",
                                                                     str(HOT / "profile.json"))[1]
    finally:
        acf.write_text(before)


def test_write_leaves_out_a_unit_under_the_least_share_and_says_so(project, tmp_path):
    """vector.cu's kernels take 3.3% of this profile's GPU time: under the default 5% it is left out, and
    said (before: in silence); --min-share 3 adds it, and gemm.cu, added already, is not added again."""
    folder, env = project
    acf = folder / "nvcc-evo.acf"
    before = acf.read_text()
    text = (HOT / "profile.json").read_text()
    for old, new in (('"total_ns": 50000000', '"total_ns": 10000000'), ('"total_ns": 40000000', '"total_ns": '
                     '10000000'), ('"total_ns": 30000000', '"total_ns": 10000000')):
        assert text.count(old) == 1
        text = text.replace(old, new)
    (tmp_path / "small.json").write_text(text)
    try:
        result, _ = _hot(project, "--from", str(tmp_path / "small.json"), "--write")
        assert result.returncode == 0, result.stderr
        assert "--write: src/vector.cu left out: 3.3% of the GPU time, under --min-share 5\n" in result.stderr
        written = acf.read_text()
        assert 'unit "src/gemm.cu" {' in written and 'unit "src/vector.cu" {' not in written
        assert "# nvcc-evo --hot: 89.0% of the GPU time" in written
        more, _ = _hot(project, "--from", str(tmp_path / "small.json"), "--write", "--min-share", "3")
        assert more.returncode == 0 and "left out" not in more.stderr, more.stderr
        assert acf.read_text().count('unit "src/gemm.cu" {') == 1 and 'unit "src/vector.cu" {' in acf.read_text()
    finally:
        acf.write_text(before)


def test_written_register_caps_are_those_where_an_sm_holds_more_blocks_of_the_hot_kernels():
    """A cap that adds no block per SM only spills (an SGEMM of 168 registers capped at 80..160 ran
    1.2-12x slower, H100): the caps written are where the occupancy table gives a launch shape that
    takes a tenth of the unit's time another block, down to half its registers; none where shared
    memory limits it; the old range where the profile has no shapes (an Nsight Systems summary) or the
    occupancy table no row for the architecture."""
    from nvcc_evo.acf import model
    from nvcc_evo.cubin.occupancy import occupancy
    from nvcc_evo.hot.origin import Origin
    from nvcc_evo.hot.table import Hot, HotUnit
    from nvcc_evo.hot.write import register_caps
    from nvcc_evo.measure.profile.records import KernelTime

    def unit(*shapes, arch="sm_90"):
        kernels = tuple(Hot(f"k{i}", f"k{i}", 1, ns, (KernelTime(f"k{i}", 1, ns, ns, ns, (99, 1, 1), block,
                            registers, shared),) if block else (), ()) for i, (ns, block, registers, shared)
                        in enumerate(shapes))
        origin = Origin("src/a.cu", arch, None, None, 168)
        return HotUnit("src/a.cu", sum(k.total_ns for k in kernels), kernels, (origin,) * len(kernels))

    gemm = (100, (128, 1, 1), 168, 17 * 1024)
    caps = register_caps(unit(gemm))
    assert caps == model.SetDomain((96, 128))
    blocks = [occupancy("sm_90", 128, r, 17 * 1024).blocks for r in (168, 128, 127 + 8, 96, 103)]
    assert blocks[0] < blocks[1] < blocks[3] and blocks[2] == blocks[0] and blocks[4] == blocks[1]
    assert register_caps(unit((100, (256, 1, 1), 64, 100 * 1024))) is None     # shared memory limits it
    assert register_caps(unit(gemm, (5, (256, 1, 1), 96, 0))) == caps          # 5% of the unit's time
    assert register_caps(unit(gemm, (50, (256, 1, 1), 96, 0))) == model.SetDomain((48, 64, 80, 96, 128))
    assert register_caps(unit((100, None, 0, 0))) == model.RangeDomain(80, 160, 16)   # no shapes
    assert register_caps(unit(gemm, arch="sm_61")) == model.RangeDomain(80, 160, 16)   # no row for it


def test_write_with_nothing_recorded_says_how_the_build_gets_recorded(tmp_path, evo_cache):
    """No ACF, then an ACF whose compiles were never recorded: --write writes nothing and says how (a unit
    that records every compile, a rebuild from clean through nvcc-evo); it said "no unit to add" before."""
    env = evo_env(evo_cache)
    shutil.copy(HOT / "profile.json", tmp_path / "profile.json")
    nothing = run_evo("--hot", "--from", "profile.json", "--write", cwd=tmp_path, env=env)
    assert nothing.returncode == 1 and "no ACF here or above" in nothing.stderr
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit "**/*.cu" {\n}\n')
    result = run_evo("--hot", "--from", "profile.json", "--write", cwd=tmp_path, env=env)
    assert result.returncode == 1 and "nvcc-evo reaches 0.0% of the GPU time" in result.stdout
    assert f"no compile of {tmp_path} is recorded yet: unit \"**/*.cu\" {{}} records every compile" in result.stderr
    assert "rebuild from clean through nvcc-evo" in result.stderr and result.stderr.endswith(": nothing written\n")
    assert "(Triton's kernels: unit kernel \"*\" {}, and the run with TRITON_PTXAS_PATH=nvcc-evo-ptxas" in result.stderr
    assert (tmp_path / "nvcc-evo.acf").read_text() == 'acf 1\n\nunit "**/*.cu" {\n}\n'


# Two of PyTorch's kernels as an H100 run of a PyTorch program named them (a line of 5,072 characters
# in the table before: templates of lambdas of templates).
TORCH_KERNELS = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<bool, bool, bool, "
    "at::native::binary_internal::MulFunctor<bool> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<"
    "bool, bool, bool, at::native::binary_internal::MulFunctor<bool> >, std::array<char*, 3ul>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, bool, "
    "at::native::(anonymous namespace)::CompareEqFunctor<float> >, std::array<char*, 3ul> >(int, "
    "at::native::BinaryFunctor<float, float, bool, at::native::(anonymous namespace)::CompareEqFunctor<float> >, "
    "std::array<char*, 3ul>)" + "".join(f", std::array<char*, {n}ul>" for n in range(40)),
)


def test_a_long_kernel_name_is_shown_with_its_deepest_brackets_collapsed(tmp_path, evo_cache):
    header = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
    rows = "".join(f'{50 - i},{5000 - i},1,1.0,1.0,1,1,0.0,"{name}"\n' for i, name in enumerate(TORCH_KERNELS))
    (tmp_path / "nsys.csv").write_text(header + rows)
    result = run_evo("--hot", "--from", "nsys.csv", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "vectorized_elementwise_kernel" in line]
    assert len(lines) == 2 and all(len(line) <= 44 + WIDEST for line in lines), lines
    # the deepest brackets go first: the kernel's own template arguments and parameters stay readable
    assert lines[0].endswith("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...>, "
                             "std::array<...> >(int, at::native::BinaryFunctor<...>, std::array<...>)"), lines[0]
    assert "CompareEqFunctor" not in lines[1] and "..." in lines[1]


@pytest.mark.parametrize("name, text, said", [
    ("other.csv", "a,b\n1,2\n", "other.csv:1:1: error: not a kernel profile: neither nvcc-evo's (JSON) nor Nsight"),
    ("row.csv", "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
                "1,x,2,3,4,5,6,7,k\n", "row.csv:2:3: error: Total Time (ns): 'x' is not a number\n1,x,2"),
    ("few.csv", "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
                "1,2\n", "few.csv:2:1: error: row 1 has 2 field(s), not the header's 9"),
    ("short.csv", "Time (%),Total Time (ns),Instances,Name\n", "short.csv:1:1: error: the kernel summary lacks "
                                                              "the column(s) Avg (ns), Med (ns), Min (ns)"),
    ("other.json", '{"kernels": []}\n', "other.json:1:1: error: not a kernel profile of nvcc-evo"),
    ("broken.json", '{"format": \n', "broken.json:2:1: error: not a kernel profile: Expecting value"),
    # (before: an empty table and exit 0)
    ("header.csv", "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n",
     "header.csv:1:1: error: the profile holds no kernel: nothing to rank"),
    ("none.json", '{"format": "nvcc-evo kernel profile", "version": 1, "kernels": []}\n',
     "none.json:1:1: error: the profile holds no kernel: nothing to rank"),
])
def test_a_profile_of_another_shape_is_a_located_error(tmp_path, evo_cache, name, text, said):
    (tmp_path / name).write_text(text)
    result = run_evo("--hot", "--from", name, cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(said), result.stderr
    assert "Traceback" not in result.stderr


def test_a_profile_that_cannot_be_read_is_said_as_bad_input(tmp_path, evo_cache):
    """A missing file, a folder: exit 1 naming --from and the file (before: `[Errno 2] No such file or
    directory: 'missing.csv'` and exit 3, the code of a machine that lacks something)."""
    for name, said in (("missing.csv", "No such file or directory"), (".", "Is a directory")):
        result = run_evo("--hot", "--from", name, cwd=tmp_path, env=evo_env(evo_cache))
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr == f"nvcc-evo: error: --hot --from {name}: {said}\n", result.stderr


# ---------------------------------------------------------------- the bench that needs no harness
STAND_IN = """\
import ctypes, os, random
# A CUDA program's kernels as the injection library records them (no GPU here: the program adds them itself).
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
run = random.Random(int(os.environ["NVCC_EVO_RUN"]))
mine = 4.0e6 if "-O1" in os.environ["NVCC_EVO_CANDIDATE_FLAGS"] else 5.0e6
for _ in range(10):
    lib.nvcc_evo_add(b"mix", 64, 1, 1, 1024, 1, 1, 32, 0, ctypes.c_ulonglong(int(mine * run.gauss(1, 0.002))))
# a library's kernel, slower and noisy, the same for every candidate: not the unit's, not counted
lib.nvcc_evo_add(b"cublas_gemm", 8, 1, 1, 128, 1, 1, 168, 0, ctypes.c_ulonglong(int(run.uniform(1e8, 5e8))))
raise SystemExit(lib.nvcc_evo_write())
"""


def test_a_retune_measures_the_units_own_kernels_time_from_the_injection(tmp_path, evo_cache):
    """`metric time kernels`: the metric is the GPU time of the kernels the candidate's build defines
    (spill.cu's `mix`) in the runs, as the real library writes it; the program prints nothing."""
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "app.py").write_text(STAND_IN)
    (tmp_path / "nvcc-evo.acf").write_text(f"""acf 1
unit "spill.cu" {{
    search {{
        ptxas.opt_level in {{1, 3}}
    }}
    tune {{
        minimize time
    }}
    bench {{
        command "{EVO} -arch=sm_90 -cubin spill.cu -o spill.cubin && {sys.executable} app.py"
        metric time kernels
        repeat 2
    }}
}}
""")
    result = run_evo_without_gpu_check("--retune", "--target", "sm_90", "--backend", "command", "--evaluations",
                                       "2", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert "time the unit's kernels' GPU time" in result.stderr and "improved time" in result.stdout
    from nvcc_evo.acf.parse import parse_text
    target = parse_text((tmp_path / "nvcc-evo.acf").read_text()).units[0].targets[0]
    found = {r.key: r.value for r in target.provenance}
    assert {s.knob: s.value for s in target.settings} == {"ptxas.opt_level": 1}
    assert 49 < found["baseline.time"] < 51 and 39 < found["tuned.time"] < 41      # mix's 10 calls alone
    assert found["significant"] is True


def test_a_retune_of_a_kernel_metric_where_kernels_cannot_be_timed_stops_before_any_build(tmp_path, evo_cache):
    """No CUPTI (NVCC_EVO_CUPTI names a folder without it; no GPU either, on this machine): exit 3 at once,
    what is missing and how to get it, as --hot says it, before the bench builds the unit and, once the unit
    is recorded, before its baseline is compiled. Before: the bench command ran, then the baseline (about
    60 s on SGEMM_CUDA), and only its runs failed."""
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "app.py").write_text("open('ran', 'w').close()\n")
    (tmp_path / "nvcc-evo.acf").write_text(f"""acf 1
unit "spill.cu" {{
    search {{
        ptxas.opt_level in {{1, 3}}
    }}
    bench {{
        command "{EVO} -arch=sm_90 -cubin spill.cu -o spill.cubin && {sys.executable} app.py"
        metric time kernels
    }}
}}
""")
    (tmp_path / "cupti").mkdir()
    env = evo_env(evo_cache, NVCC_EVO_CUPTI=tmp_path / "cupti")
    from nvcc_evo.measure.profile.clock import gpu_missing
    for recorded in (False, True):
        if recorded:                                    # the bench's build, run by hand: recorded
            built = subprocess.run(["sh", "-c", f"{EVO} -arch=sm_90 -cubin spill.cu -o spill.cubin"], cwd=tmp_path,
                                   env=env, capture_output=True, text=True)
            assert built.returncode == 0 and (tmp_path / "spill.cubin").is_file(), built.stderr
            (tmp_path / "spill.cubin").unlink()
        started = time.monotonic()
        result = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=env)
        assert result.returncode == 3 and result.stdout == "", result.stderr
        error = result.stderr.splitlines()[-1]
        assert error.startswith("nvcc-evo: error: unit \"spill.cu\": `metric time kernels` cannot record kernel "
                                "times here: "), result.stderr
        assert f"NVCC_EVO_CUPTI={tmp_path / 'cupti'} holds no include/cupti.h and lib/libcupti.so" in error
        if gpu_missing():
            assert "no CUDA driver (libcuda.so.1 cannot be loaded, or it does not start): its runs record the GPU " \
                   "time of the unit's kernels on an NVIDIA GPU: retune it on a machine with one" in error
        assert "Traceback" not in result.stderr and "baseline" not in result.stderr
        assert not (tmp_path / "spill.cubin").exists() and not (tmp_path / "ran").exists()   # nothing built or run
        assert time.monotonic() - started < 30


def interleaved(run, rounds: int, out: str | None, name: str) -> dict:
    """`run(side)` -> (wall seconds, the program's figure) for "plain" and "injected": one warm-up run of
    each (not counted), then `rounds` of both in turn (P I, I P, ...); their medians and ratios, written as
    JSON to the folder `out` names (NVCC_EVO_TEST_OUT: the figures a GPU run brings back) when it is set."""
    import json
    import statistics
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "injected": []}
    warm = {side: run(side) for side in ("plain", "injected")}
    for index in range(rounds):
        for side in ("plain", "injected") if index % 2 == 0 else ("injected", "plain"):
            runs[side].append(run(side))
    median = {side: (statistics.median(w for w, _ in values), statistics.median(f for _, f in values))
              for side, values in runs.items()}
    found = {"rounds": rounds, "warm_up": warm, "runs": runs, "median_wall_s": {s: m[0] for s, m in median.items()},
             "median_figure": {s: m[1] for s, m in median.items()},
             "wall_ratio": median["injected"][0] / median["plain"][0],
             "figure_ratio": median["injected"][1] / median["plain"][1]}
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(found, indent=1) + "\n")
    return found


def test_the_overhead_check_warms_up_interleaves_and_writes_its_figures(tmp_path):
    """(The GPU test's comparison, on a stand-in run: the first run of each side is not counted.)"""
    import json
    order, slow = [], iter([9.0, 9.0])
    def run(side):
        order.append(side)
        first = next(slow, None)                    # (the warm-up runs: slow, not counted)
        return (first or (1.0 if side == "plain" else 1.1)), (first or (2.0 if side == "plain" else 2.5))
    found = interleaved(run, 3, str(tmp_path / "out"), "overhead")
    assert order == ["plain", "injected", "plain", "injected", "injected", "plain", "plain", "injected"]
    assert found["wall_ratio"] == pytest.approx(1.1) and found["figure_ratio"] == pytest.approx(1.25)
    assert json.loads((tmp_path / "out" / "overhead.json").read_text())["runs"]["plain"] == [[1.0, 2.0]] * 3


@pytest.mark.gpu
def test_on_the_gpu_hot_ranks_the_apps_kernels_and_the_injected_run_keeps_its_speed(tmp_path, evo_cache):
    """The real thing (run on the H200): the project built and run, CUPTI's records ranked and mapped, the
    profile saved; the injected run within 1.2x of the plain run's wall time (the issue's bound: medians of
    7 rounds in turn, after a warm-up run of each). The app's own figure (its GPU loop, in which CUPTI's
    first-launch setup falls) is kept with every run's time in NVCC_EVO_TEST_OUT/hot-overhead.json when set."""
    folder = tmp_path / "app"
    shutil.copytree(DATA / "projects" / "hot", folder)
    env = evo_env(evo_cache)
    built = subprocess.run(["make", "-s", f"NVCC={shlex.join(EVO_COMMAND)}"], cwd=folder, env=env,
                           capture_output=True, text=True)     # (the GPU machine runs nvcc-evo from the tree)
    assert built.returncode == 0, built.stderr
    result = run_evo("--hot", "--", "./app", "1024", "8", cwd=folder, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "tile_gemm<32>" in line)
    assert lines[first + 1].strip().startswith("from src/gemm.cu [sm_90]"), result.stdout
    assert "saxpy" in result.stdout and "defined by 2 units" in result.stdout       # the static scale
    assert (folder / ".nvcc-evo" / "hot" / "profile.json").is_file()
    from nvcc_evo.measure.profile.library import library
    from nvcc_evo.measure.profile.records import environment
    lib = library(env, "nvcc")
    count = iter(range(1000))

    def run(side: str) -> tuple[float, float]:
        times = tmp_path / f"times-{next(count)}"
        times.mkdir()
        extra = environment(str(times), lib) if side == "injected" else {}
        started = time.monotonic()
        done = subprocess.run(["./app", "2048", "20"], cwd=folder, env={**env, **extra}, capture_output=True,
                              text=True)
        wall = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert side == "plain" or list(times.glob("kernels-*.tsv")), "the injected run wrote no kernel times"
        return wall, float(re.search(r"time ([0-9.]+) ms", done.stdout).group(1))

    found = interleaved(run, 7, os.environ.get("NVCC_EVO_TEST_OUT"), "hot-overhead")
    assert found["wall_ratio"] <= 1.2, found


KERNEL_PROFILE = """{"format": "nvcc-evo kernel profile", "version": 1, "source": "the run of python3 model.py",
 "command": ["python3", "model.py"], "cwd": "", "exit": 0, "seconds": 2.0, "kernels": [
  {"name": "softmax_kernel", "calls": 100, "total_ns": 700000000, "least_ns": 6900000, "most_ns": 7100000,
   "grid": [4096, 1, 1], "block": [128, 1, 1], "registers": 40, "shared": 0},
  {"name": "_ZN2at6native18elementwise_kernelILi128ELi4EEEviT1_", "calls": 10, "total_ns": 300000000,
   "least_ns": 1, "most_ns": 2, "grid": [1, 1, 1], "block": [128, 1, 1], "registers": 16, "shared": 0}]}
"""


def test_a_triton_kernel_maps_to_its_ptx_entry_and_is_written_as_a_kernel_unit(tmp_path, evo_cache):
    """The drop-in ptxas keeps the PTX a program hands it and records it (the toolkit's ptxas: no Triton);
    --write adds a kernel unit whose bench is the run alone (Triton compiles it in the run)."""
    env = evo_env(evo_cache)
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit kernel "*" {\n}\n')
    (tmp_path / "k.ptx").write_text(".version 8.0\n.target sm_90a\n.address_size 64\n"
                                    ".visible .entry softmax_kernel()\n.reqntid 128\n{\n\tret;\n}\n")
    done = subprocess.run([str(EVO.parent / "nvcc-evo-ptxas"), "-v", "--gpu-name=sm_90a", "k.ptx", "-o", "k.o"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (tmp_path / "profile.json").write_text(KERNEL_PROFILE)
    result = run_evo("--hot", "--from", "profile.json", "--write", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "  70.0%     700.000      100     7000.00  softmax_kernel\n" \
           "                                 PTX entry of .nvcc-evo/kernels/softmax_kernel-" in result.stdout
    assert "of no recorded build (libraries, the framework's own, or builds no ACF unit covers): 30.0%" \
        in result.stdout
    text = (tmp_path / "nvcc-evo.acf").read_text()
    block = text[text.index('unit kernel "softmax_kernel" {'):text.index('unit kernel "*"')]
    assert "    pin ptxas.override_directive_values = true\n" in block        # (its PTX states its block size)
    assert '        command "python3 model.py"\n        metric time kernels\n' in block
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path, env=env).returncode == 0
