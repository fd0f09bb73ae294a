"""`nvcc-evo --hot -- COMMAND` as the command runs: its output shown as it
comes (a real program that writes, then waits to be let go), a command that
cannot be started said once, and the injection library's files: one a
process, named apart across pid namespaces and forks, all of them read. No
GPU here: the processes add their kernels to the real injection library
themselves, as the driver's CUPTI records would; the GPU tests run a real
CUDA program that forks."""
from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DATA, EVO_COMMAND, evo_env, interruptible, run_evo

ROOT = Path(__file__).resolve().parents[1]

# Writes a line on each stream, then waits (at most 30 s) for the file `go` before it writes again and ends.
SLOW = """\
import os, sys, time
print("first out", flush=True)
print("first err", file=sys.stderr, flush=True)
for _ in range(3000):
    if os.path.exists("go"):
        break
    time.sleep(0.01)
else:
    sys.exit(9)
print("second out", flush=True)
print("second err", file=sys.stderr, flush=True)
KERNEL
raise SystemExit(3)
"""


def _line_within(stream, seconds: float) -> str:
    """The next line of a child's unbuffered pipe (bufsize=0: a line read takes no more of the pipe, so
    select sees what is left), or "" when none comes within `seconds`."""
    ready, _, _ = select.select([stream], [], [], seconds)
    return stream.readline().decode() if ready else ""


def _let_go(child: subprocess.Popen, folder: Path) -> tuple[str, str, str, str]:
    """The first line of each of `child`'s streams, read before it is let go (`go`), then the rest."""
    first_out = _line_within(child.stdout, 60)
    first_err = ""
    while first_out and not first_err.startswith("first err"):    # (nvcc-evo's own lines come first)
        first_err = _line_within(child.stderr, 60) or "(nothing)"
    (folder / "go").touch()
    rest_out, rest_err = child.communicate(timeout=120)
    return first_out, first_err, rest_out.decode(), rest_err.decode()


def test_a_shown_command_s_output_comes_as_it_is_written_and_its_stderr_tail_is_kept(tmp_path):
    """run_in_group_shown with a real program that writes a line on each stream and waits: both lines reach
    the caller's stdout and stderr while it still runs; its status and its stderr come back at its end."""
    (tmp_path / "slow.py").write_text(SLOW.replace("KERNEL", ""))
    code = ("import json, sys\nfrom nvcc_evo.system.leftovers import run_in_group_shown\n"
            f"done = run_in_group_shown([sys.executable, 'slow.py'], cwd={str(tmp_path)!r})\n"
            "print(json.dumps(done))\n")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, bufsize=0, env={**os.environ, "PYTHONPATH": str(ROOT)})
    first_out, first_err, rest_out, rest_err = _let_go(child, tmp_path)
    assert (first_out, first_err) == ("first out\n", "first err\n")     # while it waits for `go`
    assert rest_out.splitlines() == ["second out", json.dumps([3, "", "first err\nsecond err\n"])]
    assert rest_err == "second err\n"


def test_a_shown_command_keeps_the_tail_of_a_long_stderr_and_does_not_wait_for_what_it_left_running(
        tmp_path, capfd):
    from nvcc_evo.system.leftovers import SHOWN_TAIL, run_in_group_shown
    lines = "".join(f"line {n}\n" for n in range(20000))          # (about 200 KB)
    (tmp_path / "lines.txt").write_text(lines)
    done = run_in_group_shown(["sh", "-c", "cat lines.txt >&2; exit 5"], cwd=tmp_path)
    assert done.returncode == 5 and done.stderr == lines[-SHOWN_TAIL:]
    assert capfd.readouterr().err == lines                            # all of it shown
    # a process it leaves behind holds its stderr open: read a moment more, not until that one ends
    started = time.monotonic()
    left = run_in_group_shown(["sh", "-c", "sleep 8 >&2 & echo gone >&2"], cwd=tmp_path)
    assert (left.returncode, left.stderr) == (0, "gone\n") and time.monotonic() - started < 6


CUDA_PROGRAM_KERNEL = """\
import ctypes
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
lib.nvcc_evo_add(b"_Z4tilePf", 8, 1, 1, 256, 1, 1, 40, 0, ctypes.c_ulonglong(2000000))
lib.nvcc_evo_write()
"""


def test_hot_shows_the_program_s_output_while_it_runs_and_its_stdout_before_the_table(tmp_path, evo_cache):
    """`nvcc-evo --hot -- python3 slow.py` (the GPU check stood aside: no GPU here): the program's first
    lines arrive while it waits, its stdout on stdout before the table, its stderr on stderr (before: both on
    stderr, and only once it had ended); its failure (status 3) quotes the tail of its stderr."""
    (tmp_path / "slow.py").write_text(SLOW.replace("KERNEL", CUDA_PROGRAM_KERNEL))
    code = ("import sys\nfrom nvcc_evo.measure.profile import clock\nfrom nvcc_evo.cli import main\n"
            "clock.gpu_missing = lambda: ''\n"
            "sys.exit(main(['--hot', '--', sys.executable, 'slow.py']))\n")
    env = evo_env(evo_cache, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, bufsize=0, env=env)
    first_out, first_err, rest_out, rest_err = _let_go(child, tmp_path)
    assert (first_out, first_err) == ("first out\n", "first err\n"), (first_out, first_err, rest_err)
    assert child.returncode == 1 and rest_out == "second out\n"
    assert rest_err.startswith("second err\nnvcc-evo: error: ") and "exited with status 3: no profile saved" \
        in rest_err and rest_err.endswith("    | first err\n    | second err\n"), rest_err
    # the same program ending well: its stdout, then the table
    (tmp_path / "slow.py").write_text(SLOW.replace("KERNEL", CUDA_PROGRAM_KERNEL).replace("(3)", "(0)"))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("first out\nsecond out\nkernels by GPU time: the run of "), done.stdout
    assert "first err\nsecond err\n" in done.stderr and "first out" not in done.stderr


RUNS_ON = """\
import ctypes, os, time
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
lib.nvcc_evo_arm()                      # what InitializeInjection does once CUPTI records (no GPU here)
assert lib.nvcc_evo_snapshots() == 0
for _ in range(4):
    lib.nvcc_evo_add(b"_Z5trainPf", 96, 1, 1, 256, 1, 1, 64, 0, ctypes.c_ulonglong(3000000))
print("ready", flush=True)
time.sleep(120)                         # (a long application: the user presses Ctrl-C)
"""


def test_ctrl_c_of_hot_prints_and_saves_what_the_command_recorded_until_then(tmp_path, evo_cache):
    """Ctrl-C while the command runs (SIGINT to nvcc-evo, as a terminal sends it: the command runs in a
    session of its own): its processes are killed, the table of what they recorded until their last
    snapshot is printed and the profile saved, nothing written, exit 130 saying so (before: nothing printed
    or saved, every kernel of a long run lost)."""
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\n\nunit "**/*.cu" {\n}\n')
    (tmp_path / "train.py").write_text(RUNS_ON)
    code = ("import sys\nfrom nvcc_evo.measure.profile import clock\nfrom nvcc_evo.cli import main\n"
            "clock.gpu_missing = lambda: ''\n"
            "sys.exit(main(['--hot', '--write', '--', sys.executable, 'train.py']))\n")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, bufsize=0, env=evo_env(evo_cache, PYTHONPATH=str(ROOT)),
                             preexec_fn=interruptible)    # (a suite run in the background ignores SIGINT)
    assert _line_within(child.stdout, 120) == "ready\n"
    time.sleep(2.5)                     # (a snapshot a second)
    child.send_signal(signal.SIGINT)
    out, err = (stream.decode() for stream in child.communicate(timeout=60))
    assert child.returncode == 130, err
    assert out.startswith("kernels by GPU time: the run of ") and "stopped by Ctrl-C" in out, out
    assert "4     3000.00  train(float*)" in out and "12.000 ms on the GPU" in out, out
    saved = tmp_path / ".nvcc-evo" / "hot" / "profile.json"
    assert err.rstrip().endswith(f"saved as {saved}, nothing written; nvcc-evo --hot --from {saved} --write "
                                 "writes from it") and "nvcc-evo: interrupted: the table above holds" in err, err
    assert json.loads(saved.read_text())["kernels"][0]["calls"] == 4
    assert (tmp_path / "nvcc-evo.acf").read_text() == 'acf 1\n\nunit "**/*.cu" {\n}\n'   # nothing written
    assert subprocess.run(["pgrep", "-f", "train.py"], capture_output=True).returncode == 1    # killed


def test_a_command_that_cannot_be_started_is_said_once_before_it_runs(tmp_path, monkeypatch, evo_cache, capfd):
    """One line, exit 2 (usage: found before anything runs; the GPU check stood aside, as on a machine with
    one). Before: the shell's `not found` shown, then quoted again in the failure's message, exit 1."""
    from nvcc_evo import cli
    from nvcc_evo.measure.profile import clock
    monkeypatch.setattr(clock, "gpu_missing", lambda: "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "folder").mkdir()
    for name, interpreter in (("nowhere.sh", "/no/such/interpreter-nvcc-evo"), ("data.sh", str(tmp_path / "script.sh"))):
        (tmp_path / name).write_text(f"#!{interpreter} -e\necho hi\n")
        (tmp_path / name).chmod(0o755)
    for command, said in ((["no-such-program-nvcc-evo", "1"], "no-such-program-nvcc-evo: command not found (no "
                                                                "such program on PATH)"),
                          (["./missing", "1"], "./missing: no such file"),
                          (["./folder"], "./folder: is a folder, not a program"),
                          (["./script.sh"], "./script.sh: not executable (chmod +x ./script.sh, or name its "
                                            "interpreter first)"),
                          (["./nowhere.sh"], "./nowhere.sh: its interpreter /no/such/interpreter-nvcc-evo (its #! "
                                             "line) does not exist"),
                          (["./data.sh"], f"./data.sh: its interpreter {tmp_path / 'script.sh'} (its #! line) is not "
                                          "executable")):
        assert cli.main(["--hot", "--", *command]) == 2
        assert capfd.readouterr() == ("", f"nvcc-evo: error: --hot -- {said}\n")
    assert not (tmp_path / ".nvcc-evo").exists()


def test_a_command_the_shell_cannot_start_after_the_check_is_said_once(tmp_path, monkeypatch, evo_cache, capfd):
    """A program the up-front check lets by that the kernel refuses (an ELF header of another machine: Exec
    format error): the guard shell's line is held back and said once, in the error, exit 2. Before: the
    shell's line shown, then quoted again in the failure's message, exit 1."""
    from nvcc_evo import cli
    from nvcc_evo.measure.profile import clock
    monkeypatch.setattr(clock, "gpu_missing", lambda: "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "foreign").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00\x15\x00" + bytes(44))
    (tmp_path / "foreign").chmod(0o755)
    assert cli.main(["--hot", "--", "./foreign", "1"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err.endswith("\nnvcc-evo: error: --hot -- ./foreign: cannot be started: Exec format "
                                      "error\n") and err.count("Exec format error") == 1, err
    assert "nvcc-evo-group" not in err and not (tmp_path / ".nvcc-evo").exists()


def test_the_guard_s_words_are_held_back_only_where_the_command_did_not_start(tmp_path, capfd):
    from nvcc_evo.system.leftovers import not_started, run_in_group_shown
    (tmp_path / "foreign").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00\x15\x00" + bytes(44))
    (tmp_path / "foreign").chmod(0o755)
    refused = run_in_group_shown(["./foreign"], cwd=tmp_path)
    assert refused.returncode == 126 and not_started(refused) and "Exec format error" in refused.stderr
    assert capfd.readouterr().err == ""                                   # held back: its caller says it
    # a program that says the guard's words itself and ends well, and one that exits 127 itself: shown
    mine = run_in_group_shown(["sh", "-c", "echo 'nvcc-evo-group: mine' >&2"], cwd=tmp_path)
    assert mine.returncode == 0 and not not_started(mine) and capfd.readouterr().err == "nvcc-evo-group: mine\n"
    own = run_in_group_shown(["sh", "-c", "echo oops >&2; exit 127"], cwd=tmp_path)
    assert own.returncode == 127 and not not_started(own) and capfd.readouterr().err == "oops\n"


# ---------------------------------------------------------------- the injection library's files
@pytest.fixture(scope="module")
def injection(tmp_path_factory) -> str:
    """The injection library, built here by the real C compiler against this machine's CUPTI."""
    from nvcc_evo.measure.profile.library import library
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("inject-cache")))
        return library(os.environ, "nvcc")


WRITER = """\
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
for _ in range(int(sys.argv[2])):
    lib.nvcc_evo_add(b"_Z4tilePf", 8, 1, 1, 256, 1, 1, 40, 0, ctypes.c_ulonglong(1000))
    assert lib.nvcc_evo_write() == 0
print(os.getpid(), os.stat("/proc/self/ns/pid").st_ino)
"""
NAME = r"kernels-(\d+)-(\d+)-[A-Za-z0-9]{6}(?:-\d+)?\.tsv"


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_process_s_writes_replace_its_own_file_named_by_pid_and_pid_namespace(injection, tmp_path):
    """A process that writes its table twice (a snapshot, then its exit's write) leaves one file (its pid, its
    pid namespace's inode, a random part), no temporary, holding its whole table at the last write (before:
    two files, each a whole table then, added up: 3 calls read of 2)."""
    import re
    from nvcc_evo.measure.profile.records import read_file, read_run
    done = subprocess.run([sys.executable, "-c", WRITER, injection, "2"], capture_output=True, text=True,
                          env={**os.environ, "NVCC_EVO_KERNEL_TIMES": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    pid, namespace = done.stdout.split()
    names = _files(tmp_path)
    assert len(names) == 1 and re.fullmatch(NAME, names[0]), names
    assert re.fullmatch(NAME, names[0]).groups() == (pid, namespace)
    assert open(tmp_path / names[0]).readline().startswith(f"# nvcc-evo kernel times 1 pid={pid} "
                                                          f"pidns={namespace} dropped=0")
    assert read_file(tmp_path / names[0])[0][0].calls == 2
    rows, problems = read_run(str(tmp_path))
    assert problems == [] and [(r.name, r.calls, r.total_ns) for r in rows] == [("_Z4tilePf", 2, 2000)]


KILLED = """\
import ctypes, os, signal, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.nvcc_evo_arm()
assert lib.nvcc_evo_snapshots() == 0
for _ in range(5):
    lib.nvcc_evo_add(b"_Z4stepPf", 64, 1, 1, 128, 1, 1, 32, 0, ctypes.c_ulonglong(500))
time.sleep(2.5)                          # (a snapshot a second)
lib.nvcc_evo_add(b"_Z4lostPf", 1, 1, 1, 32, 1, 1, 8, 0, ctypes.c_ulonglong(7))
os.kill(os.getpid(), signal.SIGKILL)     # no exit: what Ctrl-C of --hot does to the command's group
"""


def test_a_process_killed_before_its_exit_leaves_its_last_snapshot(injection, tmp_path):
    """The snapshot thread writes the table every second: a process killed (no atexit) leaves what it
    recorded until its last snapshot, one file, read whole (before: nothing, the table was written at exit
    alone: a --hot run stopped by Ctrl-C, a crash or an exec lost every kernel)."""
    from nvcc_evo.measure.profile.records import read_run
    done = subprocess.run([sys.executable, "-c", KILLED, injection], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "NVCC_EVO_KERNEL_TIMES": str(tmp_path)})
    assert done.returncode == -9, done.stderr
    assert len(_files(tmp_path)) == 1, _files(tmp_path)          # (no temporary left: each renamed whole)
    rows, problems = read_run(str(tmp_path))
    assert problems == [] and [(r.name, r.calls, r.total_ns) for r in rows] == [("_Z4stepPf", 5, 2500)]


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="unshare cannot make a user and pid namespace here "
                                                 "(unprivileged user namespaces refused)")
def test_two_processes_of_one_pid_in_two_pid_namespaces_keep_both_files(injection, tmp_path):
    """Each process the first of a new pid namespace (`unshare --pid --fork`: pid 1 in both, as two
    containers' programs): two files, both read (before: both wrote kernels-1.tsv, one table lost)."""
    from nvcc_evo.measure.profile.records import read_run
    env = {**os.environ, "NVCC_EVO_KERNEL_TIMES": str(tmp_path)}
    seen = []
    for _ in range(2):
        done = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", sys.executable, "-c",
                               WRITER, injection, "1"], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        seen.append(done.stdout.split())
    assert seen[0][0] == seen[1][0] == "1" and seen[0][1] != seen[1][1]       # one pid, two namespaces
    assert len(_files(tmp_path)) == 2
    rows, problems = read_run(str(tmp_path))
    assert problems == [] and [(r.calls, r.total_ns) for r in rows] == [(2, 2000)]


FORKS = """\
import ctypes, os, signal, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.nvcc_evo_arm()                      # what InitializeInjection does once CUPTI records (no GPU here)
assert lib.nvcc_evo_snapshots() == 0    # (its snapshot thread too: it writes while children fork)
add = lambda name, ns: lib.nvcc_evo_add(name, 1, 1, 1, 32, 1, 1, 8, 0, ctypes.c_ulonglong(ns))
add(b"parent_before", 1000)
busy = threading.Event()
def keep_adding():                      # a thread inside the table (under its lock) while the main thread forks:
    while not busy.is_set():            # a long name is long to hash and compare
        add(b"busy" + b"_" * 1000000, 1)
thread = threading.Thread(target=keep_adding, daemon=True)
thread.start()
children = []
for n in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:                        # the child records a kernel of its own and ends normally (atexit)
        signal.alarm(20)                # (a child that hangs is killed, and said by its status)
        add(b"child", 10)
        sys.exit(0)
    children.append(pid)
for pid in children:
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child {pid}: status {os.waitstatus_to_exitcode(status)}"
busy.set()
thread.join()
add(b"parent_after", 2000)
print(os.getpid(), " ".join(map(str, children)))
"""


def test_a_forked_child_that_ends_normally_writes_its_own_kernels_and_the_parent_its_own(injection, tmp_path):
    """The library's fork handling with no GPU (nvcc_evo_arm: what InitializeInjection arms): 20 children
    forked while another thread adds to the table, each ends with exit(); each child's file holds its own
    kernel alone, the parent's its own (none twice), in the format the reader reads. The lock is held across
    the fork: a child forked while the thread held it hung at its first add before (a timeout here)."""
    import re
    from nvcc_evo.measure.profile.records import read_file, read_run
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", FORKS, injection, "20"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NVCC_EVO_KERNEL_TIMES": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    parent, *children = done.stdout.split()
    by_pid = {re.fullmatch(NAME, n).group(1): n for n in _files(tmp_path)}
    assert sorted(by_pid) == sorted([parent, *children]), _files(tmp_path)       # one file a process
    for child in children:
        rows, dropped = read_file(tmp_path / by_pid[child])
        assert [(r.name, r.calls, r.total_ns) for r in rows] == [("child", 1, 10)] and dropped == 0
    mine = {r.name: r.calls for r in read_file(tmp_path / by_pid[parent])[0]}
    assert mine.pop("parent_before") == 1 and mine.pop("parent_after") == 1 and [n[:6] for n in mine] == ["busy__"]
    rows, problems = read_run(str(tmp_path))
    assert problems == [] and {r.name: r.calls for r in rows if not r.name.startswith("busy")} == \
        {"parent_before": 1, "parent_after": 1, "child": 20}


FORKING_CUDA = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
__global__ void parent_kernel(float *x) { x[threadIdx.x] += 1.0f; }
__global__ void exec_kernel(float *x) { x[threadIdx.x] *= 2.0f; }
int main(int argc, char **argv) {
    float *x;
    if (cudaMalloc(&x, 256 * sizeof(float)) != cudaSuccess) { fprintf(stderr, "no GPU memory\n"); return 1; }
    bool executed = argc > 1 && !strcmp(argv[1], "exec");
    for (int i = 0; i < 5; i++) {
        if (executed) exec_kernel<<<1, 256>>>(x); else parent_kernel<<<1, 256>>>(x);
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return 2;
    if (executed) { printf("exec done\n"); return 0; }
    pid_t plain = fork();              // after its CUDA work: a child that ends normally, no CUDA in it
    if (plain == 0) { printf("child done\n"); exit(0); }
    pid_t again = fork();              // and one that runs the program again: a CUDA process of its own
    if (again == 0) { execl(argv[0], argv[0], "exec", (char *)0); _exit(127); }
    int status_plain, status_again;
    waitpid(plain, &status_plain, 0);
    waitpid(again, &status_again, 0);
    for (int i = 0; i < 3; i++) parent_kernel<<<1, 256>>>(x);
    if (cudaDeviceSynchronize() != cudaSuccess) return 3;
    printf("parent done %d %d\n", WEXITSTATUS(status_plain), WEXITSTATUS(status_again));
    return WEXITSTATUS(status_plain) || WEXITSTATUS(status_again);
}
"""


@pytest.mark.gpu
def test_on_the_gpu_a_program_that_forks_after_its_cuda_work_is_profiled_whole(tmp_path, evo_cache):
    """The real thing (run on the H200): a CUDA program forks after its kernels, one child ending with exit()
    and one exec'ing the program again (a CUDA process of its own); --hot ends (no hang at the children's
    exits), every process's kernels counted once: parent_kernel 8 calls (5 before the forks, 3 after),
    exec_kernel 5, from the two files of the two CUDA processes."""
    (tmp_path / "forks.cu").write_text(FORKING_CUDA)
    built = subprocess.run(["nvcc", "-arch=native", "-o", "forks", "forks.cu"], cwd=tmp_path, capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stderr
    result = subprocess.run([*EVO_COMMAND, "--hot", "--", "./forks"], cwd=tmp_path, env=evo_env(evo_cache),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "child done\n" in result.stdout and "exec done\n" in result.stdout and \
        "parent done 0 0\n" in result.stdout, result.stdout
    rows = {line.split()[-1]: line.split() for line in result.stdout.splitlines()
            if line.startswith(" ") and "%" in line}
    assert rows["parent_kernel(float*)"][2] == "8" and rows["exec_kernel(float*)"][2] == "5", result.stdout
    assert "kernel times:" not in result.stderr, result.stderr           # (no file unreadable, nothing dropped)


ENDLESS_CUDA = r"""
#include <cstdio>
__global__ void step_kernel(float *x) { x[threadIdx.x] = x[threadIdx.x] * 0.5f + 1.0f; }
int main() {
    float *x;
    if (cudaMalloc(&x, 256 * sizeof(float)) != cudaSuccess) { fprintf(stderr, "no GPU memory\n"); return 1; }
    for (long i = 0;; i++) {           // (a training loop: it runs until stopped)
        step_kernel<<<1, 256>>>(x);
        if (cudaDeviceSynchronize() != cudaSuccess) return 2;
        if (i == 100) { printf("ready\n"); fflush(stdout); }
    }
}
"""


@pytest.mark.gpu
def test_on_the_gpu_ctrl_c_of_hot_keeps_the_kernels_of_a_program_that_never_ends(tmp_path, evo_cache):
    """The real thing (run on the H200): a CUDA program that launches a kernel in a loop until it is
    stopped; Ctrl-C of --hot after 4 s prints its kernel, thousands of calls from CUPTI's snapshots, exit
    130 (before: nothing, the table was written at the program's exit alone)."""
    (tmp_path / "endless.cu").write_text(ENDLESS_CUDA)
    built = subprocess.run(["nvcc", "-arch=native", "-o", "endless", "endless.cu"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    child = subprocess.Popen([*EVO_COMMAND, "--hot", "--", "./endless"], cwd=tmp_path, env=evo_env(evo_cache),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, preexec_fn=interruptible)
    assert _line_within(child.stdout, 120) == "ready\n"
    time.sleep(4)
    child.send_signal(signal.SIGINT)
    out, err = (stream.decode() for stream in child.communicate(timeout=60))
    assert child.returncode == 130, err
    rows = {line.split()[-1]: line.split() for line in out.splitlines() if line.startswith(" ") and "%" in line}
    assert int(rows["step_kernel(float*)"][2]) > 1000, out
    assert "stopped by Ctrl-C" in out and "nvcc-evo: interrupted: the table above holds" in err, err


QUEUED_CUDA = r"""
#include <cstdio>
__global__ void spin_kernel(long long cycles) {          // about a millisecond each
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
int main() {
    cudaEvent_t begin, end;
    cudaEventCreate(&begin);
    cudaEventCreate(&end);
    cudaEventRecord(begin);
    for (int i = 0; i < 3000; i++) spin_kernel<<<1, 1>>>(2000000);   // queued, never waited for one by one
    cudaEventRecord(end);
    if (cudaEventSynchronize(end) != cudaSuccess) return 2;
    float ms = 0;
    cudaEventElapsedTime(&ms, begin, end);
    printf("elapsed %.3f ms\n", ms);
}
"""


@pytest.mark.gpu
def test_on_the_gpu_kernels_queued_across_snapshots_are_all_timed(tmp_path, evo_cache):
    """The real thing: 3000 kernels of about a millisecond queued without a wait (three seconds of
    snapshots while a thousand wait in the queue): every call counted with its time, the total within 2%
    of the events' elapsed time, nothing dropped (before: each snapshot's forced flush handed CUPTI's
    queued records over unfinished, lost for good: an SGEMM_CUDA retune read 28% short)."""
    (tmp_path / "queued.cu").write_text(QUEUED_CUDA)
    built = subprocess.run(["nvcc", "-arch=native", "-o", "queued", "queued.cu"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    result = subprocess.run([*EVO_COMMAND, "--hot", "--", "./queued"], cwd=tmp_path, env=evo_env(evo_cache),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    elapsed = float(re.search(r"elapsed ([0-9.]+) ms", result.stdout)[1])
    row = next(line.split() for line in result.stdout.splitlines() if line.endswith("spin_kernel(long long)"))
    assert row[2] == "3000" and abs(float(row[1]) / elapsed - 1) < 0.02, (elapsed, result.stdout)
    assert "dropped" not in result.stderr, result.stderr


# ---------------------------------------------------------------- a build for another GPU
@pytest.mark.parametrize("arch, device, native", [
    ("sm_90", "sm_90", True), ("sm_80", "sm_86", True), ("sm_86", "sm_80", False), ("sm_86", "sm_90", False),
    ("sm_90a", "sm_90", True), ("sm_90a", "sm_100", False), ("sm_100", "sm_90", False), ("compute_90", "sm_90", True),
])
def test_a_cubin_runs_as_it_is_on_its_major_version_up_from_its_minor(arch, device, native):
    from nvcc_evo.hot.table import runs_natively
    assert runs_natively(arch, device) is native


def test_a_source_built_for_no_architecture_the_gpu_runs_is_said_once_with_what_to_build():
    from nvcc_evo.hot.table import jit_warnings
    said = jit_warnings([("src/runner.cu", {"sm_86"}), ("src/both.cu", {"sm_86", "sm_90"}), ("src/none.cu", set())],
                        ("sm_90", "sm_90"))
    assert said == ["src/runner.cu is built for sm_86 alone (its recorded compiles): this machine's GPU (sm_90) runs "
                    "its kernels from their PTX, compiled by the driver when the program loads them, so the ptxas "
                    "knobs of a retune reach none of them here: build it for sm_90 too (nvcc -arch=sm_90; CMake: "
                    "CUDA_ARCHITECTURES 90), rebuild from clean through nvcc-evo and run --hot again"]
    assert jit_warnings([("src/runner.cu", {"sm_86"})], ()) == []         # (no GPU known: nothing said)


@pytest.mark.gpu
def test_on_the_gpu_a_project_built_for_an_older_gpu_is_said_to_run_from_its_ptx(tmp_path, evo_cache):
    """The real thing (run on the H200, sm_90): the hot project built for sm_80 through nvcc-evo runs, its
    kernels JIT-compiled from their PTX; --hot says so for each of its hot sources, and nothing of the kind for
    the same project built for sm_90."""
    env = evo_env(evo_cache)
    for arch, said in (("sm_80", True), ("sm_90", False)):
        folder = tmp_path / arch
        shutil.copytree(DATA / "projects" / "hot", folder)
        built = subprocess.run(["make", "-s", f"ARCH={arch}", f"NVCC={shlex.join(EVO_COMMAND)}"], cwd=folder,
                               env=env, capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
        result = run_evo("--hot", "--", "./app", "256", "2", cwd=folder, env=env)
        assert result.returncode == 0, result.stderr
        assert ("src/gemm.cu is built for sm_80 alone (its recorded compiles): this machine's GPU (sm_90) runs its "
                "kernels from their PTX" in result.stderr) is said, result.stderr
        assert ("runs its kernels from their PTX" in result.stderr) is said, result.stderr


@pytest.mark.parametrize("dropped, whole", [(0, True), (3, False)])
def test_a_run_whose_records_were_dropped_or_unfinished_gives_no_kernel_time(tmp_path, dropped, whole):
    """A process's file saying records were dropped (CUPTI's, or unfinished at its end): the unit's
    kernels' time is short by an unknown amount, so the run has no metric and says why (before: the
    short sum was the candidate's time)."""
    from nvcc_evo.measure.profile.clock import KernelClock
    folder = tmp_path / "kernel-times"
    folder.mkdir()
    (folder / "kernels-10-20-abcdef.tsv").write_text(
        f"# nvcc-evo kernel times 1 pid=10 pidns=20 dropped={dropped}\n"
        "4\t8000000\t1900000\t2100000\t64\t1\t1\t256\t1\t1\t40\t0\tmix\n")
    clock = KernelClock(active=True)
    clock.own["candidate"] = frozenset({"mix"})
    clock.use("candidate")
    milliseconds, why = clock.read(str(tmp_path))
    if whole:
        assert (milliseconds, why) == (8.0, "")
    else:
        assert milliseconds != milliseconds and why.startswith("the kernels' time of this run is not whole: ")
        assert "3 kernel record(s) dropped by CUPTI or unfinished" in why, why
