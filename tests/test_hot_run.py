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
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DATA, EVO_COMMAND, evo_env, run_evo

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
    """The next line of a child's pipe, or "" when none comes within `seconds`."""
    ready, _, _ = select.select([stream], [], [], seconds)
    return stream.readline() if ready else ""


def _let_go(child: subprocess.Popen, folder: Path) -> tuple[str, str, str, str]:
    """The first line of each of `child`'s streams, read before it is let go (`go`), then the rest."""
    first_out = _line_within(child.stdout, 60)
    first_err = ""
    while first_out and not first_err.startswith("first err"):    # (nvcc-evo's own lines come first)
        first_err = _line_within(child.stderr, 60) or "(nothing)"
    (folder / "go").touch()
    rest_out, rest_err = child.communicate(timeout=120)
    return first_out, first_err, rest_out, rest_err


def test_a_shown_command_s_output_comes_as_it_is_written_and_its_stderr_tail_is_kept(tmp_path):
    """run_in_group_shown with a real program that writes a line on each stream and waits: both lines reach
    the caller's stdout and stderr while it still runs; its status and its stderr come back at its end."""
    (tmp_path / "slow.py").write_text(SLOW.replace("KERNEL", ""))
    code = ("import json, sys\nfrom nvcc_evo.system.leftovers import run_in_group_shown\n"
            f"done = run_in_group_shown([sys.executable, 'slow.py'], cwd={str(tmp_path)!r})\n"
            "print(json.dumps(done))\n")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
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
    code = ("import sys\nfrom nvcc_evo.hot import run\nfrom nvcc_evo.cli import main\n"
            "run.gpu_problem = lambda: ''\n"
            "sys.exit(main(['--hot', '--', sys.executable, 'slow.py']))\n")
    env = evo_env(evo_cache, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
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


def test_a_command_that_cannot_be_started_is_said_once_before_it_runs(tmp_path, monkeypatch, evo_cache, capfd):
    """One line, exit 2 (usage: found before anything runs; the GPU check stood aside, as on a machine with
    one). Before: the shell's `not found` shown, then quoted again in the failure's message, exit 1."""
    from nvcc_evo import cli
    from nvcc_evo.hot import run
    monkeypatch.setattr(run, "gpu_problem", lambda: "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(evo_cache))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "folder").mkdir()
    for command, said in ((["no-such-program-nvcc-evo", "1"], "no-such-program-nvcc-evo: command not found (no "
                                                                "such program on PATH)"),
                          (["./missing", "1"], "./missing: no such file"),
                          (["./folder"], "./folder: is a folder, not a program"),
                          (["./script.sh"], "./script.sh: not executable (chmod +x ./script.sh, or name its "
                                            "interpreter first)")):
        assert cli.main(["--hot", "--", *command]) == 2
        assert capfd.readouterr() == ("", f"nvcc-evo: error: --hot -- {said}\n")
    assert not (tmp_path / ".nvcc-evo").exists()
