"""The command line as a user runs it: installed `nvcc-evo`, real nvcc."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

from conftest import DATA, ROOT, run_evo
from nvcc_evo.cli import VERBS


def nvcc_option_names(nvcc) -> set[str]:
    text = subprocess.run([str(nvcc), "--help"], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in text.splitlines():
        match = re.match(r"^(--[\w-]+)\S*.*?\((-[\w-]+)\)", line)
        if match:
            names.update(match.groups())
    return names


def test_verbs_never_collide_with_nvcc_options(real_nvcc):
    nvcc_names = nvcc_option_names(real_nvcc)
    assert len(nvcc_names) > 150            # the parse of --help found the options
    assert "--ptxas-options" in nvcc_names and "-Xptxas" in nvcc_names
    for verb in VERBS + ("--check",):
        assert verb not in nvcc_names
        assert not any(name.startswith(verb + "=") for name in nvcc_names)


def test_acf_check_accepts_a_good_file():
    result = run_evo("--acf-check", str(DATA / "acf" / "ok" / "full.acf"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("full.acf: ok (2 unit(s))")
    # (no sources beside the golden file: each unit is said to match none, and that is all)
    assert [line.split(": warning: ")[1].split(" matches")[0] for line in result.stderr.splitlines()] == [
        'unit "kernels/gemm_tiled.cu"', 'unit "apps/*.cu" "apps/extra/solver.cu"'], result.stderr


def test_acf_check_says_which_unit_matches_no_file(tmp_path):
    """A mistyped glob was "ok": the build then matched nothing and tuned nothing, silently."""
    (tmp_path / "gemm.cu").write_text('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n')
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "gemm.cu" {\n}\nunit "src/gemm.cu" {\n}\n')
    done = run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "nvcc-evo.acf: ok (2 unit(s))\n"
    assert done.stderr == (f'nvcc-evo.acf:4:1: warning: unit "src/gemm.cu" matches no file under {tmp_path}: '
                           "a build applies nothing of it\n")


CHOOSING = """#ifndef ALGO
#define ALGO 0   // which algorithm: ALGO * 2 in a comment is no use
#endif
#ifndef TILE
#define TILE 4
#endif
#if !defined(WIDTH)
#define WIDTH 2
#endif
__global__ void k(float* y) {
#if ALGO == 2
    switch (ALGO) { case 2: y[threadIdx.x] = 2.0f; }
#elif ALGO != 0
    float t[TILE];
    for (int i = 0; i < TILE; ++i) t[i] = i;
    y[threadIdx.x] = t[threadIdx.x % TILE] * (WIDTH == 2);
#else
    y[threadIdx.x] = WIDTH;
#endif
}
"""


def test_acf_check_notes_a_define_its_source_only_compares_for_equality(tmp_path):
    """ALGO is only tested with == and != (its numbers name algorithms): a note at its line says
    `unordered`; TILE sizes an array and WIDTH is a value too: no note; said unordered, none."""
    (tmp_path / "k.cu").write_text(CHOOSING)
    acf = tmp_path / "nvcc-evo.acf"
    search = "define.ALGO in {0, 1, 2, 3}\n        define.TILE in {1, 2, 4, 8}\n        define.WIDTH in 1..3"
    acf.write_text(f'acf 1\nunit "k.cu" {{\n    search {{\n        {search}\n    }}\n}}\n')
    checked = run_evo("--acf-check", str(acf))
    assert checked.returncode == 0, checked.stderr
    notes = [line for line in checked.stderr.splitlines() if ": note: " in line]
    assert len(notes) == 1 and notes[0].startswith(f"{acf}:4:9: note: define.ALGO is only compared for equality "
                                                   "in k.cu (3 use(s))") and "`unordered`" in notes[0], notes
    acf.write_text(acf.read_text().replace("{0, 1, 2, 3}", "{0, 1, 2, 3} unordered"))
    assert ": note: " not in run_evo("--acf-check", str(acf)).stderr
    acf.write_text(acf.read_text().replace("1..3", "1..2 unordered").replace("{1, 2, 4, 8}", "{1, 2, 4, 8, x} unordered"))
    notes = [line for line in run_evo("--acf-check", str(acf)).stderr.splitlines() if ": note: " in line]
    assert [line.split(": note: ")[1] for line in notes] == [
        "`unordered` changes nothing for define.TILE: values that are not all numbers are choices already",
        "`unordered` changes nothing for define.WIDTH: two values are apart either way"], notes
    acf.write_text(acf.read_text().replace("{1, 2, 4, 8, x} unordered", "{0.5, 1.0, 2.0} unordered"))
    assert "define.TILE" not in run_evo("--acf-check", str(acf)).stderr    # numbers: the word matters


def test_acf_check_reports_every_error_of_every_file(tmp_path):
    bad = tmp_path / "bad.acf"
    text = (DATA / "acf" / "err" / "pins.acf").read_text()
    bad.write_text(text)
    result = run_evo("--acf-check", str(bad), str(DATA / "acf" / "err" / "syntax_two_errors.acf"))
    assert result.returncode == 1
    assert result.stderr.count(": error: ") == 5
    assert f"{bad}:3:5: error: pinned value 48" in result.stderr
    assert "Traceback" not in result.stderr
    assert bad.read_text() == text


def test_acf_check_launches_the_bench_with_the_sources_own_defaults(tmp_path):
    (tmp_path / "k.cu").write_text("#ifndef BM\n#define BM 128\n#endif\n__global__ void k(float* c) {}\n")
    acf_text = ('acf 1\nunit "k.cu" {\n    search {\n        define.BM in {16, 128}\n    }\n    bench {\n'
                '        kernel k\n        let M = 64\n        arg c : f32[M] = output\n        grid (M / BM)\n'
                '        block (BM)\n        check c\n    }\n}\n')
    (tmp_path / "nvcc-evo.acf").write_text(acf_text)
    bad = run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.startswith("nvcc-evo.acf:10:15: error: with the unit's defaults (k.cu's #defines and the pins): "
                                 "grid must be positive integers, got [0]\n        grid (M / BM)\n              ^")
    built = run_evo("-arch=sm_90", "-c", "k.cu", "-o", "k.o", cwd=tmp_path)
    assert built.returncode == 0 and "the ACF has errors" not in built.stderr       # a build is not held back
    (tmp_path / "nvcc-evo.acf").write_text(acf_text.replace("    search {", "    pin define.BM = 16\n    search {"))
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path).returncode == 0       # the pin makes it launch
    (tmp_path / "k.cu").unlink()
    (tmp_path / "nvcc-evo.acf").write_text(acf_text)
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path).returncode == 0       # no source: nothing to check


def test_a_bench_may_name_a_define_the_source_gives_itself_and_nothing_else(tmp_path):
    """A bench over compiler knobs only launches with the source's own
    `#define BLOCK 256`: the name is the source's (it was 'undefined', and the
    build ran untuned, 'the ACF has errors'); a name no source defines is an
    error where the sources are read, and holds no build back."""
    (tmp_path / "k.cu").write_text("#ifndef BLOCK\n#define BLOCK 256\n#endif\n__global__ void k(float* c) {}\n")
    acf_text = ('acf 1\nunit "k.cu" {\n    search {\n        ptxas.opt_level in {2, 3}\n    }\n    bench {\n'
                '        kernel k\n        let M = 1024\n        arg c : f32[M] = output\n        grid (M / BLOCK)\n'
                '        block (BLOCK)\n        check c\n    }\n}\n')
    (tmp_path / "nvcc-evo.acf").write_text(acf_text)
    good = run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    built = run_evo("-arch=sm_90", "-c", "k.cu", "-o", "k.o", cwd=tmp_path)
    assert built.returncode == 0 and "the ACF has errors" not in built.stderr, built.stderr
    (tmp_path / "nvcc-evo.acf").write_text(acf_text.replace("block (BLOCK)", "block (THREADS)"))
    bad = run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.startswith("nvcc-evo.acf:11:16: error: undefined name 'THREADS' in expression (sizes: M; "
                                 "defines: BLOCK)"), bad.stderr
    built = run_evo("-arch=sm_90", "-c", "k.cu", "-o", "k.o", cwd=tmp_path)
    assert built.returncode == 0 and "the ACF has errors" not in built.stderr, built.stderr
    (tmp_path / "nvcc-evo.acf").write_text(acf_text)
    (tmp_path / "k.cu").unlink()                 # no source beside the ACF: no #define to take the name from
    alone = run_evo("--acf-check", "nvcc-evo.acf", cwd=tmp_path)
    assert alone.returncode == 1 and "undefined name 'BLOCK' in expression (sizes: M; defines: none)" in alone.stderr


def test_acf_check_missing_file():
    result = run_evo("--acf-check", "/nonexistent/x.acf")
    assert result.returncode == 1
    assert "/nonexistent/x.acf: error: No such file or directory" in result.stderr


def test_acf_fmt_check_then_rewrite(tmp_path):
    path = tmp_path / "messy.acf"
    shutil.copy(DATA / "acf" / "ok" / "messy.acf", path)
    checked = run_evo("--acf-fmt", "--check", str(path))
    assert checked.returncode == 1 and "would reformat" in checked.stdout
    assert path.read_text() == (DATA / "acf" / "ok" / "messy.acf").read_text()
    assert run_evo("--acf-fmt", str(path)).returncode == 0
    assert path.read_text() == (DATA / "acf" / "ok" / "messy.fmt").read_text()
    assert run_evo("--acf-fmt", "--check", str(path)).returncode == 0


def test_acf_fmt_refuses_a_broken_file_and_leaves_it(tmp_path):
    path = tmp_path / "b.acf"
    path.write_text("acf 1\nunit {\n")
    result = run_evo("--acf-fmt", str(path))
    assert result.returncode == 1 and f"{path}:2:6: error:" in result.stderr
    assert path.read_text() == "acf 1\nunit {\n"


def test_usage_errors_exit_2():
    result = run_evo("--acf-check")
    assert result.returncode == 2 and "usage:" in result.stderr
    result = run_evo("--evo-version", "--check")
    assert result.returncode == 2


def test_python_dash_m_runs_the_same_cli():
    result = subprocess.run([sys.executable, "-m", "nvcc_evo", "--evo-version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("nvcc-evo ")


def test_explain_shows_every_located_error_of_the_acf(tmp_path):
    (tmp_path / "a.cu").write_text('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n')
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "a.cu" {\n    target sm_90 {\n        ptxas.maxregs = 40\n'
                                           '        ptxas.opt_level = 7\n    }\n}\n')
    done = run_evo("--explain", "-arch=sm_90", "-c", "a.cu", cwd=tmp_path)
    assert done.returncode == 1                       # was 0, with one line and no caret
    assert "problem: the ACF has errors; building without tuned flags" in done.stdout
    assert f"{tmp_path / 'nvcc-evo.acf'}:4:9: error: unknown knob 'ptxas.maxregs'" in done.stderr
    assert f"{tmp_path / 'nvcc-evo.acf'}:5:9: error: ptxas.opt_level takes" in done.stderr
    assert "\n        ^" in done.stderr and "Traceback" not in done.stderr


def test_explain_lists_architectures_by_number(tmp_path):
    """cuda-samples' CMake arches (75 ... 100 ... 120) read `SASS targets: sm_100, sm_120, sm_75, ...` and
    the per-architecture lines began with sm_100: sorted as text, where the retune sorts them by number."""
    (tmp_path / "a.cu").write_text('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n')
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "a.cu" {\n    target sm_75, sm_90 {\n'
                                           '        ptxas.maxrregcount = 40\n    }\n}\n')
    gencodes = [f"--generate-code=arch=compute_{a},code=[compute_{a},sm_{a}]" for a in (120, 75, 100, 90)]
    done = run_evo("--explain", *gencodes, "-c", "a.cu", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "SASS targets: sm_75, sm_90, sm_100, sm_120" in done.stdout, done.stdout
    shown = re.findall(r"^a\.cu \[(sm_\d+)\]:", done.stdout, re.M)
    assert shown == ["sm_75", "sm_90", "sm_100", "sm_120"], done.stdout
