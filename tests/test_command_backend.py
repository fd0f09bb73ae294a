"""The command backend as a user runs it (real nvcc, real make, no GPU): a
project timed by its own harness, repeats and the interleaved confirmation,
the rebuild guarantee, wrong answers and failures on stderr."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import DATA, EVO, evo_env, run_evo
from nvcc_evo.acf import model
from nvcc_evo.acf.bench.command import wrong_answer
from nvcc_evo.measure.command.rebuilt import LONG_AGO, flags_problem


def _harness(tmp_path, evo_cache, space: str):
    """tests/data/projects/harness with its search block replaced, built
    once through nvcc-evo (so the compile database knows its outputs)."""
    project = tmp_path / "harness"
    shutil.copytree(DATA / "projects" / "harness", project)
    acf = project / "nvcc-evo.acf"
    text = acf.read_text()
    start, end = text.index("    search {"), text.index("    tune {")
    acf.write_text(text[:start] + f"    search {{\n        {space}\n    }}\n" + text[end:])
    env = evo_env(evo_cache, PATH=f"{EVO.parent}{os.pathsep}{os.environ['PATH']}")
    built = __import__("subprocess").run(["make", "-s", "NVCC=nvcc-evo", "bench"], cwd=project, env=env,
                                         capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return project, env


def _spill_project(folder, run: str, bench: list[str], cubin_flags: str = ""):
    """tests/data/cuda/spill.cu in `folder` with an ACF searching
    ptxas.opt_level in {1, 3}, its bench command building the cubin through
    nvcc-evo and then `run`, and these further bench lines; the ACF's path."""
    shutil.copy(DATA / "cuda" / "spill.cu", folder / "spill.cu")
    acf = folder / "nvcc-evo.acf"
    lines = "".join(f"        {line}\n" for line in bench)
    acf.write_text(f"""acf 1
unit "spill.cu" {{
    search {{
        ptxas.opt_level in {{1, 3}}
    }}
    bench {{
        command "{EVO} -arch=sm_90 -cubin {cubin_flags}spill.cu -o spill.cubin && {run}"
{lines}    }}
}}
""")
    return acf


def _provenance(acf_text: str) -> dict:
    from nvcc_evo.acf.parse import parse_text
    target = parse_text(acf_text).units[0].targets[0]
    return {r.key: r.value for r in target.provenance}


def test_a_real_effect_in_the_projects_own_harness_is_found_and_confirmed(tmp_path, evo_cache):
    project, env = _harness(tmp_path, evo_cache, "define.NEWTON_STEPS in {6, 32}")
    log = tmp_path / "wrapper.log"
    env["NVCC_EVO_LOG"] = str(log)          # the user's own log gets the candidates' compiles too
    # (an evaluation budget: a time budget keeps back what 5 rounds take, much on a loaded machine)
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--evaluations", "4", cwd=project,
                     env=env)
    assert result.returncode == 0, result.stderr
    assert "improved time" in result.stdout
    text = (project / "nvcc-evo.acf").read_text()
    assert "        define.NEWTON_STEPS = 6\n" in text
    found = _provenance(text)
    assert found["test"] == "mannwhitneyu" and found["p_value"] < 0.01 and found["significant"] is True
    assert found["rounds"] == 5 and found["repeats"] == 3 and found["effect_size"] > 1.5
    assert found["baseline.time"] > found["tuned.time"]
    # each candidate: its runs, medians and spread, and the seconds it cost
    assert "-DNEWTON_STEPS=6: time " in result.stderr and " ms ±" in result.stderr and "(3 runs" in result.stderr
    records = [json.loads(line) for line in (project / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    assert all(r["metrics"]["runs"] == 3 and "time" in r["spreads"] for r in records)
    # make rebuilt every candidate (nvcc-evo re-dates the outputs the compile database knows): the
    # baseline (32) and the candidate once in the search (their repeats reuse the build), the baseline
    # once more for the drift after the search, then both in each of the five confirmation rounds
    steps = [" ".join(c["added"]) for c in map(json.loads, log.read_text().splitlines()) if c.get("units")]
    assert steps.count("-DNEWTON_STEPS=6") == 6 and steps.count("-DNEWTON_STEPS=32") == 7, steps
    assert "baseline drift: " in result.stdout
    # the binary left in the tree is some candidate's: re-dated, so the next build compiles the ACF's choice
    assert (project / "bench").stat().st_mtime == LONG_AGO


NOISE = (
    "import os, random\n"
    "run = random.Random(int(os.environ['NVCC_EVO_RUN']))\n"
    "lucky = 0.5 if os.environ['NVCC_EVO_PHASE'] == 'search' and os.environ['NVCC_EVO_CANDIDATE_FLAGS'] else 0\n"
    "print('time %.4f ms' % (run.gauss(10, 0.3) - lucky))\n")


def test_a_winner_that_was_noise_keeps_the_baseline(tmp_path, evo_cache):
    """The search sees a candidate 5% ahead; re-run interleaved, the metric is
    pure noise (the same for every candidate): the baseline is kept, and the
    provenance says why."""
    (tmp_path / "noise.py").write_text(NOISE)
    _spill_project(tmp_path, f"{sys.executable} noise.py",
                   ['metric time "time ([0-9.]+) ms"', 'check command "test -s spill.cubin"', "confirm rounds 6"])
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert "baseline kept: gain not significant" in result.stdout
    text = (tmp_path / "nvcc-evo.acf").read_text()
    found = _provenance(text)
    # sequential: it may stop after the 5 least rounds once even a clean sixth could not make it significant
    assert found["significant"] is False and found["p_value"] >= 0.01 and 5 <= found["rounds"] <= 6
    assert found["verdict"].startswith("baseline kept")
    assert "ptxas.opt_level = " not in text


def test_a_command_that_does_not_rebuild_fails_and_says_why(tmp_path, evo_cache):
    project, env = _harness(tmp_path, evo_cache, "define.NEWTON_STEPS in {6, 32}")
    acf = project / "nvcc-evo.acf"
    acf.write_text(acf.read_text().replace('command "make -s NVCC=nvcc-evo bench && ./bench 5"',
                                           'command "echo running the old binary && ./bench 5"'))
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=project, env=env)
    assert result.returncode == 1
    assert "not-rebuilt" in result.stderr and "no compile of unit bench.cu for sm_90" in result.stderr
    assert "    | running the old binary" in result.stderr          # the run's last lines, on stderr


def test_flags_the_build_overrides_fail_the_candidate(tmp_path, evo_cache):
    """The bench's build passes ptxas -O3, which the recorded build (built
    once through nvcc-evo without it) does not: its -O3 wins over the
    candidate's -O1 (the user's flag is never overridden), the candidate was
    not what ran, so it fails. (Where the recorded build itself passes -O3,
    the knob is left out of the search before it starts, said.)"""
    _spill_project(tmp_path, "echo 'time 1 ms'", ['metric time "time ([0-9.]+) ms"'], cubin_flags="-Xptxas -O3 ")
    env = evo_env(evo_cache)
    built = subprocess.run([str(EVO), "-arch=sm_90", "-cubin", "spill.cu", "-o", "spill.cubin"], cwd=tmp_path,
                           env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=env)
    assert "flags-not-applied" in result.stderr, result.stderr
    assert "missing -O1" in result.stderr and "baseline kept" in result.stdout


def test_flags_are_checked_against_the_wrappers_log():
    line = {"added": ["-Xptxas", "-O1", "-DTILE=8"], "units": [{"input": "k.cu", "arch": "sm_90", "unit": ["k.cu"]}],
            "skipped": []}
    other = {"added": [], "units": [{"input": "o.cu", "arch": "sm_90", "unit": ["o.cu"]}]}
    assert flags_problem([other, line], ("k.cu",), "sm_90", ("-Xptxas", "-O1", "-DTILE=8"), True) == (None, "")
    assert flags_problem([other], ("k.cu",), "sm_90", (), True)[0] == "not-rebuilt"
    assert flags_problem([other], ("k.cu",), "sm_90", (), False) == (None, "")      # a repeat need not build
    status, why = flags_problem([line], ("k.cu",), "sm_90", ("-Xptxas", "-O2"), False)
    assert status == "flags-not-applied" and "missing -O2" in why
    split = dict(line, added=["-DTILE=8"], ptxas_per_step=[{"input": "k.cu", "arch": "sm_90", "options": ["-O1"]}])
    assert flags_problem([split], ("k.cu",), "sm_90", ("-Xptxas", "-O1", "-DTILE=8"), True) == (None, "")


@pytest.mark.parametrize("checks, output, code, wrong", [
    ((model.RunCheck("exit", 0),), "ok", 1, "exit code 1"),
    ((model.RunCheck("exit", 0),), "ok", 0, ""),
    ((model.RunCheck("match", r"All results match"),), "Mismatch of out", 0, "does not match"),
    ((model.RunCheck("absent", r"Mismatch"),), "a\nMismatch of out at 3\n", 0, "Mismatch of out at 3"),
    ((model.RunCheck("absent", r"Mismatch"),), "All results match", 0, ""),
])
def test_run_checks_tell_wrong_answers(checks, output, code, wrong):
    found = wrong_answer(checks, output, code)
    assert (wrong in found) if wrong else found == ""


def test_a_metric_to_maximize_is_scored_and_judged_upward():
    from nvcc_evo.measure.stats import judged
    from nvcc_evo.execute.goal import goal_for
    goal = goal_for(model.Tune(minimize=("tokens",)), ("tokens", "registers"), maximize=("tokens",))
    assert goal.scores({"tokens": 900.0}) < goal.scores({"tokens": 800.0})        # more tokens/s: a lower score
    assert goal.better("tokens", 900, 800) and goal.better("registers", 800, 900)
    verdict = judged({"baseline": [800, 810, 790, 805, 795], "chosen": [900, 910, 890, 905, 895]}, maximize=True)
    assert verdict.significant and abs(verdict.effect - 900 / 800) < 0.01
    assert not judged({"baseline": [800, 810, 790, 805, 795], "chosen": [900, 910, 890, 905, 895]},
                      maximize=False).significant


def test_without_a_tune_block_the_first_metric_is_tuned():
    from nvcc_evo.execute.goal import goal_for
    assert goal_for(None, ("time", "tokens", "registers", "spills"), primary=("time",)).minimize == ("time",)
    assert goal_for(None, ("registers", "spills")).minimize == ("spills", "registers")


def test_the_docs_show_the_example_projects_acf_and_the_language_example_checks(tmp_path):
    from conftest import ROOT
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.acf.resolve import check
    blocks = (ROOT / "docs" / "retune.md").read_text().split("```\n")[1::2]
    unit = next(b for b in blocks if b.startswith('unit "bench.cu"'))
    assert unit in (DATA / "projects" / "harness" / "nvcc-evo.acf").read_text()
    blocks = (ROOT / "docs" / "acf.md").read_text().split("```\n")[1::2]
    example = next(b for b in blocks if b.startswith("acf 1"))
    (tmp_path / "references.py").write_text("def sgemm(**arrays):\n    return {}\n")
    check(parse_text(example, str(tmp_path / "nvcc-evo.acf")), example)


def test_results_of_another_bench_command_are_not_reused(tmp_path, evo_cache):
    acf = _spill_project(tmp_path, "echo 'time 2 ms, 1 ms'", ['metric time "([0-9]+) ms"'])
    env = evo_env(evo_cache)
    first = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert "baseline.time = 2\n" in acf.read_text()       # one run a candidate: no spread claimed (not "+- 0.0")
    assert "spread (p20..p80" not in first.stderr
    acf.write_text(acf.read_text().replace('metric time "([0-9]+) ms"', 'metric time "([0-9]+) ms" take last'))
    again = run_evo("--retune", "--all", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert "other context(s) in the results store left aside" in again.stderr
    assert "baseline.time = 1\n" in acf.read_text()


@pytest.mark.parametrize("failure, said", [
    ("print('Mismatch of out at 7: CPU_ref: 1.0 vs GPU: 2.0')",
     "failed its check: the output matches `check not \"Mismatch\"`: Mismatch of out at 7: CPU_ref: 1.0 vs GPU: 2.0"),
    ("raise SystemExit(3)", "exited with status 3"),
])
def test_a_failed_confirmation_run_keeps_the_baseline_and_says_what_failed(tmp_path, evo_cache, failure, said):
    """The winner looks faster while searching, then its confirmation run (the
    longer run) prints a mismatch, or exits with an error: never written, and
    the verdict says which run failed and how, in the command's own terms
    (not the GPU backend's "wrong on fresh inputs")."""
    (tmp_path / "run.py").write_text(
        "import os\n"
        "tuned = bool(os.environ['NVCC_EVO_CANDIDATE_FLAGS'])\n"
        "if tuned and os.environ['NVCC_EVO_PHASE'] == 'confirm':\n"
        f"    {failure}\n"
        "print('time %d ms' % (5 if tuned else 10))\n")
    _spill_project(tmp_path, f"{sys.executable} run.py", ['metric time "time ([0-9.]+) ms"', 'check not "Mismatch"'])
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    expected = f"the chosen candidate's confirmation run 1 of 10 {said}"
    assert expected in result.stderr
    assert f"baseline kept: {expected}" in result.stdout and "fresh inputs" not in result.stdout + result.stderr
    text = (tmp_path / "nvcc-evo.acf").read_text()
    assert "ptxas.opt_level = " not in text and "fresh inputs" not in text
    if "Mismatch" in failure:
        assert "    | Mismatch of out at 7" in result.stderr         # the run's last lines


def test_the_baseline_is_run_again_after_the_search_and_its_drift_reported(tmp_path, evo_cache):
    """The command backend's drift: the baseline rebuilt and run after the
    search (NVCC_EVO_PHASE=drift), its metric against its first runs',
    reported on stderr and in the end report."""
    (tmp_path / "run.py").write_text(
        "import os\n"
        "tuned, phase = bool(os.environ['NVCC_EVO_CANDIDATE_FLAGS']), os.environ['NVCC_EVO_PHASE']\n"
        "open('phases.log', 'a').write(f'{phase} {tuned}\\n')\n"
        "print('time %d ms' % (5 if tuned else 11 if phase == 'drift' else 10))\n")
    _spill_project(tmp_path, f"{sys.executable} run.py",
                   ['metric time "time ([0-9.]+) ms"', "confirm rounds 6", "repeat 2"])
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert '"spill.cu" [sm_90]: baseline drift +10.00% (the baseline built and run again after the search' \
        in result.stderr
    assert "  baseline drift: +10.00% (run again after the search)" in result.stdout
    phases = (tmp_path / "phases.log").read_text().splitlines()
    assert phases.count("drift False") == 2 and "drift True" not in phases           # the baseline, its 2 repeats
    assert phases.index("drift False") > max(i for i, p in enumerate(phases) if p.startswith("search"))
    assert phases.index("drift False") < phases.index("confirm False")               # before the confirmation


def test_the_confirmation_compiles_nothing_the_command_rebuilds_itself(tmp_path, evo_cache, real_nvcc):
    """The command backend rebuilds each side through the project's own
    command: the retune compiles each candidate once (for the search's static
    facts) and nothing more for the confirmation. A counting nvcc (the real
    one behind a script) logs every compile the retune makes (`--keep-dir`:
    the retune's candidate builds; the command's own go through the wrapper)."""
    calls = tmp_path / "calls.log"
    counting = tmp_path / "bin" / "nvcc"
    counting.parent.mkdir()
    counting.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real_nvcc} "$@"\n')
    counting.chmod(0o755)
    (tmp_path / "run.py").write_text(
        "import os\nprint('time %d ms' % (5 if os.environ['NVCC_EVO_CANDIDATE_FLAGS'] else 10))\n")
    _spill_project(tmp_path, f"{sys.executable} run.py", ['metric time "time ([0-9.]+) ms"', "confirm rounds 6"])
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path,
                     env=evo_env(evo_cache, counting))
    assert result.returncode == 0, result.stderr
    assert "improved time 10 -> 5" in result.stdout
    assert "verification of ptxas.opt_level=1 against the baseline: mannwhitneyu" in result.stderr, result.stderr
    stored = (tmp_path / ".nvcc-evo" / "results.jsonl").read_text().splitlines()
    built = [line for line in calls.read_text().splitlines() if "--keep-dir" in line]
    # the baseline (-O3) and -O1 once each, the ship check's build of the entry written (retune.scope.reach), and
    # the per-kernel comparison of the two (kerneldiff.compare: their PTX kept, only ptxas run again)
    assert len(stored) == 2 and len(built) == len(stored) + 1 + 2, built
    rebuilt = [line for line in calls.read_text().splitlines() if "spill.cubin" in line]
    rounds = _provenance((tmp_path / "nvcc-evo.acf").read_text())["rounds"]
    assert rounds == 5                              # sequential: clear after the least rounds (6 allowed)
    # the command's: its first run (the unit never built: it records the build), the search's two, the drift's,
    # two a round
    assert len(rebuilt) == 1 + 2 + 1 + 2 * rounds, rebuilt


def test_what_is_searched_is_said_before_the_baseline_runs(tmp_path, evo_cache):
    """A bench command's baseline runs take a while (30 s for a third-party GEMM benchmark on the H200)
    and print their own line: the unit's header (why it is retuned, the backend, the space) comes
    first. (It came after the baseline's line, as if the baseline belonged to the unit before.)

    Beside it `unit "*.cu" {}` (no search, no bench: what `--hot` asks for so that a build is recorded):
    the retune stopped with a usage error until it was removed by hand. Passed by now, said once."""
    acf = _spill_project(tmp_path, "echo 'time 2 ms'", ['metric time "([0-9]+) ms"'])
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "other.cu")
    acf.write_text(acf.read_text() + '\n# records every other compile\nunit "*.cu" {\n}\n')
    done = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--evaluations", "2", cwd=tmp_path,
                   env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if "space 2 points, 1 knobs" in line)
    baseline = next(i for i, line in enumerate(lines) if "(baseline): time 2" in line)
    assert header < baseline, done.stderr
    said = [line for line in lines if '"*.cu"' in line]
    assert len(said) == 1 and "unit \"*.cu\" has no `bench { command ...; metric ... }` block for the command " \
        "backend, nor a search block: it records the build's compiles (for --hot, other units): not retuned" \
        in said[0], done.stderr
    assert done.stdout.splitlines()[2].startswith('"spill.cu" ') and "other.cu" not in done.stdout
    assert acf.read_text().endswith('# records every other compile\nunit "*.cu" {\n}\n')


def test_a_unit_without_a_bench_command_is_a_usage_error_before_any_bench_runs(tmp_path, evo_cache):
    """Two units, the second without a bench command: the first unit's bench ran for 26 s, then exit 2."""
    acf = _spill_project(tmp_path, "touch ran && echo 'time 1 ms'", ['metric time "([0-9]+) ms"'])
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "other.cu")
    acf.write_text(acf.read_text() + 'unit "other.cu" {\n    search {\n        ptxas.opt_level in {1, 3}\n    }\n}\n')
    done = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=evo_env(evo_cache))
    assert done.returncode == 2, done.stderr
    assert "unit \"other.cu\" has no `bench { command ...; metric ... }` block for the command backend" in done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / ".nvcc-evo" / "results.jsonl").exists()


def test_a_unit_that_only_records_the_build_named_alone_is_a_usage_error(tmp_path, evo_cache):
    """`unit "*.cu" {}` is passed by beside units a retune tunes (above); named alone, it is a usage error."""
    acf = _spill_project(tmp_path, "echo 'time 1 ms'", ['metric time "([0-9]+) ms"'])
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "other.cu")
    acf.write_text(acf.read_text() + '\nunit "*.cu" {\n}\n')
    alone = run_evo("--retune", "other.cu", "--target", "sm_90", "--backend", "command", cwd=tmp_path,
                    env=evo_env(evo_cache))
    assert alone.returncode == 2 and "(nor a search block: it records the build's compiles)" in alone.stderr


def test_a_verdict_says_speedup_only_of_a_time_or_a_rate():
    """"speedup 1.0625x" was said of a minimized register count."""
    from nvcc_evo.measure.stats import Verdict, a_speed
    found = Verdict("mannwhitneyu", 0.001, 1.0625, 0.01, True, 10)
    assert "speedup 1.0625x" in str(found)
    assert "regs 1.0625x better" in str(replace(found, judged="regs")) and "speedup" not in str(replace(found, judged="regs"))
    assert a_speed("time", "ms") and a_speed("kernel_runtime") and a_speed("tokens", "tok/s", maximize=True)
    assert not a_speed("regs") and not a_speed("error", "") and not a_speed("accuracy", "%", maximize=True)


def test_a_command_s_gpu_names_its_results_and_entries_and_another_model_makes_them_stale(tmp_path, evo_cache):
    """A bench command runs on whatever GPU the machine has: where every visible GPU is one model (here
    nvidia-smi's answer: this machine has none, so a stand-in on PATH answers as the driver's tool does), the
    results are kept under it and the entry names it; on another model the entry is stale; with two models
    (which one the command takes is unknown) nothing is claimed. (Results of one GPU were reused on another,
    and an entry never went stale, when the machine changed.)"""
    shim = tmp_path / "bin" / "nvidia-smi"
    shim.parent.mkdir()
    answer = tmp_path / "gpus.txt"
    shim.write_text(f'#!/bin/sh\n[ "$*" = "--query-gpu=name --format=csv,noheader" ] && exec cat {answer}\nexit 9\n')
    shim.chmod(0o755)
    (tmp_path / "run.py").write_text(
        "import os\nprint('time %d ms' % (5 if os.environ['NVCC_EVO_CANDIDATE_FLAGS'] else 10))\n")
    acf = _spill_project(tmp_path, f"{sys.executable} run.py", ['metric time "time ([0-9.]+) ms"'])
    env = evo_env(evo_cache, PATH=f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    answer.write_text("NVIDIA H200\nNVIDIA H200\n")
    built = subprocess.run([str(EVO), "-arch=sm_90", "-cubin", "spill.cu", "-o", "spill.cubin"], cwd=tmp_path,
                           env=env, capture_output=True, text=True)             # built once through nvcc-evo
    assert built.returncode == 0, built.stderr
    done = run_evo("--retune", "--target", "sm_90", "--backend", "command", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert 'gpu = "NVIDIA H200"' in acf.read_text() and "cc = " not in acf.read_text()
    records = [json.loads(line) for line in (tmp_path / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    assert {r["context"]["device"] for r in records} == {"NVIDIA H200"}
    same = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--dry-run", cwd=tmp_path, env=env)
    assert same.returncode == 0 and '"spill.cu"' not in same.stdout, same.stdout + same.stderr
    answer.write_text("NVIDIA H100 80GB HBM3\n")
    other = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--dry-run", cwd=tmp_path, env=env)
    assert "measured on NVIDIA H200; this GPU is NVIDIA H100 80GB HBM3" in other.stdout, other.stdout + other.stderr
    answer.write_text("NVIDIA H200\nNVIDIA H100 80GB HBM3\n")
    mixed = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--dry-run", cwd=tmp_path, env=env)
    assert mixed.returncode == 0 and '"spill.cu"' not in mixed.stdout, mixed.stdout + mixed.stderr


def test_a_unit_never_built_is_tuned_as_its_bench_builds_it_and_stays_up_to_date(tmp_path, evo_cache):
    """A unit no build has compiled through nvcc-evo yet: the retune runs its bench command once first, so the
    build it measures (here for sm_80) is recorded, tuned for its architecture and named in the entry. (It
    was tuned as `nvcc -c SOURCE` for sm_90, whose knobs the sm_80 bench build never took, and the entry
    said "no recorded build", stale at the next retune for the build its own bench had recorded.)"""
    (tmp_path / "run.py").write_text(
        "import os\nprint('time %d ms' % (5 if os.environ.get('NVCC_EVO_CANDIDATE_FLAGS') else 10))\n")
    acf = _spill_project(tmp_path, f"{sys.executable} run.py", ['metric time "time ([0-9.]+) ms"'])
    acf.write_text(acf.read_text().replace("-arch=sm_90", "-arch=sm_80"))
    env = evo_env(evo_cache)
    done = run_evo("--retune", "--backend", "command", "--evaluations", "3", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "its bench command runs once first, so that the build it measures is recorded" in done.stderr
    text = acf.read_text()
    assert "target sm_80 {" in text and "target sm_90" not in text, done.stderr
    assert _provenance(text)["build"].startswith("recorded compile "), text
    again = run_evo("--retune", "--backend", "command", "--dry-run", cwd=tmp_path, env=env)
    assert again.returncode == 0 and "nothing to retune" in again.stderr, again.stdout + again.stderr



def test_finding_a_retune_s_tasks_runs_no_bench_unless_the_retune_asks(tmp_path, evo_cache, monkeypatch):
    """find_tasks is a query (--sass, the report): a unit never built that its command bench builds has its
    bench run only where the retune asks (run_benches)."""
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.driver.toolkit import load_toolkit
    from nvcc_evo.driver.wrapper import find_real_nvcc
    from nvcc_evo.retune.scope.options import Selection
    from nvcc_evo.retune.scope.tasks import find_tasks
    acf = _spill_project(tmp_path, f"{sys.executable} -c 'print(1)'", ['metric time "([0-9]+)"'])
    acf.write_text(acf.read_text().replace('command "', 'command "touch ran && '))
    monkeypatch.chdir(tmp_path)
    for key, value in evo_env(evo_cache).items():
        monkeypatch.setenv(key, value)
    found = lambda **asked: find_tasks(load(acf), acf, load_toolkit(find_real_nvcc()), Selection(backend="command"),
                                       **asked)
    found()
    assert not (tmp_path / "ran").exists()
    found(run_benches=True)
    assert (tmp_path / "ran").exists()


HANGS = (
    "import os, subprocess, sys\n"
    "if '-O1' in os.environ['NVCC_EVO_CANDIDATE_FLAGS']:      # stands in for a kernel that never ends\n"
    "    child = subprocess.Popen(['sleep', '3600'])\n"
    "    open('hung.pid', 'w').write(str(child.pid))\n"
    "    child.wait()\n"
    "print('time 10.0 ms')\n")


def test_a_bench_run_that_never_ends_is_a_timeout_its_processes_killed_and_the_retune_goes_on(tmp_path, evo_cache):
    """The command backend's watchdog: a run past the bench's `timeout` (a program waiting on a kernel that
    never ends) is a `timeout` failure, its whole process group killed (the program and what it started),
    and the retune ends with the baseline kept."""
    (tmp_path / "run.py").write_text(HANGS)
    _spill_project(tmp_path, f"{sys.executable} run.py", ["metric time \"time ([0-9.]+) ms\"", "timeout 30"])
    done = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--evaluations", "1", cwd=tmp_path,
                   env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]
    hung = [r for r in records if r["status"] == "timeout"]
    assert len(hung) == 1 and "-O1" in " ".join(hung[0]["flags"]) and "the run exceeded 30 s" in hung[0]["detail"]
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "hung.pid").read_text()), 0)        # the sleeping child went with its group
    assert "baseline kept" in done.stdout, done.stdout


def test_a_unit_added_before_the_unit_that_recorded_the_build_is_rebuilt_for_each_candidate(tmp_path, evo_cache):
    """`--hot --write` adds a unit before `unit "**/*.cu" {}`, whose globs the build's records
    name: the candidates' builds must still compile the object again (SGEMM_CUDA on an H100: every
    candidate was not-rebuilt, its object never re-dated), and so must the user's next build."""
    project = tmp_path / "harness"
    shutil.copytree(DATA / "projects" / "harness", project)
    acf = project / "nvcc-evo.acf"
    text = acf.read_text()
    recording = 'unit "**/*.cu" {\n}\n'
    acf.write_text(f"acf 1\n\n{recording}")
    env = evo_env(evo_cache, PATH=f"{EVO.parent}{os.pathsep}{os.environ['PATH']}")
    built = subprocess.run(["make", "-s", "NVCC=nvcc-evo", "bench"], cwd=project, env=env, capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stderr
    unit = text[text.index('unit "bench.cu"'):]
    start, end = unit.index("    search {"), unit.index("    tune {")
    unit = unit[:start] + "    search {\n        define.NEWTON_STEPS in {6, 32}\n    }\n" + unit[end:]
    acf.write_text(f"acf 1\n\n{unit}\n{recording}")
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--evaluations", "4", cwd=project,
                     env=env)
    assert result.returncode == 0 and "not-rebuilt" not in result.stderr, result.stderr[-3000:]
    assert "improved time" in result.stdout, result.stdout
    assert "        define.NEWTON_STEPS = 6\n" in acf.read_text()
    assert (project / "bench").stat().st_mtime == LONG_AGO          # the next build compiles the entry
    log = tmp_path / "build.log"
    rebuilt = subprocess.run(["make", "-s", "NVCC=nvcc-evo", "bench"], cwd=project, env={**env, "NVCC_EVO_LOG": str(log)},
                             capture_output=True, text=True)
    assert rebuilt.returncode == 0, rebuilt.stderr
    compiles = [json.loads(line) for line in log.read_text().splitlines()]
    assert any("-DNEWTON_STEPS=6" in c.get("added", ()) for c in compiles), compiles


def test_a_candidate_whose_runs_spread_shows_each_run_s_value(tmp_path, evo_cache):
    """Runs 30% apart (a metric gone wrong, as the kernels' time of SGEMM_CUDA's runs on an H100
    read in a retune): the progress line shows each run's value, so the user sees which run went
    astray; runs within NOISY show only the median and spread."""
    (tmp_path / "runs.py").write_text(
        "import os\n"
        "run = int(os.environ['NVCC_EVO_RUN'])\n"
        "wild = os.environ['NVCC_EVO_CANDIDATE_FLAGS'] == ''\n"
        "print('time %.4f ms' % ((10, 14, 7)[run % 3] if wild else 10 + 0.01 * (run % 3)))\n")
    _spill_project(tmp_path, f"{sys.executable} runs.py", ['metric time "time ([0-9.]+) ms"', "repeat 3"])
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--evaluations", "2",
                     cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    baseline = next(line for line in result.stderr.splitlines() if "(baseline): time " in line)
    values = sorted(float(v) for v in baseline.split("(3 runs: ")[1].split(",")[:3])
    assert values == [7, 10, 14], baseline
    steady = [line for line in result.stderr.splitlines() if "-Xptxas -O" in line and ": time " in line]
    assert steady and all("(3 runs, " in line for line in steady), steady
