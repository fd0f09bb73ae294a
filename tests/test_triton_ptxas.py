"""nvcc-evo-ptxas under Triton (3.6, compiling for sm_90a on a machine with no
GPU): nothing changes without a kernel unit that names the kernel; an entry's
knobs reach the cubin; a changed entry is never answered from Triton's cache;
the real ptxas's failures are its own. Each Triton compile is a process of
its own (tests/data/triton/kernels.py), as a user's program is."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, evo_env, run_evo
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.driver.cmdline.ptxas import probe
from nvcc_evo.cubin.sass import cubin_registers

pytest.importorskip("triton", reason="Triton is not installed (the test extra brings it on Linux x86_64)")
PTXAS = Path(sys.executable).parent / "nvcc-evo-ptxas"
KERNELS = DATA / "triton" / "kernels.py"
CAPPED = """acf 1
unit kernel "matmul_kernel" {
    pin ptxas.override_directive_values = true
    target sm_90a {
        ptxas.maxrregcount = CAP
    }
}
"""


def toolkit_release() -> str:
    return probe(shutil.which("ptxas")).version


def triton_release() -> str:
    import triton
    return probe(str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas")).version


TRITON_RELEASE = triton_release()


def compile_kernel(folder: Path, env: dict, name: str = "matmul", cache: str = "cache", through: bool = True):
    """`name` compiled by Triton in `folder` (its working folder), through nvcc-evo-ptxas or not: the cubin."""
    env = dict(env, TRITON_CACHE_DIR=str(folder / cache))
    if through:
        env["TRITON_PTXAS_PATH"] = str(PTXAS)
    out = folder / f"{name}-{len(list(folder.glob('*.cubin')))}.cubin"
    done = subprocess.run([sys.executable, str(KERNELS), name, str(out)], cwd=folder, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out.read_bytes()


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def plain(tmp_path_factory, evo_cache) -> bytes:
    """Triton's own cubin of the matmul, its own ptxas, no nvcc-evo."""
    return compile_kernel(tmp_path_factory.mktemp("plain"), evo_env(evo_cache), through=False)


def test_without_an_acf_the_cubin_is_triton_s_own(project, evo_cache, plain):
    assert compile_kernel(project, evo_env(evo_cache)) == plain      # Triton's own ptxas found, as it would run it


def test_a_glob_that_names_no_kernel_changes_nothing(project, evo_cache, plain):
    (project / "nvcc-evo.acf").write_text(CAPPED.replace("matmul_kernel", "matmul_kernel_v2*").replace("CAP", "128"))
    log = project / "log.jsonl"
    assert compile_kernel(project, evo_env(evo_cache, NVCC_EVO_LOG=log)) == plain
    assert '"added": []' in log.read_text() and "no kernel unit" in log.read_text()


def test_an_entry_s_register_cap_reaches_the_cubin_and_a_change_is_never_cached(project, evo_cache, plain):
    acf = project / "nvcc-evo.acf"
    assert cubin_registers(plain) > 168
    acf.write_text(CAPPED.replace("CAP", "128"))
    capped = compile_kernel(project, evo_env(evo_cache))
    assert cubin_registers(capped) == 128
    acf.write_text(CAPPED.replace("CAP", "168"))            # the same TRITON_CACHE_DIR
    assert cubin_registers(compile_kernel(project, evo_env(evo_cache))) == 168
    acf.write_text(CAPPED.replace("CAP", "128"))
    assert compile_kernel(project, evo_env(evo_cache)) == capped
    records = list((project / ".nvcc-evo" / "compile-db").glob("*.json"))
    assert len(records) == 1 and '"matmul_kernel"' in records[0].read_text()   # for --retune: what ran


def test_a_failing_real_ptxas_is_passed_through_unchanged(project, evo_cache):
    real = shutil.which("ptxas")
    fake = project / "broken-ptxas"
    fake.write_text(f'#!/bin/sh\ncase "$*" in *--version*) exec {real} "$@";; esac\n'
                    'echo "half a line on stdout"\necho "ptxas fatal   : Unresolved extern function \'nope\'" >&2\n'
                    'exit 7\n')
    fake.chmod(0o755)
    (project / "nvcc-evo.acf").write_text(CAPPED.replace("CAP", "128"))
    ptx = project / "k.ptx"
    ptx.write_text(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry matmul_kernel()\n.reqntid 128\n"
                   "{\n\tret;\n}\n")
    argv = ["-lineinfo", "-v", "--gpu-name=sm_90a", str(ptx), "-o", str(project / "k.o")]
    own = subprocess.run([str(fake), *argv], cwd=project, capture_output=True, text=True)
    ours = subprocess.run([str(PTXAS), *argv], cwd=project, capture_output=True, text=True,
                          env=evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=fake))
    assert (ours.returncode, ours.stdout, ours.stderr) == (7, own.stdout, own.stderr)
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=fake, TRITON_PTXAS_PATH=PTXAS, TRITON_CACHE_DIR=project / "c")
    done = subprocess.run([sys.executable, str(KERNELS), "matmul", str(project / "x.cubin")], cwd=project, env=env,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "Unresolved extern function 'nope'" in done.stderr + done.stdout
    assert "error code 7" in done.stderr + done.stdout


def test_version_answers_the_real_ptxas_and_digests_the_kernel_units(project, evo_cache):
    real = subprocess.run(["ptxas", "--version"], capture_output=True, text=True)
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"))     # (this process has loaded Triton)
    alone = subprocess.run([str(PTXAS), "--version"], cwd=project, env=env, capture_output=True, text=True)
    assert (alone.stdout, alone.returncode) == (real.stdout, 0)
    acf = project / "nvcc-evo.acf"
    answers = []
    for cap in ("128", "168", "128"):
        acf.write_text(CAPPED.replace("CAP", cap))
        done = subprocess.run([str(PTXAS), "--version"], cwd=project, env=env, capture_output=True, text=True)
        assert done.stdout.startswith(real.stdout) and "release" in done.stdout
        answers.append(done.stdout[len(real.stdout):])
    assert answers[0] == answers[2] != answers[1]
    acf.write_text('acf 1\nunit "a.cu" {\n}\n')                 # no kernel unit: the real answer
    done = subprocess.run([str(PTXAS), "--version"], cwd=project, env=env, capture_output=True, text=True)
    assert done.stdout == real.stdout


def test_explain_names_the_unit_the_target_and_the_digest(project, evo_cache):
    (project / "nvcc-evo.acf").write_text(CAPPED.replace("CAP", "128"))
    ptx = project / "k.ptx"
    ptx.write_text(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry matmul_kernel()\n.reqntid 128\n"
                   "{\n\tret;\n}\n")
    done = subprocess.run([str(PTXAS), "--explain", "--gpu-name=sm_90a", "k.ptx", "-o", "k.o"], cwd=project,
                          env=evo_env(evo_cache), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    print(done.stdout)
    assert 'served by unit kernel "matmul_kernel" (line 2), target sm_90a (line 4)' in done.stdout
    assert "entries matmul_kernel; sha256 " in done.stdout and "-maxrregcount=128" in done.stdout
    assert not (project / "k.o").exists()


def test_it_never_runs_itself(project, evo_cache):
    done = subprocess.run([str(PTXAS), "--version"], cwd=project, capture_output=True, text=True,
                          env=evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=PTXAS))
    assert done.returncode == 3 and "nvcc-evo-ptxas itself" in done.stderr


RETUNED = """acf 1
unit kernel "matmul_kernel" {
    pin ptxas.override_directive_values = true
    search {
        ptxas.maxrregcount in {64, 255}
    }
    bench {
        command "PYTHON bench_registers.py"
        metric "time ([0-9.]+) ms"
        confirm rounds 5
    }
}
"""


def test_retune_through_the_user_s_own_benchmark(project, evo_cache):
    """`--retune --backend command` runs the user's program per candidate (Triton recompiling it each time:
    the log shows each candidate's ptxas call), and the next run gets the chosen entry. The kernel was
    never compiled through nvcc-evo-ptxas (as after --hot --write: its PTX recorded for the unit that
    records every kernel, `unit kernel "*" {}`, and a warm Triton cache compiles nothing): the retune skipped
    it ("never compiled through nvcc-evo-ptxas ...; skipped", exit 1). Its bench command now runs once
    first, through the stand-ins with fresh Triton caches, as a source unit's does, and the unit is tuned.
    (One retune for both: each runs the Triton program about ten times.)"""
    for name in ("kernels.py", "bench_registers.py"):
        shutil.copy(DATA / "triton" / name, project / name)
    (project / "nvcc-evo.acf").write_text(RETUNED.replace("PYTHON", sys.executable) + '\nunit kernel "*" {\n}\n')
    env = evo_env(evo_cache, TRITON_PTXAS_PATH=PTXAS, TRITON_CACHE_DIR=project / "cache")
    done = run_evo("--retune", "--backend", "command", "--evaluations", "2", cwd=project,
                   env={k: v for k, v in env.items() if k != "TRITON_PTXAS_PATH"})
    assert done.returncode == 0, done.stderr
    assert 'kernel "matmul_kernel": never compiled through nvcc-evo-ptxas for this ACF: its bench command runs ' \
           "once first" in done.stderr
    assert not list(Path(env["TMPDIR"]).glob("nvcc-evo-afresh-*"))          # (its fresh caches removed)
    assert 'kernel "matmul_kernel" [sm_90a]' in done.stderr and "not-rebuilt" not in done.stderr
    text = (project / "nvcc-evo.acf").read_text()
    assert text.count("target sm_90a {") == 1 and text.endswith('\nunit kernel "*" {\n}\n'), text
    assert "target sm_90a {\n        ptxas.maxrregcount = 64\n" in text, text
    provenance = {r.key: r.value for r in parse_text(text).units[0].targets[0].provenance}
    assert float(provenance["baseline.metric"]) > 64                        # (the cap changed the kernel)
    assert 'to use the new entries of kernel "matmul_kernel": run the program through the drop-in ptxas' in done.stderr
    assert "no compile of these units is recorded" not in done.stderr
    # the ptxas that compiled it is Triton's own (CUDA 12.8 with Triton 3.6), not the toolkit's nvcc (13.0)
    assert f'toolkit = "{TRITON_RELEASE}"' in text and TRITON_RELEASE != toolkit_release()
    again = subprocess.run([sys.executable, "bench_registers.py"], cwd=project, env=env, capture_output=True,
                           text=True)
    assert again.stdout == "time 64 ms\n"
    # the program's ptxas changes (Triton upgraded, or another named): its entry is stale for that
    other = subprocess.run([sys.executable, "bench_registers.py"], cwd=project, capture_output=True, text=True,
                           env=dict(env, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas")))
    assert other.returncode == 0, other.stderr
    listed = run_evo("--retune", "--dry-run", cwd=project, env=env)
    assert f"toolkit {TRITON_RELEASE} -> {toolkit_release()}" in listed.stderr, listed.stderr
