"""Nothing stays behind an interrupted nvcc-evo: no compiler process after a
timeout, a Ctrl-C or a `kill -9` of a retune, and the folders and temporary
files a killed run left are removed by the next one. Real nvcc, real
processes, a kernel that takes cicc several seconds."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import EVO_COMMAND, evo_env, interruptible, run_evo
from nvcc_evo.driver.candidate import CompileJob, compile_candidate
from nvcc_evo.driver.common import find_real_nvcc
from nvcc_evo.system import leftovers

ACF = """acf 1
unit "slow.cu" {
    search {
        ptxas.opt_level in {1, 2, 3}
    }
}
"""


def slow_kernel(statements: int = 3000) -> str:
    """Straight-line code that keeps cicc and ptxas busy for seconds."""
    body = [f"    a{i % 4} = a{(i + 1) % 4} * y[{i * 37 % 1024}] + __sinf(a{(i + 2) % 4} + {i}.0f);"
            for i in range(statements)]
    return "\n".join(["__global__ void slow(float *x, const float *y) {",
                      "    float a0 = x[threadIdx.x], a1 = a0 + 1, a2 = a0 * 2, a3 = a0 - 3;", *body,
                      "    x[threadIdx.x] = a0 + a1 + a2 + a3;", "}", ""])


def processes_naming(folder: Path) -> dict[int, str]:
    """Live (not zombie) processes whose command line names `folder`:
    every compiler step of a candidate does (its keep folder is there)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(folder) in command and state != "Z":
            found[int(entry.name)] = command[:120]
    return found


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def dead_pid() -> int:
    finished = subprocess.Popen(["true"])
    finished.wait()
    return finished.pid


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "slow.cu").write_text(slow_kernel())
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def start_retune(project: Path, env: dict) -> subprocess.Popen:
    """A static retune in a session of its own (as a terminal would run it),
    returned once it is compiling: its candidate folder exists and a
    compiler step runs."""
    retune = subprocess.Popen([*EVO_COMMAND, "--retune", "--backend", "static", "--evaluations", "3", "--jobs", "1"],
                              cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True, preexec_fn=interruptible)
    compiling = lambda: list((project / "tmp").glob("nvcc-evo-cand-*")) and any(
        ("cicc" in c or "ptxas" in c) for c in processes_naming(project / "tmp").values())
    assert wait_until(compiling, 120), retune.stderr.read() if retune.poll() is not None else "not compiling"
    return retune


def test_kill_minus_nine_leaves_no_compiler_and_the_next_retune_sweeps(project, evo_cache):
    env = evo_env(evo_cache, TMPDIR=project / "tmp")
    retune = start_retune(project, env)
    left = list((project / "tmp").glob("nvcc-evo-cand-*"))
    retune.kill()
    retune.wait()
    assert wait_until(lambda: not processes_naming(project / "tmp"), 3), processes_naming(project / "tmp")
    assert left and all(folder.is_dir() and folder.name.startswith(f"nvcc-evo-cand-{retune.pid}-")
                        for folder in left)                          # what kill -9 leaves ...
    gone, alive = dead_pid(), os.getpid()
    planted = [project / "tmp" / f"nvcc-evo-steps-{gone}-x1", project / f".nvcc-evo.acf.{gone}.k2j4.tmp",
               project / f".nvcc-evo-candidate-{gone}.acf"]
    kept = [project / "tmp" / f"nvcc-evo-cand-{alive}-x3", project / f".nvcc-evo.acf.{alive}.k2j5.tmp",
            project / "tmp" / f"nvcc-evo-cand-{gone}", project / f".other.acf.{gone}.k2j6.tmp"]
    for path in planted + kept:
        path.mkdir() if path.parent.name == "tmp" else path.write_text("x")
    dry = run_evo("--retune", "--backend", "static", "--dry-run", cwd=project, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "that killed runs left" in dry.stderr
    assert not any(path.exists() for path in left + planted)          # ... the next retune's start removes
    assert all(path.exists() for path in kept)                        # a live process's, and names not ours


def test_ctrl_c_kills_the_compiles_and_removes_their_folders(project, evo_cache):
    env = evo_env(evo_cache, TMPDIR=project / "tmp")
    retune = start_retune(project, env)
    os.killpg(retune.pid, signal.SIGINT)                # the terminal's Ctrl-C: the retune's group only
    assert retune.wait(timeout=30) == 130
    assert wait_until(lambda: not processes_naming(project / "tmp"), 3), processes_naming(project / "tmp")
    assert list((project / "tmp").glob("nvcc-evo-cand-*")) == []


def test_a_timeout_kills_every_step_of_the_compile(project):
    job = CompileJob(find_real_nvcc(), ("-c", "slow.cu"), str(project), "slow.cu", "sm_90", timeout=2.0)
    os.environ["TMPDIR"], before = str(project / "tmp"), os.environ.get("TMPDIR")
    started = time.monotonic()
    try:
        result = compile_candidate(job)
    finally:
        os.environ.pop("TMPDIR") if before is None else os.environ.update(TMPDIR=before)
    assert result.status == "timeout" and time.monotonic() - started < 5     # not when cicc is done
    assert wait_until(lambda: not processes_naming(project / "tmp"), 1), processes_naming(project / "tmp")
    assert list((project / "tmp").iterdir()) == []


def test_the_group_dies_with_a_killed_parent(tmp_path):
    """The guard shell gets the parent-death signal and kills its group:
    here the parent is a Python that runs `sleep` through run_in_group."""
    code = f"from nvcc_evo.system.leftovers import run_in_group; run_in_group(['sleep', '60'], cwd={str(tmp_path)!r})"
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path)
    assert wait_until(lambda: any(c.startswith("sleep 60") for c in _children_commands(parent.pid)), 30)
    sleeper = next(pid for pid, c in _all_commands().items() if c.startswith("sleep 60") and _ancestor(pid, parent.pid))
    parent.kill()
    parent.wait()
    assert wait_until(lambda: not Path(f"/proc/{sleeper}").exists() or _state(sleeper) == "Z", 3)


def _all_commands() -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                pass
    return found


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _ancestor(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = _parent(pid)
        if pid == ancestor:
            return True
    return False


def _children_commands(parent: int) -> list[str]:
    return [c for pid, c in _all_commands().items() if _ancestor(pid, parent)]


def test_the_sweep_leaves_what_it_cannot_know_is_gone(tmp_path):
    gone = dead_pid()
    (tmp_path / f"nvcc-evo-steps-{gone}-a").mkdir()
    (tmp_path / f"nvcc-evo-steps-{os.getpid()}-b").mkdir()
    (tmp_path / "nvcc-evo-steps-abc-c").mkdir()
    (tmp_path / f"nvcc-evo-cand-{gone}-file").write_text("a file, not a folder of ours")
    assert leftovers.sweep_temporary(str(tmp_path)) == [str(tmp_path / f"nvcc-evo-steps-{gone}-a")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"nvcc-evo-steps-{os.getpid()}-b", "nvcc-evo-steps-abc-c", f"nvcc-evo-cand-{gone}-file"])


def test_a_split_build_killed_with_minus_nine_is_swept_by_the_next(project, evo_cache):
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "*.cu" {\n    target sm_80 { ptxas.maxrregcount = 32 }\n'
                                          '    target sm_90 { ptxas.maxrregcount = 40 }\n}\n')
    (project / "small.cu").write_text("__global__ void small(float *x) { x[threadIdx.x] = 1.0f; }\n")
    env = evo_env(evo_cache, TMPDIR=project / "tmp")
    archs = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
    build = subprocess.Popen([*EVO_COMMAND, *archs, "-c", "slow.cu", "-o", "slow.o"], cwd=project, env=env,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    folders = lambda: list((project / "tmp").glob(f"nvcc-evo-steps-{build.pid}-*"))
    assert wait_until(lambda: folders() and any("cicc" in c for c in processes_naming(project / "tmp").values()), 60)
    left = folders()
    os.killpg(build.pid, signal.SIGKILL)                # make's group, killed: the EXIT trap never runs
    build.wait()
    assert all(folder.is_dir() for folder in left)
    again = run_evo(*archs, "-c", "small.cu", "-o", "small.o", cwd=project, env=env)
    assert again.returncode == 0, again.stderr
    assert not any(folder.exists() for folder in left)
