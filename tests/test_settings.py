"""Project settings: nvcc-evo.toml beside the ACF or pyproject.toml's
[tool.nvcc-evo]; precedence command line > environment > file > default,
each value's source said; located errors; the compile path without a file
never imports tomllib."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import DATA, EVO, ROOT, evo_env, run_evo

ACF = """acf 1
unit "spill.cu" {
    search {
        ptxas.opt_level in 1..3
        ptxas.register_usage_level in 0..10
    }
    tune {
        minimize spills, registers
    }
    target sm_90 "H200" {
        ptxas.opt_level = 2
    }
    target sm_90 {
        ptxas.opt_level = 1
    }
}
"""


@pytest.fixture
def project(tmp_path):
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    return tmp_path


def test_a_project_table_retunes_with_no_flags(project, evo_cache):
    (project / "pyproject.toml").write_text('[project]\nname = "kernels"\n\n[tool.nvcc-evo.retune]\n'
                                            'backend = "static"\nevaluations = 6\npopulation = 3\nseed = 2\n'
                                            'target = "sm_90"\n')
    result = run_evo("--retune", cwd=project, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert "backend = 'static' (pyproject.toml:5)" in result.stderr
    assert "evaluations = 6 (pyproject.toml:6)" in result.stderr
    stored = [json.loads(line) for line in (project / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    assert 4 <= len(stored) <= 7 and all(r["context"]["backend"] == "static" for r in stored)   # the file's budget


def test_precedence_command_line_then_environment_then_file_then_default(project, evo_cache):
    (project / "nvcc-evo.toml").write_text('[retune]\nevaluations = 6\npopulation = 3\nseed = 2\n')
    env = evo_env(evo_cache, NVCC_EVO_POPULATION="5", NVCC_EVO_SEED="7")
    result = run_evo("--retune", "--dry-run", "--seed", "9", cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    said = result.stderr
    assert "evaluations = 6 (nvcc-evo.toml:2)" in said          # file
    assert "population = 5 (NVCC_EVO_POPULATION)" in said       # environment over file
    assert "seed = 9 (--seed)" in said                          # command line over both
    assert "patience = (unset) (built-in default)" in said      # a stagnant search diversifies, it does not stop
    assert "time-limit = inf (built-in default)" in said       # --evaluations (here the file's) alone: no time limit
    # the default backend is auto, and said as what it chose here (it said "'static' (built-in default)")
    assert re.search(r"backend = '(static|pycuda)' \(auto, built-in default: (no PyCUDA GPU here|PyCUDA and a "
                     r"GPU are there)\)", said), said
    (project / "nvcc-evo.toml").write_text('[retune]\nbackend = "auto"\n')
    from_file = run_evo("--retune", "--dry-run", cwd=project, env=env).stderr
    assert re.search(r"backend = '(static|pycuda)' \(auto, nvcc-evo.toml:2: ", from_file), from_file
    (project / "nvcc-evo.toml").write_text('[retune]\nevaluations = 6\npopulation = 3\nseed = 2\n')
    result = run_evo("--retune", "--dry-run", "--population", "12", cwd=project, env=env)
    assert "population = 12 (--population)" in result.stderr   # a value equal to the default still wins


def test_pyproject_table_found_above_the_acf_and_the_file_beside_it_wins(tmp_path, evo_cache):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.nvcc-evo]\nstale = "default"\n\n'
                                             '[tool.nvcc-evo.retune]\nevaluations = 7\n')
    sub = tmp_path / "cuda"
    sub.mkdir()
    shutil.copy(DATA / "cuda" / "spill.cu", sub / "spill.cu")
    (sub / "nvcc-evo.acf").write_text(ACF)
    env = evo_env(evo_cache)
    result = run_evo("--retune", "--dry-run", cwd=sub, env=env)
    assert "evaluations = 7 (../pyproject.toml:8)" in result.stderr, result.stderr
    explained = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=sub, env=env).stdout
    assert "stale = 'default' (../pyproject.toml:5)" in explained
    assert "retune.evaluations = 7 (../pyproject.toml:8)" in explained           # every setting, with its source
    (sub / "nvcc-evo.toml").write_text("[retune]\nevaluations = 3\n")
    assert "evaluations = 3 (nvcc-evo.toml:2)" in run_evo("--retune", "--dry-run", cwd=sub, env=env).stderr


def test_a_pyproject_without_the_table_is_no_settings_file(project, evo_cache):
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    explained = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=project, env=evo_env(evo_cache)).stdout
    assert "settings: no nvcc-evo.toml beside the ACF" in explained


def test_a_pyproject_that_names_nvcc_evo_without_its_table_is_no_settings_file(project, evo_cache):
    """`make tune`'s copy below nvcc-evo's own checkout (name = "nvcc-evo"), or a project that depends on
    it: the retune said "settings (project settings .../pyproject.toml)" of a file that holds none."""
    (project / "pyproject.toml").write_text('[project]\nname = "app"\ndependencies = ["nvcc-evo>=0.1"]\n'
                                            '[tool.other]\nnvcc-evo = 1\n')
    dry = run_evo("--retune", "--backend", "static", "--dry-run", cwd=project, env=evo_env(evo_cache))
    assert dry.returncode == 0, dry.stderr
    assert "settings (no project settings file)" in dry.stderr and "pyproject.toml" not in dry.stderr, dry.stderr
    explained = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=project, env=evo_env(evo_cache)).stdout
    assert "settings: no nvcc-evo.toml beside the ACF" in explained


def test_a_pyproject_tool_key_that_is_not_a_table_is_a_located_error(project, evo_cache):
    """`[tool]` with `nvcc-evo = 3`: --retune ended in a traceback (AttributeError: 'int' object has no
    attribute 'items') and a build warned of an internal error."""
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n[tool]\nnvcc-evo = 3\n')
    expected = "pyproject.toml:4:12: error: 'tool.nvcc-evo' must be a table, got an integer (3)\nnvcc-evo = 3\n"
    dry = run_evo("--retune", "--dry-run", cwd=project, env=evo_env(evo_cache))
    assert dry.returncode == 1 and dry.stderr.startswith(expected), dry.stderr
    build = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "a.o"], cwd=project,
                           env=evo_env(evo_cache), capture_output=True, text=True)
    assert build.returncode == 0 and (project / "a.o").exists() and "Traceback" not in build.stderr
    assert "building without tuned flags: pyproject.toml:4:12: error: 'tool.nvcc-evo' must be a table" \
        in build.stderr


def test_the_build_uses_the_files_gpu_log_and_nvcc(project, evo_cache, real_nvcc):
    (project / "nvcc-evo.toml").write_text(f'nvcc = "{real_nvcc}"\ngpu = "H200"\nlog = "logs/build.jsonl"\n')
    (project / "logs").mkdir()
    env = evo_env(evo_cache)
    env["PATH"] = "/usr/bin:/bin"                                # no nvcc on PATH: the file names it
    build = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "a.o"], cwd=project, env=env,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    line = json.loads((project / "logs" / "build.jsonl").read_text().splitlines()[-1])
    assert line["added"] == ["-Xptxas", "-O2"]                  # the H200 block, picked by the file's gpu
    explained = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=project, env=env).stdout
    assert f"nvcc = '{real_nvcc}' (nvcc-evo.toml:1)" in explained and f"real nvcc: {real_nvcc}" in explained
    env["NVCC_EVO_GPU"] = "A100"                                 # the environment wins: no A100 block, the plain one
    explained = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=project, env=env).stdout
    assert "gpu = 'A100' (NVCC_EVO_GPU)" in explained and "-Xptxas -O1" in explained


ERRORS = [
    ('gpu = "H200"\nlogg = "x"\n', "nvcc-evo.toml:2:1: error: unknown setting 'logg' (known settings: gpu, log, "
     "nvcc, ptxas, real-ptxas, real-ptxas-blackwell, stale, [lock], [report], [retune])\nlogg = \"x\"\n^"),
    ('[retune]\nevaluations = "ten"\n', "nvcc-evo.toml:2:15: error: 'retune.evaluations' must be an integer, "
     "got a string ('ten')\nevaluations = \"ten\"\n              ^"),
    ('[retune]\nbackend = "gpu"\n', "nvcc-evo.toml:2:11: error: 'retune.backend' must be one of auto, pycuda, "
     "static, command, replay, got 'gpu'"),
    ('[retune]\npopulation = 0\n', "nvcc-evo.toml:2:14: error: 'retune.population' must be positive, got 0"),
    ('stale = "keep"\n[retune]\nfoo = 1\n', "nvcc-evo.toml:3:1: error: unknown setting 'retune.foo' (known "
     "[retune] settings: at-once, backend, cluster, device"),
    ('gpu = "H200\n', "nvcc-evo.toml:1:12: error: illegal character"),
    ("ptxas = { a = 3 }\n", "nvcc-evo.toml:1:9: error: 'ptxas' must be an array of paths, got a table"),
]


@pytest.mark.parametrize("text, expected", ERRORS)
def test_bad_settings_are_located_errors(project, evo_cache, text, expected):
    (project / "nvcc-evo.toml").write_text(text)
    env = evo_env(evo_cache)
    result = run_evo("--retune", "--dry-run", cwd=project, env=env)
    assert result.returncode == 1 and result.stderr.startswith(expected), result.stderr
    build = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "a.o"], cwd=project, env=env,
                           capture_output=True, text=True)
    assert build.returncode == 0 and (project / "a.o").exists()     # a build is never broken: untuned, said
    assert "the project settings cannot be used; building without tuned flags: " + expected.split("\n")[0] \
        in build.stderr


def test_a_settings_file_that_is_not_utf8_is_a_located_error(project, evo_cache):
    (project / "nvcc-evo.toml").write_bytes(b'stale = "keep"\ngpu = "caf\xe9"\n')
    result = run_evo("--retune", "--dry-run", cwd=project, env=evo_env(evo_cache))
    assert result.returncode == 1
    assert result.stderr.startswith("nvcc-evo.toml:2:11: error: the file is not UTF-8 text: byte(s) 0xe9 here")


@pytest.mark.parametrize("name, text, said", [
    ("nvcc-evo.toml", '[retune]\nevaluations = 6\n', "retune.evaluations = 6 (nvcc-evo.toml:2)"),
    ("pyproject.toml", '[project]\nname = "x"\n\n[tool.nvcc-evo]\nstale = "default"\n', "stale = 'default' "
     "(pyproject.toml:5)")])
def test_a_settings_file_with_a_bom_is_read_as_an_acf_with_one_is(project, evo_cache, name, text, said):
    """A BOM (as some Windows editors save UTF-8) made the settings "nvcc-evo.toml:1:1: error: invalid
    statement (TOML)", and every build of the project went untuned, while an ACF with a BOM is read."""
    bom = b"\xef\xbb\xbf"
    (project / name).write_bytes(bom + text.encode())
    (project / "nvcc-evo.acf").write_bytes(bom + ACF.encode())
    env = evo_env(evo_cache)
    explained = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=project, env=env)
    assert explained.returncode == 0 and said in explained.stdout, explained.stdout + explained.stderr
    assert "-Xptxas -O1" in explained.stdout                      # the ACF's entry: the build is tuned
    build = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "a.o"], cwd=project, env=env,
                           capture_output=True, text=True)
    assert build.returncode == 0 and build.stderr == "", build.stderr


def test_a_settings_nvcc_that_is_not_there_is_said_with_its_place(project, evo_cache):
    (project / "nvcc-evo.toml").write_text('nvcc = "bin/nvcc"\n')
    result = run_evo("--retune", "--dry-run", cwd=project, env=evo_env(evo_cache))
    assert result.returncode == 3
    assert f"nvcc-evo: error: nvcc-evo.toml:1: nvcc = {project / 'bin' / 'nvcc'} is not an executable nvcc" \
        in result.stderr
    build = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "a.o"], cwd=project,
                           env=evo_env(evo_cache), capture_output=True, text=True)
    assert build.returncode == 0 and "nvcc-evo.toml:1: nvcc = " in build.stderr      # warned, built untuned


def test_a_bad_environment_value_is_a_usage_error(project, evo_cache):
    result = run_evo("--retune", "--dry-run", cwd=project, env=evo_env(evo_cache, NVCC_EVO_EVALUATIONS="many"))
    assert result.returncode == 2
    assert "nvcc-evo: error: NVCC_EVO_EVALUATIONS=many: expected an integer, positive" in result.stderr


PROBE = """
import sys
from pathlib import Path
from nvcc_evo.driver.wrapper import decide
decision = decide(["-arch=sm_90", "-c", "spill.cu"], Path(sys.argv[1]), {}, Path.cwd())
assert decision.flags is not None, decision
assert not {"matplotlib", "rich", "ray"} & set(sys.modules)       # the extras never load on the compile path
print("tomllib" in sys.modules, "nvcc_evo.driver.settings" in sys.modules)
"""


def test_the_compile_path_reads_settings_only_where_a_file_is(project, real_nvcc, evo_cache):
    env = evo_env(evo_cache, PYTHONPATH=str(ROOT))
    probe = lambda: subprocess.run([sys.executable, "-c", PROBE, str(real_nvcc)], cwd=project, env=env,
                                   capture_output=True, text=True, check=True).stdout.strip()
    assert probe() == "False False"                   # an ACF, no settings file: a few stats, nothing imported
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')        # no table of ours: still not
    assert probe() == "False False"
    (project / "nvcc-evo.toml").write_text('stale = "keep"\n')
    assert probe() == "True True"


# Request fields that are no project setting: what to retune and how; Options fields besides: the backend was
# auto, the build settings a retune reads, where values came from.
NOT_SETTINGS = {"acf", "globs", "all", "dry_run", "protocol", "ptxas"}
DECIDED_TOO = {"auto", "lock_wait", "sources"}


def test_a_search_setting_is_declared_once_and_is_a_request_and_options_field_and_a_flag():
    """Each `retune.` key of the settings' table is a Request field (None: not given, the table decides)
    and a --retune flag that fills it, and a field of the decided Options; every other field is named
    above (a new search setting goes into the table)."""
    import argparse
    from dataclasses import fields

    from nvcc_evo.retune.scope.options import SETTING_FIELDS, Options, Request, add_flags
    defaults = {field.name: field.default for field in fields(Request)}
    assert set(defaults) - NOT_SETTINGS == set(SETTING_FIELDS.values())
    assert all(defaults[field] is None for field in SETTING_FIELDS.values())
    assert {field.name for field in fields(Options)} - NOT_SETTINGS - DECIDED_TOO == set(SETTING_FIELDS.values())
    parser = argparse.ArgumentParser()
    add_flags(parser)
    given = vars(parser.parse_args(["--time-limit", "5", "--at-once", "2", "--backend", "static", "--target", "sm_80"]))
    assert (given["seconds"], given["at_once"], given["backend"], given["target"]) == (5.0, 2, "static", "sm_80")
    assert set(given) == set(SETTING_FIELDS.values())
    with pytest.raises(SystemExit):
        parser.parse_args(["--progress", "sometimes"])
