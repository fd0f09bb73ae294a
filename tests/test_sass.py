"""`nvcc-evo --sass` builds both sides through the compile plan of the
unit's recorded build (what the wrapper builds, what a retune's candidates
compile with), not through the flag mapping alone: an entry's knob that the
build would not pass is not built there either (and said), and a
`ptxas.version` entry runs the ptxas the build runs (NVCC_EVO_PTXAS). Real
nvcc and ptxas; ptxas 13.3 from the ptxas133 extra."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import evo_env, run_evo
from test_ptxas_choice import PTXAS133, needs_133
from test_writeback import KERNEL

MULTI = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-c", "k.cu", "-o", "k.o"]


def _project(folder: Path, body: str) -> Path:
    (folder / "k.cu").write_text(KERNEL)
    (folder / "nvcc-evo.acf").write_text('acf 1\nunit "k.cu" {\n%s}\n' % body)
    return folder


def _instructions(shown: str) -> tuple[int, int]:
    found = re.search(r"\n      instructions +(\d+) +(\d+)", shown)
    assert found, shown
    return int(found.group(1)), int(found.group(2))


def test_an_entry_knob_the_recorded_build_drops_is_not_what_sass_shows(tmp_path, evo_cache):
    """A two-architecture call whose entries disagree on a define: the build
    passes none (the host code sees it once), so the sm_90 code the wrapper
    builds is the baseline's, and so is what --sass shows for the entry."""
    _project(tmp_path, "    search {\n        define.TILE in {2, 4, 8}\n    }\n    target sm_80 {\n"
                       "        define.TILE = 2\n    }\n    target sm_90 {\n        define.TILE = 8\n    }\n")
    env = evo_env(evo_cache, NVCC_EVO_VERBOSE=1)
    built = run_evo(*MULTI, cwd=tmp_path, env=env)
    assert built.returncode == 0 and "nvcc-evo: added: (nothing)" in built.stderr, built.stderr
    shown = run_evo("--sass", "k.cu", "--target", "sm_90", cwd=tmp_path, env=evo_env(evo_cache))
    assert shown.returncode == 0, shown.stderr
    baseline, entry = _instructions(shown.stdout)
    assert entry == baseline, shown.stdout            # (TILE 8 itself: 160 instructions against 96)
    assert re.search(r'"k\.cu" \[sm_90\]: not built here, as the build passes none of it: define\.TILE = 8: '
                     r"differs within this call", shown.stderr), shown.stderr


@needs_133
def test_a_ptxas_version_entry_is_built_by_the_ptxas_the_build_runs(tmp_path, evo_cache):
    _project(tmp_path, '    search {\n        ptxas.version in {toolkit, "13.3"}\n    }\n    target sm_90 {\n'
                       '        ptxas.version = "13.3"\n    }\n')
    env = evo_env(evo_cache, NVCC_EVO_PTXAS=PTXAS133)
    built = run_evo("-arch=sm_90", "-cubin", "k.cu", "-o", "k.cubin", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    shown = run_evo("--sass", "k.cu", "--target", "sm_90", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr            # (before: "no ptxas 13.3 ... NVCC_EVO_PTXAS lists none")
    assert shown.stdout.startswith('"k.cu" [sm_90]: the build\'s own flags against its ACF entry\n'), shown.stdout
    assert "not built here" not in shown.stderr, shown.stderr
    _instructions(shown.stdout)
