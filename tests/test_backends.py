"""The command and replay backends, and GA against random search on a
recorded space (replayed: no compiler needed)."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from conftest import DATA, EVO, ROOT, evo_env, run_evo

sys.path.insert(0, str(ROOT / "benchmarks"))
import ga_vs_random  # noqa: E402  (the benchmark's own functions, so test and benchmark agree)


def test_ga_beats_random_search_on_the_recorded_space():
    ga, rnd, wins, losses = ga_vs_random.compare(budget=20, seeds=21)
    assert ga < rnd, (ga, rnd)
    assert wins > losses


def test_recording_is_a_whole_space_of_real_measurements():
    space, replay = ga_vs_random.recorded()
    assert len(replay.answers) > 4000
    statuses = {r.measurement.status for r in replay.answers.values()}
    assert statuses == {"ok", "compile-error"}
    for record in replay.answers.values():   # the failures are ptxas refusing -O1/-O2 with -Ofc
        if record.measurement.status == "compile-error":
            assert "Conflicting options -opt-level" in record.measurement.detail
            assert record.genome.value("ptxas.opt_level") in (1, 2)
    spills = {r.measurement.get("spills") for r in replay.answers.values()}
    assert 0.0 in spills and 284.0 in spills     # tuned and default, as ptxas reported them


def test_command_backend_builds_through_the_wrapper(tmp_path, evo_cache):
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text(f'''acf 1
unit "spill.cu" {{
    search {{
        ptxas.opt_level in 1..3
    }}
    tune {{
        minimize metric
    }}
    bench {{
        command "{EVO} -arch=sm_90 -cubin -Xptxas -v spill.cu -o /dev/null 2>&1 | grep -c 'spill stores' ; {EVO} -arch=sm_90 -cubin -Xptxas -v spill.cu -o /dev/null 2>&1 | grep -o '[0-9]* bytes spill stores'"
        metric "([0-9]+) bytes spill stores"
    }}
}}
''')
    result = run_evo("--retune", "--target", "sm_90", "--backend", "command", "--evaluations", "4",
                     cwd=tmp_path, env=evo_env(evo_cache))
    assert result.returncode == 0, result.stderr
    assert "improved metric 128 -> 24" in result.stdout
    assert "        ptxas.opt_level = 1\n" in (tmp_path / "nvcc-evo.acf").read_text()
    assert not list(tmp_path.glob(".nvcc-evo-candidate-*"))        # candidate ACFs cleaned up


def test_replay_backend_answers_without_compiling_and_refuses_other_contexts(tmp_path, evo_cache):
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    search {\n'
                                           '        ptxas.opt_level in 1..3\n    }\n'
                                           '    tune {\n        minimize spills, registers\n    }\n}\n')
    env = evo_env(evo_cache)
    first = run_evo("--retune", "--target", "sm_90", "--evaluations", "3", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    recording = tmp_path / "recording.jsonl"
    shutil.copy(tmp_path / ".nvcc-evo" / "results.jsonl", recording)
    shutil.rmtree(tmp_path / ".nvcc-evo")
    fake_nvcc = tmp_path / "bin" / "nvcc"          # replay must not compile: a compiler that always fails
    replayed = run_evo("--retune", "--all", "--target", "sm_90", "--backend", "replay", "--replay", str(recording),
                       "--evaluations", "3", cwd=tmp_path, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert "backend replay of" in replayed.stderr and "improved spills 284 -> 48" in replayed.stdout
    lines = [json.loads(l) for l in recording.read_text().splitlines()]
    for line in lines:
        line["context"]["device"] = "NVIDIA H200"
    recording.write_text("".join(json.dumps(l) + "\n" for l in lines))
    refused = run_evo("--retune", "--all", "--target", "sm_90", "--backend", "replay", "--replay", str(recording),
                      cwd=tmp_path, env=env)
    assert refused.returncode == 1
    assert "device: 'NVIDIA H200' there, 'cpu' here" in refused.stderr
    assert fake_nvcc.exists() is False


def test_the_candidate_copy_finds_its_unit_by_globs_in_the_acf_as_it_is_now(tmp_path):
    """A unit inserted above during the run takes no candidate; while the ACF is mid-edit the copy is made
    from the text as the search began."""
    from types import SimpleNamespace
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.execute.measurers import CandidateAcf
    from nvcc_evo.engine.space import Genome
    at_start = 'acf 1\nunit "a.cu" { }\nunit "b.cu" { }\n'
    path = tmp_path / "nvcc-evo.acf"
    task = SimpleNamespace(arch="sm_90", unit=parse_text(at_start).units[1], unit_index=1)
    genome = Genome((("ptxas.opt_level", 1),))
    for now in ['acf 1\nunit "new.cu" { }\nunit "a.cu" { }\nunit "b.cu" { }\n', 'acf 1\nunit "b.cu" {']:
        path.write_text(now)
        copy = parse_text(CandidateAcf(path, task, at_start)(genome).read_text())
        assert [(u.globs, [str(s.knob) for t in u.targets for s in t.settings]) for u in copy.units if u.targets] \
            == [(("b.cu",), ["ptxas.opt_level"])]
