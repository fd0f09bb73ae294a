"""`nvcc-evo --retune` end to end on the CPU, with the real nvcc and ptxas."""
from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DATA, EVO, compile_seconds, evo_env, interruptible, run_evo

ACF = """acf 1
# hand-written notes survive a retune
unit "spill.cu" {
    search {
        ptxas.opt_level in 1..3
        ptxas.register_usage_level in 0..10
    }
    tune {
        minimize spills, registers   # static objectives
    }
}
"""


@pytest.fixture
def project(tmp_path) -> Path:
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    return tmp_path


def spills(stderr: str) -> int:
    return sum(int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", stderr))


def store_lines(project: Path) -> list[dict]:
    path = project / ".nvcc-evo" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def retune(project: Path, env: dict, *args: str):
    return run_evo("--retune", "--target", "sm_90", "--seed", "1", *args, cwd=project, env=env)


def test_retune_cuts_spills_and_the_build_uses_it(project, evo_cache):
    env = evo_env(evo_cache)
    before = subprocess.run([str(EVO), "-arch=sm_90", "-cubin", "-Xptxas", "-v", "spill.cu", "-o", "a.cubin"],
                            cwd=project, env=env, capture_output=True, text=True)
    result = retune(project, env, "--evaluations", "24")
    assert result.returncode == 0, result.stderr
    assert re.search(r"spills\s+284\s+48\s+-83.1%", result.stdout), result.stdout
    assert "backend static (no GPU timing" in result.stderr and "gen 1:" in result.stderr
    assert "waiting" not in result.stderr          # a lone retune never waits for its own lock
    assert re.search(r"gen 1: 12 evaluations .*\[\d+ s; at most 12 more, ~\d+ s at this pace; "
                     r"[\d.]+ candidates/min; per candidate: compile [\d.]+ s, other [\d.e-]+ s; \d+ ptxas only\]", result.stderr)
    assert re.search(r"  cost: [\d.]+ candidates/min; per candidate: compile [\d.]+ s", result.stdout)
    assert all(line["costs"]["compile"] > 0 for line in store_lines(project))
    text = (project / "nvcc-evo.acf").read_text()
    assert text.startswith(ACF[: ACF.rindex("}")])              # every byte before the new block kept
    assert "        ptxas.opt_level = 1\n" in text and 'verdict = "improved spills 284 -> 48"' in text
    assert 0 < float(re.search(r"search_seconds = ([0-9.]+)", text).group(1)) < 600
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=project).returncode == 0
    after = subprocess.run([str(EVO), "-arch=sm_90", "-cubin", "-Xptxas", "-v", "spill.cu", "-o", "b.cubin"],
                           cwd=project, env=env, capture_output=True, text=True)
    assert (spills(before.stderr), spills(after.stderr)) == (284, 48)


def test_only_stale_units_are_retuned(project, evo_cache):
    shutil.copy(DATA / "cuda" / "regs.cu", project / "regs.cu")
    (project / "nvcc-evo.acf").write_text(ACF + 'unit "regs.cu" {\n    search {\n        ptxas.opt_level in 1..3\n'
                                          '    }\n}\n')
    env = evo_env(evo_cache)
    first = retune(project, env, "--evaluations", "6")
    assert first.returncode == 0 and first.stderr.count("no entry for sm_90") == 2
    tuned = (project / "nvcc-evo.acf").read_text()
    again = retune(project, env, "--evaluations", "6")
    assert "nothing to retune" in again.stderr and (project / "nvcc-evo.acf").read_text() == tuned
    assert "kept for a GPU" not in again.stderr         # (said so, "as said above", where nothing was kept)
    (project / "regs.cu").write_text((project / "regs.cu").read_text() + "// edited\n")
    stored = store_lines(project)
    listed = retune(project, env, "--dry-run")                 # what would be retuned, nothing tuned
    assert listed.returncode == 0 and listed.stdout == '"regs.cu" [sm_90]: source changed (regs.cu)\n'
    assert "1 to retune (dry run" in listed.stderr
    assert (project / "nvcc-evo.acf").read_text() == tuned and store_lines(project) == stored
    gpu_list = run_evo("--retune", "--dry-run", "--backend", "pycuda", cwd=project, env=env)   # no GPU: the ACF's
    # stale units, and those whose entry only the static backend chose (a measuring backend has yet to judge them)
    assert gpu_list.returncode == 0 and gpu_list.stdout == (
        '"spill.cu" [sm_90]: its entry holds static objectives only (compiler facts): never measured\n' + listed.stdout)
    edited = retune(project, env, "--evaluations", "6")
    assert edited.returncode == 0
    assert '"regs.cu" [sm_90]: source changed' in edited.stderr and '"spill.cu" [sm_90]' not in edited.stderr
    new = (project / "nvcc-evo.acf").read_text()
    spill_block = tuned[tuned.index('unit "spill.cu"'):tuned.index('unit "regs.cu"')]
    assert spill_block in new


def test_interrupted_search_resumes_from_the_store(project, evo_cache):
    env = evo_env(evo_cache)
    argv = [str(EVO), "--retune", "--target", "sm_90", "--seed", "3", "--evaluations", "33", "--patience", "99",
            "--population", "6", "--jobs", "1"]
    running = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while len(store_lines(project)) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    running.send_signal(signal.SIGINT)
    out, err = running.communicate(timeout=120)
    assert running.returncode == 130, err
    assert "interrupted: every finished evaluation is kept" in err
    # said once, last ("nvcc-evo: interrupted" followed it, as if nothing had been said)
    assert err.rstrip().splitlines()[-1].startswith("nvcc-evo: interrupted: every finished evaluation is kept"), err
    assert "nvcc-evo: interrupted\n" not in err, err
    assert (project / "nvcc-evo.acf").read_text() == ACF            # nothing half-written
    kept = len(store_lines(project))
    assert kept >= 4
    resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming with {kept} stored evaluations" in resumed.stderr
    # the provenance tells those read back (`resumed`) from the same binary measured again (`reused`)
    assert f"resumed = {kept}\n" in (project / "nvcc-evo.acf").read_text()
    genomes = [json.dumps(line["genome"]) for line in store_lines(project)]
    assert len(genomes) == len(set(genomes)) == 33                   # the whole space, nothing twice


def test_kill_minus_nine_loses_at_most_the_evaluation_in_flight(project, evo_cache):
    env = evo_env(evo_cache)
    argv = [str(EVO), "--retune", "--target", "sm_90", "--evaluations", "20", "--jobs", "1", "--population", "4"]
    running = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(store_lines(project)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    running.kill()
    running.wait()
    kept = store_lines(project)          # every line still parses
    resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0 and f"resuming with {len(kept)} stored evaluations" in resumed.stderr


def test_a_hung_compile_times_out_and_is_recorded(project, evo_cache, real_nvcc):
    """A fake nvcc that hangs for one define value, through the real code path. The candidates'
    --timeout is five of this machine's compiles of the unit, measured here: the other candidate
    finishes inside it however loaded the machine is (a fixed 5 s cut it short once a compile took
    that long). The space is the define alone, so that one candidate waits out the timeout."""
    fake = project / "bin" / "nvcc"
    fake.parent.mkdir()
    hang = 600                          # far beyond the run's time on a loaded machine (pytest -n on 2 cores)
    fake.write_text(f'#!/bin/sh\ncase " $* " in *" -DHANG=1 "*) sleep {hang};; esac\nexec {real_nvcc} "$@"\n')
    fake.chmod(0o755)
    source = project / "spill.cu"
    source.write_text("#ifndef HANG\n#define HANG 0\n#endif\n" + source.read_text())
    searched = "ptxas.opt_level in 1..3\n        ptxas.register_usage_level in 0..10"
    (project / "nvcc-evo.acf").write_text(ACF.replace(searched, "define.HANG in {0, 1}"))   # one hung candidate
    timeout = max(5, math.ceil(5 * compile_seconds(source, "sm_90", "-DHANG=0")))
    env = evo_env(evo_cache, fake)
    started = time.monotonic()
    result = retune(project, env, "--timeout", str(timeout), "--evaluations", "10")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < hang / 2                  # the hung compile was cut short, not waited for
    statuses = {dict(line["genome"])["define.HANG"]: line["status"] for line in store_lines(project)}
    assert statuses == {0: "ok", 1: "timeout"}
    assert any(f"compile exceeded {timeout} s" in line["detail"] for line in store_lines(project))
    assert "define.HANG = 1" not in (project / "nvcc-evo.acf").read_text()


def test_a_static_retune_keeps_entries_measured_on_a_gpu(project, evo_cache):
    """Stale by its fingerprint, but measured on a GPU: without a GPU the entry stays (registers do not rank
    runtime); naming the unit overwrites it."""
    measured = ACF[:ACF.rindex("}")] + (
        '    target sm_90 {\n        ptxas.opt_level = 2\n        provenance {\n'
        '            fingerprint = "sha256:0000"\n            backend = pycuda\n            gpu = "NVIDIA H200"\n'
        '            date = "2026-11-30"\n        }\n    }\n}\n')
    (project / "nvcc-evo.acf").write_text(measured)
    env = evo_env(evo_cache)
    kept = retune(project, env, "--evaluations", "6", "--backend", "static")
    assert kept.returncode == 0 and (project / "nvcc-evo.acf").read_text() == measured
    assert '"spill.cu" [sm_90]: source changed' in kept.stderr
    # (it said "nothing to retune: every unit and target is up to date (1 kept for a GPU, ...)" of a stale entry)
    assert "nothing retuned: 1 stale entry measured on a GPU kept for one, as said above" in kept.stderr
    assert "every unit and target is up to date" not in kept.stderr
    assert "but its entry was measured (backend pycuda on NVIDIA H200, 2026-11-30)" in kept.stderr
    forced = retune(project, env, "--evaluations", "6", "--backend", "static", "spill.cu")
    assert forced.returncode == 0 and "backend = static" in (project / "nvcc-evo.acf").read_text()


def test_a_unit_whose_baseline_fails_makes_the_retune_fail(project, evo_cache):
    (project / "broken.cu").write_text('extern "C" __global__ void k(float* y) { y[0] = 1.0f }\n')
    (project / "nvcc-evo.acf").write_text(ACF + 'unit "broken.cu" {\n    search {\n        ptxas.opt_level in 1..3\n'
                                          '    }\n}\n')
    result = retune(project, evo_env(evo_cache), "--evaluations", "6")
    assert result.returncode == 1
    assert 'not tuned, their baseline failed: "broken.cu" [sm_90]' in result.stderr
    assert 'verdict = "improved' in (project / "nvcc-evo.acf").read_text()      # spill.cu is written all the same


def test_a_seed_reproduces_the_search_with_compiles_running_ahead(tmp_path, evo_cache):
    """Batches compile while the one before is measured; the same seed still
    gives the same candidates in the same order."""
    orders = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(DATA / "cuda" / "spill.cu", folder / "spill.cu")
        (folder / "nvcc-evo.acf").write_text(ACF)
        result = retune(folder, evo_env(evo_cache), "--evaluations", "30", "--population", "6")
        assert result.returncode == 0, result.stderr
        orders.append([line["genome"] for line in store_lines(folder)])
    assert len(orders[0]) == 31 and orders[0] == orders[1]        # the baseline, then 30


def test_a_retune_never_builds_a_point_the_search_blocks_requires_exclude(tmp_path, evo_cache):
    shutil.copy(Path(__file__).resolve().parent.parent / "kernels" / "sgemm_regblock.cu", tmp_path)
    (tmp_path / "nvcc-evo.acf").write_text("""acf 1
unit "sgemm_regblock.cu" {
    search {
        define.BM in {64, 128, 256}
        define.BN in {64, 128, 256}
        define.TM in {2, 4, 8}
        define.TN in {2, 4, 8}
        ptxas.opt_level in 1..3
        require (BM / TM) * (BN / TN) <= 256
        require (BM * 8) % ((BM / TM) * (BN / TN)) == 0
    }
    tune {
        minimize registers
    }
}
""")
    result = retune(tmp_path, evo_env(evo_cache), "--evaluations", "12", "--population", "6")
    assert result.returncode == 0, result.stderr
    points = [(bm, bn, tm, tn) for bm in (64, 128, 256) for bn in (64, 128, 256) for tm in (2, 4, 8) for tn in (2, 4, 8)
              if (bm // tm) * (bn // tn) <= 256 and (bm * 8) % ((bm // tm) * (bn // tn)) == 0]
    assert f"space {len(points) * 3} points" in result.stderr
    built = [dict(line["genome"]) for line in store_lines(tmp_path)][1:]           # the baseline aside
    assert len(built) == 12 and all(line["status"] == "ok" for line in store_lines(tmp_path))
    assert all((g["define.BM"], g["define.BN"], g["define.TM"], g["define.TN"]) in points for g in built)
