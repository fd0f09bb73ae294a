"""A shared machine and a hostile environment (issue 25, cases 4-6 and 8-10),
each run the way it happens: stderr closed with `2>&-`, the working folder
removed under the shell, a uid with no passwd entry and no HOME (through
`setpriv`), a disk that fills up while the ACF is written (a small tmpfs),
`--explain` and `--retune --dry-run` saying which programs they ran, and
NVCC_EVO_REAL_NVCC naming nvcc-evo itself. Real nvcc and ptxas; the installed `nvcc-evo`."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import DATA, EVO, evo_env

ACF = 'acf 1\nunit "spill.cu" {\n    search {\n        ptxas.opt_level in 1..3\n    }\n}\n'
BROKEN = 'acf 1\nunit "spill.cu" {\n    ptxas.nonsense = 3\n}\n'
RETUNE = ("--retune", "--backend", "static", "--target", "sm_90", "--evaluations", "2", "--population", "2",
          "--jobs", "1")


def project(folder: Path, acf: str = ACF) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / "cuda" / "spill.cu", folder / "spill.cu")
    (folder / "nvcc-evo.acf").write_text(acf)
    return folder


def shell(line: str, cwd: Path, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- 4: stderr closed
@pytest.mark.parametrize("args", ["-E spill.cu", "-M spill.cu", "-arch=sm_90 -ptx spill.cu -o -"])
def test_closed_stderr_never_puts_a_warning_on_stdout(tmp_path, evo_cache, real_nvcc, args):
    """`nvcc-evo -E k.cu 2>&-` with an ACF in error: the warning was line 1 of the preprocessed output."""
    folder = project(tmp_path, BROKEN)
    env = evo_env(evo_cache)
    ours = shell(f"exec {EVO} {args} 2>&-", folder, env)
    theirs = shell(f"exec {real_nvcc} {args} 2>&-", folder, env)
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout == theirs.stdout and "nvcc-evo" not in ours.stdout


def test_unwritable_stderr_is_dropped_too(tmp_path, evo_cache, real_nvcc):
    """stderr a pipe nobody reads any more: our warning fails to write, the build goes on, stdout is nvcc's."""
    folder = project(tmp_path, BROKEN)
    read, write = os.pipe()
    os.close(read)
    try:
        ours = subprocess.run([str(EVO), "-E", "spill.cu"], cwd=folder, env=evo_env(evo_cache), stdout=subprocess.PIPE,
                              stderr=write, text=True, timeout=300)
    finally:
        os.close(write)
    theirs = subprocess.run([str(real_nvcc), "-E", "spill.cu"], cwd=folder, capture_output=True, text=True)
    assert ours.returncode == 0 and ours.stdout == theirs.stdout


def test_a_retune_with_stderr_closed_tunes(tmp_path, evo_cache):
    """`--retune 2>&-` exited 1 on AttributeError: 'NoneType' object has no attribute 'write', tuning nothing."""
    folder = project(tmp_path)
    done = shell(f"exec {EVO} {' '.join(RETUNE)} 2>&-", folder, evo_env(evo_cache))
    assert done.returncode == 0 and "target sm_90" in (folder / "nvcc-evo.acf").read_text()
    assert "nvcc-evo:" not in done.stdout and "spill.cu" in done.stdout          # the end table only


# ---------------------------------------------------------------- 5: the working folder removed
def test_a_removed_working_folder(tmp_path, evo_cache):
    """A build with absolute paths works (was a traceback in os.getcwd); the verbs name the folder."""
    folder = project(tmp_path / "project")
    gone = tmp_path / "gone"
    env = evo_env(evo_cache)
    built = shell(f"mkdir {gone} && cd {gone} && rmdir {gone} && exec {EVO} -arch=sm_90 -c {folder}/spill.cu "
                  f"-o {folder}/spill.o", tmp_path, env)
    assert built.returncode == 0 and (folder / "spill.o").is_file(), built.stderr
    assert "Traceback" not in built.stderr
    for verb in (f"--explain -c {folder}/spill.cu", f"--retune --dry-run --acf {folder}/nvcc-evo.acf",
                 f"--report --acf {folder}/nvcc-evo.acf"):
        done = shell(f"mkdir {gone} && cd {gone} && rmdir {gone} && exec {EVO} {verb}", tmp_path, env)
        assert done.returncode == 3, done.stderr
        assert f"the working folder ({gone}) was removed" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- 6: no HOME, no passwd entry
NOBODY = 54321          # a uid with no passwd entry


@pytest.fixture
def homeless():
    """A folder of uid 54321 (not in /etc/passwd) of this test's own, removed after."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as a uid with no passwd entry")
    import pwd
    try:
        pwd.getpwuid(NOBODY)
        pytest.skip(f"uid {NOBODY} has a passwd entry here")
    except KeyError:
        pass
    top = Path(tempfile.mkdtemp(prefix="nvcc-evo-homeless-"))
    try:
        top.chmod(0o755)
        yield top
    finally:
        shutil.rmtree(top)


def test_no_home_and_no_passwd_entry(homeless, real_nvcc):
    """`RuntimeError: Could not determine home directory` in --retune and
    --explain; builds warned "internal error". The cache goes to the
    temporary folder, said once."""
    folder = project(homeless / "project")
    temporary = homeless / "tmp"
    temporary.mkdir()
    for path in (folder, temporary, *folder.iterdir()):
        os.chown(path, NOBODY, NOBODY)
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(temporary), "NVCC_EVO_REAL_NVCC": str(real_nvcc)}
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    said = []
    for args in (("-arch=sm_90", "-c", "spill.cu", "-o", "spill.o"), ("--explain", "-arch=sm_90", "-c", "spill.cu"),
                 RETUNE):
        done = subprocess.run([*as_nobody, str(EVO), *args], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr and "internal error" not in done.stderr, \
            done.stderr
        said.append(done.stderr.count(f"caches are kept in {temporary / f'nvcc-evo-cache-{NOBODY}'}"))
    assert said == [1, 0, 0] and (folder / "spill.o").is_file()
    assert os.stat(temporary / f"nvcc-evo-cache-{NOBODY}").st_mode & 0o777 == 0o700


# ---------------------------------------------------------------- 8: a full disk while the ACF is written
@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs of this test's own, unmounted after."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    place = tmp_path / "disk"
    place.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(place)],
                      capture_output=True).returncode != 0:
        pytest.skip("mount refused here")
    try:
        yield place
    finally:
        subprocess.run(["umount", str(place)], check=True)


def test_a_full_disk_while_writing_the_acf(small_disk, evo_cache):
    """Was `error: [Errno 28] No space left on device`, exit 3, no file named,
    no end table, later units not tuned. Now: the file named, the
    evaluations kept, the other unit searched, the table printed, exit 3."""
    filler = "# " + "x" * 98 + "\n"
    acf = ACF + 'unit "regs.cu" {\n    search {\n        ptxas.opt_level in 1..3\n    }\n}\n' + filler * 2800
    folder = project(small_disk, acf)                    # a 280 KiB ACF: its new copy does not fit
    shutil.copy(DATA / "cuda" / "regs.cu", folder / "regs.cu")
    done = subprocess.run([str(EVO), *RETUNE, "--all"], cwd=folder, env=evo_env(evo_cache), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 3, done.stderr
    said = f"cannot write the ACF {folder / 'nvcc-evo.acf'}: No space left on device"
    assert done.stderr.count(said) == 2 and "Traceback" not in done.stderr, done.stderr
    assert '"spill.cu"' in done.stdout and '"regs.cu"' in done.stdout           # the end table, both units
    stored = (folder / ".nvcc-evo" / "results.jsonl").read_text()
    assert '\\"spill.cu\\"' in stored and '\\"regs.cu\\"' in stored
    assert (folder / "nvcc-evo.acf").read_text() == acf and not list(folder.glob(".nvcc-evo.acf.*.tmp"))


# ---------------------------------------------------------------- 9: what --explain and --dry-run run
def test_explain_and_dry_run_say_which_programs_they_ran(tmp_path, evo_cache, real_nvcc):
    """They ran the `nvcc` a settings file names (14 calls for --explain), and did not say so."""
    folder = project(tmp_path / "project")
    wrapper = tmp_path / "my-nvcc"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(str(real_nvcc))} \"$@\"\n")
    wrapper.chmod(0o755)
    (folder / "nvcc-evo.toml").write_text(f'nvcc = "{wrapper}"\n')
    cache = tmp_path / "cache"
    explained = subprocess.run([str(EVO), "--explain", "-arch=sm_90", "-c", "spill.cu"], cwd=folder,
                               env=evo_env(evo_cache, XDG_CACHE_HOME=cache), capture_output=True, text=True)
    assert explained.returncode == 0, explained.stderr
    line = next(line for line in explained.stdout.splitlines() if line.startswith("programs run: "))
    assert f"{wrapper} x" in line and "(toolkit probe)" in line
    again = subprocess.run([str(EVO), "--explain", "-arch=sm_90", "-c", "spill.cu"], cwd=folder,
                           env=evo_env(evo_cache, XDG_CACHE_HOME=cache), capture_output=True, text=True)
    assert "programs run: nothing (every answer was cached)" in again.stdout
    dry = subprocess.run([str(EVO), "--retune", "--dry-run"], cwd=folder,
                         env=evo_env(evo_cache, XDG_CACHE_HOME=tmp_path / "fresh"), capture_output=True, text=True)
    assert dry.returncode == 0 and f"programs run: {wrapper} x" in dry.stderr, dry.stderr
    assert "(toolkit probe)" in dry.stderr.splitlines()[-1]


# ---------------------------------------------------------------- 10: NVCC_EVO_REAL_NVCC naming nvcc-evo
def test_real_nvcc_naming_nvcc_evo_itself_is_said_with_an_acf_in_reach(tmp_path, evo_cache):
    """Was "no real nvcc found: set NVCC_EVO_REAL_NVCC"; a shell wrapper that runs
    nvcc-evo was "internal error (OSError(... cannot compile a probe kernel))"."""
    folder = project(tmp_path / "project")
    done = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu"], cwd=folder,
                          env=evo_env(evo_cache, NVCC_EVO_REAL_NVCC=EVO), capture_output=True, text=True)
    assert done.returncode == 3 and f"NVCC_EVO_REAL_NVCC={EVO} points at nvcc-evo itself" in done.stderr
    script = tmp_path / "nvcc"
    script.write_text(f"#!/bin/sh\nexec {EVO} \"$@\"\n")
    script.chmod(0o755)
    done = subprocess.run([str(EVO), "-arch=sm_90", "-c", "spill.cu"], cwd=folder,
                          env=evo_env(evo_cache, NVCC_EVO_REAL_NVCC=script), capture_output=True, text=True)
    assert done.returncode == 3 and "internal error" not in done.stderr, done.stderr
    assert f"NVCC_EVO_REAL_NVCC={script} points at nvcc-evo itself" in done.stderr      # (a script that runs it)
