"""A retune's progress: a live bar on a terminal (a pty here), one plain
line per generation in a pipe; both drawn from one ProgressLine."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from dataclasses import replace

import pytest

from conftest import DATA, EVO_COMMAND, evo_env
from nvcc_evo.retune.search.progress import Lines, ProgressLine, reporter
from test_retune import ACF           # spill.cu's two-knob search

LINE = ProgressLine('"spill.cu" [sm_90]', 2, 8, 20, 3, (("compile-error", 2, "ptxas error : bad"),), 1,
                    (("spills", 48.0), ("registers", 64.0)), (("spills", 332.0), ("registers", 255.0)),
                    elapsed=16.0, made=8, drift=0.0125)


def test_the_plain_line_and_the_bar_say_the_same_fields():
    assert LINE.text() == ('"spill.cu" [sm_90] gen 2: 8 evaluations (3 same binary, 2 failed: compile-error 2 '
                           '(e.g. "ptxas error : bad")), front 1, best spills=48, registers=64, baseline drift '
                           '+1.25% [16 s; at most 12 more, ~24 s at this pace]')
    assert LINE.bar_text() == ("gen 2 | best spills=48, registers=64 | spills -85.5% vs baseline | "
                               "failed: compile-error 2 | 2.0 s/candidate | ETA 24 s")
    done = ProgressLine("u", 3, 20, 20, 0, (), 1, (("runtime", 1.0),), (("runtime", 1.0),), 30.0, 20)
    assert done.eta is None and "at most" not in done.text() and "ETA" not in done.bar_text()
    timed = replace(LINE, seconds_left=10.0)          # 12 more would take 24 s: the time budget ends it first
    assert "at most" not in timed.text() and "10 s left" in timed.text() and "ETA" not in timed.bar_text()
    assert "at most 12 more, ~24 s at this pace; 30 s left" in replace(LINE, seconds_left=30.0).text()
    more = ProgressLine("u", 1, 2, float("inf"), 0, (), 0, (), (), 1.0, 2, extra=(("compile", "60%"),))
    assert more.text().endswith("best none feasible, compile 60% [1 s]") and "compile 60%" in more.bar_text()


def test_no_terminal_no_bar(tmp_path):
    with open(tmp_path / "log", "w") as stream:
        assert isinstance(reporter("auto", "u", 10, print, stream), Lines)
    with open(os.devnull, "w") as stream:
        bar = reporter("bar", "u", 10, print, stream)       # asked for: a bar even where no one looks
        bar.close()
    assert not isinstance(bar, Lines)


@pytest.fixture
def project(tmp_path):
    shutil.copy(DATA / "cuda" / "spill.cu", tmp_path / "spill.cu")
    (tmp_path / "nvcc-evo.acf").write_text(ACF)
    (tmp_path / "nvcc-evo.toml").write_text('[retune]\nbackend = "static"\nevaluations = 8\npopulation = 4\n'
                                            'target = "sm_90"\n')
    return tmp_path


def _on_a_terminal(project, evo_cache, *args: str) -> str:
    """A retune's stderr on a pty, its escape sequences removed."""
    leader, follower = os.openpty()
    child = subprocess.Popen(EVO_COMMAND + ["--retune", *args], cwd=project, env=evo_env(evo_cache, COLUMNS="120"),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:                         # EIO: the child closed its side
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert child.wait() == 0, seen.decode(errors="replace")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))


def test_a_terminal_shows_the_live_bar(project, evo_cache):
    screen = _on_a_terminal(project, evo_cache)
    assert "━" in screen and '"spill.cu" [sm_90]' in screen and re.search(r"\b8/8\b", screen), screen
    assert re.search(r"gen 2 \| best spills=\d+, registers=\d+ \| spills -\d+\.\d% vs baseline \| failed: none \| "
                     r"\d+\.\d s/candidate", screen), screen
    assert re.search(r'nvcc-evo: "spill.cu" \[sm_90\] gen 2: 8 evaluations', screen)   # the record kept


def test_a_pipe_gets_lines(project, evo_cache):
    result = subprocess.run(EVO_COMMAND + ["--retune"], cwd=project, env=evo_env(evo_cache), capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert "━" not in result.stderr and "\x1b[" not in result.stderr
    assert re.search(r"gen 1: 4 evaluations .*\[\d+ s; at most 4 more, ~\d+ s at this pace; "
                     r"[\d.]+ candidates/min; per candidate: compile [\d.]+ s", result.stderr)


def test_the_bar_moves_with_each_measured_candidate(project, evo_cache):
    """Generations of 4: a bar that moved once per generation would only
    ever show 0/8, 4/8 and 8/8; it shows the counts in between as each
    candidate is measured (a candidate whose binary was seen before moves it
    at its generation's end)."""
    screen = _on_a_terminal(project, evo_cache)
    shown = {int(n) for n in re.findall(r"\b([0-8])/8\b", screen)}
    assert {4, 8} <= shown and shown & {1, 2, 3}, (shown, screen)    # within the first generation, one by one


def test_a_resumed_search_starts_its_bar_at_what_the_store_holds(tmp_path):
    said = []
    with open(os.devnull, "w") as stream:
        bar = reporter("bar", "u", 10, said.append, stream, done=3)
        bar.advance()
        assert bar.progress.tasks[0].completed == 4
        bar.close()
    lines = reporter("lines", "u", 10, said.append, done=3)
    lines.advance()                                  # the plain lines wait for the generation
    assert isinstance(lines, Lines) and said == []


def test_searches_at_once_show_a_bar_each_on_a_terminal(tmp_path, evo_cache):
    from conftest import kernels_project
    kernels_project(tmp_path, ("scale.cu", "reduce_sum.cu"))
    screen = _on_a_terminal(tmp_path, evo_cache, "--backend", "static", "--evaluations", "8", "--population", "4",
                            "--at-once", "2", "scale.cu", "reduce_sum.cu")
    assert "2 searches, 2 at once" in screen
    rows = [line for line in screen.splitlines() if "━" in line]
    for unit in ("scale.cu", "reduce_sum.cu"):
        assert any(f'"{unit}" [sm_90]' in row and re.search(r"\b\d/8\b", row) for row in rows), (unit, screen)
        assert re.search(rf'nvcc-evo: "{unit}" \[sm_90\] gen 2: 8 evaluations', screen), screen   # the record kept
