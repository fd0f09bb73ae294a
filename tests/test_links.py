"""A cloned repository may hold links where nvcc-evo's own files belong
(issue 25, case 1): `git clone` of a project whose `.nvcc-evo/` commits
links to a file outside it, then the verbs and a build as a user runs them.
Each link is refused, named, and its target left byte for byte as it was.
Real git, nvcc and ptxas; the static backend; the installed `nvcc-evo`."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, EVO, evo_env

ACF = """acf 1
unit "spill.cu" {
    search {
        ptxas.opt_level in 1..3
    }
}
"""
THESIS = "My thesis, five years of work.\n" * 100
RETUNE = ("--retune", "--backend", "static", "--target", "sm_90", "--evaluations", "2", "--population", "2",
          "--jobs", "1")


def cloned(tmp_path: Path, links: dict[str, str], files: dict[str, str] | None = None) -> Path:
    """A repository with `links` (name -> target) committed, cloned beside
    the victim file `thesis.txt` (two folders up from `.nvcc-evo/NAME`)."""
    origin = tmp_path / "origin"
    origin.mkdir()
    shutil.copy(DATA / "cuda" / "spill.cu", origin / "spill.cu")
    (origin / "nvcc-evo.acf").write_text(ACF)
    for name, text in (files or {}).items():
        (origin / name).parent.mkdir(parents=True, exist_ok=True)
        (origin / name).write_text(text)
    for name, target in links.items():
        (origin / name).parent.mkdir(parents=True, exist_ok=True)
        (origin / name).symlink_to(target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(origin)], check=True)
    subprocess.run([*git, "-C", str(origin), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(origin), "commit", "-qm", "project"], check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / "clone")], check=True)
    (tmp_path / "thesis.txt").write_text(THESIS)
    clone = tmp_path / "clone"
    assert all((clone / name).is_symlink() for name in links)
    return clone


def evo(clone: Path, cache: Path, *args: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([str(EVO), *args], cwd=clone, env=evo_env(cache, **extra), capture_output=True,
                          text=True, timeout=300)


def untouched(tmp_path: Path) -> bool:
    return (tmp_path / "thesis.txt").read_text() == THESIS


@pytest.mark.parametrize("name", ["locks/retune-nvcc-evo.acf.lock", "results.jsonl"])
def test_retune_refuses_a_committed_link_in_its_folder(tmp_path, evo_cache, name):
    """The lock link: the thesis was truncated and held a pid; the store
    link: JSON lines were appended to it."""
    clone = cloned(tmp_path, {f".nvcc-evo/{name}": "../../thesis.txt"})
    done = evo(clone, evo_cache, *RETUNE)
    assert done.returncode == 3, done.stderr
    assert f"{clone / '.nvcc-evo' / name}" in done.stderr and "symbolic link to ../../thesis.txt" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert untouched(tmp_path) and (clone / ".nvcc-evo" / name).is_symlink()


def test_retune_refuses_a_linked_state_folder(tmp_path, evo_cache):
    """`.nvcc-evo` itself a link to a folder of the user's: nothing is made there."""
    (tmp_path / "elsewhere").mkdir()
    clone = cloned(tmp_path, {".nvcc-evo": "../elsewhere"})
    done = evo(clone, evo_cache, *RETUNE)
    assert done.returncode == 3 and f"{clone / '.nvcc-evo'} is a symbolic link" in done.stderr, done.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_report_refuses_a_committed_link(tmp_path, evo_cache):
    """`.nvcc-evo/report.html -> FILE` was replaced by the report."""
    clone = cloned(tmp_path, {".nvcc-evo/report.html": "../../thesis.txt"})
    assert evo(clone, evo_cache, *RETUNE).returncode == 0
    done = evo(clone, evo_cache, "--report")
    assert done.returncode == 2, done.stderr
    assert f"the report file {clone / '.nvcc-evo' / 'report.html'} is a symbolic link" in done.stderr
    assert untouched(tmp_path) and done.stdout == ""


def test_a_build_writes_through_no_link(tmp_path, evo_cache, real_nvcc):
    """A build's compile database (a linked folder) and a log the committed
    settings name (a link to the thesis): each refused (the log as a located
    error of the settings), the build itself goes on and succeeds."""
    (tmp_path / "victim").mkdir()
    clone = cloned(tmp_path, {".nvcc-evo/compile-db": "../../victim", "build.log": "../thesis.txt"},
                   {"nvcc-evo.toml": 'log = "build.log"\n'})
    done = evo(clone, evo_cache, "-arch=sm_90", "-c", "spill.cu", "-o", "spill.o")
    assert done.returncode == 0 and (clone / "spill.o").is_file(), done.stderr
    assert "nvcc-evo.toml:1:7: error: 'log' must name a file inside the project folder" in done.stderr and \
        "'build.log' (a link leads out of it)" in done.stderr, done.stderr
    (clone / "nvcc-evo.toml").unlink()                  # the settings aside: the build records, tuned
    again = evo(clone, evo_cache, "-arch=sm_90", "-c", "spill.cu", "-o", "spill.o")
    assert again.returncode == 0 and f"{clone / '.nvcc-evo' / 'compile-db'} is a symbolic link" in again.stderr
    assert "Traceback" not in done.stderr + again.stderr and done.stdout == again.stdout == ""
    assert untouched(tmp_path) and list((tmp_path / "victim").iterdir()) == []


def test_a_linked_cache_folder_is_not_written(tmp_path, evo_cache, real_nvcc):
    """The user's cache folder replaced by a link: the build works, uncached, and writes nothing there."""
    (tmp_path / "victim").mkdir()
    cache = tmp_path / "xdg"
    cache.mkdir()
    (cache / "nvcc-evo").symlink_to(tmp_path / "victim")
    clone = cloned(tmp_path, {})
    env = evo_env(evo_cache)
    env["XDG_CACHE_HOME"] = str(cache)
    done = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu", "-o", "spill.o"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert list((tmp_path / "victim").iterdir()) == []


def test_the_helper_refuses_links_folders_and_fifos(tmp_path):
    from nvcc_evo.system import files
    (tmp_path / "target").write_text("keep")
    (tmp_path / "link").symlink_to("target")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name in ("link", "fifo", "dir"):
        for write in (files.replace, files.append):
            with pytest.raises(files.Refused, match=f"{name} is"):
                write(tmp_path / name, "x")
    with pytest.raises(files.Refused):
        files.folder(tmp_path / "link")
    assert (tmp_path / "target").read_text() == "keep"
    files.replace(tmp_path / "new", "a")
    files.append(tmp_path / "new", "b")
    assert (tmp_path / "new").read_text() == "ab" and sorted(os.listdir(tmp_path)) == \
        ["dir", "fifo", "link", "new", "target"]


def test_the_check_matches_a_linked_acfs_units_where_the_build_does(tmp_path, evo_cache):
    """An ACF that is a link (to a shared store of ACFs) applies to the files beside the link, for a build,
    --explain and --retune alike; --acf-check looked beside the link's target and warned that the unit
    "matches no file ...: a build applies nothing of it"."""
    store, project = tmp_path / "acfstore", tmp_path / "project"
    store.mkdir()
    project.mkdir()
    (store / "real.acf").write_text('acf 1\nunit "spill.cu" {\n    target sm_90 {\n        ptxas.dlcm = cg\n'
                                    '    }\n}\n')
    shutil.copy(DATA / "cuda" / "spill.cu", project / "spill.cu")
    (project / "nvcc-evo.acf").symlink_to("../acfstore/real.acf")
    checked = subprocess.run([str(EVO), "--acf-check", "nvcc-evo.acf"], cwd=project, env=evo_env(evo_cache),
                             capture_output=True, text=True)
    assert checked.returncode == 0 and "warning" not in checked.stderr, checked.stderr
    explained = subprocess.run([str(EVO), "--explain", "-arch=sm_90", "-c", "spill.cu"], cwd=project,
                               env=evo_env(evo_cache), capture_output=True, text=True)
    assert "-dlcm=cg" in explained.stdout + explained.stderr, explained.stdout + explained.stderr
