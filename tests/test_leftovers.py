"""Nothing stays behind an interrupted nvcc-evo: no compiler process after a
timeout, a Ctrl-C or a `kill -9` of a retune, and the folders and temporary
files a killed run left are removed by the next one. Real nvcc, real
processes, a kernel that takes cicc several seconds."""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import EVO, EVO_COMMAND, ROOT, evo_env, interruptible, run_evo
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
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
    # (an older nvcc-evo's folder with no lock file, an hour old; temporaries whose lock no one holds)
    planted = [project / "tmp" / f"nvcc-evo-steps-{gone}-x1", project / f".nvcc-evo.acf.{gone}.k2j4.tmp",
               project / f".nvcc-evo-candidate-{gone}.acf", project / f".nvcc-evo-candidate-{gone}-ab12.acf"]
    held = [Path(leftovers.private_folder("cand", str(project / "tmp"))), project / f".nvcc-evo.acf.{alive}.k2j5.tmp"]
    kept = [project / "tmp" / f"nvcc-evo-cand-{gone}", project / f".other.acf.{gone}.k2j6.tmp"]
    for path in planted + kept + held[1:]:
        path.mkdir() if path.parent.name == "tmp" else path.write_text("x")
    os.utime(planted[0], (time.time() - 7200,) * 2)
    lock = os.open(held[1], os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)                   # a live writer's temporary: its lock is held
    dry = run_evo("--retune", "--backend", "static", "--dry-run", cwd=project, env=env)
    assert dry.returncode == 0 and "that killed runs left" not in dry.stderr, dry.stderr
    assert all(path.exists() for path in left + planted)     # a dry run writes and removes nothing
    (project / "nvcc-evo.acf").write_text("acf 1\n")         # (nothing to search: the retune's start alone)
    swept = run_evo("--retune", "--backend", "static", cwd=project, env=env)
    os.close(lock)
    leftovers.remove_private(str(held[0]))
    kept += held[1:]
    assert swept.returncode == 0, swept.stderr
    assert "that killed runs left" in swept.stderr
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
    """The guard shell sees the end of the death pipe and kills its group:
    here the parent is a Python that runs `sleep` through run_in_group."""
    code = f"from nvcc_evo.system.leftovers import run_in_group; run_in_group(['sleep', '60'], cwd={str(tmp_path)!r})"
    _assert_killing_the_parent_ends(code, "sleep 60", tmp_path)


def test_a_group_starts_though_a_fork_handler_would_hang_a_forked_child(tmp_path):
    """No code runs in the forked child before the exec: a fork handler that never returns in a
    child cannot hang a compile (several searches at once on a GPU machine once hung so, between
    the fork and the exec). The Python fork handler stands for it: it runs only where Python code
    runs after the fork
    (a preexec_fn, as the guard had before, hung here for the handler's 60 s)."""
    code = ("import os, time\n"
            "os.register_at_fork(after_in_child=lambda: time.sleep(60))\n"
            "from nvcc_evo.system.leftovers import run_in_group\n"
            "done = run_in_group(['sh', '-c', 'cat; echo out; echo err >&2; exit 7'], timeout=30)\n"
            "print(done.returncode, repr(done.stdout), repr(done.stderr))\n")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.stdout == "7 'out\\n' 'err\\n'\n", run        # the command's stdin empty, its outputs and status
    assert time.monotonic() - started < 20


def test_the_group_dies_with_a_parent_killed_while_another_thread_started_it(tmp_path):
    """A group started by a thread other than the main one (a search's compile) dies with the
    process too."""
    code = ("import threading, time\n"
            "from nvcc_evo.system.leftovers import run_in_group\n"
            f"threading.Thread(target=run_in_group, args=(['sleep', '61'],), kwargs={{'cwd': {str(tmp_path)!r}}},"
            " daemon=True).start()\n"
            "time.sleep(120)\n")
    _assert_killing_the_parent_ends(code, "sleep 61", tmp_path)


def _assert_killing_the_parent_ends(code: str, command: str, tmp_path) -> None:
    """A Python running `code` starts `command` (through run_in_group); kill -9 of that Python
    ends the command within 3 s."""
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path)
    assert wait_until(lambda: any(c.startswith(command) for c in _children_commands(parent.pid)), 30)
    sleeper = next(pid for pid, c in _all_commands().items() if c.startswith(command) and _ancestor(pid, parent.pid))
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


# ---------------------------------------------------------------- leftovers by lock (issue 25, case 3)
HOLDER = """
import os, sys, time
from nvcc_evo.system.leftovers import private_folder
alive_outside = {int(p) for p in open(sys.argv[2]).read().split()}
while True:                      # a child whose pid no process has outside this namespace
    child = os.fork()
    if child == 0:
        if os.getpid() in alive_outside or os.getpid() < 100:
            os._exit(1)
        print(private_folder("cand", sys.argv[1]), flush=True)
        time.sleep(600)
        os._exit(0)
    if os.waitpid(child, 0)[1] == 0:
        break
"""


def _sweep_by_retune(project: Path, temporary: Path, cache: Path) -> subprocess.CompletedProcess:
    """What a user's `--retune` sweeps from the shared temporary folder (of an ACF with nothing to search: the
    retune's start alone; a dry run removes nothing)."""
    (project / "nvcc-evo.acf").write_text("acf 1\n")
    return subprocess.run([str(EVO), "--retune"], cwd=project, env=evo_env(cache, TMPDIR=temporary),
                          capture_output=True, text=True, timeout=300)


def test_a_run_in_another_pid_namespace_keeps_its_folders(project, tmp_path, evo_cache):
    """A retune removed a running retune's candidate folder because its pid
    is not alive in this pid namespace (its next compile failed: cannot open
    module id file .../nvcc-evo-cand-PID-.../k.module_id)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a process in another pid namespace")
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    holder, folder = _holder_of_a_pid_unused_here(shared, tmp_path)
    try:
        swept = _sweep_by_retune(project, shared, evo_cache)
        assert swept.returncode == 0, swept.stderr
        assert folder.is_dir() and "removed" not in swept.stderr
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    swept = _sweep_by_retune(project, shared, evo_cache)          # its holder gone: its lock is free
    assert not folder.exists() and f"removed 1 folder(s) and file(s) that killed runs left: {folder}" in swept.stderr


def _holder_of_a_pid_unused_here(shared: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A process in a pid namespace of its own holding a candidate folder, whose pid no process has here. Where
    pids wrap (pid_max 32768 on a busy machine), a process here may take that pid between the namespace's look
    and ours: another holder is started then (the case cannot be shown while one runs under that pid)."""
    for _ in range(5):
        outside = tmp_path / "outside-pids"
        outside.write_text(" ".join(p for p in os.listdir("/proc") if p.isdigit()))
        holder = subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", HOLDER, str(shared),
                                   str(outside)], stdout=subprocess.PIPE, text=True, start_new_session=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        folder = Path(holder.stdout.readline().strip())
        assert folder.parent == shared and folder.is_dir()
        if leftovers_is_gone(int(folder.name.split("-")[3])):
            return holder, folder
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        shutil.rmtree(folder)
    pytest.skip("each namespace's pid was taken by a process here meanwhile: the case cannot be shown")


def leftovers_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def test_another_users_folder_is_never_swept(project, tmp_path, evo_cache):
    """A folder of uid 12345 whose run is over (its lock free) is theirs to remove."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv for a second uid")
    shared = Path(tempfile.mkdtemp(prefix="nvcc-evo-sweep-test-"))
    try:
        shared.chmod(0o1777)
        made = subprocess.run(["setpriv", "--reuid=12345", "--regid=12345", "--clear-groups", sys.executable, "-c",
                               "import sys; from nvcc_evo.system.leftovers import private_folder; "
                               "print(private_folder('cand', sys.argv[1]))", str(shared)],
                              capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
        assert made.returncode == 0, made.stderr
        theirs = Path(made.stdout.strip())
        assert theirs.stat().st_uid == 12345
        os.utime(theirs, (time.time() - 7200,) * 2)
        assert _sweep_by_retune(project, shared, evo_cache).returncode == 0 and theirs.is_dir()
    finally:
        shutil.rmtree(shared)


def test_the_sweep_takes_only_free_locks(tmp_path):
    """Held: kept; free (its process killed): removed; no lock file: kept
    while new, removed once an hour old (an older nvcc-evo's); files, links
    and other names: kept."""
    held = leftovers.private_folder("steps", str(tmp_path))
    freed = subprocess.run([sys.executable, "-c", "import sys; from nvcc_evo.system.leftovers import "
                            "private_folder; print(private_folder('cand', sys.argv[1]))", str(tmp_path)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    free = freed.stdout.strip()
    new = f"nvcc-evo-steps-{dead_pid()}-new"
    (tmp_path / new).mkdir()
    old = tmp_path / "nvcc-evo-cand-1-old"
    old.mkdir()
    os.utime(old, (time.time() - 7200,) * 2)
    (tmp_path / "nvcc-evo-cand-2-file").write_text("a file, not a folder of ours")
    (tmp_path / "nvcc-evo-cand-3-link").symlink_to(free)
    assert sorted(leftovers.sweep_temporary(str(tmp_path))) == sorted([free, str(old)])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [Path(held).name, new, "nvcc-evo-cand-2-file", "nvcc-evo-cand-3-link"])
    leftovers.remove_private(held)
    assert not Path(held).exists()
