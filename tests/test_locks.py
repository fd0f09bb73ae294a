"""Locks only the user can take: nvcc-evo locks no file others may open (a
lock needs no more than a read-only descriptor), its lock files are 0600 in
a 0700 folder, and a wait for one says who holds it and gives up with exit 3.
Another user is a real second uid (setpriv); the installed `nvcc-evo`."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import DATA, EVO_COMMAND, evo_env

NOBODY = 65534
UNFORMATTED = 'acf 1\nunit "regs.cu" {   pin nvcc.ftz = false\n}\n'
# Another user's process: a lock on every file and folder of the project it may open, held.
HOG = r"""
import fcntl, os, sys, time
held = []
for root, folders, files in os.walk(sys.argv[1]):
    for name in folders + files:
        try:
            fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NONBLOCK)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue
        held.append(os.path.relpath(os.path.join(root, name), sys.argv[1]))
print(" ".join(sorted(held)), flush=True)
time.sleep(120)
"""


def evo(*args: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The installed `nvcc-evo`, as a user runs it; a wait that never ends fails the test."""
    return subprocess.run([*EVO_COMMAND, *args], cwd=cwd, env=env, capture_output=True, text=True)


def another_user_may_run() -> str | None:
    if os.geteuid() != 0:
        return "running as another uid takes root (setpriv --reuid): this test runs as a user"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    return None


@pytest.fixture
def shared(tmp_path) -> Path:
    """A project other users may read, as most home folders are (0755, files 0644), outside the test's
    own temporary folder (which only its user may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="nvcc-evo-shared-", dir="/tmp"))
    os.chmod(folder, 0o755)
    shutil.copy(DATA / "cuda" / "regs.cu", folder / "regs.cu")
    (folder / "nvcc-evo.acf").write_text(UNFORMATTED)
    os.chmod(folder / "nvcc-evo.acf", 0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def hog(project: Path) -> tuple[subprocess.Popen, list[str]]:
    """Another user (nobody) holding a lock on everything of `project` it may open."""
    process = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                sys.executable, "-c", HOG, str(project)], stdout=subprocess.PIPE, text=True)
    return process, (process.stdout.readline() if process.stdout else "").split()


def private_locks(project: Path) -> dict[str, int]:
    locks = project / ".nvcc-evo" / "locks"
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in [locks, *locks.iterdir()]}


def test_another_user_holding_every_file_it_may_open_blocks_no_acf_fmt_nor_retune(shared, evo_cache):
    reason = another_user_may_run()
    if reason:
        pytest.skip(reason)
    env = evo_env(evo_cache, NVCC_EVO_LOCK_WAIT="20")
    retune = ["--retune", "--backend", "static", "--target", "sm_90", "--evaluations", "1", "--population", "1"]
    other, held = hog(shared)
    try:
        assert "nvcc-evo.acf" in held                   # readable: it may be locked, so nvcc-evo locks it not
        formatted = evo("--acf-fmt", "nvcc-evo.acf", cwd=shared, env=env)
        assert formatted.returncode == 0, formatted.stderr
        tuned = evo(*retune, "regs.cu", cwd=shared, env=env)
        assert tuned.returncode == 0 and "waiting" not in tuned.stderr, tuned.stderr
    finally:
        other.kill()
        other.wait()
    assert private_locks(shared) == {"locks": 0o700, "nvcc-evo.acf.lock": 0o600, "retune-nvcc-evo.acf.lock": 0o600,
                                     "results.jsonl.lock": 0o600, "kernels.jsonl.lock": 0o600}
    other, held = hog(shared)                          # again, now that every lock file is there
    try:
        assert ".nvcc-evo/results.jsonl" in held and not [name for name in held if name.startswith(".nvcc-evo/locks")]
        again = evo(*retune, "--all", cwd=shared, env=env)
        assert again.returncode == 0 and "waiting" not in again.stderr, again.stderr
    finally:
        other.kill()
        other.wait()


# This user's other process holding the ACF's write lock (as another nvcc-evo does), then, with `fork`,
# leaving it to a child of its own and ending: the pid /proc/locks names has exited.
HOLDER = r"""
import os, sys, time
from pathlib import Path
from nvcc_evo.system.locks import Wait, lock_for, locked
acf = Path(sys.argv[1])
with locked(acf, lock_for(acf), Wait(), "held"):
    print(os.getpid(), flush=True)
    if sys.argv[2] == "fork":
        child = os.fork()
        if child:
            print(child, flush=True)
            os._exit(0)
    time.sleep(120)
"""


@pytest.mark.parametrize("holder", ["itself", "fork"])
def test_a_wait_for_a_lock_says_who_holds_it_and_gives_up_with_exit_3(tmp_path, evo_cache, holder):
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text(UNFORMATTED)
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(acf), holder], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        pids = [process.stdout.readline().strip() for _ in range(1 if holder == "itself" else 2)]
        if holder == "fork":
            process.wait()                              # the taker has exited; its child holds the lock
        result = evo("--acf-fmt", str(acf), env=evo_env(evo_cache, NVCC_EVO_LOCK_WAIT="1"))
    finally:
        process.kill()
        if holder == "fork":
            os.kill(int(pids[1]), 9)
        process.wait()
    assert result.returncode == 3, result.stderr
    holding = pids[-1]
    assert (f"nvcc-evo: another nvcc-evo is writing {acf} (pid {holding}, {sys.executable} -c " in result.stderr
            and "waiting for it to finish (at most 1 s: lock.wait or NVCC_EVO_LOCK_WAIT)" in result.stderr)
    assert f"still after 1 s; gave up waiting (the lock {tmp_path}/.nvcc-evo/locks/nvcc-evo.acf.lock" in result.stderr
    assert holder == "itself" or f"pid {pids[0]}," not in result.stderr      # never a pid that has exited
    assert acf.read_text() == UNFORMATTED and "Traceback" not in result.stderr


def test_a_lock_let_go_before_its_holder_is_looked_up_is_taken_without_a_word(tmp_path):
    """A holder that lets the lock go between the failed try and the look at /proc/locks (another
    writer of a results store appending one line) leaves no holder to name: the lock is taken, and
    nothing is said (a static retune of cuda-samples' simpleTemplates said 'a process nvcc-evo
    cannot see (another machine, or a pid namespace); waiting for it' with no other process)."""
    from nvcc_evo.system import locks
    acf = tmp_path / "nvcc-evo.acf"
    acf.write_text(UNFORMATTED)
    said: list[str] = []
    fd = locks._open_lock(locks.lock_for(acf), os.stat(acf))
    try:
        locks._wait_for(fd, locks.lock_for(acf), locks.Wait(5, said.append), "held")
        assert said == []
        busy = subprocess.run([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], "
                               "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
                               str(locks.lock_for(acf))], capture_output=True, text=True)
        assert "BlockingIOError" in busy.stderr            # it was taken
    finally:
        os.close(fd)


def test_a_process_never_waits_on_itself_and_still_waits_for_another(tmp_path):
    """Two threads append to one store while a third starts children (each holds a copy of every
    descriptor from its fork to its exec): no append waits, none names a holder. Before, about one
    append in eight waited on its own process (the lock outlived its `with` in a child not yet at its
    exec, or another thread held it through a descriptor of its own) and said "another nvcc-evo is
    appending" with this pid or "a process nvcc-evo cannot see". A real second process holding the
    lock is still waited for, and named."""
    import threading
    import time
    from nvcc_evo.system.jsonlines import JsonLines
    from nvcc_evo.system.locks import Busy, Wait, lock_for
    said: list[str] = []
    store = JsonLines(tmp_path / ".nvcc-evo" / "results.jsonl", Wait(5, said.append))
    store.append("{}")
    appending = True

    def start_children() -> None:
        while appending:
            subprocess.run(["/bin/true"])

    def append(count: int) -> None:
        for _ in range(count):
            store.append("{}")
    starter = threading.Thread(target=start_children)
    starter.start()
    try:
        appenders = [threading.Thread(target=append, args=(200,)) for _ in range(2)]
        for thread in appenders:
            thread.start()
        for thread in appenders:
            thread.join()
    finally:
        appending = False
        starter.join()
    assert said == [] and len(store.read(str)) == 401
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store.path), "itself"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None
        pid = holder.stdout.readline().strip()
        store.wait = Wait(1, said.append)
        started = time.monotonic()
        with pytest.raises(Busy):
            store.append("{}")
    finally:
        holder.kill()
        holder.wait()
    assert time.monotonic() - started >= 1 and len(said) == 1
    assert said[0].startswith(f"another nvcc-evo is appending to {store.path} (pid {pid}, {sys.executable} -c ")
    assert lock_for(store.path) == tmp_path / ".nvcc-evo" / "locks" / "results.jsonl.lock"
    store.append("{}")                  # the holder gone, the lock is free again
    assert len(store.read(str)) == 402

