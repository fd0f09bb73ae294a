"""What the end of a retune says about rebuilding: only when a knob of an
entry changed (a build system compares sources and objects, not the ACF);
a retune that keeps the baseline, or writes the knobs the entry held,
changes no binary and says nothing about rebuilding. Real nvcc and ptxas."""
from __future__ import annotations

from pathlib import Path

from conftest import evo_env, run_evo
from test_fidelity import KERNEL        # a kernel whose TILE changes its code

REBUILD = "to use the new entries"


def _project(folder: Path, values: str, evo_cache) -> Path:
    (folder / "k.cu").write_text(KERNEL)
    (folder / "nvcc-evo.acf").write_text('acf 1\nunit "k.cu" {\n    search {\n        define.TILE in {%s}\n    }\n'
                                         '    tune {\n        minimize instructions\n    }\n}\n' % values)
    built = run_evo("-arch=sm_90", "-c", "k.cu", "-o", "k.o", cwd=folder, env=evo_env(evo_cache))
    assert built.returncode == 0, built.stderr
    return folder


def _retune(folder: Path, evo_cache, *extra: str):
    done = run_evo("--retune", "--acf", str(folder / "nvcc-evo.acf"), "--backend", "static", "--evaluations", "4",
                   *extra, cwd=folder, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    return done


def test_a_retune_that_keeps_the_baseline_says_nothing_about_rebuilding(tmp_path, evo_cache):
    _project(tmp_path, "4, 8, 16", evo_cache)         # the source's TILE 4 has the fewest instructions
    tuned = _retune(tmp_path, evo_cache, "--seed", "5")
    assert "baseline kept" in tuned.stdout + tuned.stderr, tuned.stdout + tuned.stderr
    written = (tmp_path / "nvcc-evo.acf").read_text()
    assert "provenance" in written                    # written: the entry's provenance
    assert "backend = static" in written and "seed = 5" in written, written   # (writeback.Writing)
    assert REBUILD not in tuned.stderr, tuned.stderr


def test_a_retune_that_changes_a_knob_says_what_to_rebuild_and_a_rerun_that_writes_the_same_does_not(
        tmp_path, evo_cache):
    _project(tmp_path, "2, 4, 8", evo_cache)          # TILE 2: fewer instructions
    tuned = _retune(tmp_path, evo_cache)
    assert "define.TILE = 2" in (tmp_path / "nvcc-evo.acf").read_text()
    assert f"{REBUILD}, rebuild what your build compiled before them: k.o." in tuned.stderr, tuned.stderr
    again = _retune(tmp_path, evo_cache, "--all")     # the same choice written again: no binary changes
    assert "define.TILE = 2" in (tmp_path / "nvcc-evo.acf").read_text()
    assert REBUILD not in again.stderr, again.stderr
