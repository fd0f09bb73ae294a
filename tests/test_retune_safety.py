"""`--retune` is safe with the user's ACF: results land in their own unit as
the file is at write time, one retune at a time, staleness covers pins and
the search space, writes keep the file, and a rerun only reaches the budget.
Real nvcc and ptxas, static backend, the installed `nvcc-evo`."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DATA, EVO, evo_env, run_evo
from nvcc_evo.acf.parse import parse_text

SEARCH = """    search {
        ptxas.opt_level in 1..3
        ptxas.register_usage_level in 0..10
    }
"""
TWO_UNITS = f"""acf 1
unit "spill.cu" {{
{SEARCH}    tune {{
        minimize spills, registers
    }}
}}

unit "regs.cu" {{
{SEARCH}}}
"""
SPACE_CHANGED = '"spill.cu" [sm_90]: pins or search space changed\n'


@pytest.fixture
def project(tmp_path) -> Path:
    for name in ("spill.cu", "regs.cu"):
        shutil.copy(DATA / "cuda" / name, tmp_path / name)
    (tmp_path / "nvcc-evo.acf").write_text(TWO_UNITS)
    return tmp_path


def store_lines(project: Path, unit: str | None = None) -> list[dict]:
    path = project / ".nvcc-evo" / "results.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [line for line in lines if unit is None or line["context"]["unit"] == f'"{unit}"']


def retune_argv(*args: str) -> list[str]:
    return [str(EVO), "--retune", "--backend", "static", "--target", "sm_90", "--jobs", "1", "--population", "3", *args]


def start(project: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(retune_argv(*args), cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(condition, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def targets(text: str) -> dict:
    return {u.globs: [str(t) for t in u.targets if t.provenance] for u in parse_text(text).units}


# ---------------------------------------------------------------- point 2: by identity, not index
EDITS = {
    "a unit inserted above": lambda t: t.replace('unit "spill.cu"', 'unit "other.cu" {\n    pin nvcc.fmad = true\n}\n\n'
                                                 'unit "spill.cu"', 1),
    "its globs changed": lambda t: t.replace('unit "spill.cu"', 'unit "spill*.cu"', 1),
    "a pin added": lambda t: t.replace("    tune {", "    pin nvcc.fmad = true\n    tune {", 1),
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edit_during_the_run_never_sends_the_result_to_another_unit(project, evo_cache, edit):
    acf_path = project / "nvcc-evo.acf"
    running = start(project, evo_env(evo_cache), "spill.cu", "--evaluations", "4")
    wait_for(lambda: len(store_lines(project)) >= 1)          # the baseline is in: the search is under way
    assert running.poll() is None and "target" not in acf_path.read_text()
    edited = EDITS[edit](TWO_UNITS)
    acf_path.write_text(edited)                               # an editor, a git pull
    out, err = running.communicate(timeout=300)
    if edit == "a unit inserted above":
        assert running.returncode == 0, err
        assert targets(acf_path.read_text()) == {("other.cu",): [], ("spill.cu",): ["sm_90"], ("regs.cu",): []}
        return
    assert running.returncode == 1, err
    assert acf_path.read_text() == edited                     # nothing overwritten
    why = ('no unit "spill.cu" in ' + str(acf_path) + " any more (removed, or its globs changed)"
           if edit == "its globs changed" else
           "its pins or search space changed since the search began: the result is stale")
    assert f'"spill.cu" [sm_90]: not written to the ACF: {why}' in err
    assert f'"spill.cu" [sm_90]: ' in out and f"NOT written: {why}" in out and "written to the ACF" not in out


# ---------------------------------------------------------------- point 3: one writer at a time
def test_a_second_retune_of_the_same_acf_waits_and_both_results_are_written(project, evo_cache):
    env = evo_env(evo_cache)
    # The first searches long enough (the whole space, from source) to be still running when the second
    # starts: with PTX reuse and compiles running ahead, 3 evaluations ended before it (a race).
    first = start(project, env, "spill.cu", "--evaluations", "32", "--patience", "4", "--full-protocol")
    wait_for(lambda: len(store_lines(project)) >= 1)
    second = start(project, env, "regs.cu", "--evaluations", "3")
    first_out, first_err = first.communicate(timeout=300)
    second_out, second_err = second.communicate(timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first_err + second_err
    assert f"another retune of {project / 'nvcc-evo.acf'} is running (pid {first.pid}, " in second_err
    assert f"{EVO} --retune " in second_err and "); waiting for it to finish (at most 600 s: " in second_err
    assert targets((project / "nvcc-evo.acf").read_text()) == {("spill.cu",): ["sm_90"], ("regs.cu",): ["sm_90"]}
    units = [line["context"]["unit"] for line in store_lines(project)]
    assert units == sorted(units, key=lambda u: u != '"spill.cu"')       # one after the other, not mixed


# ---------------------------------------------------------------- point 4: pins and space in the staleness key
def test_pins_and_the_search_space_are_part_of_the_staleness_key(project, evo_cache):
    env = evo_env(evo_cache)
    acf_path = project / "nvcc-evo.acf"
    assert subprocess.run(retune_argv("spill.cu", "--evaluations", "2"), cwd=project, env=env).returncode == 0
    tuned = acf_path.read_text()
    assert re.search(r'space_digest = "sha256:[0-9a-f]{16}"', tuned)
    assert run_evo("--acf-check", "nvcc-evo.acf", cwd=project).returncode == 0

    def stale(text: str) -> tuple[str, bool]:
        acf_path.write_text(text.replace('unit "regs.cu" {\n' + SEARCH + "}\n", ""))
        dry = subprocess.run(retune_argv("--dry-run"), cwd=project, env=env, capture_output=True, text=True)
        explain = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=project, env=env)
        assert dry.returncode == 0 and explain.returncode == 0, dry.stderr + explain.stderr
        return dry.stdout, "    stale: pins or search space changed\n" in explain.stdout

    assert stale(tuned) == ("", False)
    assert stale(tuned.replace("    tune {", "    pin nvcc.fmad = true\n    tune {", 1)) == (SPACE_CHANGED, True)
    searched_less = tuned.replace("0..10", "0..9", 1)
    assert stale(searched_less) == (SPACE_CHANGED, True)
    assert stale(tuned.replace("in 1..3", "in {1, 2, 3}", 1)) == ("", False)           # same values, other spelling
    legacy = re.sub(r" *space_digest = .*\n", "", searched_less)      # an entry written before the key existed
    assert stale(legacy) == ("", False)


def test_the_tune_block_is_part_of_the_staleness_key(project, evo_cache):
    """Editing a unit's tune block (objectives, require, select) left its entry up to date: only the pins and
    the search block counted, so an entry chosen for other objectives stayed and no retune chose again."""
    env = evo_env(evo_cache)
    acf_path = project / "nvcc-evo.acf"
    assert subprocess.run(retune_argv("spill.cu", "--evaluations", "2"), cwd=project, env=env).returncode == 0
    tuned = acf_path.read_text()
    assert re.search(r'tune_digest = "sha256:[0-9a-f]{16}"', tuned)
    changed = '"spill.cu" [sm_90]: tune block changed (objectives, require, select)\n'

    def stale(text: str) -> tuple[str, bool]:
        acf_path.write_text(text.replace('unit "regs.cu" {\n' + SEARCH + "}\n", ""))
        dry = subprocess.run(retune_argv("--dry-run"), cwd=project, env=env, capture_output=True, text=True)
        explain = run_evo("--explain", "-arch=sm_90", "-c", "spill.cu", cwd=project, env=env)
        assert dry.returncode == 0 and explain.returncode == 0, dry.stderr + explain.stderr
        return dry.stdout, "    stale: tune block changed (objectives, require, select)\n" in explain.stdout

    assert stale(tuned) == ("", False)
    reordered = tuned.replace("minimize spills, registers", "minimize registers, spills", 1)
    assert stale(reordered) == (changed, True)
    required = tuned.replace("minimize spills, registers", "minimize spills, registers\n        require spills <= 0", 1)
    assert stale(required) == (changed, True)
    assert stale(required.replace("spills <= 0", "spills <= 0.0")) == (changed, True)      # (same value: still)
    assert stale(re.sub(r" *tune_digest = .*\n", "", reordered)) == ("", False)     # written before the key


def test_a_hand_edited_tuned_value_is_said_by_the_check(project, evo_cache):
    """A value edited by hand in a tuned target kept its provenance (tuned values, verdict) and nothing said
    that the provenance measured other knobs."""
    env = evo_env(evo_cache)
    acf_path = project / "nvcc-evo.acf"
    assert subprocess.run(retune_argv("spill.cu", "--evaluations", "2"), cwd=project, env=env).returncode == 0
    tuned = acf_path.read_text()
    assert re.search(r'settings_digest = "sha256:[0-9a-f]{16}"', tuned)
    checked = run_evo("--acf-check", "nvcc-evo.acf", cwd=project, env=env)
    assert checked.returncode == 0 and "warning" not in checked.stderr, checked.stderr
    acf_path.write_text(tuned.replace("    target sm_90 {\n", "    target sm_90 {\n        ptxas.maxrregcount = 64\n", 1))
    checked = run_evo("--acf-check", "nvcc-evo.acf", cwd=project, env=env)
    line = acf_path.read_text()[:acf_path.read_text().index("    target sm_90 {")].count("\n") + 1
    assert checked.returncode == 0, checked.stderr
    assert (f'nvcc-evo.acf:{line}:5: warning: unit "spill.cu": target sm_90: its knobs are not those its '
            f"provenance measured (edited since the retune wrote them)") in checked.stderr, checked.stderr


# ---------------------------------------------------------------- point 5: writes keep the file
def test_a_retune_writes_through_a_link_keeping_line_endings_bom_mode_and_owner(project, evo_cache):
    shared = project / "shared"
    shared.mkdir()
    real = shared / "real.acf"
    real.write_bytes(b"\xef\xbb\xbf" + TWO_UNITS.replace("\n", "\r\n").encode())
    os.chmod(real, 0o640)
    if os.geteuid() == 0:
        os.chown(real, 65534, 65534)
    before = real.stat()
    link = project / "nvcc-evo.acf"
    link.unlink()
    link.symlink_to("shared/real.acf")
    # (a file of another uid is trusted only on purpose: NVCC_EVO_TRUST, see docs/security.md)
    result = subprocess.run(retune_argv("spill.cu", "--evaluations", "2"), cwd=project,
                            env=evo_env(evo_cache, NVCC_EVO_TRUST=project), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == "shared/real.acf"
    data = real.read_bytes()
    assert data.startswith(b"\xef\xbb\xbfacf 1\r\n") and data.count(b"\n") == data.count(b"\r\n") > 20
    assert targets(data[3:].decode().replace("\r\n", "\n")) == {("spill.cu",): ["sm_90"], ("regs.cu",): []}
    after = real.stat()
    assert (after.st_mode & 0o7777, after.st_uid, after.st_gid) == (0o640, before.st_uid, before.st_gid)
    # nothing left beside it but the lock of its writers (.nvcc-evo/locks/, docs/security.md)
    assert sorted(os.listdir(shared)) == [".nvcc-evo", "real.acf"]
    assert sorted(os.listdir(shared / ".nvcc-evo")) == [".gitignore", "locks"] and os.listdir(shared / ".nvcc-evo" / "locks") == \
        ["real.acf.lock"]


def test_a_read_only_acf_stops_the_retune_before_any_search(project, evo_cache):
    acf_path = project / "nvcc-evo.acf"
    os.chmod(acf_path, 0o444)
    result = subprocess.run(retune_argv("--evaluations", "2"), cwd=project, env=evo_env(evo_cache),
                            capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert f"nvcc-evo: error: cannot write {acf_path}: it is read-only (mode 0444); left as it is" in result.stderr
    assert acf_path.read_text() == TWO_UNITS and store_lines(project) == [] and "Traceback" not in result.stderr


# ---------------------------------------------------------------- point 7: resume means reach the budget
def test_a_finished_retune_run_again_does_nothing(project, evo_cache):
    env = evo_env(evo_cache)
    argv = retune_argv("--all", "--evaluations", "4")
    assert subprocess.run(argv, cwd=project, env=env, capture_output=True).returncode == 0
    tuned, stored = (project / "nvcc-evo.acf").read_text(), store_lines(project)
    assert len(stored) == 2 * 5                                           # the baseline and 4 per unit
    again = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert store_lines(project) == stored and (project / "nvcc-evo.acf").read_text() == tuned
    assert again.stderr.count("already within budget (4 evaluations of this search space stored besides the "
                              "baseline, --evaluations 4): nothing to search; its entry is up to date") == 2
    assert "written to the ACF" not in again.stdout


def test_a_space_searched_whole_is_within_budget(project, evo_cache):
    """A budget larger than the space: the first run searches all of it, a
    second one has nothing left to search and must not re-verify or rewrite
    (seen on the H200: a 12-point space with --evaluations 12 was verified
    and written again)."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    search {\n'
                                          '        ptxas.opt_level in 1..3\n    }\n'
                                          '    tune {\n        minimize spills, registers\n    }\n}\n')
    env = evo_env(evo_cache)
    argv = retune_argv("--all", "--evaluations", "10")
    assert subprocess.run(argv, cwd=project, env=env, capture_output=True).returncode == 0
    tuned, stored = (project / "nvcc-evo.acf").read_text(), store_lines(project)
    assert len(stored) == 3                                               # the whole space
    again = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert (project / "nvcc-evo.acf").read_text() == tuned and store_lines(project) == stored
    assert "already within budget (2 evaluations of this search space stored besides the baseline, " \
           "the whole space" in again.stderr


@pytest.mark.parametrize("edit", [("ptxas.register_usage_level in {0, 5, 10}", "ptxas.register_usage_level in {1, 2}"),
                                  ("ptxas.opt_level in 1..3", "ptxas.opt_level in 1..3\n        ptxas.fmad in bool")],
                         ids=["values changed", "a knob added"])
def test_a_search_block_edited_since_the_last_run_is_searched_afresh(project, evo_cache, edit):
    """A new user's report: after an edit of the search block, the stored
    genomes of the old space were fed to the operators (IndexError,
    ValueError tracebacks in space.step / mutate)."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    search {\n        ptxas.opt_level in 1..3\n'
                                          '        ptxas.register_usage_level in {0, 5, 10}\n    }\n}\n')
    env = evo_env(evo_cache)
    argv = retune_argv("--all", "--evaluations", "6", "--seed", "2")
    assert subprocess.run(argv, cwd=project, env=env, capture_output=True).returncode == 0
    acf = project / "nvcc-evo.acf"
    acf.write_text(acf.read_text().replace(*edit))
    again = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "stored evaluation(s) of an earlier search space left aside" in again.stderr
    assert run_evo("--acf-check", str(acf)).returncode == 0


def test_a_settled_unit_reports_the_entry_it_keeps(project, evo_cache):
    """Within budget and up to date, the entry stands: the summary must show it, not a choice made
    anew from the store (on the H200 a baseline kept by the verification was shown as `ptxas.dlcm=cs`)."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    search {\n'
                                          '        ptxas.opt_level in 1..3\n    }\n'
                                          '    tune {\n        minimize spills, registers\n    }\n}\n')
    env = evo_env(evo_cache)
    argv = retune_argv("--all", "--evaluations", "10")
    first = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert first.returncode == 0 and "chosen: ptxas.opt_level=1" in first.stdout, first.stdout
    acf = project / "nvcc-evo.acf"
    acf.write_text(acf.read_text().replace("ptxas.opt_level = 1", "ptxas.opt_level = 2"))     # a hand edit
    again = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "not rewritten" in again.stdout, again.stdout + again.stderr
    assert "chosen: ptxas.opt_level=2" in again.stdout


def test_after_kill_minus_nine_each_unit_resumes_where_it_stopped(project, evo_cache):
    env = evo_env(evo_cache)
    argv = retune_argv("--all", "--evaluations", "6")
    running = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: targets((project / "nvcc-evo.acf").read_text())[("spill.cu",)] == ["sm_90"]
             and len(store_lines(project, "regs.cu")) >= 2)
    assert running.poll() is None               # killed in the middle of the second unit
    running.kill()
    running.wait()
    spill_lines = store_lines(project, "spill.cu")
    assert len(spill_lines) == 7
    resumed = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert store_lines(project, "spill.cu") == spill_lines                # finished and written: not searched again
    assert '"spill.cu" [sm_90]: already within budget' in resumed.stderr
    genomes = [json.dumps(line["genome"]) for line in store_lines(project, "regs.cu")]
    assert len(genomes) == len(set(genomes)) == 7                          # resumed up to the budget, nothing twice
    assert targets((project / "nvcc-evo.acf").read_text()) == {("spill.cu",): ["sm_90"], ("regs.cu",): ["sm_90"]}


def test_the_summary_tells_knobs_kept_from_the_entry_from_those_chosen(project, evo_cache):
    """An entry's knob outside the search stays set: the summary says it was kept, not chosen (a third-party
    project's `baseline kept: no candidate beat it` stood beside `chosen: ptxas.dscm=cs`)."""
    (project / "nvcc-evo.acf").write_text('acf 1\nunit "spill.cu" {\n    search {\n'
                                          '        ptxas.opt_level in 1..3\n    }\n'
                                          '    tune {\n        minimize spills, registers\n    }\n'
                                          '    target sm_90 {\n        ptxas.dscm = cs\n    }\n}\n')
    done = subprocess.run(retune_argv("--all", "--evaluations", "6"), cwd=project, env=evo_env(evo_cache),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert re.search(r"chosen: (ptxas\.opt_level=\d|no searched knob moved); kept from the entry, not searched: "
                     r"ptxas\.dscm=cs", done.stdout), done.stdout
    assert "ptxas.dscm = cs" in (project / "nvcc-evo.acf").read_text()
