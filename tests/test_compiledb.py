"""The compile database as a user's project lives: moved, copied, built
with an environment the retune shell lacks, or with a broken record."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EVO, evo_env, run_evo

KERNEL = """#include "params.h"
extern "C" __global__ void scale(float* y, const float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FACTOR * x[i];
}
"""
ACF = 'acf 1\nunit "src/kernel.cu" {\n    search {\n        ptxas.opt_level in {1, 3}\n    }\n}\n'


@pytest.fixture
def project(tmp_path) -> Path:
    """A project whose unit needs the build's -I (an absolute path into the project)."""
    root = tmp_path / "old" / "proj"
    (root / "src").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "params.h").write_text("#define FACTOR 2.0f\n")
    (root / "src" / "kernel.cu").write_text(KERNEL)
    (root / "nvcc-evo.acf").write_text(ACF)
    return root


def build(root: Path, cache: Path, **env) -> None:
    done = subprocess.run([str(EVO), "-arch=sm_90", f"-I{root / 'include'}", "-c", "src/kernel.cu",
                           "-o", "kernel.o"], cwd=root, env=evo_env(cache, **env), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def retune(root: Path, cache: Path, *args: str, **env):
    return run_evo("--retune", "--backend", "static", "--evaluations", "3", *args, cwd=root,
                   env=evo_env(cache, **env))


def test_a_moved_project_retunes_its_own_files(project, tmp_path, evo_cache):
    build(project, evo_cache)
    moved = tmp_path / "new" / "proj"
    moved.parent.mkdir()
    shutil.move(project, moved)                      # the old folder is gone
    done = retune(moved, evo_cache)
    assert done.returncode == 0, done.stderr         # was: [Errno 2] No such file or directory (exit 3)
    assert "target sm_90 {" in (moved / "nvcc-evo.acf").read_text()
    assert "compiled as `nvcc -c SOURCE`" not in done.stderr     # the record, with its -I moved, was used


def test_a_copied_project_is_stale_where_its_own_source_changed(project, tmp_path, evo_cache):
    build(project, evo_cache)
    assert retune(project, evo_cache).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(project, copy)                   # .nvcc-evo/ comes along
    with open(copy / "src" / "kernel.cu", "a") as source:
        source.write("// edited in the copy\n")
    dry = retune(copy, evo_cache, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == '"src/kernel.cu" [sm_90]: source changed (src/kernel.cu)\n'
    explained = run_evo("--explain", "-arch=sm_90", f"-I{copy / 'include'}", "-c", "src/kernel.cu",
                        cwd=copy, env=evo_env(evo_cache))
    assert "stale: source changed" in explained.stdout
    assert retune(project, evo_cache, "--dry-run").stdout == ""        # the original is up to date


def test_the_build_environment_is_recorded_and_used(project, tmp_path, evo_cache):
    """A header found through CPATH at build time is found by --retune from a shell without it."""
    elsewhere = tmp_path / "sdk"
    elsewhere.mkdir()
    (elsewhere / "extra.h").write_text("#define OFFSET 1.0f\n")
    (project / "src" / "kernel.cu").write_text('#include <extra.h>\n' + KERNEL.replace("* x[i]", "* x[i] + OFFSET"))
    build(project, evo_cache, CPATH=elsewhere)
    done = retune(project, evo_cache)
    assert done.returncode == 0, done.stderr


def test_an_unreadable_record_is_named_and_the_unit_not_tuned_blind(project, evo_cache):
    folder = project / ".nvcc-evo" / "compile-db"
    folder.mkdir(parents=True)
    (folder / "0123.json").write_text("{ not json")
    done = retune(project, evo_cache)
    assert f"{folder / '0123.json'}: unreadable" in done.stderr
    assert "not tuned" in done.stderr and "Traceback" not in done.stderr
    assert done.returncode == 1 and "nothing retuned: 1 skipped" in done.stderr
    assert "target sm_90" not in (project / "nvcc-evo.acf").read_text()
    build(project, evo_cache)                        # recorded again: tuned as the build compiles it
    assert retune(project, evo_cache).returncode == 0


def test_records_are_relative_to_the_acf_folder(project, evo_cache):
    build(project, evo_cache)
    (entry,) = (project / ".nvcc-evo" / "compile-db").glob("*.json")
    data = json.loads(entry.read_text())
    assert (data["cwd"], data["input"]) == (".", "src/kernel.cu")


def test_another_path_keeps_the_stored_results(project, tmp_path, evo_cache):
    """An activated venv changes PATH: the build's identity must not change with it (every stored
    result was set aside and searched again)."""
    build(project, evo_cache)
    assert retune(project, evo_cache).returncode == 0
    extra = tmp_path / "tools"
    extra.mkdir()
    env = evo_env(evo_cache)
    build(project, evo_cache, PATH=f"{extra}:{env['PATH']}")
    done = retune(project, evo_cache, "--all")
    assert done.returncode == 0, done.stderr
    assert "other context(s) in the results store left aside" not in done.stderr
    assert "resuming with" in done.stderr


def test_a_bench_commands_build_keeps_the_users_record(project, evo_cache):
    """A command backend's bench command builds each candidate through the wrapper; its compile
    (here with a -D of its own) must not replace the record of how the user's build compiles the
    unit (it did: the next static retune built with the bench command's flags, or failed where the
    bench command's build lacked the user's -I)."""
    build(project, evo_cache)
    bench = (f"{EVO} -arch=sm_90 -DFROM_BENCH=1 -I{project / 'include'} -c src/kernel.cu -o kernel.o "
             f"&& echo time 1.5 ms")
    (project / "nvcc-evo.acf").write_text(ACF.replace(
        "    }\n}\n", f'    }}\n    bench {{\n        command "{bench}"\n        metric time "time ([0-9.]+) ms"\n'
                      f'        confirm rounds 5\n    }}\n}}\n'))
    done = run_evo("--retune", "--backend", "command", "--evaluations", "2", cwd=project, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    assert "FROM_BENCH" in done.stderr or "time" in done.stdout          # the bench command ran
    (entry,) = (project / ".nvcc-evo" / "compile-db").glob("*.json")
    argv = json.loads(entry.read_text())["argv"]
    assert "-DFROM_BENCH=1" not in argv and f"-I{project / 'include'}" in argv


def test_a_moved_project_keeps_its_stored_results(project, tmp_path, evo_cache):
    """The build's identity in the results store is the same after a move: paths under the ACF's
    folder are compared relative to it (a moved checkout searched everything again)."""
    build(project, evo_cache)
    assert retune(project, evo_cache).returncode == 0
    moved = tmp_path / "new" / "proj"
    moved.parent.mkdir()
    shutil.move(project, moved)
    done = retune(moved, evo_cache, "--all")
    assert done.returncode == 0, done.stderr
    assert "other context(s) in the results store left aside" not in done.stderr
    assert "resuming with" in done.stderr


def test_a_unit_added_before_the_recording_unit_is_built_as_its_records_build(project, evo_cache):
    """`--hot --write` adds a unit before `unit "**/*.cu" {}`, which recorded the build: a retune of
    the new unit compiles it as those records do (here with the build's -I), not as `nvcc -c
    SOURCE`, which cannot find params.h."""
    (project / "nvcc-evo.acf").write_text('acf 1\n\nunit "**/*.cu" {\n}\n')
    build(project, evo_cache)
    (project / "nvcc-evo.acf").write_text(ACF + '\nunit "**/*.cu" {\n}\n')
    done = run_evo("--retune", "--backend", "static", "--evaluations", "2", "src/kernel.cu",
                   cwd=project, env=evo_env(evo_cache))
    assert "never built through nvcc-evo" not in done.stderr
    assert "params.h" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    written = (project / "nvcc-evo.acf").read_text()
    assert 'unit "src/kernel.cu" {' in written
    assert "target sm_90 {" in written.split('unit "**/*.cu"')[0], written


def test_git_leaves_the_state_folder_out_unless_the_user_shares_it(project, evo_cache):
    """A build and a retune in a git repository: `.nvcc-evo/` (records, results, locks) is made with a
    `.gitignore` of `*`, so `git status` shows the user's own changes alone (before: `?? .nvcc-evo/` after
    every first build); a user who deleted that file to commit the folder is not overruled."""
    git = ["git", "-c", "user.email=u@example.com", "-c", "user.name=u"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "project"], cwd=project, check=True)
    build(project, evo_cache)
    assert retune(project, evo_cache).returncode == 0
    status = subprocess.run([*git, "status", "--porcelain"], cwd=project, capture_output=True, text=True)
    assert status.stdout.splitlines() == [" M nvcc-evo.acf", "?? kernel.o"], status.stdout
    assert (project / ".nvcc-evo" / "results.jsonl").is_file()
    (project / ".nvcc-evo" / ".gitignore").unlink()            # the user shares it
    build(project, evo_cache)
    assert retune(project, evo_cache).returncode == 0
    assert not (project / ".nvcc-evo" / ".gitignore").exists()
