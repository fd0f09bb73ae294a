"""What is measured is what ships (issue 24): every knob a retune searches,
reports or writes reaches the user's binary, in every output mode and
multi-architecture call, or it is left out and said. Real nvcc and ptxas;
ptxas 13.3 from the ptxas133 extra and the CompileIQ control files of the
shared test data (read where they are, never copied into the repository)."""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import (EVO, ROOT, cmake_build, cmake_configure, compile_seconds, cuobjdump, evo_env, run_evo,
                      sass)
from test_ptxas_choice import FIXTURES, PTXAS133, needs_133, needs_fixtures

from nvcc_evo.acf.parse import parse_text
from nvcc_evo.cubin.sass import sass_hash

KERNEL = """\
#ifndef TILE
#define TILE 4
#endif
__global__ void k(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0;
    for (int j = 0; j < TILE; ++j) s += x[(i + j) % n] * j;
    if (i < n) x[i] = s;
}
"""


MAIN = "__global__ void k(float *x, int n);\nint main() { k<<<1, 32>>>(0, 0); return 0; }\n"


def _project(folder: Path, acf_body: str, source: str = KERNEL, name: str = "k.cu", unit: str = "") -> Path:
    (folder / name).write_text(source)
    (folder / "nvcc-evo.acf").write_text(f'acf 1\nunit "{unit or name}" {{\n{acf_body}\n}}\n')
    return folder


def _added(built) -> str:
    """What the wrapper added (NVCC_EVO_VERBOSE's line on stderr)."""
    return "\n".join(line for line in built.stderr.splitlines() if line.startswith("nvcc-evo: added:"))


# ------------------------------------------------------------ output modes
@needs_133
@needs_fixtures
@pytest.mark.parametrize("mode", ["-cubin", "-fatbin"])
def test_cubin_and_fatbin_builds_get_ptxas_version_and_controls(tmp_path, evo_cache, mode):
    for name in ("softmax.cu", "block_reduce.cuh"):
        shutil.copy(ROOT / "kernels" / name, tmp_path / name)
    controls = FIXTURES / "controls-a.acf"
    (tmp_path / "nvcc-evo.acf").write_text(
        f'acf 1\nunit "softmax.cu" {{\n    pin ptxas.version = "13.3"\n    pin ptxas.controls = "c.acf"\n}}\n')
    shutil.copy(controls, tmp_path / "c.acf")           # (test data, into a temporary folder)
    out = tmp_path / f"k.{mode[1:]}"
    built = run_evo("-arch=sm_90", mode, "softmax.cu", "-o", str(out), cwd=tmp_path,
                    env=evo_env(evo_cache, NVCC_EVO_PTXAS=str(PTXAS133)))
    assert built.returncode == 0 and built.stdout == "", built.stderr
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "softmax.cu", "-o", "d.ptx"], cwd=tmp_path, check=True)
    subprocess.run([PTXAS133, "-arch=sm_90", f"--apply-controls={controls}", "d.ptx", "-o", "d.cubin"],
                   cwd=tmp_path, check=True)
    assert _code(out) == _code(tmp_path / "d.cubin")
    subprocess.run([PTXAS133, "-arch=sm_90", "d.ptx", "-o", "plain.cubin"], cwd=tmp_path, check=True)
    assert _code(out) != _code(tmp_path / "plain.cubin")      # the controls file made a difference


def _code(binary: Path) -> list[str]:
    return [line.split("*/", 1)[1].strip() for line in sass(binary).splitlines()
            if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]


# ------------------------------------------------------------ multi-architecture calls
def test_a_define_tuned_for_one_architecture_reaches_every_architecture_of_the_call(tmp_path, evo_cache):
    _project(tmp_path, "    target sm_90 {\n        define.TILE = 2\n    }")
    gencodes = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
    built = run_evo(*gencodes, "-c", "k.cu", "-o", "k.o", cwd=tmp_path,
                    env=evo_env(evo_cache, NVCC_EVO_VERBOSE="1"))
    assert built.returncode == 0, built.stderr
    assert "-DTILE=2" in _added(built), built.stderr
    reference = subprocess.run(["nvcc", *gencodes, "-DTILE=2", "-c", "k.cu", "-o", "ref.o"], cwd=tmp_path)
    assert reference.returncode == 0
    assert sass(tmp_path / "k.o") == sass(tmp_path / "ref.o")


def test_entries_that_disagree_on_a_define_leave_it_out_and_say_so(tmp_path, evo_cache):
    _project(tmp_path, "    target sm_90 {\n        define.TILE = 2\n    }\n    target sm_80 {\n"
                       "        define.TILE = 8\n    }")
    built = run_evo("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-c",
                    "k.cu", "-o", "k.o", cwd=tmp_path, env=evo_env(evo_cache, NVCC_EVO_VERBOSE="1"))
    assert built.returncode == 0 and "-DTILE" not in _added(built), built.stderr
    explained = run_evo("--explain", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
                        "arch=compute_90,code=sm_90", "-c", "k.cu", cwd=tmp_path, env=evo_env(evo_cache)).stdout
    assert "define.TILE" in explained and "differs within this call" in explained


# ------------------------------------------------------------ the user's host defines win
@pytest.mark.parametrize("spelled", [["-Xcompiler", "-DTILE=7"], ["--compiler-options=-DTILE=7"],
                                     ["-Xcompiler=-DTILE=7"], ["-Xcompiler", "-O2,-DTILE=7"],
                                     ["-DTILE(x)=x"], ["-UTILE"]])
def test_the_users_host_side_and_function_like_defines_win(tmp_path, evo_cache, spelled):
    _project(tmp_path, "    target sm_90 {\n        define.TILE = 3\n    }")
    built = run_evo("-arch=sm_90", *spelled, "-c", "k.cu", "-o", "k.o", cwd=tmp_path,
                    env=evo_env(evo_cache, NVCC_EVO_VERBOSE="1"))
    assert "-DTILE=3" not in _added(built), built.stderr
    explained = run_evo("--explain", "-arch=sm_90", *spelled, "-c", "k.cu", cwd=tmp_path,
                        env=evo_env(evo_cache)).stdout
    assert re.search(r"define\.TILE.*the user sets it", explained), explained


# ------------------------------------------------------------ a retune searches only what reaches
def _record(folder: Path, evo_cache, *argv: str) -> None:
    built = run_evo(*argv, cwd=folder, env=evo_env(evo_cache))
    assert built.returncode == 0, built.stderr


def _retune(folder: Path, evo_cache, *extra: str):
    return run_evo("--retune", "--acf", str(folder / "nvcc-evo.acf"), "--backend", "static", "--evaluations", "6",
                   "--all", *extra, cwd=folder, env=evo_env(evo_cache))


def test_a_knob_the_users_flags_override_is_left_out_of_the_search_and_said(tmp_path, evo_cache):
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n        ptxas.opt_level in {1, 3}\n"
                       "        ptxas.register_usage_level in {3, 5, 7}\n    }")
    _record(tmp_path, evo_cache, "-arch=sm_90", "-Xcompiler", "-DTILE=7", "-Xptxas", "-O2", "-c", "k.cu", "-o",
            "k.o")
    tuned = _retune(tmp_path, evo_cache)
    assert tuned.returncode == 0, tuned.stderr
    assert re.search(r"define\.TILE: all its values left out of the search: .*the user sets it \(-Xcompiler "
                     r"-DTILE=7\)", tuned.stderr), tuned.stderr
    assert re.search(r"ptxas\.opt_level: all its values left out .*the user sets it", tuned.stderr)
    assert tuned.stderr.count("define.TILE: all its values") == 1
    written = (tmp_path / "nvcc-evo.acf").read_text()
    assert "define.TILE =" not in written and "ptxas.opt_level =" not in written


# ------------------------------------------------------------ the ship check
@pytest.mark.parametrize("named", [True, False])
def test_the_retune_reads_and_writes_the_block_the_build_reads_for_its_gpu(tmp_path, evo_cache, named):
    """A unit with a block named for a GPU and a plain one: the build recorded with NVCC_EVO_GPU naming that
    GPU reads the named block, without it the plain one (driver.match.units.choose_target), and the retune
    reads and writes that same block, which the ship check then finds in the build's SASS. It read and wrote
    the plain block whatever the build named: for the named build the ship check found the difference and
    nothing was written."""
    _project(tmp_path, '    search {\n        define.TILE in {2, 4, 8}\n    }\n    tune {\n        minimize registers\n'
                       '    }\n    target sm_90 "NVIDIA H200" {\n        define.TILE = 8\n    }\n'
                       '    target sm_90 {\n        define.TILE = 2\n    }')
    env = evo_env(evo_cache, **({"NVCC_EVO_GPU": "NVIDIA H200"} if named else {}))
    built = run_evo("-arch=sm_90", "-c", "k.cu", "-o", "k.o", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    tuned = _retune(tmp_path, evo_cache)
    assert tuned.returncode == 0 and "ship check" not in tuned.stderr, tuned.stderr
    (unit,) = parse_text((tmp_path / "nvcc-evo.acf").read_text()).units
    written = {target.gpu: target.provenance is not None for target in unit.targets}
    assert written == {"NVIDIA H200": named, None: not named}, tuned.stderr


def test_the_ship_check_passes_a_unit_whose_module_id_names_the_compiling_process(tmp_path, evo_cache):
    """Template kernels and a name of internal linkage (NVIDIA/cuda-samples' reduction, under CMake): each
    compile's cubin names its own process in nvcc's module id; the build's compile is the measured code."""
    source = ("namespace { __device__ int calls; }\n"
              "template <int N> __global__ void k(float *x) { float s = 0; for (int j = 0; j < N; ++j)\n"
              "    s += x[(threadIdx.x * 7 + j) % 256] * x[j]; x[threadIdx.x] = s; atomicAdd(&calls, 1); }\n"
              "template __global__ void k<24>(float *);\n")
    _project(tmp_path, "    search {\n        ptxas.maxrregcount in {24, 255}\n    }\n    tune {\n"
                       "        minimize registers\n    }", source=source)
    _record(tmp_path, evo_cache, "-arch=sm_90", "-rdc=true", "-c", "k.cu", "-o", "k.o")
    before = (tmp_path / "nvcc-evo.acf").read_text()
    tuned = _retune(tmp_path, evo_cache)
    assert tuned.returncode == 0 and "ship check" not in tuned.stderr, tuned.stderr
    assert "ptxas.maxrregcount = 24" in (tmp_path / "nvcc-evo.acf").read_text(), tuned.stderr
    # The whole space stored, by an older nvcc-evo, whose hashes kept the process id: the choice is written.
    store = tmp_path / ".nvcc-evo" / "results.jsonl"
    lines = [json.loads(line) for line in store.read_text().splitlines()]
    store.write_text("".join(json.dumps({**line, "sass_hash": f"{i:032x}"}) + "\n" for i, line in enumerate(lines)))
    (tmp_path / "nvcc-evo.acf").write_text(before)
    again = _retune(tmp_path, evo_cache)
    assert again.returncode == 0 and "nothing to search" in again.stderr and "ship check" not in again.stderr, \
        again.stderr
    assert "ptxas.maxrregcount = 24" in (tmp_path / "nvcc-evo.acf").read_text(), again.stderr


def _counting_nvcc(folder: Path, real: Path, when: str, nth: int, then: str) -> Path:
    """A real nvcc behind a script that does `then` at the nth full candidate compile (a retune's: --keep,
    not --dryrun) whose arguments match the shell pattern `when`."""
    fake = folder / "bin" / "nvcc"
    fake.parent.mkdir()
    seen = folder / "bin" / "seen"
    fake.write_text(f'#!/bin/sh\ncase " $* " in *" --dryrun "*) ;; *" --keep "*)\n'
                    f'  case " $* " in {when}) echo >> {seen}\n'
                    f'    if [ "$(wc -l < {seen})" -eq {nth} ]; then {then}; fi;; esac;; esac\n'
                    f'exec {real} "$@"\n')
    fake.chmod(0o755)
    return fake


def test_the_ship_check_compiles_with_a_timeout_of_its_own(tmp_path, evo_cache, real_nvcc):
    """The search's --timeout is for candidates; the ship check compiles a genome that compiled already,
    so a slow compile of it (a loaded machine) still writes the entry. The candidates' timeout is five
    of this machine's compiles of the unit, measured here, and the ship check's compile sleeps past it:
    a fixed 5 s timed the candidates out themselves once a compile took that long."""
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n    }\n    tune {\n"
                       "        minimize instructions\n    }")
    _record(tmp_path, evo_cache, "-arch=sm_90", "-c", "k.cu", "-o", "k.o")
    timeout = max(5, math.ceil(5 * compile_seconds(tmp_path / "k.cu", "sm_90", "-DTILE=2")))
    fake = _counting_nvcc(tmp_path, real_nvcc, '*" -DTILE=2 "*', 2,
                          f"sleep {timeout + 3}")                  # (1: the search's)
    tuned = run_evo("--retune", "--backend", "static", "--evaluations", "3", "--timeout", str(timeout),
                    cwd=tmp_path, env=evo_env(evo_cache, fake))
    assert tuned.returncode == 0, tuned.stderr
    assert "define.TILE = 2" in (tmp_path / "nvcc-evo.acf").read_text(), tuned.stderr


def test_a_kept_baseline_with_its_entry_unchanged_is_not_compiled_again(tmp_path, evo_cache, real_nvcc):
    """Fewest instructions at the source's own TILE: the baseline stays and the entry gets no knob, so the
    build compiles as the baseline was measured (the candidate spells the source's TILE, the build passes
    nothing: the same code); the ship check compiles nothing (a compile as the build's fails here)."""
    _project(tmp_path, "    search {\n        define.TILE in {4, 8, 16}\n    }\n    tune {\n"
                       "        minimize instructions\n    }")
    _record(tmp_path, evo_cache, "-arch=sm_90", "-c", "k.cu", "-o", "k.o")
    # The search compiles the baseline as -DTILE=4; a compile with no TILE at all is the build's (the ship check's).
    fake = _counting_nvcc(tmp_path, real_nvcc, '*" -DTILE="*) ;; *', 1, "echo compiled again >&2; exit 1")
    tuned = run_evo("--retune", "--backend", "static", "--evaluations", "3", cwd=tmp_path,
                    env=evo_env(evo_cache, fake))
    assert tuned.returncode == 0, tuned.stderr
    assert "ship check" not in tuned.stderr and "compiled again" not in tuned.stderr, tuned.stderr
    written = (tmp_path / "nvcc-evo.acf").read_text()
    assert "target sm_90 {" in written and "define.TILE =" not in written, written


# ------------------------------------------------------------ fidelity over build shapes
def _entries(acf: Path) -> dict[str, dict]:
    """The knobs a retune wrote into each plain target: {arch: {knob: value}}."""
    found = {}
    for arch, body in re.findall(r"\n    target (sm_[0-9a-z]+) \{\n(.*?)\n    \}", acf.read_text(), re.S):
        body = body.split("provenance {", 1)[0]
        found[arch] = {k: v.strip('"') for k, v in re.findall(r"^\s+([A-Za-z_.0-9]+) = (\S+)$", body, re.M)}
    return found


def _sass_of(binary: Path, arch: str) -> str:
    tool = cuobjdump()
    shown = subprocess.run([str(tool), "-sass", "-arch", arch, str(binary)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    return "\n".join(line for line in shown.stdout.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line))


def _by_hand(settings: dict) -> list[str]:
    """The written knobs as nvcc flags, spelled here (not by nvcc-evo's table)."""
    spelled = {"ptxas.opt_level": "-O{}", "ptxas.register_usage_level": "--register-usage-level={}",
               "ptxas.maxrregcount": "-maxrregcount={}"}
    flags = []
    for knob, value in settings.items():
        if knob.startswith("define."):
            flags.append(f"-D{knob[len('define.'):]}={value}")
        elif knob in spelled:
            flags += ["-Xptxas", spelled[knob].format(value)]
    return flags


SHAPES = {
    "multi-arch": (["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-c", "k.cu",
                    "-o", "k.o"], "k.o"),
    "cubin": (["-arch=sm_90", "-cubin", "k.cu", "-o", "k.cubin"], "k.cubin"),
    "rdc": (["-arch=sm_90", "-rdc=true", "-c", "k.cu", "-o", "k.o"], "k.o"),
    "several-inputs": (["-arch=sm_90", "-c", "k.cu", "k2.cu"], "k2.o"),      # a Make rule of several inputs
    "fatbin": (["-arch=sm_90", "-fatbin", "k.cu", "-o", "k.fatbin"], "k.fatbin"),
    "compile-and-link": (["-arch=sm_90", "k.cu", "k2.cu", "-o", "app"], "app"),      # (k2.cu has a main)
    "dc": (["-gencode", "arch=compute_90,code=sm_90", "-dc", "k.cu", "-o", "k.o"], "k.o"),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_written_entry_is_what_the_rebuilt_binary_holds(tmp_path, evo_cache, shape):
    argv, output = SHAPES[shape]
    (tmp_path / "k2.cu").write_text(KERNEL.replace("void k(", "void k2(") + "int main() { return 0; }\n")
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8, 16}\n        ptxas.opt_level in {1, 3}\n"
                       "        ptxas.register_usage_level in {0, 5, 10}\n    }\n    tune {\n        minimize instructions\n"
                       "    }", unit="k*.cu")
    _record(tmp_path, evo_cache, *argv)
    tuned = run_evo("--retune", "--acf", str(tmp_path / "nvcc-evo.acf"), "--backend", "static", "--evaluations",
                    "12", cwd=tmp_path, env=evo_env(evo_cache))
    assert tuned.returncode == 0, tuned.stderr
    written = _entries(tmp_path / "nvcc-evo.acf")
    assert any(written.values()), tuned.stderr     # instructions: a TILE other than 4 is fewer of them
    _record(tmp_path, evo_cache, *argv)   # the project's build again, with the entries
    for arch, settings in written.items():
        # The reference: this architecture alone, the written knobs spelled here; a define is the
        # call's (every entry that sets it agrees, or the build passes none: then it is none here).
        shared = {k: v for k, v in settings.items() if k.startswith("define.")}
        defines = shared if all(e.get(k) == v for e in written.values() for k, v in shared.items()) else {}
        ptxas = {k: v for k, v in settings.items() if not k.startswith("define.")}
        folder = tmp_path / f"ref-{arch}"           # the same call, by plain nvcc, in a folder of its own
        folder.mkdir()
        for name in ("k.cu", "k2.cu"):
            shutil.copy(tmp_path / name, folder / name)
        by_hand = [a for a in argv if not a.startswith(("-gencode", "arch=", "-arch"))]
        code = arch.replace("sm_", "compute_")
        subprocess.run(["nvcc", *by_hand, f"-gencode=arch={code},code={arch}", *_by_hand({**ptxas, **defines})],
                       cwd=folder, check=True)
        assert _sass_of(tmp_path / output, arch) == _sass_of(folder / output, arch), (arch, settings)


NINE_ARCHS = ("75", "80", "86", "87", "89", "90", "100", "110", "120")     # (what CUDA 13.0 builds SASS for)


def test_a_cmake_project_of_nine_architectures_ships_every_written_entry(tmp_path, evo_cache):
    """A real CMake project (CMAKE_CUDA_COMPILER nvcc-evo) building one source for nine architectures in
    one call; static retunes for sm_90 and sm_120, a rebuild: each architecture's SASS in the rebuilt
    object is a by-hand build's of its entry's knobs (the define, one value per call, in every one)."""
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n        ptxas.opt_level in {1, 3}\n"
                       "        ptxas.register_usage_level in {0, 5, 10}\n    }\n    tune {\n"
                       "        minimize instructions\n    }")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(nine LANGUAGES CUDA)\n"
        f'set(CMAKE_CUDA_ARCHITECTURES "{";".join(NINE_ARCHS)}")\nadd_library(k STATIC k.cu)\n'
        "set_property(SOURCE k.cu APPEND PROPERTY OBJECT_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/nvcc-evo.acf)\n")
    env = evo_env(evo_cache)
    build = tmp_path / "build"
    cmake_configure(tmp_path, build, env)
    cmake_build(build, env)
    for target in ("sm_90", "sm_120"):
        tuned = run_evo("--retune", "--backend", "static", "--evaluations", "6", "--target", target,
                        cwd=tmp_path, env=env)
        assert tuned.returncode == 0, tuned.stderr
    written = _entries(tmp_path / "nvcc-evo.acf")
    assert set(written) == {"sm_90", "sm_120"} and all(written.values()), written
    rebuilt = cmake_build(build, env)
    assert "k.cu.o" in rebuilt.stdout, rebuilt.stdout + rebuilt.stderr
    defines = {k: v for k, v in written["sm_90"].items() if k.startswith("define.")}
    assert all(e.get(k) == v for e in written.values() for k, v in defines.items()), written
    obj = build / "CMakeFiles" / "k.dir" / "k.cu.o"
    plain = [f"sm_{a}" for a in NINE_ARCHS if f"sm_{a}" not in written]
    for archs, settings in [([arch], settings) for arch, settings in written.items()] + [(plain, {})]:
        reference = tmp_path / f"ref-{archs[0]}.o"
        gencodes = [f"-gencode=arch={a.replace('sm_', 'compute_')},code={a}" for a in archs]
        subprocess.run(["nvcc", "-c", "k.cu", *gencodes, *_by_hand({**settings, **defines}), "-o", str(reference)],
                       cwd=tmp_path, check=True)
        for arch in archs:
            assert _sass_of(obj, arch) == _sass_of(reference, arch), (arch, settings)


def test_a_target_served_only_by_the_jit_is_said(tmp_path, evo_cache):
    _project(tmp_path, "    target sm_90 {\n        ptxas.opt_level = 1\n    }")
    argv = ["-gencode", "arch=compute_90,code=compute_90", "-c", "k.cu", "-o", "k.o"]
    explained = run_evo("--explain", *argv, cwd=tmp_path, env=evo_env(evo_cache)).stdout
    assert "compute_90: PTX only, compiled by the driver's JIT: no ptxas knob reaches it" in explained


@pytest.mark.parametrize("ptx_only", [["-gencode", "arch=compute_90,code=compute_90"], ["-arch=compute_90"]])
def test_a_retune_of_a_target_served_only_by_the_jit_writes_no_knob(tmp_path, evo_cache, ptx_only):
    """The build ships sm_90's code as PTX (the driver's JIT compiles it): it is recorded, so a retune
    tunes that build (not `nvcc -c SOURCE` for sm_90, whose SASS nothing ships), says once that no
    binary of it holds sm_90 SASS, and writes no knob; the rebuilt object's PTX is plain nvcc's."""
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n        ptxas.opt_level in {1, 3}\n"
                       "    }\n    tune {\n        minimize instructions\n    }")
    argv = [*ptx_only, "-c", "k.cu", "-o", "k.o"]
    _record(tmp_path, evo_cache, *argv)
    tuned = _retune(tmp_path, evo_cache)
    assert tuned.returncode == 0, tuned.stderr
    said = "the recorded build does not build sm_90 (it builds SASS for none; compute_90: PTX only, compiled by " \
           "the driver's JIT: no ptxas knob reaches it)"
    assert tuned.stderr.count(said) == 1, tuned.stderr
    assert "never built through nvcc-evo" not in tuned.stderr, tuned.stderr
    assert _entries(tmp_path / "nvcc-evo.acf") in ({}, {"sm_90": {}}), (tmp_path / "nvcc-evo.acf").read_text()
    _record(tmp_path, evo_cache, *argv)
    subprocess.run(["nvcc", *argv[:-1], "ref.o"], cwd=tmp_path, check=True)
    shown = [subprocess.run([str(cuobjdump()), "-ptx", str(tmp_path / o)], capture_output=True, text=True,
                            check=True).stdout.split(".version", 1)[1] for o in ("k.o", "ref.o")]
    assert shown[0] == shown[1]


# ------------------------------------------------------------ link-time optimisation
LTO_SAID = "its build compiles it for link-time optimisation (-dlto): ptxas never compiles it on its own"


@pytest.mark.parametrize("lto", [["-arch=sm_90", "-dlto"], ["-gencode", "arch=compute_90,code=lto_90"]])
def test_a_unit_compiled_for_link_time_optimisation_is_not_searched_and_said_once(tmp_path, evo_cache, lto):
    """CUDA 13.0, sm_90: a -dc -dlto compile runs no ptxas (its -Xptxas options leave the linked SASS as it
    is); the device link (-dlink -dlto) makes the SASS of every object at once. No candidate compiled
    alone is what ships: a retune compiles nothing for the unit, writes nothing and says so once (it
    compiled the baseline, which nvcc refused: '-dlto' conflicts with '-gencode')."""
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n        ptxas.opt_level in {1, 3}\n"
                       "    }\n    tune {\n        minimize instructions\n    }")
    _record(tmp_path, evo_cache, *lto, "-dc", "k.cu", "-o", "k.o")
    before = (tmp_path / "nvcc-evo.acf").read_text()
    tuned = _retune(tmp_path, evo_cache)
    assert tuned.returncode == 1, tuned.stderr              # (a unit skipped: as when it cannot be built)
    assert tuned.stderr.count(LTO_SAID) == 1, tuned.stderr
    assert "baseline" not in tuned.stderr and "never built through nvcc-evo" not in tuned.stderr, tuned.stderr
    assert (tmp_path / "nvcc-evo.acf").read_text() == before
    explained = run_evo("--explain", *lto, "-dc", "k.cu", cwd=tmp_path, env=evo_env(evo_cache)).stdout
    assert "note: a compile for link-time optimisation: no ptxas runs here" in explained, explained


def test_a_link_time_compile_whose_dlto_is_in_an_options_file_of_the_build_folder_is_said(tmp_path, evo_cache):
    """The same, with `-dlto` in an options file that the call names relative to its own folder (a build
    folder, as CMake's are): the retune reads it from there, not from the folder the retune runs in."""
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n    }\n    tune {\n"
                       "        minimize instructions\n    }")
    build = tmp_path / "build"
    build.mkdir()
    (build / "lto.rsp").write_text("-arch=sm_90 -dlto\n")
    _record(build, evo_cache, "--options-file", "lto.rsp", "-dc", "../k.cu", "-o", "k.o")
    before = (tmp_path / "nvcc-evo.acf").read_text()
    tuned = _retune(tmp_path, evo_cache)
    assert tuned.returncode == 1 and tuned.stderr.count(LTO_SAID) == 1, tuned.stderr
    assert (tmp_path / "nvcc-evo.acf").read_text() == before


def _lto_links(nvcc: str, folder: Path) -> bool:
    """Whether this toolkit's device link can optimise (nvlink loads libnvvm from nvvm/lib64; a toolkit
    put together from the nvidia-nvvm wheel has it in lib/, and every -dlink -dlto fails)."""
    (folder / "probe.cu").write_text("__global__ void p() {}\n")
    made = subprocess.run([nvcc, "-arch=sm_90", "-dc", "-dlto", "probe.cu", "-o", "probe.o"], cwd=folder)
    linked = subprocess.run([nvcc, "-arch=sm_90", "-dlink", "-dlto", "probe.o", "-o", "probe-dl.o"], cwd=folder,
                            capture_output=True, text=True)
    return made.returncode == 0 and linked.returncode == 0


def test_an_lto_projects_entry_reaches_the_device_link(tmp_path, evo_cache):
    """A -dc -dlto project linked by -dlink -dlto through nvcc-evo: the entry's define reaches the compile,
    its ptxas level the link (every object's entry gives it), and the linked SASS is a by-hand build's."""
    nvcc = _lto_nvcc(tmp_path / "toolkit")
    env = evo_env(evo_cache, nvcc=Path(nvcc))
    (tmp_path / "main.cu").write_text(MAIN)
    _project(tmp_path, "    target sm_90 {\n        define.TILE = 2\n        ptxas.opt_level = 1\n    }",
             unit="*.cu")
    for argv in ([f"{name}.cu", "-dc", "-o", f"{name}.o"] for name in ("k", "main")):
        built = run_evo("-arch=sm_90", "-dlto", *argv, cwd=tmp_path, env=env)
        assert built.returncode == 0, built.stderr
    linked = run_evo("-arch=sm_90", "-dlink", "-dlto", "k.o", "main.o", "-o", "dl.o", cwd=tmp_path, env=env)
    assert linked.returncode == 0, linked.stderr
    for name, define in (("k", ["-DTILE=2"]), ("main", [])):
        subprocess.run([nvcc, "-arch=sm_90", "-dc", "-dlto", *define, f"{name}.cu", "-o", f"ref-{name}.o"],
                       cwd=tmp_path, check=True)
    subprocess.run([nvcc, "-arch=sm_90", "-dlink", "-dlto", "-Xptxas", "-O1", "ref-k.o", "ref-main.o", "-o",
                    "ref-dl.o"], cwd=tmp_path, check=True)
    assert _sass_of(tmp_path / "dl.o", "sm_90") == _sass_of(tmp_path / "ref-dl.o", "sm_90")
    plain = subprocess.run([nvcc, "-arch=sm_90", "-dlink", "-dlto", "ref-k.o", "ref-main.o", "-o", "plain-dl.o"],
                           cwd=tmp_path)
    assert plain.returncode == 0 and _sass_of(tmp_path / "plain-dl.o", "sm_90") != _sass_of(tmp_path / "dl.o", "sm_90")


def _lto_nvcc(folder: Path) -> str:
    """An nvcc whose device link can optimise: the toolkit's, else the same toolkit seen through a folder of
    links that puts its libnvvm where nvlink looks (nvvm/lib64; this machine's toolkit has it in lib/)."""
    folder.mkdir()
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    if _lto_links(nvcc, folder):
        return nvcc
    shown = subprocess.run([nvcc, "--dryrun", "-c", "probe.cu"], cwd=folder, capture_output=True, text=True).stderr
    root = Path(re.search(r"^#\$ _HERE_=(.*)$", shown, re.M).group(1).strip()).parent
    tree = folder / "cuda"
    for part in ("bin", "nvvm", "nvvm/lib64"):
        (tree / part).mkdir(parents=True)
    for entry in root.iterdir():
        if entry.name not in ("bin", "nvvm"):
            (tree / entry.name).symlink_to(entry)
    for sub in ("bin", "nvvm"):
        for entry in (root / sub).iterdir():
            if not (tree / sub / entry.name).exists():
                (tree / sub / entry.name).symlink_to(entry)
    for library in (root / "lib").glob("libnvvm.so*"):
        (tree / "nvvm" / "lib64" / library.name).symlink_to(library)
    if not _lto_links(str(tree / "bin" / "nvcc"), folder):
        pytest.skip("no nvcc here whose device link can optimise (-dlink -dlto)")
    return str(tree / "bin" / "nvcc")


LTO_KERNELS = """\
extern "C" __global__ void fma_k(float *x, const float *a, const float *b, float c)
{ x[threadIdx.x] = a[threadIdx.x] * b[threadIdx.x] + c; }
extern "C" __global__ void sqrt_k(float *x, const float *a) { x[threadIdx.x] = sqrtf(a[threadIdx.x]); }
"""
LTO_MAIN = """\
extern "C" __global__ void fma_k(float *x, const float *a, const float *b, float c);
extern "C" __global__ void sqrt_k(float *x, const float *a);
int main() { fma_k<<<1, 32>>>(0, 0, 0, 0); sqrt_k<<<1, 32>>>(0, 0); return 0; }
"""


def test_an_lto_compile_gets_no_nvcc_option_the_device_link_ignores_or_takes_for_the_whole_link(tmp_path,
                                                                                              evo_cache):
    """`target sm_90 { nvcc.fmad = false }` for one unit of a -dc -dlto project: the compile got --fmad=false,
    and the device link of its object with the others failed ("nvlink fatal : Cicc option values for '-fmad'
    do not match", exit 1): the build broke. Measured (CUDA 13.0, sm_90): on every object --fmad, --prec-div,
    -Ofc and -jtd leave the linked SASS as it is; --ftz, --prec-sqrt, --use_fast_math and -maxrregcount must
    be the same on every object of the link. None of them goes to an LTO compile now, each said under
    --explain; a define and --restrict reach their object's code and go."""
    nvcc = _lto_nvcc(tmp_path / "toolkit")
    env = evo_env(evo_cache, nvcc=Path(nvcc))
    _project(tmp_path, "    target sm_90 {\n        nvcc.fmad = false\n        nvcc.ftz = true\n"
                       "        nvcc.restrict = true\n    }", source=LTO_KERNELS)
    (tmp_path / "main.cu").write_text(LTO_MAIN)
    explained = run_evo("--explain", "-arch=sm_90", "-dc", "-dlto", "k.cu", "-o", "k.o", cwd=tmp_path,
                        env=env).stdout
    assert "would add: --restrict\n" in explained, explained
    assert "    error: nvcc.fmad: with -dlto it reaches no linked code" in explained
    assert "    error: nvcc.ftz: with -dlto the device link takes -ftz for the whole link" in explained
    for name in ("k", "main"):
        built = run_evo("-arch=sm_90", "-dc", "-dlto", f"{name}.cu", "-o", f"{name}.o", cwd=tmp_path, env=env)
        assert built.returncode == 0, built.stderr
        restrict = ["--restrict"] if name == "k" else []
        subprocess.run([nvcc, "-arch=sm_90", "-dc", "-dlto", *restrict, f"{name}.cu", "-o", f"ref-{name}.o"],
                       cwd=tmp_path, check=True)
    linked = run_evo("-arch=sm_90", "-dlink", "-dlto", "k.o", "main.o", "-o", "dl.o", cwd=tmp_path, env=env)
    assert linked.returncode == 0, linked.stderr
    subprocess.run([nvcc, "-arch=sm_90", "-dlink", "-dlto", "ref-k.o", "ref-main.o", "-o", "ref-dl.o"],
                   cwd=tmp_path, check=True)
    assert _sass_of(tmp_path / "dl.o", "sm_90") == _sass_of(tmp_path / "ref-dl.o", "sm_90")


# ------------------------------------------------------------ fixed defines
FIXED = """\
#include "params.h"
#ifndef TILE
#define TILE 4
#endif
#if !defined(UNROLL)
#define UNROLL 1
#endif
__global__ void k(float *x) { x[threadIdx.x] = TILE * UNROLL * BLOCK_ROWS; }
"""


def test_a_searched_define_the_source_fixes_is_a_located_error_of_the_check(tmp_path, evo_cache):
    _project(tmp_path, "    search {\n        define.TILE in {2, 4}\n        define.UNROLL in {1, 2}\n"
                       "        define.BLOCK_ROWS in {8, 16, 32}\n    }", FIXED)
    (tmp_path / "params.h").write_text("#pragma once\n\n  #define BLOCK_ROWS 16\n")
    checked = run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path, env=evo_env(evo_cache))
    assert checked.returncode == 1
    assert checked.stderr.startswith(
        "nvcc-evo.acf:6:9: error: define.BLOCK_ROWS is searched, but params.h:3:3 defines BLOCK_ROWS without an "
        "#ifndef guard, so every value gives the same code (wrap it in #ifndef BLOCK_ROWS ... #endif)\n"), checked.stderr
    assert checked.stderr.count("error:") == 1          # the guarded TILE and UNROLL are fine


def test_a_dimension_that_never_changes_the_code_is_reported(tmp_path, evo_cache):
    source = "#ifndef UNUSED\n#define UNUSED 1\n#endif\n" + KERNEL
    _project(tmp_path, "    search {\n        define.UNUSED in {1, 2, 3}\n        define.TILE in {2, 4, 8}\n    }", source)
    tuned = run_evo("--retune", "--acf", str(tmp_path / "nvcc-evo.acf"), "--backend", "static", "--evaluations", "9",
                    cwd=tmp_path, env=evo_env(evo_cache))
    assert tuned.returncode == 0, tuned.stderr
    assert re.search(r"define\.UNUSED: 1, 2, 3 gave the same SASS in each of \d+ comparison", tuned.stderr) or \
        re.search(r"define\.UNUSED: [123], [123] gave the same SASS", tuned.stderr), tuned.stderr
    assert "define.TILE: " not in tuned.stderr


# ------------------------------------------------------------ provenance of the build
def test_an_entry_tuned_before_the_build_was_recorded_is_stale_once_it_is(tmp_path, evo_cache):
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n    }")
    first = _retune(tmp_path, evo_cache, "--target", "sm_90")
    assert first.returncode == 0, first.stderr
    assert 'build = "no recorded build: nvcc -c k.cu for sm_90"' in (tmp_path / "nvcc-evo.acf").read_text()
    dry = run_evo("--retune", "--dry-run", "--backend", "static", cwd=tmp_path, env=evo_env(evo_cache))
    assert "nothing to retune" in dry.stderr, dry.stderr
    _record(tmp_path, evo_cache, "-arch=sm_90", "-O3", "-c", "k.cu", "-o", "k.o")
    dry = run_evo("--retune", "--dry-run", "--backend", "static", cwd=tmp_path, env=evo_env(evo_cache))
    assert re.search(r'"k\.cu" \[sm_90\]: tuned for another build \(no recorded build: nvcc -c k\.cu for sm_90; '
                     r'now recorded compile [0-9a-f]{16}\)', dry.stdout), dry.stdout + dry.stderr


# ------------------------------------------------------------ the report's baseline
def test_the_reports_baseline_is_the_current_spaces_never_an_earlier_failed_one(tmp_path, evo_cache):
    source = KERNEL.replace("__global__", "static_assert(TILE > 0, \"TILE\");\n__global__")
    _project(tmp_path, "    pin define.TILE = 0", source)            # every build of this space fails
    failed = _retune(tmp_path, evo_cache, "--target", "sm_90")
    assert "baseline" in failed.stderr and "failed" in failed.stderr, failed.stderr
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n    }", source)
    tuned = _retune(tmp_path, evo_cache, "--target", "sm_90")
    assert tuned.returncode == 0, tuned.stderr
    out = tmp_path / "r.html"
    reported = run_evo("--report", "--acf", str(tmp_path / "nvcc-evo.acf"), "--out", str(out), cwd=tmp_path,
                       env=evo_env(evo_cache))
    assert reported.returncode == 0, reported.stderr
    page = out.read_text()
    assert "The entry's knobs are not among these evaluations" not in page
    assert re.search(r"<td>registers</td><td>\d+", page), page
    assert "evaluation(s) of another search space or build are not part of this section" in page


@needs_133
@needs_fixtures
def test_a_controls_search_of_a_cubin_build_ships_what_it_measured(tmp_path, evo_cache):
    """ptxas.controls needs the ptxas release its file was made for: searched
    with ptxas.version, a candidate pairing it with the toolkit's ptxas is
    never proposed (the build would drop the file), and what is written
    builds the measured SASS."""
    for name in ("softmax.cu", "block_reduce.cuh"):
        shutil.copy(ROOT / "kernels" / name, tmp_path / name)
    for name in ("controls-a.acf", "controls-b.acf"):
        shutil.copy(FIXTURES / name, tmp_path / name)          # (test data, into a temporary folder)
    (tmp_path / "nvcc-evo.acf").write_text(
        'acf 1\nunit "softmax.cu" {\n    search {\n        ptxas.version in {toolkit, "13.3"}\n'
        '        ptxas.controls in {none, "controls-a.acf", "controls-b.acf"}\n    }\n'
        '    tune {\n        minimize instructions\n    }\n}\n')
    env = evo_env(evo_cache, NVCC_EVO_PTXAS=str(PTXAS133))
    argv = ["-arch=sm_90", "-cubin", "softmax.cu", "-o", "softmax.cubin"]
    assert run_evo(*argv, cwd=tmp_path, env=env).returncode == 0
    tuned = run_evo("--retune", "--backend", "static", "--evaluations", "6", cwd=tmp_path, env=env)
    assert tuned.returncode == 0, tuned.stderr
    assert "ptxas.controls: all its values left out" not in tuned.stderr
    store = [json.loads(line) for line in (tmp_path / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    pairs = {(dict(r["genome"]).get("ptxas.version"), dict(r["genome"]).get("ptxas.controls")): r["status"]
             for r in store}
    assert not [pair for pair in pairs if pair[1] not in (None, "none") and pair[0] in (None, "toolkit")], pairs
    assert len(pairs) == 4 and set(pairs.values()) == {"ok"}, pairs      # the whole space the build takes
    written = _entries(tmp_path / "nvcc-evo.acf")["sm_90"]
    assert run_evo(*argv, cwd=tmp_path, env=env).returncode == 0
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "softmax.cu", "-o", "d.ptx"], cwd=tmp_path, check=True)
    tool = PTXAS133 if written.get("ptxas.version") == "13.3" else "ptxas"
    controls = [f"--apply-controls={written['ptxas.controls']}"] if "ptxas.controls" in written else []
    subprocess.run([tool, "-arch=sm_90", *controls, "d.ptx", "-o", "d.cubin"], cwd=tmp_path, check=True)
    assert _code(tmp_path / "softmax.cubin") == _code(tmp_path / "d.cubin"), written


CALLER = """\
extern __device__ float heavy(const float *p, int i);
__global__ void k(float *p) {
    float a[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) a[j] = p[threadIdx.x + j * 97];
    float s = heavy(p, threadIdx.x);
#pragma unroll
    for (int j = 0; j < 32; ++j) s += a[j] * a[(j * 7) % 32];
    p[threadIdx.x] = s;
}
"""
CALLEE = """\
__device__ __noinline__ float heavy(const float *p, int i) {
    float a[40];
#pragma unroll
    for (int j = 0; j < 40; ++j) a[j] = p[i + j * 97] * (j + 1);
    float s = 0;
#pragma unroll
    for (int j = 0; j < 40; ++j) s += a[j] * a[(j * 7) % 40];
    return s;
}
""" + CALLER.split("\n", 1)[1].replace("void k(", "void g(")


def test_no_register_cap_is_searched_where_relocatable_code_calls_another_objects_function(tmp_path, evo_cache):
    """a.cu's kernel calls b.cu's device function (83 registers), both compiled with -dc: a cap on a.cu is
    refused by the device link ("entry function '_Z1kPf' with max regcount of 24 calls function
    '_Z5heavyPKfi' with regcount of 83"), which no compile of a.cu alone shows: a static retune wrote
    ptxas.maxrregcount = 24 (registers 74 -> 24) and the project's device link failed. b.cu calls nothing
    of another object: its cap is searched and the link takes it."""
    (tmp_path / "a.cu").write_text(CALLER)
    (tmp_path / "b.cu").write_text(CALLEE)
    space = "    search {\n        ptxas.maxrregcount in {24, 32, 64}\n    }\n    tune {\n        minimize registers\n    }\n"
    (tmp_path / "nvcc-evo.acf").write_text(f'acf 1\nunit "a.cu" {{\n{space}}}\nunit "b.cu" {{\n{space}}}\n')
    env = evo_env(evo_cache)

    def build():
        for step in (["-dc", "a.cu", "-o", "a.o"], ["-dc", "b.cu", "-o", "b.o"], ["-dlink", "a.o", "b.o", "-o", "dl.o"]):
            done = subprocess.run([str(EVO), "-arch=sm_90", *step], cwd=tmp_path, env=env, capture_output=True,
                                  text=True)
            assert done.returncode == 0, done.stderr
    build()
    done = run_evo("--retune", "--backend", "static", "--evaluations", "5", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert ('"a.cu" [sm_90]: ptxas.maxrregcount: all its values left out of the search: its relocatable code '
            "calls functions other objects define (_Z5heavyPKfi)") in done.stderr, done.stderr
    assert '"b.cu" [sm_90]: ptxas.maxrregcount' not in done.stderr
    units = (tmp_path / "nvcc-evo.acf").read_text().split('unit "b.cu"')
    assert "ptxas.maxrregcount = " not in units[0].split("target sm_90")[1], units[0]
    assert "ptxas.maxrregcount = 24" in units[1], units[1]
    build()                                             # the tuned build links


def test_the_device_system_calls_are_not_another_objects_functions(tmp_path):
    """printf, malloc and assert are undefined in a relocatable cubin, but no object defines them and the
    device link takes a cap of 16 on their callers: they keep the register cap in the search."""
    from nvcc_evo.cubin.sass import external_functions
    (tmp_path / "p.cu").write_text(
        "#include <cstdio>\n#include <cassert>\n__global__ void k(float *p) {\n    assert(p[0] > 0);\n"
        "    printf(\"%f\\n\", p[0]);\n    p[1] = (float)(size_t)malloc(16);\n}\n")
    (tmp_path / "a.cu").write_text(CALLER)
    for name in ("p", "a"):
        done = subprocess.run(["nvcc", "-arch=sm_90", "-dc", "-cubin", f"{name}.cu", "-o", f"{name}.cubin"],
                              cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert external_functions((tmp_path / "p.cubin").read_bytes()) == ()
    assert external_functions((tmp_path / "a.cubin").read_bytes()) == ("_Z5heavyPKfi",)
    linked = subprocess.run(["nvcc", "-arch=sm_90", "-dc", "-maxrregcount=16", "p.cu", "-o", "p.o"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert linked.returncode == 0, linked.stderr
    linked = subprocess.run(["nvcc", "-arch=sm_90", "-dlink", "p.o", "-o", "dl.o"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert linked.returncode == 0, linked.stderr
