"""Triton 3.6's two ptxas programs: `ptxas` (CUDA 12.8) below sm_100 and
`ptxas-blackwell` (CUDA 12.9) from sm_100 on, each named by its own variable
(TRITON_PTXAS_PATH, TRITON_PTXAS_BLACKWELL_PATH). nvcc-evo-ptxas and
nvcc-evo-ptxas-blackwell stand in for them, each running the program it
replaces with the entry of the target it is asked for; real Triton compiles
for sm_90a and sm_100 on a machine with no GPU."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, evo_env, run_evo
from nvcc_evo.driver.cmdline.ptxas import probe
from nvcc_evo.driver.dropin_ptxas import shim
from nvcc_evo.driver.dropin_ptxas.afresh import through_stand_ins
from nvcc_evo.cubin.sass import cubin_registers

pytest.importorskip("triton", reason="Triton is not installed (the test extra brings it on Linux x86_64)")
BIN = Path(sys.executable).parent
PTXAS, BLACKWELL = BIN / "nvcc-evo-ptxas", BIN / "nvcc-evo-ptxas-blackwell"
KERNELS = DATA / "triton" / "kernels.py"
ENTRIES = """acf 1
unit kernel "matmul_kernel" {
    pin ptxas.override_directive_values = true
    target sm_90a {
        ptxas.maxrregcount = 96
    }
    target sm_100a {
        ptxas.maxrregcount = 80
    }
}
"""


def triton_bin() -> Path:
    import triton
    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def compile_small(folder: Path, env: dict, capability: int, name: str) -> bytes:
    """The small matmul compiled by Triton for `capability`, in `folder`: the cubin."""
    out = folder / name
    done = subprocess.run([sys.executable, str(KERNELS), "matmul_small", str(out), str(capability)], cwd=folder,
                          env=dict(env, TRITON_CACHE_DIR=str(folder / f"cache-{name}")), capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return out.read_bytes()


def log_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def test_each_stand_in_runs_the_program_it_replaces_with_its_target_s_entry(project, evo_cache, tmp_path):
    (project / "nvcc-evo.acf").write_text(ENTRIES)
    log = project / "log.jsonl"
    env = evo_env(evo_cache, NVCC_EVO_LOG=log, TRITON_PTXAS_PATH=PTXAS, TRITON_PTXAS_BLACKWELL_PATH=BLACKWELL)
    assert cubin_registers(compile_small(project, env, 90, "h.cubin")) == 96
    assert cubin_registers(compile_small(project, env, 100, "b.cubin")) == 80
    hopper, blackwell = log_lines(log)
    assert (hopper["argv"][0], hopper["program"]) == ("ptxas", str(triton_bin() / "ptxas"))
    assert (blackwell["argv"][0], blackwell["program"]) == ("ptxas-blackwell", str(triton_bin() / "ptxas-blackwell"))
    assert "-maxrregcount=96" in hopper["added"] and hopper["units"][0]["arch"] == "sm_90a"
    assert "-maxrregcount=80" in blackwell["added"] and blackwell["units"][0]["arch"] == "sm_100a"
    records = [json.loads(p.read_text()) for p in (project / ".nvcc-evo" / "compile-db").glob("*.json")]
    assert sorted(Path(r["nvcc"]).name for r in records) == ["ptxas", "ptxas-blackwell"], records
    # no ACF: Triton's own Blackwell cubin, byte for byte
    alone = tmp_path / "alone"
    alone.mkdir()
    own = compile_small(alone, evo_env(evo_cache), 100, "own.cubin")
    assert cubin_registers(own) > 80
    assert compile_small(alone, env | {"NVCC_EVO_LOG": str(alone / "log")}, 100, "through.cubin") == own


def test_plain_nvcc_evo_ptxas_named_for_blackwell_runs_ptxas_blackwell(project, evo_cache):
    """A likely slip: both variables name nvcc-evo-ptxas. Its sm_100 compiles
    still run Triton's ptxas-blackwell (not NVCC_EVO_REAL_PTXAS, the sm_90
    one), and the one `--version` Triton asks of both is the older program's
    (CUDA 12.9's, not 13.0's: ptxas-blackwell refuses PTX 9.0)."""
    (project / "nvcc-evo.acf").write_text(ENTRIES)
    log = project / "log.jsonl"
    env = evo_env(evo_cache, NVCC_EVO_LOG=log, TRITON_PTXAS_PATH=PTXAS, TRITON_PTXAS_BLACKWELL_PATH=PTXAS,
                  NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"))
    assert cubin_registers(compile_small(project, env, 100, "b.cubin")) == 80
    line, = log_lines(log)
    assert (line["argv"][0], line["program"]) == ("ptxas-blackwell", str(triton_bin() / "ptxas-blackwell"))


def test_version_answers_ptxas_blackwell_s_release(project, evo_cache):
    own = subprocess.run([str(triton_bin() / "ptxas-blackwell"), "--version"], capture_output=True, text=True).stdout
    assert "release 12.9" in own
    (project / "nvcc-evo.acf").write_text(ENTRIES)
    env = evo_env(evo_cache, NVCC_EVO_REAL_PTXAS=shutil.which("ptxas"))       # (this process has loaded Triton)
    done = subprocess.run([str(BLACKWELL), "--version"], cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(own), done.stdout + done.stderr
    assert done.stdout[len(own):].startswith("nvcc-evo-ptxas: kernel entries ")
    fake = project / "my-ptxas-blackwell"
    fake.write_text(f'#!/bin/sh\nexec {triton_bin() / "ptxas-blackwell"} "$@"\n')
    fake.chmod(0o755)
    done = subprocess.run([str(BLACKWELL), "--explain", "--version"], cwd=project, capture_output=True, text=True,
                          env=dict(env, NVCC_EVO_REAL_PTXAS_BLACKWELL=str(fake)))
    assert "stands in for: ptxas-blackwell (Triton's TRITON_PTXAS_BLACKWELL_PATH)" in done.stdout
    assert f"real ptxas-blackwell: {fake} (NVCC_EVO_REAL_PTXAS_BLACKWELL)" in done.stdout


def test_ptxas_blackwell_is_never_a_plain_ptxas(tmp_path, monkeypatch):
    toolkit = Path(shutil.which("ptxas")).parent
    monkeypatch.setattr(sys, "path", [])                   # no Triton beside us, none loaded by pid 1
    with pytest.raises(shim.PtxasNotFound, match="no real ptxas-blackwell found .*NVCC_EVO_REAL_PTXAS_BLACKWELL"):
        shim.find_real_ptxas({"PATH": str(toolkit), "CUDA_HOME": str(toolkit.parent)}, ppid=1, role=shim.BLACKWELL)
    assert shim.find_real_ptxas({"PATH": str(toolkit)}, ppid=1) == str(toolkit / "ptxas")
    (tmp_path / "bin").mkdir()
    shutil.copy(triton_bin() / "ptxas-blackwell", tmp_path / "bin" / "ptxas-blackwell")
    assert shim.find_real_ptxas({"PATH": str(toolkit), "CUDA_HOME": str(tmp_path)}, ppid=1, role=shim.BLACKWELL) \
        == str(tmp_path / "bin" / "ptxas-blackwell")


@pytest.mark.parametrize("argv0, argv, named, role", [
    ("/x/nvcc-evo-ptxas-blackwell", ["--gpu-name=sm_90a", "k.ptx"], {}, "ptxas-blackwell"),     # by its name
    ("PLAIN", ["--gpu-name=sm_100a", "k.ptx"], {}, "ptxas"),              # not named for Blackwell: as asked
    ("PLAIN", ["--gpu-name=sm_100a", "k.ptx"], {"TRITON_PTXAS_BLACKWELL_PATH": "PLAIN"}, "ptxas-blackwell"),
    ("PLAIN", ["--gpu-name", "sm_120a", "k.ptx"], {"TRITON_PTXAS_BLACKWELL_PATH": "PLAIN"}, "ptxas-blackwell"),
    ("PLAIN", ["-arch=sm_90a", "k.ptx"], {"TRITON_PTXAS_BLACKWELL_PATH": "PLAIN"}, "ptxas"),
    ("PLAIN", ["--version"], {"TRITON_PTXAS_BLACKWELL_PATH": "PLAIN"}, "ptxas-blackwell"),
    ("PLAIN", ["--version"], {"TRITON_PTXAS_BLACKWELL_PATH": "PLAIN", "TRITON_PTXAS_PATH": "PLAIN"},
     "ptxas or ptxas-blackwell"),
    ("PLAIN", ["--version"], {"TRITON_PTXAS_BLACKWELL_PATH": "nvcc-evo-ptxas"}, "ptxas-blackwell"),   # found on PATH
])
def test_which_program_a_call_stands_in_for(argv0, argv, named, role):
    plain = str(PTXAS)
    environ = {"PATH": str(BIN), **{k: plain if v == "PLAIN" else v for k, v in named.items()}}
    assert shim.stands_for(plain if argv0 == "PLAIN" else argv0, argv, environ) == role


def test_a_candidate_run_gets_both_stand_ins_and_fresh_caches(tmp_path):
    real = triton_bin() / "ptxas-blackwell"
    env = through_stand_ins({"TRITON_PTXAS_BLACKWELL_PATH": str(real), "TRITON_PTXAS_PATH": str(PTXAS),
                             "TORCHINDUCTOR_CACHE_DIR": "/warm", "TRITON_CACHE_DIR": "/warm/triton"}, str(tmp_path))
    assert (env["TRITON_PTXAS_PATH"], env["TRITON_PTXAS_BLACKWELL_PATH"]) == (str(PTXAS), str(BLACKWELL))
    assert env["NVCC_EVO_REAL_PTXAS_BLACKWELL"] == str(real) and "NVCC_EVO_REAL_PTXAS" not in env
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor-cache")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-cache")
    assert env["TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"] == "0"
    mine = through_stand_ins({"TRITON_PTXAS_BLACKWELL_PATH": str(real), "NVCC_EVO_REAL_PTXAS_BLACKWELL": "/mine"}, "/f")
    assert mine["NVCC_EVO_REAL_PTXAS_BLACKWELL"] == "/mine"        # the user's own choice of the real one wins


RETUNED = """acf 1
unit kernel "matmul_kernel" {
    pin ptxas.override_directive_values = true
    search {
        ptxas.maxrregcount in {64, 255}
    }
    bench {
        command "sh bench.sh"
        metric "time ([0-9.]+) ms"
        confirm rounds 5
    }
}
"""
# The bench command: TorchInductor's cache must be the run's own and empty (as Inductor fills it, it writes one)
BENCH = """set -e
test -n "$TORCHINDUCTOR_CACHE_DIR" || { echo "no TORCHINDUCTOR_CACHE_DIR of the run's own" >&2; exit 9; }
test ! -e "$TORCHINDUCTOR_CACHE_DIR" || { echo "$TORCHINDUCTOR_CACHE_DIR is not fresh" >&2; exit 9; }
mkdir -p "$TORCHINDUCTOR_CACHE_DIR" && echo kernel > "$TORCHINDUCTOR_CACHE_DIR/fxgraph"
exec PYTHON bench_registers.py 100
"""


def test_retune_of_a_blackwell_kernel_through_the_user_s_own_benchmark(project, evo_cache):
    """The sm_100a entry is searched with the programs Triton runs for it:
    candidates compiled by ptxas-blackwell (the entry's toolkit is its
    release), every run with TorchInductor's and Triton's caches of its own."""
    for name in ("kernels.py", "bench_registers.py"):
        shutil.copy(DATA / "triton" / name, project / name)
    (project / "bench.sh").write_text(BENCH.replace("PYTHON", sys.executable))
    (project / "nvcc-evo.acf").write_text(RETUNED)
    env = evo_env(evo_cache, TRITON_PTXAS_BLACKWELL_PATH=BLACKWELL, TRITON_CACHE_DIR=project / "cache",
                  TORCHINDUCTOR_CACHE_DIR=project / "warm-inductor")
    first = subprocess.run([sys.executable, "bench_registers.py", "100"], cwd=project, env=env, capture_output=True,
                           text=True)
    assert first.returncode == 0 and float(first.stdout.split()[1]) > 64, first.stderr
    done = run_evo("--retune", "--backend", "command", "--evaluations", "2", cwd=project,
                   env={k: v for k, v in env.items() if k != "TRITON_PTXAS_BLACKWELL_PATH"})
    assert done.returncode == 0, done.stderr
    assert 'kernel "matmul_kernel" [sm_100a]' in done.stderr and "not-rebuilt" not in done.stderr, done.stderr
    text = (project / "nvcc-evo.acf").read_text()
    assert "target sm_100a {\n        ptxas.maxrregcount = 64\n" in text, text
    release = probe(str(triton_bin() / "ptxas-blackwell")).version
    assert f'toolkit = "{release}"' in text and release.startswith("12.9")
    assert "TRITON_PTXAS_BLACKWELL_PATH=nvcc-evo-ptxas-blackwell" in done.stderr
    assert "empty TORCHINDUCTOR_CACHE_DIR" in done.stderr and "TORCH_COMPILE_CACHE_KEY_TAG" in done.stderr
    again = subprocess.run([sys.executable, "bench_registers.py", "100"], cwd=project, env=env, capture_output=True,
                           text=True)
    assert again.stdout == "time 64 ms\n", again.stderr
