"""Real Make and CMake projects build through nvcc-evo, unchanged, and the
covered unit gets its tuned flags (seen in ptxas -v and the wrapper's log)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, EVO, cmake_build, cmake_configure, evo_env


def log_entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def registers_by_function(stderr: str) -> list[int]:
    return [int(n) for n in re.findall(r"Used (\d+) registers", stderr)]


@pytest.mark.parametrize("variable", ["NVCC", "CUDA_NVCC"])
def test_make_project_builds_with_tuned_flags(tmp_path, evo_cache, variable):
    project = tmp_path / "proj"
    shutil.copytree(DATA / "projects" / "make", project)
    log = tmp_path / "evo.log"
    env = evo_env(evo_cache, NVCC_EVO_LOG=log)
    result = subprocess.run(["make", "-j2", f"{variable}={EVO}"], cwd=project, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (project / "app").is_file()
    assert 40 in registers_by_function(result.stderr)        # kernel.cu: tuned cap of 40
    added = {Path(a).name: e["added"] for e in log_entries(log) for a in e["argv"] if a.endswith(".cu")}
    assert added == {"kernel.cu": ["-Xptxas", "-maxrregcount=40"], "main.cu": []}


def test_make_project_through_a_cuda_path_shim(tmp_path, evo_cache):
    """NVIDIA's sample Makefiles call $(CUDA_PATH)/bin/nvcc: a folder whose
    bin/nvcc is nvcc-evo works, and nvcc-evo skips itself to find the real one."""
    project = tmp_path / "proj"
    shutil.copytree(DATA / "projects" / "make", project)
    shim = tmp_path / "cuda" / "bin"
    shim.mkdir(parents=True)
    (shim / "nvcc").symlink_to(EVO)
    env = evo_env(evo_cache, CUDA_PATH=tmp_path / "cuda")
    result = subprocess.run(["make", f"NVCC={shim / 'nvcc'}"], cwd=project, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert 40 in registers_by_function(result.stderr)


@pytest.mark.parametrize("archs", ["90", "80;90"])
def test_cmake_project_with_separable_compilation(tmp_path, evo_cache, archs):
    source = tmp_path / "src"
    shutil.copytree(DATA / "projects" / "cmake", source)
    log = tmp_path / "evo.log"
    env = evo_env(evo_cache, NVCC_EVO_LOG=log)
    build_dir = source / "build"        # in the source tree, below the ACF: CMake's probes see it too
    configure = subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), f"-DEVO_ARCHS={archs}",
                                f"-DCMAKE_CUDA_COMPILER={EVO}"], env=env, capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    assert "Performing Test HAVE_PTXAS_V - Success" in configure.stdout   # flag checks unaffected
    build = subprocess.run(["cmake", "--build", str(build_dir), "-j2"], env=env,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    assert (build_dir / "app").is_file()
    entries = log_entries(log)
    kernel = [e for e in entries if any(a.endswith("kernel.cu") for a in e["argv"])]
    assert len(kernel) == 1 and "-rdc=true" in kernel[0]["argv"]
    if archs == "90":
        assert kernel[0]["added"] == ["-Xptxas", "-maxrregcount=40"]
    else:                               # one call for both: each ptxas step gets its own cap
        assert kernel[0]["added"] == [] and kernel[0]["problems"] == []
        assert [(step["arch"], step["options"]) for step in kernel[0]["ptxas_per_step"]] == [
            ("sm_80", ["-maxrregcount=32"]), ("sm_90", ["-maxrregcount=40"])]
        assert "Used 32 registers" in build.stdout + build.stderr
    probes = [e for e in entries if "CMake probe" in e["passthrough"]]
    assert probes and all(e["added"] == [] for e in probes)
    device_links = [e for e in entries if "-dlink" in e["argv"]]
    assert len(device_links) == 1 and device_links[0]["added"] == []
    assert "Used 40 registers" in build.stdout + build.stderr


def _retuned_by_hand(acf: Path) -> None:
    """A hand edit of the ACF (as a retune would write it): sm_90's cap 40 -> 48."""
    acf.write_text(acf.read_text().replace("ptxas.maxrregcount = 40", "ptxas.maxrregcount = 48"))


def test_make_rebuilds_when_the_acf_changes(tmp_path, evo_cache):
    project = tmp_path / "proj"
    shutil.copytree(DATA / "projects" / "make", project)
    env = evo_env(evo_cache)
    first = subprocess.run(["make", f"NVCC={EVO}"], cwd=project, env=env, capture_output=True, text=True)
    assert first.returncode == 0 and 40 in registers_by_function(first.stderr), first.stderr
    _retuned_by_hand(project / "nvcc-evo.acf")
    again = subprocess.run(["make", f"NVCC={EVO}"], cwd=project, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert 48 in registers_by_function(again.stderr) and (project / "app").is_file()


def test_cmake_rebuilds_when_the_acf_changes(tmp_path, evo_cache):
    source = tmp_path / "src"
    shutil.copytree(DATA / "projects" / "cmake", source)
    env = evo_env(evo_cache)
    build_dir = source / "build"
    cmake_configure(source, build_dir, env)
    first = cmake_build(build_dir, env)
    assert "Used 40 registers" in first.stdout + first.stderr, first.stdout + first.stderr
    _retuned_by_hand(source / "nvcc-evo.acf")
    again = cmake_build(build_dir, env)
    assert "Used 48 registers" in again.stdout + again.stderr


def test_a_cmake_projects_retune_reads_its_options_file_from_the_build_folder(tmp_path, evo_cache):
    """CMake hands nvcc its include folders in `--options-file CMakeFiles/T.dir/includes_CUDA.rsp`,
    relative to the build folder (cuda-samples' matrixMul): the retune read it from its own folder, so
    the ship check said "the build would not pass ptxas.maxrregcount = 24 (... cannot read options
    file ...: passed through untouched)" and no entry but the defaults was ever written. Now the call's
    options files are read from the folder it ran in: the entry is written and the rebuild takes it."""
    source = tmp_path / "src"
    shutil.copytree(DATA / "projects" / "cmake", source)
    (source / "inc").mkdir()
    (source / "params.h").rename(source / "inc" / "params.h")
    cmake = source / "CMakeLists.txt"
    # (without WITH_HELPER kernel.cu calls no function of helper.cu: its register cap is searched, where a
    # call to another object's function would leave it out, for the device link)
    cmake.write_text(cmake.read_text().replace("target_compile_definitions(kern PRIVATE WITH_HELPER)", "")
                     + "target_include_directories(kern PRIVATE inc)\ntarget_include_directories(app PRIVATE inc)\n")
    (source / "nvcc-evo.acf").write_text('acf 1\nunit "kernel.cu" {\n    search {\n'
                                         '        ptxas.maxrregcount in {32, 255}\n    }\n'
                                         '    tune {\n        minimize registers\n    }\n}\n')
    env = evo_env(evo_cache)
    build_dir = source / "build"
    cmake_configure(source, build_dir, env)
    cmake_build(build_dir, env)
    assert list(build_dir.glob("CMakeFiles/kern.dir/includes_CUDA.rsp")), "CMake gave no options file"
    tuned = subprocess.run([str(EVO), "--retune", "--backend", "static", "--evaluations", "4"], cwd=source,
                           env=env, capture_output=True, text=True)
    assert tuned.returncode == 0, tuned.stderr
    assert "ship check" not in tuned.stderr and "cannot read options file" not in tuned.stderr, tuned.stderr
    assert "ptxas.maxrregcount = 32" in (source / "nvcc-evo.acf").read_text()
    again = cmake_build(build_dir, env)
    assert "Used 32 registers" in again.stdout + again.stderr, again.stdout + again.stderr


@pytest.mark.skipif(shutil.which("ninja") is None, reason="needs ninja (a second CMake generator)")
def test_two_build_folders_of_one_project_are_one_build_and_another_way_of_compiling_is_said(tmp_path, evo_cache):
    """A Ninja folder and a Makefiles folder of one CMake project compile kernel.cu alike (Makefiles pass the
    include folders in an options file, Ninja on the command line): an entry tuned for one was stale for
    the other ("tuned for another build"), and every rebuild in the other folder made it stale again. A
    third folder that compiles it differently (-lineinfo) is said, with which one is tuned for."""
    source = tmp_path / "src"
    shutil.copytree(DATA / "projects" / "cmake", source)
    (source / "inc").mkdir()
    (source / "params.h").rename(source / "inc" / "params.h")
    cmake = source / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + "target_include_directories(kern PRIVATE inc)\n"
                     "target_include_directories(app PRIVATE inc)\n")
    (source / "nvcc-evo.acf").write_text('acf 1\nunit "kernel.cu" {\n    search {\n'
                                         '        ptxas.maxrregcount in {32, 255}\n    }\n}\n')
    env = evo_env(evo_cache)
    cmake_configure(source, tmp_path / "ninja", env, "-G", "Ninja")
    cmake_build(tmp_path / "ninja", env)
    tuned = subprocess.run([str(EVO), "--retune", "--backend", "static", "--evaluations", "3"], cwd=source,
                           env=env, capture_output=True, text=True)
    assert tuned.returncode == 0, tuned.stderr
    cmake_configure(source, tmp_path / "make", env, "-G", "Unix Makefiles")
    cmake_build(tmp_path / "make", env)
    listed = subprocess.run([str(EVO), "--retune", "--dry-run"], cwd=source, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "nothing to retune" in listed.stderr, listed.stdout + listed.stderr
    cmake_configure(source, tmp_path / "lines", env, "-DCMAKE_CUDA_FLAGS=-lineinfo")
    cmake_build(tmp_path / "lines", env)
    listed = subprocess.run([str(EVO), "--retune", "--dry-run"], cwd=source, env=env, capture_output=True, text=True)
    assert (f'"kernel.cu" [sm_90]: 2 builds compile it differently (recorded in {tmp_path / "lines"} and '
            f'{tmp_path / "make"}; -lineinfo only in {tmp_path / "lines"}): tuned for the latest') in listed.stderr, \
        listed.stderr
    assert (f'"kernel.cu" [sm_90]: tuned for the build recorded in {tmp_path / "make"}; the latest, in '
            f'{tmp_path / "lines"}, compiles it differently: -lineinfo only in {tmp_path / "lines"}') in listed.stdout


@pytest.mark.skipif(shutil.which("ninja") is None, reason="needs ninja (a second CMake generator)")
def test_build_folders_with_a_generated_header_are_one_build_and_a_real_difference_is_named(tmp_path, evo_cache):
    """CUTLASS, like most CMake projects, passes -I<build>/include (headers CMake generates there): a Make and
    a Ninja folder of one project "compiled it differently", and each rebuild made the other's entry stale.
    Paths inside the build folder are compared relative to it, the generated header by its contents; a
    folder that does compile it differently (-lineinfo, another generated header) is said with each folder
    and the exact difference (it said "tuned for another build (KEY; now KEY)")."""
    source = tmp_path / "src"
    shutil.copytree(DATA / "projects" / "cmake", source)
    cmake = source / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + 'set(EVO_SCALE 1 CACHE STRING "")\n'
                     "file(WRITE ${CMAKE_BINARY_DIR}/include/evo_config.h \"#define EVO_SCALE ${EVO_SCALE}\\n\")\n"
                     "target_include_directories(kern PRIVATE ${CMAKE_BINARY_DIR}/include)\n")
    kernel = source / "kernel.cu"
    kernel.write_text('#include "evo_config.h"\n' + kernel.read_text())
    (source / "nvcc-evo.acf").write_text('acf 1\nunit "kernel.cu" {\n    search {\n'
                                         '        ptxas.maxrregcount in {32, 255}\n    }\n}\n')
    env = evo_env(evo_cache)
    for folder, generator in (("make", "Unix Makefiles"), ("ninja", "Ninja")):
        cmake_configure(source, tmp_path / folder, env, "-G", generator)
        cmake_build(tmp_path / folder, env)
        if folder == "make":
            tuned = subprocess.run([str(EVO), "--retune", "--backend", "static", "--evaluations", "3"], cwd=source,
                                   env=env, capture_output=True, text=True)
            assert tuned.returncode == 0, tuned.stderr
    listed = subprocess.run([str(EVO), "--retune", "--dry-run"], cwd=source, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "nothing to retune" in listed.stderr, listed.stdout + listed.stderr
    assert "compile it differently" not in listed.stderr
    other = tmp_path / "other"
    cmake_configure(source, other, env, "-G", "Ninja", "-DEVO_SCALE=2", "-DCMAKE_CUDA_FLAGS=-lineinfo")
    cmake_build(other, env)
    listed = subprocess.run([str(EVO), "--retune", "--dry-run"], cwd=source, env=env, capture_output=True, text=True)
    differ = f"-lineinfo only in {other}; the contents of <build>/include/evo_config.h"
    assert (f'"kernel.cu" [sm_90]: 2 builds compile it differently (recorded in {other} and {tmp_path / "ninja"}; '
            f"{differ}): tuned for the latest, in {other}") in listed.stderr, listed.stderr
    assert (f'"kernel.cu" [sm_90]: source changed (<build>/include/evo_config.h); tuned for the build recorded '
            f'in {tmp_path / "ninja"}; the latest, in {other}, compiles it differently: {differ}') in listed.stdout, \
        listed.stdout
